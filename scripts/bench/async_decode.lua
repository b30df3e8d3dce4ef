-- Benchmark: what asynchronous evaluation (prog:submit / ticket:wait) does to decode. A
-- Stories110M-shaped Llama (random weights) decodes the same tokens with the FFN program of
-- each layer submitted while the KV cache takes the new key and value, and with every
-- program evaluated in turn; the two alternate within each round, and the row prints the
-- median ratio (asynchronous / in turn) of tokens/s and its range.
--   build/anelua scripts/bench/async_decode.lua [--tokens N] [--rounds N] [--backend sim|ane]
local ane = require("ane")
local llama = require("ane.models.llama")

local opts = require("ane.cli").command{
  name = "scripts/bench/async_decode.lua", summary = "Decode tokens/s with and without submit/wait.",
  options = {
    { "tokens", "integer", 32, "tokens decoded per timing", min = 1 },
    { "rounds", "integer", 5, "alternating rounds", min = 1 },
    { "backend", "choice", "sim", "backend of the programs", choices = { "sim", "ane" } },
  },
}:parse(arg)
local config = { dim = 768, hidden = 2048, n_layer = 12, n_head = 12, vocab_size = 32000, seq_len = 1024 }
ane.set_compile_budget(1000000)
local weights = llama.random_weights(config, 11)
local prompt = { 1, 7919, 15838, 23757 }

print(string.format("Stories110M shape, random weights; %d tokens per timing, %d rounds, backend %s", opts.tokens,
  opts.rounds, opts.backend))
print(string.format("%-14s %12s %12s %9s %13s", "profile", "in turn t/s", "async t/s", "ratio", "range"))
for _, profile in ipairs({ "ane", "cpu" }) do
  local model = llama.from_weights(weights, { precision = "fp16", profile = profile,
    backend = profile == "cpu" and "sim" or opts.backend })
  local texts = {}
  local function decode(asynchronous)
    model.counters.decode_tokens, model.counters.decode_seconds = 0, 0
    local ids = {}
    for id in model:generate(prompt, { max_tokens = opts.tokens + 1, temperature = 0, stop_at_end = false,
      asynchronous = asynchronous }) do ids[#ids + 1] = id end
    texts[asynchronous] = table.concat(ids, ",")
    return model:stats().decode_tokens_per_s
  end
  decode(false) -- compile and warm up
  local ratios, sync_rates, async_rates = {}, {}, {}
  for r = 1, opts.rounds do
    local first_async = r % 2 == 0 -- alternate which goes first
    local a, b = decode(first_async), decode(not first_async)
    local sync, async = first_async and b or a, first_async and a or b
    sync_rates[r], async_rates[r], ratios[r] = sync, async, async / sync
  end
  assert(texts[true] == texts[false], "asynchronous decoding changed the tokens")
  table.sort(ratios)
  table.sort(sync_rates)
  table.sort(async_rates)
  local mid = (opts.rounds + 1) // 2
  print(string.format("%-14s %12.1f %12.1f %8.3fx %6.3f-%.3f", profile .. (profile == "cpu" and " (sim)" or ""),
    sync_rates[mid], async_rates[mid], ratios[mid], ratios[1], ratios[opts.rounds]))
  model = nil
  collectgarbage()
end

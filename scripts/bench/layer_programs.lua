-- Benchmark: what one program a layer does to decode on the cpu profile. The same model
-- decodes the same tokens with sessions whose steps run each layer as one program
-- (attention and FFN together, the default) and as two (`one_program_a_layer = false`); the
-- two step in turn, token by token, and the row prints the median ratio (one / two) of
-- tokens/s over the rounds and its range. The tokens must be the same.
--   build/anelua scripts/bench/layer_programs.lua [--model FILE] [--tokens N] [--rounds N]
-- Without --model: a Stories110M-shaped Llama of random weights, fp16.
local ane = require("ane")
local models = require("ane.models")
local common = dofile((arg[0]:match("^(.*)/") or ".") .. "/common.lua")

local opts = require("ane.cli").command{
  name = "scripts/bench/layer_programs.lua", summary = "Decode tokens/s with one program a layer and with two.",
  options = {
    { "model", "path", nil, "a model file or directory (default: random Stories110M-shaped weights)" },
    { "activations", "string", nil, "the model's activations option (int8: a GGUF's Q8_K-style products)" },
    { "tokens", "integer", 256, "tokens decoded per timing", min = 1 },
    { "rounds", "integer", 8, "alternating rounds", min = 1 },
  },
}:parse(arg)

local model
if opts.model then
  model = assert(models.load(opts.model, { precision = "fp16", profile = "cpu", activations = opts.activations }))
else
  local llama = require("ane.models.llama")
  local config = { dim = 768, hidden = 2048, n_layer = 12, n_head = 12, vocab_size = 32000, seq_len = 1024 }
  model = llama.from_weights(llama.random_weights(config, 11), { precision = "fp16", profile = "cpu" })
end
local prompt = { 1, 7919 % model.vocab_size, 15838 % model.vocab_size, 23757 % model.vocab_size }

-- One round: a session of each kind decodes opts.tokens greedy tokens after the prompt, the
-- two stepping in turn token by token (which steps first alternates), so a minute's slower
-- memory slows both alike; the seconds each spent, and the ids they chose.
local function round()
  local sessions, rows, seconds, ids = {}, {}, {}, { {}, {} }
  for kind, one_program in ipairs({ true, false }) do
    sessions[kind] = model:session({ capacity = #prompt + opts.tokens, one_program_a_layer = one_program })
    assert(sessions[kind].one_program_a_layer == one_program, "the model cannot run one program a layer")
    rows[kind], seconds[kind] = assert(sessions[kind]:feed(prompt)), 0
  end
  for i = 1, opts.tokens do
    for turn = 0, 1 do
      local kind = (i + turn) % 2 + 1
      ids[kind][i] = rows[kind]:argmax() - 1
      local start, compile_ms = ane.clock(), model:stats().compile_ms
      rows[kind] = assert(sessions[kind]:feed({ ids[kind][i] }))
      seconds[kind] = seconds[kind] + ane.clock() - start - (model:stats().compile_ms - compile_ms) / 1000
    end
  end
  assert(table.concat(ids[1], ",") == table.concat(ids[2], ","), "one program a layer changed the tokens")
  return opts.tokens / seconds[1], opts.tokens / seconds[2]
end

print(string.format("%s; %d tokens per timing, %d rounds", opts.model or "Stories110M shape, random weights, fp16",
  opts.tokens, opts.rounds))
round() -- compile and warm up both
local ratios, one_rates, two_rates = {}, {}, {}
for r = 1, opts.rounds do
  one_rates[r], two_rates[r] = round()
  ratios[r] = one_rates[r] / two_rates[r]
end
local ratio, low, high = common.median_and_range(ratios)
print(string.format("%14s %14s %9s %13s", "two t/s", "one t/s", "ratio", "range"))
print(string.format("%14.1f %14.1f %8.3fx %6.3f-%.3f", (common.median_and_range(two_rates)),
  (common.median_and_range(one_rates)), ratio, low, high))

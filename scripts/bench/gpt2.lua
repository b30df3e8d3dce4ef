-- Benchmark: GPT-2 124M-shaped model (random weights) on the sim backend.
--  * decode tokens/s against the memory-bandwidth bound: bytes of weights read per token
--    (the layers' conv weights as sim holds them: fp16 in fp16 precision, fp32 in fp32;
--    plus the classifier, wte, which a decode step reads in the same precision) divided by
--    the read bandwidth this script measures (common.lua's: 1 GB read on every core);
--  * prefill of 256 tokens in fp16 and fp32.
--  * fp16 decode in the ane profile against the cpu profile: the two alternate round by round
--    on the same weights and tokens, the median ratio of their ms/token and its range.
--   build/anelua scripts/bench/gpt2.lua [--tokens N] [--pairs N]
local ane = require("ane")
local gpt2 = require("ane.models.gpt2")

local options = require("ane.cli").command{
  name = "scripts/bench/gpt2.lua", summary = "GPT-2 124M-shaped decode against the bandwidth bound, and prefill.",
  options = { { "tokens", "integer", 48, "tokens decoded per round", min = 1 },
    { "pairs", "integer", 9, "rounds of the ane-against-cpu profile decode, alternating", min = 1 } },
}:parse(arg)
local tokens = options.tokens
ane.set_compile_budget(1000000)
local config = { n_embd = 768, n_layer = 12, n_head = 12, n_positions = 1024, vocab_size = 50257, eps = 1e-5 }
local C, L, V = config.n_embd, config.n_layer, config.vocab_size
local layer_params = L * (4 * C * C + 2 * 4 * C * C + 9 * C + 4 * C)
local classifier_params = V * C

local common = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/common.lua")
local probe = common.bandwidth_probe()
local ROUNDS = 3 -- each decode timing paired with a bandwidth measured just before it

local weights = gpt2.random_weights(config, 7)
local prompt = {}
for i = 1, 16 do prompt[i] = (i * 7919) % V end

print(string.format("GPT-2 124M shape: %d layers, C=%d, vocab %d; %d rounds per row, each: read bandwidth (a 1 GB read,", L,
  C, V, ROUNDS))
print("best of 3) then a decode of " .. tokens .. " tokens; the row shows the round with the median ratio and the range")
print(string.format("%-22s %9s %9s %9s %11s %9s %12s", "decode", "GB/s", "tok/s", "ms/tok", "bound tok/s", "of bound",
  "range"))
local bytes_read = { fp16 = (layer_params + classifier_params) * 2, fp32 = (layer_params + classifier_params) * 4 }
for _, setup in ipairs({ { "fp16", "cpu" }, { "fp16", "ane" }, { "fp32", "cpu" } }) do
  local model = gpt2.from_weights(weights, { precision = setup[1], profile = setup[2] })
  for _ in model:generate(prompt, { max_tokens = 4, temperature = 0, stop_at_eot = false }) do end -- compile, warm up
  local median, lowest, highest = common.paired_decode_rounds(probe, ROUNDS, bytes_read[setup[1]], function()
    model.counters.decode_tokens, model.counters.decode_seconds = 0, 0
    for _ in model:generate(prompt, { max_tokens = tokens + 1, temperature = 0, stop_at_eot = false }) do end
    local s = model:stats()
    return s.decode_tokens_per_s, s.decode_ms_per_token
  end)
  print(string.format("%-22s %9.1f %9.1f %9.1f %11.1f %8.0f%% %5.0f-%3.0f%%", setup[1] .. ", profile " .. setup[2],
    median.bandwidth / 1e9, median.rate, median.ms, median.bound, 100 * median.ratio, 100 * lowest, 100 * highest))
end
-- The ane profile against the cpu profile, the same fp16 weights and tokens: the two models
-- alternate round by round; the ratio of their ms/token, median and range.
local profiles = { ane = gpt2.from_weights(weights, { precision = "fp16", profile = "ane" }),
  cpu = gpt2.from_weights(weights, { precision = "fp16", profile = "cpu" }) }
local function decode_ms(model)
  model.counters.decode_tokens, model.counters.decode_seconds = 0, 0
  for _ in model:generate(prompt, { max_tokens = tokens + 1, temperature = 0, stop_at_eot = false }) do end
  return model:stats().decode_ms_per_token
end
decode_ms(profiles.ane) decode_ms(profiles.cpu) -- compile, warm up
local ratios, ane_ms, cpu_ms = {}, {}, {}
for round = 1, options.pairs do
  ane_ms[round] = decode_ms(profiles.ane)
  cpu_ms[round] = decode_ms(profiles.cpu)
  ratios[round] = ane_ms[round] / cpu_ms[round]
end
local ratio, low, high = common.median_and_range(ratios)
print(string.format("fp16 decode, profile ane against cpu: %.2f against %.2f ms/token (medians), time ratio %.3f " ..
  "(%.3f-%.3f) over %d alternating rounds", (common.median_and_range(ane_ms)), (common.median_and_range(cpu_ms)), ratio,
  low, high, options.pairs))
profiles = nil
probe = nil
collectgarbage()
print(string.format("bound = weight bytes read per token / bandwidth: %.0f MB in fp16 precision (layers and",
  bytes_read.fp16 / 2 ^ 20))
print(string.format("classifier), %.0f MB in fp32. The ane profile pads each decoded token to 32 positions (ANE-21).",
  bytes_read.fp32 / 2 ^ 20))

local long = {}
for i = 1, 256 do long[i] = (i * 104729) % V end
print(string.format("%-26s %9s %9s", "prefill 256 tokens", "tok/s", "ms"))
for _, setup in ipairs({ { "fp16", "ane" }, { "fp32", "cpu" } }) do
  local model = gpt2.from_weights(weights, { precision = setup[1], profile = setup[2] })
  model:logits(long) -- compile
  local fastest = common.best_of(3, function() model:logits(long) end)
  print(string.format("%-26s %9.1f %9.1f", setup[1] .. ", profile " .. setup[2], 256 / fastest, fastest * 1000))
end

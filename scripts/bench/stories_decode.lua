-- Benchmark: decode tokens/s of a Stories110M-shaped Llama (random weights: dim 768, 12
-- layers, 12 heads, hidden 2048, vocab 32000) on the sim backend, cpu profile, against the
-- memory-bandwidth bound measured in the same run (weight bytes read per token / the rate
-- of the 1 GB read of common.lua). The comparison with llama2.c's run.c on the same
-- checkpoint, in the same run, is scripts/bench/decode_vs_runc.lua.
--   build/anelua scripts/bench/stories_decode.lua [--tokens N]
local ane = require("ane")
local llama = require("ane.models.llama")

local tokens = 64
tokens = require("ane.cli").command{
  name = "scripts/bench/stories_decode.lua", summary = "Stories110M-shaped decode against the bandwidth bound.",
  options = { { "tokens", "integer", tokens, "tokens decoded per round", min = 1 } },
}:parse(arg).tokens
local config = { dim = 768, hidden = 2048, n_layer = 12, n_head = 12, vocab_size = 32000, seq_len = 1024 }
local D, F, L, V = config.dim, config.hidden, config.n_layer, config.vocab_size
local layer_params = L * (4 * D * D + 3 * F * D + 2 * D)
local classifier_params = V * D

ane.set_compile_budget(1000000) -- two precisions x (prefill + decode) programs exceed the ANE-05 default of 119
local common = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/common.lua")
local probe = common.bandwidth_probe()
local ROUNDS = 3 -- each decode timing paired with a bandwidth measured just before it
local weights = llama.random_weights(config, 11)
local prompt = { 1 }
for i = 2, 8 do prompt[i] = (i * 7919) % V end

print(string.format("Stories110M shape: %d layers, dim %d, hidden %d, vocab %d; %d rounds per row, each: read", L, D, F, V,
  ROUNDS))
print("bandwidth (a 1 GB read, best of 3) then a decode; the row shows the round with the median ratio and the range")
print(string.format("%-10s %9s %9s %9s %11s %9s %12s", "decode", "GB/s", "tok/s", "ms/tok", "bound tok/s", "of bound",
  "range"))
-- fp16 precision: fp16 layer weights, and a decode step reads the classifier in fp16 too
-- (ane.models.transformer); fp32: everything fp32.
local bytes_read = { fp16 = (layer_params + classifier_params) * 2, fp32 = (layer_params + classifier_params) * 4 }
for _, precision in ipairs({ "fp16", "fp32" }) do
  local model = llama.from_weights(weights, { precision = precision, profile = "cpu" })
  for _ in model:generate(prompt, { max_tokens = 4, temperature = 0, stop_at_end = false }) do end -- compile, warm up
  local median, lowest, highest = common.paired_decode_rounds(probe, ROUNDS, bytes_read[precision], function()
    model.counters.decode_tokens, model.counters.decode_seconds = 0, 0
    for _ in model:generate(prompt, { max_tokens = tokens + 1, temperature = 0, stop_at_end = false }) do end
    local s = model:stats()
    return s.decode_tokens_per_s, s.decode_ms_per_token
  end)
  print(string.format("%-10s %9.1f %9.1f %9.1f %11.1f %8.0f%% %5.0f-%3.0f%%", precision, median.bandwidth / 1e9,
    median.rate, median.ms, median.bound, 100 * median.ratio, 100 * lowest, 100 * highest))
  model = nil
  collectgarbage()
end

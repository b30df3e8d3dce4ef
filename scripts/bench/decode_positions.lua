-- Benchmark: what a decode step costs at different positions of a Stories110M-shaped Llama
-- (random weights, sim, cpu profile). Each row prefills a prompt of the given length, then
-- times the decode steps after it; the rows alternate, round after round, and each ratio
-- pairs two rows of the same round. Attention reads the positions the cache holds, so a
-- step should cost more at 900 than at 520 (the caches grow by 256 positions at a time
-- beyond 512; with one power-of-two size, both read 1,024). The prefill of each prompt is
-- timed too (prompts beyond 512 tokens are computed in steps of 256 positions).
--   build/anelua scripts/bench/decode_positions.lua [--rounds N] [--tokens N] [--precision fp16|fp32]
local ane = require("ane")
local llama = require("ane.models.llama")

local opts = require("ane.cli").command{
  name = "scripts/bench/decode_positions.lua", summary = "Decode cost by position.",
  options = {
    { "rounds", "integer", 5, "alternating rounds", min = 1 },
    { "tokens", "integer", 16, "decode steps timed per row and round", min = 1 },
    { "precision", "string", "fp16", "fp16 or fp32" },
  },
}:parse(arg)
local config = { dim = 768, hidden = 2048, n_layer = 12, n_head = 12, vocab_size = 32000, seq_len = 1024 }
ane.set_compile_budget(1000000) -- every cache size x 12 layers, beyond the ANE-05 default of 119
local model = llama.from_weights(llama.random_weights(config, 11), { precision = opts.precision, profile = "cpu" })
local POSITIONS = { 480, 520, 900 }

local function prompt_of(n)
  local ids = { 1 }
  for i = 2, n do ids[i] = (i * 7919) % config.vocab_size end
  return ids
end

-- ms per decode step after a prompt of n tokens, and the prompt's prefill tokens/s
-- (compiling excluded: the model's counters)
local function decode_ms(n)
  local c = model.counters
  c.decode_tokens, c.decode_seconds, c.prefill_tokens, c.prefill_seconds = 0, 0, 0, 0
  for _ in model:generate(prompt_of(n), { max_tokens = opts.tokens + 1, temperature = 0, stop_at_end = false }) do end
  local s = model:stats()
  return s.decode_ms_per_token, s.prefill_tokens_per_s
end

for _, n in ipairs(POSITIONS) do decode_ms(n) end -- compile every size once, warm up
local times, prefill = {}, {}
for _, n in ipairs(POSITIONS) do times[n], prefill[n] = {}, {} end
for r = 1, opts.rounds do
  for _, n in ipairs(POSITIONS) do times[n][r], prefill[n][r] = decode_ms(n) end
end

local function median(values)
  local sorted = {}
  for i, v in ipairs(values) do sorted[i] = v end
  table.sort(sorted)
  return sorted[math.ceil(#sorted / 2)], sorted[1], sorted[#sorted]
end

print(string.format("Stories110M shape, %s, cpu profile: %d rounds, %d decode steps per row and round", opts.precision,
  opts.rounds, opts.tokens))
print(string.format("%-20s %14s %16s %14s %16s", "prompt (positions)", "decode ms/tok", "range", "prefill tok/s",
  "range"))
for _, n in ipairs(POSITIONS) do
  local m, lo, hi = median(times[n])
  local pm, plo, phi = median(prefill[n])
  print(string.format("%-20d %14.2f %7.2f-%7.2f %14.1f %7.1f-%7.1f", n, m, lo, hi, pm, plo, phi))
end
for _, pair in ipairs({ { 520, 900 }, { 480, 520 } }) do
  local ratios = {}
  for r = 1, opts.rounds do ratios[r] = times[pair[1]][r] / times[pair[2]][r] end
  local m, lo, hi = median(ratios)
  print(string.format("step at %d / step at %d: median %.3f (range %.3f-%.3f)", pair[1], pair[2], m, lo, hi))
end

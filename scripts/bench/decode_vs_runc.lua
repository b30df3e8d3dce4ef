-- Benchmark: greedy decoding of the same random Stories110M-shaped llama2.c checkpoint by
-- llama2.c's run.c (fp32, built here from ../shared/peers) and by anelua (fp32 and fp16, cpu
-- profile), alternating run.c and anelua round by round; prints each round, the median ratio
-- and its range, both fp32 programs' share of the read-bandwidth bound measured before each
-- round, and whether the greedy texts are the same. Without the peers it says so
-- and stops (nothing to compare against).
--   build/anelua scripts/bench/decode_vs_runc.lua [--tokens N] [--rounds R] [--peers DIR] [--work DIR]
local ane = require("ane")
local llama = require("ane.models.llama")
local sentencepiece = require("ane.sentencepiece")

local root = (arg[0]:match("^(.*)/scripts/bench/[^/]*$") or ".")
local common = dofile(root .. "/scripts/bench/common.lua")
local opts = require("ane.cli").command{
  name = "scripts/bench/decode_vs_runc.lua",
  summary = "Greedy decode tok/s against llama2.c's run.c on the same checkpoint, alternating, in one run.",
  options = common.peer_options(root, {
    { "tokens", "integer", 256, "tokens per generation (run.c's -n)", min = 8 },
    { "rounds", "integer", 3, "alternating rounds", min = 1 },
  }),
}:parse(arg)
ane.set_compile_budget(1000000)
local paths, why = common.stories_peers(opts.peers, opts.work)
if not paths then
  print("peer not available: " .. why .. "; nothing to compare against")
  os.exit(0)
end
local tokenizer_bin = root .. "/data/tokenizers/llama2/tokenizer.bin"
local prompt = "Once upon a time"

-- anelua: the same prompt with BOS, greedy, the same number of positions as run.c's -n.
local tok = assert(sentencepiece.load(tokenizer_bin, { vocab_size = 32000 }))
local models = {}
for _, precision in ipairs({ "fp32", "fp16" }) do
  models[precision] = assert(llama.load(paths.checkpoint, { precision = precision, profile = "cpu" }))
end
local function run_anelua(model) return common.anelua_greedy(model, tok, prompt, opts.tokens) end
for _, model in pairs(models) do run_anelua(model) end -- compile every program once, outside the rounds

-- The fp32 bound of each round: the read bandwidth (the faster of the probes right before and
-- right after the round's three decodes) over the bytes of fp32 weights a token reads (every
-- matrix, the classifier tied to the embedding), which both run.c and anelua's fp32 model read
-- per token.
local probe = common.bandwidth_probe()
local c = models.fp32.config
local kv = c.n_kv_head * c.head_dim -- k and v rows
local fp32_bytes = 4 * (c.n_layer * (2 * c.dim * c.dim + 2 * c.dim * kv + 3 * c.dim * c.hidden) + c.vocab_size * c.dim)

print(string.format("Stories110M shape (random weights), %d positions, greedy, cpu profile; run.c built -Ofast -fopenmp -march=native",
  opts.tokens))
print(string.format("%-6s %12s %12s %12s %8s %14s", "round", "run.c tok/s", "fp32 tok/s", "fp16 tok/s", "fp32/run.c",
  "fp32 bound"))
local ratios = { fp32 = {}, fp16 = {}, runc_of_bound = {}, fp32_of_bound = {} }
local same_text = true
for round = 1, opts.rounds do
  local before = probe(3)
  local runc_rate, runc_text = common.run_runc(paths, tokenizer_bin, opts.tokens, prompt)
  local fp32_rate, fp32_text = run_anelua(models.fp32)
  local fp16_rate = run_anelua(models.fp16)
  local bound = math.max(before, probe(3)) / fp32_bytes
  ratios.fp32[round], ratios.fp16[round] = fp32_rate / runc_rate, fp16_rate / runc_rate
  ratios.runc_of_bound[round], ratios.fp32_of_bound[round] = runc_rate / bound, fp32_rate / bound
  -- run.c prints the prompt then the continuation: the two continuations must agree as far
  -- as the shorter goes (the two count generated positions one apart)
  local a = runc_text:gsub("^%s*" .. prompt:gsub("%p", "%%%0"), ""):gsub("^%s+", ""):gsub("%s+$", "")
  local b = fp32_text:gsub("^%s+", ""):gsub("%s+$", "")
  local n = math.min(#a, #b)
  same_text = same_text and n > 0 and a:sub(1, n) == b:sub(1, n)
  print(string.format("%-6d %12.1f %12.1f %12.1f %8.2f %10.1f tok/s", round, runc_rate, fp32_rate, fp16_rate,
    ratios.fp32[round], bound))
end
for _, precision in ipairs({ "fp32", "fp16" }) do
  local median, low, high = common.median_and_range(ratios[precision])
  print(string.format("anelua %s / run.c: median %.2fx (range %.2f-%.2f over %d rounds)", precision, median, low, high,
    opts.rounds))
end
for _, who in ipairs({ { "run.c", "runc_of_bound" }, { "anelua fp32", "fp32_of_bound" } }) do
  local median, low, high = common.median_and_range(ratios[who[2]])
  print(string.format("%s of the fp32 bandwidth bound: median %.0f%% (range %.0f-%.0f%%)", who[1], 100 * median, 100 * low,
    100 * high))
end
print("greedy text (fp32) the same as run.c's: " .. (same_text and "yes" or "no"))

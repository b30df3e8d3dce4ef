-- Benchmark: prefill of the same random Stories110M-shaped llama2.c checkpoint
-- (../shared/peers/make_stories_checkpoint.py) by anelua (sim, cpu profile, fp32 and fp16)
-- and by llama.cpp's llama-bench (the checkpoint converted to GGUF F32 / F16 by
-- ../shared/peers/llama.cpp/make_models.sh; 2 threads), a prompt of --tokens tokens,
-- alternating the four round by round; prints each round, then the median ratio of each
-- precision (anelua / llama.cpp) and its range. anelua's rate leaves out compiling (done
-- once before the rounds); llama-bench reports its own. Without the peers it says so.
--   build/anelua scripts/bench/prefill_vs_llamacpp.lua [--tokens 256] [--rounds 3]
local llama = require("ane.models.llama")

local root = (arg[0]:match("^(.*)/scripts/bench/[^/]*$") or ".")
local common = dofile(root .. "/scripts/bench/common.lua")
local opts = require("ane.cli").command {
  name = "scripts/bench/prefill_vs_llamacpp.lua",
  summary = "Stories110M-shaped prefill against llama.cpp, paired.",
  options = common.peer_options(root, {
    { "tokens", "integer", 256, "prompt length", min = 8 },
    { "rounds", "integer", 3, "alternating rounds", min = 1 },
  }),
}:parse(arg)

local paths, bin, gguf = common.stories_and_llama_cpp(opts, root)
if not paths then return end

local PRECISIONS = { "fp32", "fp16" }
local peer_file = { fp32 = "model-f32.gguf", fp16 = "model-f16.gguf" }
local prompt = { 1 }
for i = 2, opts.tokens do prompt[i] = (i * 7919) % 32000 end

local models = {}
for _, precision in ipairs(PRECISIONS) do
  models[precision] = assert(llama.load(paths.checkpoint, { precision = precision, profile = "cpu" }))
  assert(models[precision]:session():feed(prompt)) -- compile the prefill programs outside the rounds
end

-- tokens/s of one prefill (one session's first feed: the prompt's programs and the last
-- position's logits), compiling excluded
local function anelua_prefill(model)
  model.counters.prefill_tokens, model.counters.prefill_seconds = 0, 0
  assert(model:session():feed(prompt))
  return model:stats().prefill_tokens_per_s
end

print(string.format("Stories110M shape (random weights), prefill of %d tokens, 2 threads; alternating", opts.tokens))
print(string.format("%-6s %12s %12s %12s %12s", "round", "anelua fp32", "llama.cpp F32", "anelua fp16", "llama.cpp F16"))
local ratios = { fp32 = {}, fp16 = {} }
for round = 1, opts.rounds do
  local row = { string.format("%-6d", round) }
  for _, precision in ipairs(PRECISIONS) do
    local ours = anelua_prefill(models[precision])
    local theirs = common.llama_bench(bin, gguf .. "/" .. peer_file[precision], opts.tokens, 0)
    ratios[precision][round] = theirs and ours / theirs or 0 / 0
    row[#row + 1] = string.format("%12.1f %12.1f", ours, theirs or 0 / 0)
  end
  print(table.concat(row, " "))
  io.stdout:flush()
end
print()
common.print_ratios({ { "fp32", "llama.cpp F32", ratios.fp32 }, { "fp16", "llama.cpp F16", ratios.fp16 } })

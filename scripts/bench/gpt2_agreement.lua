-- Greedy agreement between fp16 and fp32 precision: for several prompts, 32 greedy tokens
-- from reference/gpt2-tiny (the PyTorch-checked checkpoint) in each precision; prints the
-- fraction of positions where the two agree (up to the first divergence, and overall).
--   build/anelua scripts/bench/gpt2_agreement.lua [path-to-gpt2-tiny]
local gpt2 = require("ane.models.gpt2")
local tokenizer = require("ane.tokenizer")
local root = (arg[0]:match("^(.*)/scripts/bench/[^/]*$") or ".")
local _, positional = require("ane.cli").command{
  name = "scripts/bench/gpt2_agreement.lua", usage = "[GPT2_TINY_DIR]",
  summary = "Greedy agreement between fp16 and fp32 on a GPT-2 checkpoint (default: spec/data's gpt2-tiny).",
  positional = { { "GPT2_TINY_DIR", "a GPT-2 directory", optional = true } },
}:parse(arg)
local dir = positional[1] or (root .. "/spec/data/reference/gpt2-tiny")
local tok = assert(tokenizer.load(root .. "/data/tokenizers/gpt2"))
local m16 = assert(gpt2.load(dir, { precision = "fp16" }))
local m32 = assert(gpt2.load(dir, { precision = "fp32" }))
local prompts = { "Hello world!", "Once upon a time", "The quick brown fox", "In 1999, the", "def forward(self, x):",
  "Lily and Ben played", "Numbers: 1 2 3", "She said" }
local same, total, prefix_same = 0, 0, 0
print(string.format("%-24s %9s %12s", "prompt", "agree", "first split"))
for _, text in ipairs(prompts) do
  local ids = tok:encode(text)
  local a, b = {}, {}
  for id in m16:generate(ids, { max_tokens = 32, temperature = 0, stop_at_eot = false }) do a[#a + 1] = id end
  for id in m32:generate(ids, { max_tokens = 32, temperature = 0, stop_at_eot = false }) do b[#b + 1] = id end
  local agree, split = 0, nil
  for i = 1, #b do
    if a[i] == b[i] then agree = agree + 1 elseif not split then split = i end
  end
  same, total = same + agree, total + #b
  prefix_same = prefix_same + ((split or (#b + 1)) - 1)
  print(string.format("%-24s %6d/%-2d %12s", string.format("%q", text), agree, #b, split and ("token " .. split) or "none"))
end
print(string.format("agreement: %.1f%% of positions; %.1f%% before the first divergence", 100 * same / total,
  100 * prefix_same / total))

-- Benchmark: what sim's fused steps (ane_core/backend/sim_attention.c: a decode attention's
-- chain over its cache; sim_norm.c: RMSNorm) do to decoding. The same model is loaded twice,
-- with the fusions and step by step (`fusions = false`: every node its own step, the
-- baseline), and the two alternate within each round: one session's greedy decode, and
-- `--sessions` sessions stepped together (ane.models.generation.step_together, what `anelua
-- serve` runs). Prints each round, the median ratio (fused / step by step) of tokens/s with its
-- range, and checks that both produced the same ids (the fusions change no value).
--   build/anelua scripts/bench/sim_fusions.lua [--model FILE] [--tokens 64] [--rounds 7] [--sessions 8]
-- Without --model: a Stories110M-shaped Llama with random fp16 weights.
local ane = require("ane")
local models = require("ane.models")
local generation = require("ane.models.generation")
local common = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/common.lua")

local opts = require("ane.cli").command{
  name = "scripts/bench/sim_fusions.lua", summary = "Decode tokens/s with sim's fused steps and step by step.",
  options = {
    { "model", "path", nil, "a model file or directory (default: random Stories110M-shaped weights)" },
    { "tokens", "integer", 64, "tokens decoded per timing", min = 1 },
    { "rounds", "integer", 7, "alternating rounds", min = 1 },
    { "sessions", "integer", 8, "sessions stepped together", min = 2, max = 16 },
  },
}:parse(arg)

ane.set_compile_budget(1000000)
local function load(fusions)
  local options = { precision = "fp16", profile = "cpu", fusions = fusions }
  if opts.model then return assert(models.load(opts.model, options)) end
  local llama = require("ane.models.llama")
  local config = { dim = 768, hidden = 2048, n_layer = 12, n_head = 12, vocab_size = 32000, seq_len = 1024 }
  return llama.from_weights(llama.random_weights(config, 11), options)
end
local fused, step_by_step = load(true), load(false)
local prompt = { 1, 7919, 15838, 23757 }

-- One session's greedy decode: tokens/s (compiles left out) and the ids.
local function one_session(model)
  model.counters.decode_tokens, model.counters.decode_seconds = 0, 0
  local ids = {}
  for id in model:generate(prompt, { max_tokens = opts.tokens + 1, temperature = 0, stop_at_end = false }) do
    ids[#ids + 1] = id
  end
  return model:stats().decode_tokens_per_s, table.concat(ids, ",")
end

-- `sessions` sessions, each from its own prompt, stepped together: aggregate tokens/s, the ids.
local function together(model)
  local sessions, next_ids, ids = {}, {}, {}
  for i = 1, opts.sessions do
    sessions[i] = model:session({ capacity = #prompt + 1 + opts.tokens })
    next_ids[i] = assert(sessions[i]:feed({ 1, 7919 + 31 * i, 15838 })):argmax() - 1
    ids[i] = { next_ids[i] }
  end
  model.counters.decode_tokens, model.counters.decode_seconds = 0, 0
  for _ = 1, opts.tokens do
    generation.step_together(sessions, next_ids)
    for i, session in ipairs(sessions) do
      next_ids[i] = session.logits:argmax() - 1
      table.insert(ids[i], next_ids[i])
    end
  end
  for i = 1, #ids do ids[i] = table.concat(ids[i], ",") end
  return model:stats().decode_tokens_per_s, table.concat(ids, ";")
end

print(string.format("%s; %d tokens per timing, %d rounds, fp16 precision, cpu profile", opts.model or
  "Stories110M shape, random fp16 weights", opts.tokens, opts.rounds))
local rows = {}
for _, case in ipairs({ { "one session", one_session }, { opts.sessions .. " sessions together", together } }) do
  local name, run = case[1], case[2]
  run(fused) -- compile and warm up both
  run(step_by_step)
  local ratios = {}
  for r = 1, opts.rounds do
    local a, ids_fused = run(fused)
    local b, ids_steps = run(step_by_step)
    if ids_fused ~= ids_steps then error(name .. ": the fused steps changed the generated ids", 0) end
    ratios[r] = a / b
    print(string.format("%s round %d: fused %.1f tok/s, step by step %.1f tok/s, ratio %.3f", name, r, a, b, ratios[r]))
  end
  local median, low, high = common.median_and_range(ratios)
  rows[#rows + 1] = { name, median, low, high }
end
print("| decode | median ratio (fused / step by step) | range |")
print("|---|---|---|")
for _, row in ipairs(rows) do print(string.format("| %s | %.3fx | %.3f-%.3f |", row[1], row[2], row[3], row[4])) end
print("(the same ids both ways in every round)")

-- How far quantized weights move a model from its fp32 reference, measured on one fixed
-- text: mean per-token cross-entropy of the text (and its change from fp32), the mean
-- KL divergence of each position's next-token distribution from fp32's, how often the
-- top-1 token agrees with fp32's, and over a few prompts how many greedy tokens agree
-- before the first difference. Modes: fp16 (dense), int8, int4 (the classifier int8), and
-- int8/a8, int4/a8 and int8/a16, int4/a16: the same weights with activations = "int8" /
-- "int16" (integer products).
--   anelua scripts/quantize_fidelity.lua [--models qwen3-tiny,llama-tiny,qwen3-0.6b,stories110m]
--          [--tokens N] [--greedy N]
-- qwen3-tiny and llama-tiny are the PyTorch-checked reference models (../shared/data's, else
-- spec/data's smaller copies); the
-- Qwen3-0.6B- and Stories110M-shaped models have random weights (seeded), so their text
-- cross-entropy is near log(vocab) in every mode and the divergence columns say more.
local ane = require("ane")
local cli = require("ane.cli")
local llama = require("ane.models.llama")
local qwen3 = require("ane.models.qwen3")

local command = cli.command {
  name = "scripts/quantize_fidelity.lua",
  summary = "Quantized weights against fp32 on a fixed text: cross-entropy, KL, top-1 and greedy agreement.",
  options = {
    { "models", "string", "qwen3-tiny,llama-tiny,qwen3-0.6b,stories110m", "comma-separated models" },
    { "tokens", "integer", 128, "tokens of the text scored", min = 8 },
    { "greedy", "integer", 32, "greedy tokens generated per prompt", min = 1 },
  },
}
local opts = command:parse(arg)
ane.set_compile_budget(1000000) -- four builds of each model compile more than one device process may (ANE-05)
local root = arg[0]:match("^(.*)/scripts/[^/]*$") or "."
local lfs = require("lfs")
-- the reference models: the shared data's (real vocabularies) when it is beside the
-- project, else the repository's smaller copies (their ids are the text's modulo the vocabulary)
local shared = os.getenv("ANELUA_TEST_DATA") or root .. "/../shared/data"
local references = lfs.attributes(shared .. "/reference/qwen3-tiny", "mode") and shared .. "/reference"
  or root .. "/spec/data/reference"

local common = dofile(root .. "/scripts/bench/common.lua")
local TEXT, log_softmax = common.FIDELITY_TEXT, common.log_softmax
local PROMPTS = { "Once upon a time", "The little dog", "In a small village" }

-- Each model: how to load it (opts -> model) and how to turn text into its ids.
local function modulo(ids, vocab_size) -- (a no-op for the real vocabularies)
  for i, id in ipairs(ids) do ids[i] = id % vocab_size end
  return ids
end
local function qwen3_ids(vocab_size)
  local tok = assert(require("ane.tokenizer").load(root .. "/data/tokenizers/qwen3/tokenizer.json"))
  return function(text) return modulo(tok:encode(text), vocab_size) end
end
local function llama_ids(vocab_size)
  local sp = assert(require("ane.sentencepiece").load(root .. "/data/tokenizers/llama2/tokenizer.model"))
  return function(text) return modulo(sp:encode(text, { bos = true }), vocab_size) end
end

local MODELS = {
  ["qwen3-tiny"] = { load = function(o) return assert(llama.load(references .. "/qwen3-tiny", o)) end, ids = qwen3_ids },
  ["llama-tiny"] = { load = function(o) return assert(llama.load(references .. "/llama-tiny/model.bin", o)) end,
    ids = llama_ids },
  ["qwen3-0.6b"] = { weights = function() return qwen3.random_weights(qwen3.CONFIGS["0.6B"], 1) end,
    build = qwen3.from_weights, ids = qwen3_ids },
  ["stories110m"] = { weights = function()
      return llama.random_weights({ dim = 768, hidden = 2048, n_layer = 12, n_head = 12, vocab_size = 32000, seq_len = 1024 }, 1)
    end, build = llama.from_weights, ids = llama_ids },
}

local MODES = {
  { label = "fp32", opts = { precision = "fp32" } },
  { label = "fp16", opts = { precision = "fp16", profile = "cpu" } },
  { label = "int8", opts = { precision = "fp16", profile = "cpu", quantize = "int8" } },
  { label = "int4", opts = { precision = "fp16", profile = "cpu", quantize = "int4" } },
  { label = "int8/a8", opts = { precision = "fp16", profile = "cpu", quantize = "int8", activations = "int8" } },
  { label = "int4/a8", opts = { precision = "fp16", profile = "cpu", quantize = "int4", activations = "int8" } },
  { label = "int8/a16", opts = { precision = "fp16", profile = "cpu", quantize = "int8", activations = "int16" } },
  { label = "int4/a16", opts = { precision = "fp16", profile = "cpu", quantize = "int4", activations = "int16" } },
}

local function greedy(model, ids, n)
  local out = {}
  for id in model:generate(ids, { max_tokens = n, temperature = 0 }) do out[#out + 1] = id end
  return out
end

print("| model | mode | layer weights | CE (nats/token) | ΔCE vs fp32 | mean KL vs fp32 | top-1 agreement | greedy tokens equal (of " .. opts.greedy .. ", per prompt) |")
print("|---|---|---|---|---|---|---|---|")
for name in opts.models:gmatch("[^,]+") do
  local spec = MODELS[name] or command:fail("unknown model '" .. name .. "' (qwen3-tiny, llama-tiny, qwen3-0.6b, stories110m)")
  local weights = spec.weights and spec.weights()
  local reference, reference_greedy, encode, input, targets
  for _, mode in ipairs(MODES) do
    local model = weights and spec.build(weights, mode.opts) or spec.load(mode.opts)
    if not encode then
      encode = spec.ids(model.vocab_size)
      local ids = encode(TEXT)
      while #ids > math.min(opts.tokens, model.context_length - 1) + 1 do table.remove(ids) end
      input, targets = { table.unpack(ids, 1, #ids - 1) }, { table.unpack(ids, 2) }
    end
    local logits = model:logits(input):to("fp32"):totable() -- [T, V]
    local ce, rows = 0, {}
    for t = 1, #input do
      rows[t] = log_softmax(logits[t])
      ce = ce - rows[t][targets[t] + 1]
    end
    ce = ce / #input
    local streams = {}
    for p, prompt in ipairs(PROMPTS) do streams[p] = greedy(model, encode(prompt), opts.greedy) end
    local bytes = 0
    for _, L in ipairs(model.P.layers) do
      for _, w in pairs(L) do bytes = bytes + (ane.quantized.is(w) and w:bytes() or w:numel() * w:element_size()) end
    end
    if not reference then
      reference, reference_greedy = { rows = rows, ce = ce }, streams
      print(string.format("| %s | fp32 | %.1f MB | %.4f | | | | |", name, bytes / 1e6, ce))
    else
      local equal = {}
      for p, stream in ipairs(streams) do
        local n = 0
        while n < #stream and stream[n + 1] == reference_greedy[p][n + 1] do n = n + 1 end
        equal[p] = tostring(n)
      end
      local kl, agree = common.divergence(reference.rows, rows)
      print(string.format("| %s | %s | %.1f MB | %.4f | %+.4f | %.5f | %.1f%% | %s |", name, mode.label, bytes / 1e6, ce,
        ce - reference.ce, kl, 100 * agree, table.concat(equal, ", ")))
    end
    io.stdout:flush()
    model = nil
    collectgarbage()
  end
end

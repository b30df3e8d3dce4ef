-- Benchmark: each model family's decode at Qwen3-0.6B's shape against the read bound. One
-- random-weight model per family (dim 1024, hidden 3072, 28 layers, 16 query and 8 kv heads of
-- 128, vocabulary 151,936, tied embeddings), with what the family adds: Llama 3.x's rope
-- scaling, SmolLM2's base, Qwen2's q/k/v biases, Qwen3's q/k norms, Mistral's sliding window,
-- Phi-3's LongRoPE, Gemma 3's (1 + w) norms, post-norms, GeGLU and sliding layers. Greedy
-- decode in the cpu profile after a short prompt (its prefill outside the timing), each round
-- paired with a measurement of the memory read bandwidth: the bound of a round is bandwidth /
-- bytes read per token (layers' weights and the classifier as stored). Prints tok/s, the bound
-- and the median ratio with its range, per family.
--   build/anelua scripts/bench/family_decode.lua [--families llama3,gemma3,...] [--precision fp16|int8|int4]
--                                                [--tokens N] [--rounds R]
local ane = require("ane")
local llama = require("ane.models.llama")

local root = (arg[0]:match("^(.*)/scripts/bench/[^/]*$") or ".")
local common = dofile(root .. "/scripts/bench/common.lua")

-- What each family adds to the shared shape (the fields ane.formats.hf_llama reads into a config).
local FAMILIES = {
  { "llama3", { model_type = "llama", rope_theta = 500000, rope_scaling = { type = "llama3", factor = 32,
    low_freq_factor = 1, high_freq_factor = 4, original_max_position_embeddings = 8192 } } },
  { "smollm2", { model_type = "llama", rope_theta = 100000 } },
  { "qwen2", { model_type = "qwen2", rope_theta = 1000000, qkv_bias = true } },
  { "qwen3", { model_type = "qwen3", rope_theta = 1000000, qk_norm = true } },
  { "mistral", { model_type = "mistral", rope_theta = 1000000, sliding_window = 4096 } },
  { "phi3", { model_type = "phi3", rope_theta = 10000, seq_len = 4096, rope_scaling = { type = "longrope",
    short_factor = (function() local f = {} for i = 1, 64 do f[i] = 1 end return f end)(), attention_factor = 1.19,
    original_max_position_embeddings = 4096 } } },
  { "gemma3", { model_type = "gemma3_text", naming = "hf_gemma", rope_theta = 1000000, rope_local_theta = 10000,
    qk_norm = true, post_norms = true, ffn = "geglu", attn_scale = 256 ^ -0.5, embed_scale = 32,
    sliding_window = 512, sliding = (function() local s = {} for l = 1, 28 do s[l] = l % 6 ~= 0 or nil end return s end)() } },
}

local command = require("ane.cli").command {
  name = "scripts/bench/family_decode.lua",
  summary = "Each family's decode at Qwen3-0.6B's shape against the memory read bound.",
  options = {
    { "families", "string", "", "comma-separated families (default: all of llama3, smollm2, qwen2, qwen3, mistral, "
      .. "phi3, gemma3)" },
    { "precision", "choice", "fp16", "the weights: fp16, or int8 / int4 quantized at load", choices = { "fp16", "int8", "int4" } },
    { "tokens", "integer", 64, "tokens decoded per round", min = 8 },
    { "rounds", "integer", 3, "rounds per family", min = 1 },
  },
}
local opts = command:parse(arg)
ane.set_compile_budget(1000000)
local chosen = {}
for name in opts.families:gmatch("[^,]+") do chosen[name] = true end

-- Random weights of the shared shape with the family's fields (llama.random_hf_weights).
local function random_weights(features, seed)
  local c = { dim = 1024, hidden = 3072, n_layer = 28, n_head = 16, n_kv_head = 8, head_dim = 128, vocab_size = 151936,
    seq_len = 40960, rope = "half", norm_eps = 1e-6, naming = "hf" }
  for key, value in pairs(features) do c[key] = value end
  return llama.random_hf_weights(c, seed, "random " .. c.model_type .. " weights (seed " .. seed .. ")")
end

local bytes_per_token, decode_rate = common.bytes_per_token, common.decode_rate

print(string.format("Qwen3-0.6B shape per family (random weights, seed 1), %s weights, cpu profile, greedy: %d tokens "
  .. "after a 4-token prompt, %d rounds; bound = read bandwidth / bytes per token", opts.precision, opts.tokens, opts.rounds))
print("| family | read per token | decode tok/s | bound tok/s | of bound (median, range) |")
print("|---|---|---|---|---|")
local probe = common.bandwidth_probe()
local quantized = opts.precision ~= "fp16" and opts.precision or nil
for _, entry in ipairs(FAMILIES) do
  local family, features = entry[1], entry[2]
  if next(chosen) == nil or chosen[family] then
    local model = assert(llama.from_weights(random_weights(features, 1), { precision = "fp16", profile = "cpu",
      quantize = quantized, quantize_classifier = quantized and "int8" or nil }))
    local prompt = { 1, 2, 3, 4 }
    decode_rate(model, prompt, 4) -- compiles the decode programs outside the timing
    local bytes = bytes_per_token(model)
    local median, low, high = common.paired_decode_rounds(probe, opts.rounds, bytes,
      function() return decode_rate(model, prompt, opts.tokens) end)
    print(string.format("| %s | %.0f MB | %.1f | %.1f | %.0f%% (%.0f-%.0f%%) |", family, bytes / 1e6, median.rate,
      median.bound, 100 * median.ratio, 100 * low, 100 * high))
    io.stdout:flush()
    model = nil
    collectgarbage()
  end
end

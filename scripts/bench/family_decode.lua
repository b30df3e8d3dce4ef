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
local family_config = require("ane.models.llama_config")
local decoder = require("ane.models.decoder")

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

-- Random weights of the shared shape in the family's checkpoint naming: normal(0, 0.02)
-- projections (the residual ones scaled by 1/sqrt(2 L)), norms 1 (Gemma's stored as 0), biases 0.
local function random_weights(features, seed)
  local c = { dim = 1024, hidden = 3072, n_layer = 28, n_head = 16, n_kv_head = 8, head_dim = 128, vocab_size = 151936,
    seq_len = 40960, rope = "half", norm_eps = 1e-6, naming = "hf" }
  for key, value in pairs(features) do c[key] = value end
  local naming = family_config.NAMINGS[c.naming]
  local name, offsets = naming.name, naming.offsets or {}
  local randn = decoder.seeded_randn(seed)
  local function norm(role, n) return ane.tensor({ n }):fill(1 - (offsets[role] or 0)) end
  local q_width, kv_width = c.n_head * c.head_dim, c.n_kv_head * c.head_dim
  local residual_std = 0.02 / math.sqrt(2 * c.n_layer)
  local params = { [name("token_embedding")] = randn({ c.vocab_size, c.dim }, 0.02),
    [name("final_norm")] = norm("final_norm", c.dim) }
  for l = 0, c.n_layer - 1 do
    for _, role in ipairs({ "attn_norm", "ffn_norm", "post_attn_norm", "post_ffn_norm" }) do
      if role:match("^post") == nil or c.post_norms then params[name(role, l)] = norm(role, c.dim) end
    end
    if c.qk_norm then params[name("q_norm", l)], params[name("k_norm", l)] = norm("q_norm", c.head_dim), norm("k_norm", c.head_dim) end
    if c.qkv_bias then
      params[name("q_bias", l)] = ane.tensor({ q_width })
      params[name("k_bias", l)], params[name("v_bias", l)] = ane.tensor({ kv_width }), ane.tensor({ kv_width })
    end
    params[name("q", l)] = randn({ q_width, c.dim }, 0.02)
    params[name("k", l)], params[name("v", l)] = randn({ kv_width, c.dim }, 0.02), randn({ kv_width, c.dim }, 0.02)
    params[name("out", l)] = randn({ c.dim, q_width }, residual_std)
    params[name("gate", l)], params[name("up", l)] = randn({ c.hidden, c.dim }, 0.02), randn({ c.hidden, c.dim }, 0.02)
    params[name("down", l)] = randn({ c.dim, c.hidden }, residual_std)
  end
  return llama.weights_from_parameters(c, params, "random " .. c.model_type .. " weights (seed " .. seed .. ")", c.naming)
end

-- Bytes one decoded token reads: every layer weight and the classifier, as stored.
local function bytes_per_token(model)
  local function bytes(w) return ane.quantized.is(w) and w:bytes() or w:numel() * w:element_size() end
  local total = bytes(model.P.classifier_fp16 or model.P.classifier)
  for _, L in ipairs(model.P.layers) do
    for _, w in pairs(L) do total = total + bytes(w) end
  end
  return total
end

-- Greedy decode of `tokens` after `ids` (their prefill untimed; compiles taken out).
local function decode_rate(model, ids, tokens)
  local session = model:session({ capacity = #ids + tokens })
  local row = assert(session:feed(ids))
  local before = model:stats()
  local start = ane.clock()
  for _ = 1, tokens do row = assert(session:feed({ row:argmax() - 1 })) end
  local seconds = ane.clock() - start - (model:stats().compile_ms - before.compile_ms) / 1000
  return tokens / seconds, 1000 * seconds / tokens
end

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

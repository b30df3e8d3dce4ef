-- ane.formats.hf_llama: Hugging Face Llama-family directories (config.json and
-- model.safetensors, or a sharded index) as the Llama model's weights: model_type "llama"
-- (rotate-half RoPE; Llama 2 and 3.x with their rope_scaling, SmolLM2), "mistral" (its sliding
-- window), "qwen2" (biases on q, k and v), "qwen3" (per-head q/k RMSNorms), "phi3" (fused
-- projections, LongRoPE) or "gemma3_text" (Gemma 3: M.gemma3 below), fp32, fp16 and bf16 weights
-- read where the file maps them (converted by the model where it needs another dtype), tied
-- or separate lm_head, grouped-query attention. M.write saves a model (model:save) as such a
-- directory; anelua's quantized directories (model:save_quantized) also carry, in config.json,
-- "quantization_config": {"quant_method": "anelua", "weights": "int8" | "int4", ...}, and each
-- quantized linear weight NAME is stored as its codes (I8 [out, in] or U8 [out, in / 2], two
-- 4-bit indices a byte, low nibble first) with NAME_scale (F32 [out]) or NAME_palette
-- (F32 [out, 16]) beside it, or for "q8_0" / "q4_0" its codes (I8 [out, in] / U8 [out, in / 2],
-- signed 4-bit codes) with NAME_block_scale (F32 [out, in / 32]); they load as ane.quantized
-- weights, not re-quantized.
--
--   local W = assert(require("ane.formats.hf_llama").read("models/qwen3-0.6b"))
local ane = require("ane")
local arch = require("ane.models.llama_config")
local common = require("ane.formats.common")
local cjson = require("cjson.safe")

local M = {}

local function fail(format, ...) return nil, string.format(format, ...) end

local integer_field = common.integer_field

-- The model types this reader knows.
M.MODEL_TYPES = { llama = true, mistral = true, phi3 = true, qwen2 = true, qwen3 = true, gemma3_text = true }

-- Phi-3's fused projections: the roles cut from one tensor's rows, in order.
local PHI3_FUSED = {
  { name = "self_attn.qkv_proj", roles = { "q", "k", "v" } },
  { name = "mlp.gate_up_proj", roles = { "gate", "up" } },
}

--- Phi-3's LongRoPE (rope_type "longrope", formerly "su"): within original_max_position_embeddings
--- transformers rotates by the short factors (each frequency divided by its factor) and scales
--- cos and sin by sqrt(1 + ln(max / original) / ln(original)) (or rope_scaling.attention_factor);
--- anelua gives such a model that context (config.context_from), so the long factors never apply.
function M.longrope(json, r, source)
  local original = json.original_max_position_embeddings or r.original_max_position_embeddings
  if type(original) ~= "number" or original <= 0 or math.tointeger(original) == nil then
    return nil, string.format("%s: LongRoPE needs 'original_max_position_embeddings', a positive integer (got %s)",
      source, cjson.encode(original))
  end
  local short = r.short_factor
  if type(short) ~= "table" or #short == 0 then
    return nil, string.format("%s: rope_scaling.short_factor is %s, expected a list of numbers", source, cjson.encode(short))
  end
  for i, v in ipairs(short) do
    if type(v) ~= "number" or not (v > 0 and v < math.huge) then
      return nil, string.format("%s: rope_scaling.short_factor[%d] is %s, expected a positive number", source, i, cjson.encode(v))
    end
  end
  local max = type(json.max_position_embeddings) == "number" and json.max_position_embeddings or original
  local attention = r.attention_factor
  if attention == nil or attention == cjson.null then
    attention = max > original and math.sqrt(1 + math.log(max / original) / math.log(original)) or 1
  elseif type(attention) ~= "number" or not (attention > 0) then
    return nil, string.format("%s: rope_scaling.attention_factor is %s, expected a positive number", source, cjson.encode(attention))
  end
  return { type = "longrope", short_factor = short, attention_factor = attention,
    original_max_position_embeddings = math.tointeger(original) }
end

--- config.json's rope_scaling as nn.rope_frequencies takes it: nil for none (absent, null,
--- "default", and "dynamic", which rescales only beyond max_position_embeddings, the context
--- anelua gives the model), or { type = "linear" | "llama3" | "longrope" | "factors", ... }; or nil
--- and a message naming the field.
function M.rope_scaling(json, source)
  local r = json.rope_scaling
  if r == nil or r == cjson.null then return nil end
  if type(r) ~= "table" then return nil, string.format("%s: 'rope_scaling' is %s, expected an object", source, cjson.encode(r)) end
  local kind = r.rope_type or r.type
  if kind == "default" or kind == "dynamic" then return nil end
  if kind == "longrope" or kind == "su" then return M.longrope(json, r, source) end
  if kind == "factors" then -- anelua's own: a GGUF file's rope_freqs factors, saved with the model
    if type(r.factors) ~= "table" or #r.factors == 0 then
      return nil, string.format("%s: rope_scaling.factors is %s, expected a list of numbers", source, cjson.encode(r.factors))
    end
    for i, v in ipairs(r.factors) do
      if type(v) ~= "number" or not (v > 0 and v < math.huge) then
        return nil, string.format("%s: rope_scaling.factors[%d] is %s, expected a positive number", source, i, cjson.encode(v))
      end
    end
    return { type = "factors", factors = r.factors }
  end
  if kind ~= "linear" and kind ~= "llama3" then
    return nil, string.format("%s: rope_scaling.rope_type '%s' is not supported (anelua reads linear, dynamic, llama3 "
      .. "and longrope)", source, tostring(kind))
  end
  local scaling = { type = kind }
  local fields = kind == "llama3" and { "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings" }
    or { "factor" }
  for _, key in ipairs(fields) do
    local value = r[key]
    if type(value) ~= "number" or not (value > 0 and value < math.huge) then
      return nil, string.format("%s: rope_scaling.%s is %s, expected a positive number", source, key, cjson.encode(value))
    end
    scaling[key] = value
  end
  if kind == "llama3" and scaling.high_freq_factor <= scaling.low_freq_factor then
    return nil, string.format("%s: rope_scaling.high_freq_factor (%g) must be above low_freq_factor (%g)", source,
      scaling.high_freq_factor, scaling.low_freq_factor)
  end
  return scaling
end

-- A number rounded to a checkpoint dtype ("bfloat16", "float16"; else as it is), as
-- transformers rounds a scale it casts to the weights' dtype.
local function in_torch_dtype(value, torch_dtype)
  local dtype = torch_dtype == "bfloat16" and "bf16" or torch_dtype == "float16" and "fp16" or nil
  if not dtype then return value end
  return ane.tensor.from({ value }, { 1 }, dtype):to("fp32"):get(1)
end

--- What Gemma 3's config.json adds to a Llama's (facts from transformers' modeling_gemma3.py and
--- configuration_gemma3.py), into `config`: the (1 + weight) RMSNorms (naming hf_gemma), q/k
--- norms, norms after attention and the FFN, GeGLU with GELU's tanh form, the scores scaled by
--- query_pre_attn_scalar^-0.5, embeddings times sqrt(hidden_size) in the checkpoint's dtype,
--- sliding-window layers (layer_types, else every layer but each sliding_window_pattern-th)
--- rotating by rope_local_base_freq, the others by rope_theta with rope_scaling (or the newer
--- rope_parameters of both), and soft-capping of the scores and the logits where the config sets
--- it (attn_logit_softcapping, final_logit_softcapping). Returns config, or nil and a message.
function M.gemma3(json, config, source)
  local activation = json.hidden_activation or json.hidden_act
  if activation ~= "gelu_pytorch_tanh" and activation ~= "gelu_tanh" then
    return fail("%s: hidden_activation '%s'; Gemma 3 runs GELU's tanh form (gelu_pytorch_tanh)", source, tostring(activation))
  end
  for key, field in pairs({ attn_logit_softcapping = "attn_softcap", final_logit_softcapping = "final_softcap" }) do
    if json[key] ~= nil and json[key] ~= cjson.null then
      local cap, why = common.positive_number_field(json, key, source)
      if not cap then return nil, why end
      config[field] = cap
    end
  end
  if json.use_bidirectional_attention == true then
    return fail("%s: use_bidirectional_attention is true (an encoder); anelua runs causal decoders", source)
  end
  local scalar, err = common.positive_number_field(json, "query_pre_attn_scalar", source)
  if not scalar then return nil, err end
  local window
  window, err = common.positive_integer_field(json, "sliding_window", source)
  if not window then return nil, err end
  local sliding = {}
  local n_layer = math.tointeger(json.num_hidden_layers) or 0
  if json.layer_types ~= nil and json.layer_types ~= cjson.null then
    if type(json.layer_types) ~= "table" or #json.layer_types ~= n_layer then
      return fail("%s: 'layer_types' must list one type per layer (%d)", source, n_layer)
    end
    for l, kind in ipairs(json.layer_types) do
      if kind ~= "sliding_attention" and kind ~= "full_attention" then
        return fail("%s: layer_types[%d] is %s, expected \"sliding_attention\" or \"full_attention\"", source, l,
          cjson.encode(kind))
      end
      sliding[l] = kind == "sliding_attention" or nil
    end
  else
    local pattern
    pattern, err = common.positive_integer_field(json, "sliding_window_pattern", source, 6)
    if not pattern then return nil, err end
    for l = 1, n_layer do sliding[l] = l % pattern ~= 0 or nil end -- every pattern-th layer is global
  end
  -- RoPE: rope_parameters {sliding_attention = {...}, full_attention = {...}} (newer), or the
  -- flat rope_theta, rope_scaling and rope_local_base_freq
  local local_theta = json.rope_local_base_freq
  local parameters = json.rope_parameters
  if type(parameters) == "table" then
    local full, slide = parameters.full_attention, parameters.sliding_attention
    if type(full) ~= "table" or type(slide) ~= "table" then
      return fail("%s: rope_parameters needs full_attention and sliding_attention entries", source)
    end
    if (slide.rope_type or "default") ~= "default" then
      return fail("%s: rope_parameters.sliding_attention.rope_type '%s' is not supported (default only)", source,
        tostring(slide.rope_type))
    end
    local_theta = slide.rope_theta
    config.rope_theta, err = common.positive_number_field(full, "rope_theta", source .. ": rope_parameters.full_attention")
    if not config.rope_theta then return nil, err end
    config.rope_scaling, err = M.rope_scaling({ rope_scaling = full }, source .. ": rope_parameters.full_attention")
    if err then return nil, err end
  end
  config.rope_local_theta, err = common.positive_number_field({ rope_local_base_freq = local_theta },
    "rope_local_base_freq", source, 10000)
  if not config.rope_local_theta then return nil, err end
  config.naming, config.qk_norm, config.post_norms, config.ffn = "hf_gemma", true, true, "geglu"
  config.attn_scale = scalar ^ -0.5
  config.sliding_window, config.sliding = window, sliding
  local hidden = math.tointeger(json.hidden_size)
  config.embed_scale = hidden and in_torch_dtype(math.sqrt(hidden), json.torch_dtype or json.dtype)
  return config
end

-- A quantized weight stored as codes + scales or palettes (see the top), checked.
local function quantized_tensor(tensors, key, shape, dir)
  local scale, palette, block_scale = tensors[key .. "_scale"], tensors[key .. "_palette"], tensors[key .. "_block_scale"]
  local encoding = scale and "int8" or palette and "int4" or (tensors[key] and tensors[key]:dtype() == "int8") and "q8_0"
    or "q4_0"
  local codes_shape = (encoding == "int8" or encoding == "q8_0") and shape or { shape[1], shape[2] // 2 }
  local codes, problem = common.expect_tensor(tensors, key, codes_shape, dir)
  if not codes then return nil, problem end
  local ok, q = pcall(ane.quantized, { encoding = encoding, dtype = "fp32", shape = shape, data = codes,
    table = scale or palette or block_scale })
  if not ok then return fail("%s: tensor '%s': %s", dir, key, tostring(q):gsub("^ane%.quantized: ", "")) end
  return q
end

--- The weights of a Hugging Face directory, or nil and a message naming file and field.
function M.read(dir)
  local source = dir .. "/config.json"
  local json, err = ane.io.read_json(source)
  if not json then return nil, err end
  local model_type = json.model_type
  if model_type == "gemma3" then
    return fail("%s: model_type 'gemma3' is Gemma 3 with its vision tower; anelua reads the text-only "
      .. "'gemma3_text' directories (Gemma 3 270M and 1B)", source)
  end
  if not M.MODEL_TYPES[model_type] then
    return fail("%s: model_type '%s'; the Llama loader reads 'llama', 'mistral', 'phi3', 'qwen2', 'qwen3' and "
      .. "'gemma3_text'", source, tostring(model_type))
  end
  local gemma = model_type == "gemma3_text"
  local rope_scaling
  rope_scaling, err = M.rope_scaling(json, source)
  if err then return nil, err end
  if json.attention_bias == true or json.mlp_bias == true then
    return fail("%s: attention or MLP biases are not supported", source)
  end
  if not gemma and json.hidden_act ~= nil and json.hidden_act ~= "silu" then
    return fail("%s: hidden_act '%s'; only silu (SwiGLU) is supported", source, tostring(json.hidden_act))
  end
  local quantization = json.quantization_config
  if quantization ~= nil and quantization ~= cjson.null then
    if type(quantization) ~= "table" or quantization.quant_method ~= "anelua" then
      return fail("%s: quantization_config.quant_method '%s' is not supported (anelua reads its own quantized "
        .. "directories; load the unquantized checkpoint with quantize = 'int8' or 'int4')", source,
        tostring(type(quantization) == "table" and quantization.quant_method or quantization))
    end
  else
    quantization = nil
  end
  -- anelua_rope: a llama2.c model saved quantized keeps its interleaved rotary layout
  local rope = json.anelua_rope == "interleaved" and "interleaved" or "half"
  local config = { rope = rope, qk_norm = model_type == "qwen3", qkv_bias = model_type == "qwen2", naming = "hf",
    model_type = model_type, rope_scaling = rope_scaling, hf_json = json }
  config.rope_theta, err = common.positive_number_field(json, "rope_theta", source, gemma and 1000000 or 10000)
  if not config.rope_theta then return nil, err end
  if gemma then
    config, err = M.gemma3(json, config, source)
    if not config then return nil, err end
  end
  config.norm_eps, err = common.positive_number_field(json, "rms_norm_eps", source, 1e-6)
  if not config.norm_eps then return nil, err end
  if json.tie_word_embeddings ~= nil and json.tie_word_embeddings ~= cjson.null and type(json.tie_word_embeddings) ~= "boolean" then
    return fail("%s: 'tie_word_embeddings' is %s, expected true or false", source, cjson.encode(json.tie_word_embeddings))
  end
  local keys = { dim = "hidden_size", hidden = "intermediate_size", n_layer = "num_hidden_layers",
    n_head = "num_attention_heads", vocab_size = "vocab_size", seq_len = "max_position_embeddings" }
  for field, key in pairs(keys) do
    config[field], err = integer_field(json, key, source)
    if not config[field] then return nil, err end
  end
  config.n_kv_head, err = integer_field(json, "num_key_value_heads", source, config.n_head)
  if not config.n_kv_head then return nil, err end
  config.head_dim, err = integer_field(json, "head_dim", source, config.n_head > 0 and config.dim // config.n_head or 0)
  if not config.head_dim then return nil, err end
  if rope_scaling and rope_scaling.type == "factors" and #rope_scaling.factors ~= config.head_dim // 2 then
    return fail("%s: rope_scaling.factors has %d factors for heads of %d dimensions (expected %d)", source,
      #rope_scaling.factors, config.head_dim, config.head_dim // 2)
  end
  if rope_scaling and rope_scaling.type == "longrope" and rope_scaling.original_max_position_embeddings < config.seq_len then
    config.seq_len = rope_scaling.original_max_position_embeddings
    config.context_note = string.format("the context is LongRoPE's short range, %d positions", config.seq_len)
  end
  if json.partial_rotary_factor ~= nil and json.partial_rotary_factor ~= cjson.null and json.partial_rotary_factor ~= 1 then
    return fail("%s: partial_rotary_factor %s is not supported (every head dimension rotates in anelua's models)", source,
      cjson.encode(json.partial_rotary_factor))
  end
  -- Mistral's sliding window: every layer attends to the last sliding_window positions (Qwen2's
  -- is off unless use_sliding_window; Phi-3's null)
  local window = json.sliding_window
  if not gemma and window ~= nil and window ~= cjson.null and json.use_sliding_window ~= false and model_type ~= "qwen2" then
    window = type(window) == "number" and math.tointeger(window) or window
    if math.type(window) ~= "integer" or window <= 0 then
      return fail("%s: 'sliding_window' is %s, expected a positive integer or null", source, cjson.encode(window))
    end
    if window < config.seq_len then config.sliding_window = window end
  end
  config, err = arch.check_config(arch.complete_config(config), source)
  if not config then return nil, err end

  local tensors, meta = ane.io.load_safetensors(dir)
  if not tensors then return nil, meta end
  local tied = json.tie_word_embeddings == true or (json.tie_word_embeddings == nil and tensors["lm_head.weight"] == nil)
  local naming = arch.NAMINGS[config.naming]
  local name = naming.name
  local c, q_width, kv_width = config, config.n_head * config.head_dim, config.n_kv_head * config.head_dim
  -- Phi-3: q, k, v and gate, up as row ranges of the fused tensors
  local fused_roles = {}
  if model_type == "phi3" then
    local widths = { q = q_width, k = kv_width, v = kv_width, gate = c.hidden, up = c.hidden }
    for _, fused in ipairs(PHI3_FUSED) do
      local first = 1
      for _, role in ipairs(fused.roles) do
        fused_roles[role] = { name = fused.name, first = first, last = first + widths[role] - 1 }
        first = first + widths[role]
      end
      fused.rows = first - 1
    end
  end
  local function tensor(role, l, shape)
    local key = name(role, l)
    local part = l and fused_roles[role]
    if part then
      local whole_key = string.format("model.layers.%d.%s.weight", l, part.name)
      local rows = part.name:match("qkv") and PHI3_FUSED[1].rows or PHI3_FUSED[2].rows
      local whole, problem = common.expect_tensor(tensors, whole_key, { rows, c.dim }, dir)
      if not whole then return nil, problem end
      return whole:slice(1, part.first, part.last)
    end
    if quantization and #shape == 2 and (tensors[key .. "_scale"] or tensors[key .. "_palette"]
        or tensors[key .. "_block_scale"]) then
      return quantized_tensor(tensors, key, shape, dir)
    end
    local t, problem = common.expect_tensor(tensors, key, shape, dir)
    if not t then return nil, problem end
    if t:dtype() ~= "fp32" and t:dtype() ~= "fp16" and t:dtype() ~= "bf16" then
      return fail("%s: tensor '%s' is %s%s", dir, key, t:dtype(), quantization
        and string.format(" with no '%s_scale' or '%s_palette' beside it", key, key) or ", not a float type")
    end
    -- Gemma's norms hold 1 + weight, summed in fp32 as transformers sums them
    local offset = naming.offsets and naming.offsets[role]
    if offset then return t:to("fp32"):add(offset) end
    -- a view of the mapped file, in the file's dtype: a model converts it only where its
    -- precision differs (bf16 straight to fp16), fp32 masters only when training asks
    return t
  end
  -- eos_token_id: an id, a list of ids (the first stops generation) or absent
  local eos = type(json.eos_token_id) == "table" and json.eos_token_id[1] or json.eos_token_id
  if eos == cjson.null then eos = nil end
  if eos ~= nil and not (type(eos) == "number" and math.tointeger(eos) and eos >= 0 and eos < config.vocab_size) then
    return fail("%s: 'eos_token_id' is %s, expected a token id below vocab_size %d", source, cjson.encode(eos),
      config.vocab_size)
  end
  -- weights by role (ane.models.transformer); the classifier absent when tied
  local W = { config = config, layers = {}, source = dir, naming = config.naming, format = "Hugging Face " .. model_type,
    stop_token = math.type(eos) and math.tointeger(eos) or nil }
  return arch.fill_weights(W, tensor, not tied or (quantization and tensors["lm_head.weight"] ~= nil))
end

-- config.json of a saved model; quantization: { weights =, classifier = } encodings, or nil
local function hf_config(model, quantization)
  local c = model.config
  if c.model_type == "gemma3_text" then -- its own fields as read (the sizes are not changed by anelua)
    local config = {}
    for key, value in pairs(c.hf_json) do config[key] = value end
    -- (torch_dtype stays the source's: it sets the embedding scale's rounding, which the
    -- model keeps whatever dtype its tensors are saved in)
    config.tie_word_embeddings = quantization == nil and model.shared_classifier or false
    config.quantization_config = quantization and { quant_method = "anelua", weights = quantization.weights,
      classifier = quantization.classifier } or nil
    return config
  end
  -- (Phi-3's fused projections are written apart, as a Llama's: the same network)
  local model_type = c.model_type == "phi3" and "llama" or c.model_type or "llama"
  local config = { model_type = model_type, hidden_size = c.dim, intermediate_size = c.hidden,
    num_hidden_layers = c.n_layer, num_attention_heads = c.n_head, num_key_value_heads = c.n_kv_head,
    head_dim = c.head_dim, vocab_size = c.vocab_size, max_position_embeddings = c.seq_len, rope_theta = c.rope_theta,
    rms_norm_eps = c.norm_eps, hidden_act = "silu", eos_token_id = model.stop_token,
    tie_word_embeddings = quantization == nil and model.shared_classifier or false,
    torch_dtype = model.dtype == "fp16" and "float16" or "float32" }
  if quantization then
    config.quantization_config = { quant_method = "anelua", weights = quantization.weights,
      classifier = quantization.classifier }
  end
  if c.rope ~= "half" then config.anelua_rope = c.rope end
  if c.rope_scaling then
    config.rope_scaling = { rope_type = c.rope_scaling.type }
    for key, value in pairs(c.rope_scaling) do
      if key ~= "type" then config.rope_scaling[key] = value end
    end
  end
  return config
end

-- NAME (the codes) and NAME_scale / NAME_palette / NAME_block_scale (the table, F32) of one
-- quantized weight.
local TABLE_SUFFIX = { int8 = "_scale", int4 = "_palette", q8_0 = "_block_scale", q4_0 = "_block_scale" }
local function add_quantized(tensors, key, q)
  local rows = q:shape()[1]
  local codes, table = q:data(), q:table()
  tensors[key] = codes:reshape(rows, codes:numel() // rows)
  tensors[key .. TABLE_SUFFIX[q:encoding()]] = q:encoding() == "int8" and table:reshape(rows)
    or table:reshape(rows, table:numel() // rows)
end

--- Writes a Llama-family model (model:save) as a directory that M.read loads as it is:
--- config.json and model.safetensors. Norms in F32, the embedding and unquantized weights in
--- the model's precision (fp16 ones then load as views of the file, with nothing to
--- convert), a tied embedding once; quantized weights as codes + tables, loaded without
--- re-quantizing. Other files of the source directory (tokenizer, generation_config.json),
--- or a llama2.c checkpoint's tokenizer.bin / tokenizer.model, are copied. Returns true or
--- nil and a message.
function M.write(dir, model)
  if model.lora then -- (its adapters are program inputs, not part of the weights written here)
    return fail("%s: the model has LoRA adapters, which this directory would leave out; save them with "
      .. "model:save_adapters(path)", dir)
  end
  if model.refresh_weights then model:refresh_weights() end -- trained parameters not yet in the programs' weights
  local lfs = require("lfs")
  local in_dtype = require("ane.models.decoder").in_dtype
  if lfs.attributes(dir, "mode") ~= "directory" then
    local ok, why = lfs.mkdir(dir)
    if not ok then return fail("%s: cannot create the directory: %s", dir, tostring(why)) end
  end
  -- Hugging Face names (Gemma's own, whose norms are stored as weight, not 1 + weight)
  local naming = model.naming == arch.NAMINGS.hf_gemma and model.naming or arch.NAMINGS.hf
  local name, offsets, tensors, weights_encoding = naming.name, naming.offsets or {}, {}, nil
  local function vector(role, t) return t:to("fp32"):reshape(t:numel()):add(-(offsets[role] or 0)) end
  for l, stored in ipairs(model.P.stored_layers) do
    for role, t in pairs(model.P.layers[l]) do
      if stored[role] and TABLE_SUFFIX[stored[role]:encoding()] then
        add_quantized(tensors, name(role, l - 1), stored[role])
        weights_encoding = stored[role]:encoding()
      elseif stored[role] then -- (a GGUF file's K-quant blocks, kept for sim's products: saved dequantized)
        tensors[name(role, l - 1)] = in_dtype(stored[role]:dequantize(), model.dtype)
      elseif t:ndim() == 4 then -- a program's [out, in, 1, 1] weight: [out, in]
        tensors[name(role, l - 1)] = t:reshape(t:shape()[1], t:shape()[2])
      else
        tensors[name(role, l - 1)] = vector(role, t)
      end
    end
  end
  tensors[name("final_norm")] = vector("final_norm", model.P.final_norm)
  local embedding = model.P.token_embedding -- (a GGUF file's blocks: saved dequantized)
  tensors[name("token_embedding")] = in_dtype(ane.quantized.is(embedding) and embedding:dequantize() or embedding, model.dtype)
  local classifier, quantization = model.P.classifier, nil
  -- (a GGUF file's Q6_K classifier is kept for the CPU's products only: saved dequantized)
  if ane.quantized.is(classifier) and classifier:encoding() == "q6_k" then classifier = classifier:dequantize() end
  if weights_encoding then
    quantization = { weights = weights_encoding, classifier = ane.quantized.is(classifier) and classifier:encoding() or "none" }
  end
  if ane.quantized.is(classifier) then add_quantized(tensors, name("classifier"), classifier)
  elseif quantization or not model.shared_classifier then
    tensors[name("classifier")] = in_dtype(classifier, model.dtype)
  end
  local ok, err = ane.io.write_file_atomic(dir .. "/config.json", cjson.encode(hf_config(model, quantization)))
  if not ok then return nil, err end
  ok, err = ane.io.save_safetensors(dir .. "/model.safetensors", tensors, { format = "pt", saved_by = "anelua" })
  if not ok then return nil, err end
  local source = model.source
  local source_dir = type(source) == "string" and (lfs.attributes(source, "mode") == "directory" and source
    or lfs.attributes(source, "mode") == "file" and (source:match("^(.*)/[^/]*$") or "."))
  if source_dir and source_dir ~= dir then
    for _, file in ipairs({ "tokenizer.json", "tokenizer_config.json", "generation_config.json", "vocab.json",
      "merges.txt", "special_tokens_map.json", "tokenizer.bin", "tokenizer.model", "chat_template.jinja" }) do
      local bytes = ane.io.read_file(source_dir .. "/" .. file)
      if bytes then
        ok, err = ane.io.write_file_atomic(dir .. "/" .. file, bytes)
        if not ok then return nil, err end
      end
    end
  end
  return true
end

--- model:save_quantized: M.write for a model that holds quantized weights.
function M.write_quantized(dir, model)
  if not model.quantized then
    return fail("%s: the model holds no quantized weights (load it with quantize = ...)", dir)
  end
  return M.write(dir, model)
end

return M

-- ane.formats.hf_llama: Hugging Face Llama-family directories (config.json and
-- model.safetensors, or a sharded index) as the Llama model's weights: model_type "llama"
-- (rotate-half RoPE) or "qwen3" (also per-head q/k RMSNorms), bf16/fp16/fp32 weights read
-- as fp32 masters, tied or separate lm_head, grouped-query attention.
--
--   local W = assert(require("ane.formats.hf_llama").read("models/qwen3-0.6b"))
local ane = require("ane")
local arch = require("ane.models.llama_config")
local common = require("ane.formats.common")
local cjson = require("cjson.safe")

local M = {}

local function fail(format, ...) return nil, string.format(format, ...) end

local function integer_field(config, key, source, default)
  local value = config[key]
  if value == nil or value == cjson.null then value = default end
  if type(value) ~= "number" or value ~= math.floor(value) then
    return nil, string.format("%s: '%s' is missing or not an integer", source, key)
  end
  return math.tointeger(value)
end

--- The weights of a Hugging Face directory, or nil and a message naming file and field.
function M.read(dir)
  local source = dir .. "/config.json"
  local json, err = ane.io.read_json(source)
  if not json then return nil, err end
  local model_type = json.model_type
  if model_type ~= "llama" and model_type ~= "qwen3" then
    return fail("%s: model_type '%s'; the Llama loader reads 'llama' and 'qwen3'", source, tostring(model_type))
  end
  if json.rope_scaling ~= nil and json.rope_scaling ~= cjson.null then
    return fail("%s: rope_scaling is set; scaled rotary embeddings are not supported", source)
  end
  if json.attention_bias == true or json.mlp_bias == true then
    return fail("%s: attention or MLP biases are not supported", source)
  end
  if json.hidden_act ~= nil and json.hidden_act ~= "silu" then
    return fail("%s: hidden_act '%s'; only silu (SwiGLU) is supported", source, tostring(json.hidden_act))
  end
  local config = { rope = "half", rope_theta = json.rope_theta or 10000, norm_eps = json.rms_norm_eps or 1e-6,
    qk_norm = model_type == "qwen3", naming = "hf", model_type = model_type }
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
  config, err = arch.check_config(arch.complete_config(config), source)
  if not config then return nil, err end

  local tensors, meta = ane.io.load_safetensors(dir)
  if not tensors then return nil, meta end
  local tied = json.tie_word_embeddings == true or (json.tie_word_embeddings == nil and tensors["lm_head.weight"] == nil)
  local name = arch.NAMINGS.hf
  local c, q_width, kv_width = config, config.n_head * config.head_dim, config.n_kv_head * config.head_dim
  local shapes = { rms_att = { c.dim }, wq = { q_width, c.dim }, wk = { kv_width, c.dim }, wv = { kv_width, c.dim },
    wo = { c.dim, q_width }, rms_ffn = { c.dim }, w1 = { c.hidden, c.dim }, w2 = { c.dim, c.hidden },
    w3 = { c.hidden, c.dim }, q_norm = { c.head_dim }, k_norm = { c.head_dim } }
  local function tensor(field, l, shape)
    local t, problem = common.expect_tensor(tensors, name(field, l), shape, dir)
    if not t then return nil, problem end
    return t:dtype() == "fp32" and t or t:to("fp32") -- bf16 / fp16 files: fp32 masters
  end
  local eos = type(json.eos_token_id) == "table" and json.eos_token_id[1] or json.eos_token_id
  local W = { config = config, layers = {}, source = dir, shared_classifier = tied, naming = "hf",
    format = "Hugging Face " .. model_type, stop_token = math.type(eos) and math.tointeger(eos) or nil }
  W.token_embedding, err = tensor("token_embedding", nil, { c.vocab_size, c.dim })
  if not W.token_embedding then return nil, err end
  W.rms_final, err = tensor("rms_final", nil, { c.dim })
  if not W.rms_final then return nil, err end
  if tied then
    W.wcls = W.token_embedding
  else
    W.wcls, err = tensor("wcls", nil, { c.vocab_size, c.dim })
    if not W.wcls then return nil, err end
  end
  for l = 1, c.n_layer do
    W.layers[l] = {}
    for _, field in ipairs(arch.layer_fields(config)) do
      W.layers[l][field], err = tensor(field, l - 1, shapes[field])
      if not W.layers[l][field] then return nil, err end
    end
  end
  return W
end

return M

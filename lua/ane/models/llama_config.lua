-- ane.models.llama_config: the Llama family's configuration and tensor names, shared by its
-- model (ane.models.llama) and the readers of its checkpoint formats (ane.formats.llama2c,
-- ane.formats.hf_llama): which tensors a layer has, what llama2.c configurations leave
-- implicit, the checks every configuration passes, and each format's tensor names.
local M = {}

local function fail(format, ...) return nil, string.format(format, ...) end

-- The tensors of one transformer layer, by their llama2.c field names.
M.LAYER_FIELDS = { "rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3" }
M.QK_NORM_FIELDS = { "q_norm", "k_norm" } -- Qwen3: RMSNorm over head_dim on q and k

-- Hugging Face names of the layer fields (model.layers.<l>.<name>.weight) and of the rest.
local HF_LAYER_NAMES = { rms_att = "input_layernorm", wq = "self_attn.q_proj", wk = "self_attn.k_proj",
  wv = "self_attn.v_proj", wo = "self_attn.o_proj", q_norm = "self_attn.q_norm", k_norm = "self_attn.k_norm",
  rms_ffn = "post_attention_layernorm", w1 = "mlp.gate_proj", w2 = "mlp.down_proj", w3 = "mlp.up_proj" }
local HF_NAMES = { token_embedding = "model.embed_tokens.weight", rms_final = "model.norm.weight", wcls = "lm_head.weight" }

--- The name a checkpoint gives a tensor: field (a LAYER_FIELDS entry or token_embedding,
--- rms_final, wcls) of 0-based layer l (nil for the others), in llama2.c's naming
--- ("wq.0") or Hugging Face's ("model.layers.0.self_attn.q_proj.weight").
M.NAMINGS = {
  llama2c = function(field, l) return l and field .. "." .. l or field end,
  hf = function(field, l) return l and string.format("model.layers.%d.%s.weight", l, HF_LAYER_NAMES[field]) or HF_NAMES[field] end,
}

--- The layer fields of a configuration.
function M.layer_fields(config)
  if not config.qk_norm then return M.LAYER_FIELDS end
  local fields = { table.unpack(M.LAYER_FIELDS) }
  for _, field in ipairs(M.QK_NORM_FIELDS) do fields[#fields + 1] = field end
  return fields
end

--- Fills what llama2.c configurations leave implicit: head size dim / n_head, interleaved
--- RoPE with theta 10000, RMSNorm eps 1e-5, no q/k norms. Returns config.
function M.complete_config(config)
  config.n_kv_head = config.n_kv_head or config.n_head
  if not config.head_dim and math.type(config.n_head) == "integer" and config.n_head > 0 then
    config.head_dim = config.dim // config.n_head
  end
  config.rope = config.rope or "interleaved"
  config.rope_theta = config.rope_theta or 10000
  config.norm_eps = config.norm_eps or 1e-5
  config.qk_norm = config.qk_norm or false
  return config
end

local MAX_CONTEXT = 1 << 20 -- positions; real models use up to 131,072

function M.check_config(config, source)
  local c = config
  for _, key in ipairs({ "dim", "hidden", "n_layer", "n_head", "n_kv_head", "head_dim", "vocab_size", "seq_len" }) do
    if math.type(c[key]) ~= "integer" or c[key] <= 0 then
      return fail("%s: configuration field '%s' is %s, expected a positive integer", source, key, tostring(c[key]))
    end
  end
  if c.seq_len > MAX_CONTEXT then -- RoPE tables and KV caches are sized by it
    return fail("%s: configuration field 'seq_len' is %d, more than the %d positions anelua supports (a corrupt header?)",
      source, c.seq_len, MAX_CONTEXT)
  end
  if c.n_head % c.n_kv_head ~= 0 then
    return fail("%s: %d query heads cannot share %d kv heads evenly", source, c.n_head, c.n_kv_head)
  end
  if c.head_dim % 2 ~= 0 then return fail("%s: head size %d is odd; rotary embeddings rotate pairs", source, c.head_dim) end
  return config
end

--- The per-layer tensors of a checkpoint that stores each field for all layers together.
function M.split_layers(t, config, fields)
  local layers = {}
  local function layer(tensor, l) return tensor:slice(1, l, l):reshape(table.unpack(tensor:shape(), 2)) end
  for l = 1, config.n_layer do
    layers[l] = {}
    for _, field in ipairs(fields) do layers[l][field] = layer(t[field], l) end
  end
  return layers
end

return M

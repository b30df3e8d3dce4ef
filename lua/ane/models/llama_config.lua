-- ane.models.llama_config: the Llama family's configuration and tensor names, shared by its
-- model (ane.models.llama) and the readers of its checkpoint formats (ane.formats.llama2c,
-- ane.formats.hf_llama): which tensors a layer has, what llama2.c configurations leave
-- implicit, the checks every configuration passes, and each format's name map.
local M = {}

local function fail(format, ...) return nil, string.format(format, ...) end

-- The roles (ane.models.transformer) of one layer's tensors, in llama2.c's file order.
M.LAYER_ROLES = { "attn_norm", "q", "k", "v", "out", "ffn_norm", "gate", "down", "up" }
M.QK_NORM_ROLES = { "q_norm", "k_norm" } -- Qwen3: RMSNorm over head_dim on q and k
M.QKV_BIAS_ROLES = { "q_bias", "k_bias", "v_bias" } -- Qwen2: biases on the q, k and v projections
M.POST_NORM_ROLES = { "post_attn_norm", "post_ffn_norm" } -- Gemma 3: norms of the attention's and FFN's outputs

-- llama2.c's names of the roles (its file's tensors; layer l's is "<name>.<l>").
local LLAMA2C_NAMES = { attn_norm = "rms_att", q = "wq", k = "wk", v = "wv", out = "wo", ffn_norm = "rms_ffn",
  gate = "w1", down = "w2", up = "w3", q_norm = "q_norm", k_norm = "k_norm", token_embedding = "token_embedding",
  final_norm = "rms_final", classifier = "wcls" }
-- Hugging Face names of the layer roles (model.layers.<l>.<name>.weight) and of the rest.
local HF_LAYER_NAMES = { attn_norm = "input_layernorm", q = "self_attn.q_proj", k = "self_attn.k_proj",
  v = "self_attn.v_proj", out = "self_attn.o_proj", q_norm = "self_attn.q_norm", k_norm = "self_attn.k_norm",
  ffn_norm = "post_attention_layernorm", gate = "mlp.gate_proj", down = "mlp.down_proj", up = "mlp.up_proj" }
local HF_NAMES = { token_embedding = "model.embed_tokens.weight", final_norm = "model.norm.weight",
  classifier = "lm_head.weight" }
-- llama.cpp's GGUF names: blk.<l>.<name>.weight (and .bias), and the model's own.
local GGUF_LAYER_NAMES = { attn_norm = "attn_norm", q = "attn_q", k = "attn_k", v = "attn_v", out = "attn_output",
  q_norm = "attn_q_norm", k_norm = "attn_k_norm", ffn_norm = "ffn_norm", gate = "ffn_gate", down = "ffn_down",
  up = "ffn_up" }
local GGUF_NAMES = { token_embedding = "token_embd.weight", final_norm = "output_norm.weight",
  classifier = "output.weight" }
local function gguf_layer_name(role, l)
  local projection = role:match("^(.*)_bias$")
  if projection then return string.format("blk.%d.%s.bias", l, GGUF_LAYER_NAMES[projection]) end
  return string.format("blk.%d.%s.weight", l, GGUF_LAYER_NAMES[role])
end
-- Gemma 3 names its four norms by place: post_attention_layernorm is the attention's output
-- norm there, where a Llama's is the FFN's input norm.
local GEMMA_LAYER_NAMES = setmetatable({ ffn_norm = "pre_feedforward_layernorm",
  post_attn_norm = "post_attention_layernorm", post_ffn_norm = "post_feedforward_layernorm" },
  { __index = HF_LAYER_NAMES })
-- Gemma 3's RMSNorms scale by (1 + weight) (Gemma3RMSNorm): its checkpoints store weight, the
-- model holds 1 + weight (the same fp32 sum transformers forms), so these roles differ by 1.
local GEMMA_NORM_OFFSETS = { attn_norm = 1, ffn_norm = 1, post_attn_norm = 1, post_ffn_norm = 1, q_norm = 1,
  k_norm = 1, final_norm = 1 }

-- A role's Hugging Face name in layer l: a weight's "....weight", a bias role ("q_bias") its
-- projection's "....bias".
local function hf_layer_name(role, l, names)
  names = names or HF_LAYER_NAMES
  local projection = role:match("^(.*)_bias$")
  if projection then return string.format("model.layers.%d.%s.bias", l, names[projection]) end
  return string.format("model.layers.%d.%s.weight", l, names[role])
end

--- The name maps of the family's checkpoint formats: naming.name(role, l) is the name a
--- checkpoint gives role of 0-based layer l (nil for the model's own tensors), in llama2.c's
--- naming ("wq.0") or Hugging Face's ("model.layers.0.self_attn.q_proj.weight"; Gemma 3's norms by
--- their own names). naming.offsets[role]: what the model's tensor adds to the checkpoint's.
M.NAMINGS = {
  llama2c = { name = function(role, l) return l and LLAMA2C_NAMES[role] .. "." .. l or LLAMA2C_NAMES[role] end },
  hf = { name = function(role, l) return l and hf_layer_name(role, l) or HF_NAMES[role] end },
  gguf = { name = function(role, l) return l and gguf_layer_name(role, l) or GGUF_NAMES[role] end },
  hf_gemma = { name = function(role, l) return l and hf_layer_name(role, l, GEMMA_LAYER_NAMES) or HF_NAMES[role] end,
    offsets = GEMMA_NORM_OFFSETS },
}

--- The layer roles of a configuration.
function M.layer_roles(config)
  if not config.qk_norm and not config.qkv_bias and not config.post_norms then return M.LAYER_ROLES end
  local roles = { table.unpack(M.LAYER_ROLES) }
  for _, role in ipairs(config.qk_norm and M.QK_NORM_ROLES or {}) do roles[#roles + 1] = role end
  for _, role in ipairs(config.qkv_bias and M.QKV_BIAS_ROLES or {}) do roles[#roles + 1] = role end
  for _, role in ipairs(config.post_norms and M.POST_NORM_ROLES or {}) do roles[#roles + 1] = role end
  return roles
end

--- Fills what llama2.c configurations leave implicit: head size dim / n_head, interleaved
--- RoPE with theta 10000, RMSNorm eps 1e-5, no q/k norms. Returns config.
function M.complete_config(config)
  config.n_kv_head = config.n_kv_head or config.n_head
  if not config.head_dim and math.type(config.n_head) == "integer" and config.n_head > 0
      and math.type(config.dim) == "integer" then -- (else left for the checks to name)
    config.head_dim = config.dim // config.n_head
  end
  config.rope = config.rope or "interleaved"
  config.rope_theta = config.rope_theta or 10000
  config.norm_eps = config.norm_eps or 1e-5
  config.qk_norm = config.qk_norm or false
  config.qkv_bias = config.qkv_bias or false
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

--- The shapes of a configuration's tensors by role ([out, in] matrices, vectors).
function M.role_shapes(c)
  local q_width, kv_width = c.n_head * c.head_dim, c.n_kv_head * c.head_dim
  return { attn_norm = { c.dim }, q = { q_width, c.dim }, k = { kv_width, c.dim }, v = { kv_width, c.dim },
    out = { c.dim, q_width }, ffn_norm = { c.dim }, gate = { c.hidden, c.dim }, down = { c.dim, c.hidden },
    up = { c.hidden, c.dim }, q_norm = { c.head_dim }, k_norm = { c.head_dim }, q_bias = { q_width },
    k_bias = { kv_width }, v_bias = { kv_width }, post_attn_norm = { c.dim }, post_ffn_norm = { c.dim },
    token_embedding = { c.vocab_size, c.dim }, final_norm = { c.dim }, classifier = { c.vocab_size, c.dim } }
end

--- Fills W (config set) with the weights by role a reader's tensor(role, 0-based layer or nil,
--- shape) returns: the embedding, the final norm, the classifier when `untied`, every layer's
--- roles. Returns W, or nil and the first message.
function M.fill_weights(W, tensor, untied)
  local c, shapes, err = W.config, M.role_shapes(W.config), nil
  local model_roles = { "token_embedding", "final_norm", untied and "classifier" or nil }
  for _, role in ipairs(model_roles) do
    W[role], err = tensor(role, nil, shapes[role])
    if not W[role] then return nil, err end
  end
  for l = 1, c.n_layer do
    W.layers[l] = {}
    for _, role in ipairs(M.layer_roles(c)) do
      W.layers[l][role], err = tensor(role, l - 1, shapes[role])
      if not W.layers[l][role] then return nil, err end
    end
  end
  return W
end

--- The per-layer tensors, by role, of a checkpoint that stores each tensor for all layers
--- together: t[file_name(role)] is [n_layer, ...].
function M.split_layers(t, config, roles, file_name)
  local layers = {}
  local function layer(tensor, l) return tensor:slice(1, l, l):reshape(table.unpack(tensor:shape(), 2)) end
  for l = 1, config.n_layer do
    layers[l] = {}
    for _, role in ipairs(roles) do layers[l][role] = layer(t[file_name(role)], l) end
  end
  return layers
end

return M

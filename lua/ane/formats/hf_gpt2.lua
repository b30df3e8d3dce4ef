-- ane.formats.hf_gpt2: Hugging Face GPT-2 directories (config.json and model.safetensors,
-- or sharded; a `transformer.` prefix and the attention buffers some files carry are
-- ignored) as the GPT-2 model's weights, by role (ane.models.transformer). The weights are
-- Conv1D, stored [in, out]; they come out [out, in] (transposed views), with q, k, v
-- concatenated in c_attn's one product. M.naming is the format's name map.
--
--   local W = assert(require("ane.formats.hf_gpt2").read("models/gpt2"))
local ane = require("ane")
local common = require("ane.formats.common")
local expect = common.expect_tensor

local M = {}

-- Checkpoint names of the model's roles (ane.models.transformer), `transformer.` prefix
-- dropped; the Conv1D matrices stored [in, out].
local NAMES = { token_embedding = "wte.weight", position_embedding = "wpe.weight", final_norm = "ln_f.weight",
  final_norm_bias = "ln_f.bias" }
local LAYER_NAMES = { attn_norm = "ln_1.weight", attn_norm_bias = "ln_1.bias", qkv = "attn.c_attn.weight",
  qkv_bias = "attn.c_attn.bias", out = "attn.c_proj.weight", out_bias = "attn.c_proj.bias", ffn_norm = "ln_2.weight",
  ffn_norm_bias = "ln_2.bias", up = "mlp.c_fc.weight", up_bias = "mlp.c_fc.bias", down = "mlp.c_proj.weight",
  down_bias = "mlp.c_proj.bias" }
M.LAYER_ROLES = { "attn_norm", "attn_norm_bias", "qkv", "qkv_bias", "out", "out_bias", "ffn_norm", "ffn_norm_bias", "up",
  "up_bias", "down", "down_bias" }
M.naming = {
  name = function(role, l) return l and string.format("h.%d.%s", l, LAYER_NAMES[role]) or NAMES[role] end,
  transposed = { qkv = true, out = true, up = true, down = true },
}

local function fail(format, ...) return nil, string.format(format, ...) end

local function read_config(dir)
  local config, err = ane.io.read_json(dir .. "/config.json")
  if not config then return nil, err end
  local source = dir .. "/config.json"
  local out = {
    n_embd = config.n_embd, n_layer = config.n_layer, n_head = config.n_head,
    n_positions = config.n_positions or config.n_ctx, vocab_size = config.vocab_size,
  }
  for _, key in ipairs({ "n_embd", "n_layer", "n_head", "n_positions", "vocab_size" }) do
    out[key], err = common.positive_integer_field(out, key, source)
    if not out[key] then return nil, err end
  end
  out.eps, err = common.positive_number_field(config, "layer_norm_epsilon", source, 1e-5)
  if not out.eps then return nil, err end
  if out.n_embd % out.n_head ~= 0 then return fail("%s/config.json: n_embd %d is not divisible by n_head %d", dir, out.n_embd, out.n_head) end
  return out
end

--- The weights of a Hugging Face GPT-2 directory, or nil and a message naming file and tensor.
function M.read(dir)
  local config, err = read_config(dir)
  if not config then return nil, err end
  local raw, meta = ane.io.load_safetensors(dir)
  if not raw then return nil, meta end
  local tensors = {}
  for name, t in pairs(raw) do
    local plain = name:gsub("^transformer%.", "")
    if not plain:match("%.attn%.bias$") and not plain:match("%.attn%.masked_bias$") and plain ~= "lm_head.weight" then
      tensors[plain] = t
    end
  end
  local C, V, T = config.n_embd, config.vocab_size, config.n_positions
  local W = { config = config, layers = {}, source = dir }
  local function read(role, l, shape)
    local t, problem = expect(tensors, M.naming.name(role, l), shape, dir)
    if not t then return nil, problem end
    return M.naming.transposed[role] and t:transpose() or t -- Conv1D [in, out] -> [out, in]
  end
  for _, spec in ipairs({ { "token_embedding", { V, C } }, { "position_embedding", { T, C } }, { "final_norm", { C } },
    { "final_norm_bias", { C } } }) do
    W[spec[1]], err = read(spec[1], nil, spec[2])
    if not W[spec[1]] then return nil, err end
  end
  local shapes = { attn_norm = { C }, attn_norm_bias = { C }, qkv = { C, 3 * C }, qkv_bias = { 3 * C }, out = { C, C },
    out_bias = { C }, ffn_norm = { C }, ffn_norm_bias = { C }, up = { C, 4 * C }, up_bias = { 4 * C }, down = { 4 * C, C },
    down_bias = { C } }
  for l = 0, config.n_layer - 1 do
    local L = {}
    for _, role in ipairs(M.LAYER_ROLES) do
      L[role], err = read(role, l, shapes[role])
      if not L[role] then return nil, err end
    end
    W.layers[l + 1] = L
  end
  W.source = dir
  return W
end

return M

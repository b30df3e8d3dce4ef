-- ane.formats.hf_gpt2: Hugging Face GPT-2 directories (config.json and model.safetensors,
-- or sharded; a `transformer.` prefix and the attention buffers some files carry are
-- ignored) as the GPT-2 model's weights. The weights are Conv1D, stored [in, out]; they come
-- out [out, in] (transposed views), with q, k, v concatenated in c_attn's one product.
--
--   local W = assert(require("ane.formats.hf_gpt2").read("models/gpt2"))
local ane = require("ane")
local common = require("ane.formats.common")
local expect = common.expect_tensor

local M = {}

local function fail(format, ...) return nil, string.format(format, ...) end

local function read_config(dir)
  local config, err = ane.io.read_json(dir .. "/config.json")
  if not config then return nil, err end
  local out = {
    n_embd = config.n_embd, n_layer = config.n_layer, n_head = config.n_head,
    n_positions = config.n_positions or config.n_ctx, vocab_size = config.vocab_size,
    eps = config.layer_norm_epsilon or 1e-5,
  }
  for _, key in ipairs({ "n_embd", "n_layer", "n_head", "n_positions", "vocab_size" }) do
    out[key], err = common.integer_field(out, key, dir .. "/config.json")
    if not out[key] then return nil, err end
  end
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
  local source = dir
  local W = { config = config, layers = {} }
  local t
  t, err = expect(tensors, "wte.weight", { V, C }, source); if not t then return nil, err end
  W.wte = t
  t, err = expect(tensors, "wpe.weight", { T, C }, source); if not t then return nil, err end
  W.wpe = t
  t, err = expect(tensors, "ln_f.weight", { C }, source); if not t then return nil, err end
  W.ln_f_g = t
  t, err = expect(tensors, "ln_f.bias", { C }, source); if not t then return nil, err end
  W.ln_f_b = t
  for l = 0, config.n_layer - 1 do
    local p = "h." .. l .. "."
    local L = {}
    local specs = {
      { "ln_1.weight", { C }, "ln1_g" }, { "ln_1.bias", { C }, "ln1_b" },
      { "attn.c_attn.weight", { C, 3 * C }, "c_attn" }, { "attn.c_attn.bias", { 3 * C }, "c_attn_b" },
      { "attn.c_proj.weight", { C, C }, "c_proj" }, { "attn.c_proj.bias", { C }, "bo" },
      { "ln_2.weight", { C }, "ln2_g" }, { "ln_2.bias", { C }, "ln2_b" },
      { "mlp.c_fc.weight", { C, 4 * C }, "c_fc" }, { "mlp.c_fc.bias", { 4 * C }, "fc_b" },
      { "mlp.c_proj.weight", { 4 * C, C }, "mlp_proj" }, { "mlp.c_proj.bias", { C }, "proj_b" },
    }
    for _, spec in ipairs(specs) do
      t, err = expect(tensors, p .. spec[1], spec[2], source)
      if not t then return nil, err end
      L[spec[3]] = t
    end
    -- Conv1D [in, out] -> [out, in]; c_attn's output axis holds q | k | v (one product).
    L.qkv, L.qkv_b = L.c_attn:transpose(), L.c_attn_b
    L.wo = L.c_proj:transpose()
    L.fc = L.c_fc:transpose()
    L.proj = L.mlp_proj:transpose()
    W.layers[l + 1] = L
  end
  W.source = dir
  return W
end

return M

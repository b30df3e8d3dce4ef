-- ane.formats.llmc: llm.c's GPT-2 checkpoints (gpt2_124M.bin: an int32[256] header with
-- magic 20240326 and version 3 = fp32 or 5 = bf16, then 16 tensors with [out, in] matrices)
-- as the GPT-2 model's weights, by role (ane.models.transformer); tensors are views of the
-- file's mapping.
--
--   local W = assert(require("ane.formats.llmc").read("gpt2_124M.bin"))
local ane = require("ane")

local M = {}

M.MAGIC = 20240326

local function fail(format, ...) return nil, string.format(format, ...) end

--- The weights of an llm.c GPT-2 checkpoint, or nil and a message naming file and offset.
function M.read(path)
  local mapping, size = ane._io.map_file(path)
  if not mapping then return nil, size end
  local file = assert(io.open(path, "rb"))
  local header = file:read(1024) or ""
  file:close()
  if #header < 1024 then return fail("%s: %d bytes is too short for the 1024-byte header", path, #header) end
  local magic, version, maxT, V, L, NH, C, Vp = string.unpack("<i4i4i4i4i4i4i4i4", header)
  if magic ~= M.MAGIC then return fail("%s: magic %d at offset 0, expected %d", path, magic, M.MAGIC) end
  if version ~= 3 and version ~= 5 then return fail("%s: version %d at offset 4: expected 3 (fp32) or 5 (bf16)", path, version) end
  if C <= 0 or L <= 0 or NH <= 0 or V <= 0 or Vp < V or maxT <= 0 or C % NH ~= 0 then
    return fail("%s: header holds an impossible configuration (C=%d L=%d heads=%d V=%d Vp=%d T=%d)", path, C, L, NH, V, Vp, maxT)
  end
  local code, element = version == 3 and "F32" or "BF16", version == 3 and 4 or 2
  local shapes = {
    { "wte", { Vp, C } }, { "wpe", { maxT, C } }, { "ln1w", { L, C } }, { "ln1b", { L, C } },
    { "qkvw", { L, 3 * C, C } }, { "qkvb", { L, 3 * C } }, { "attprojw", { L, C, C } }, { "attprojb", { L, C } },
    { "ln2w", { L, C } }, { "ln2b", { L, C } }, { "fcw", { L, 4 * C, C } }, { "fcb", { L, 4 * C } },
    { "fcprojw", { L, C, 4 * C } }, { "fcprojb", { L, C } }, { "lnfw", { C } }, { "lnfb", { C } },
  }
  local offset, t = 1024, {}
  for _, spec in ipairs(shapes) do
    local n = 1
    for _, d in ipairs(spec[2]) do n = n * d end
    local tensor, err = mapping:tensor(path, spec[1], code, spec[2], offset, offset + n * element)
    if not tensor then return nil, err end
    t[spec[1]] = tensor
    offset = offset + n * element
  end
  if offset ~= size then return fail("%s: the tensors end at byte %d but the file has %d bytes", path, offset, size) end
  local W = { config = { n_embd = C, n_layer = L, n_head = NH, n_positions = maxT, vocab_size = V, eps = 1e-5 }, layers = {} }
  W.token_embedding = t.wte:slice(1, 1, V) -- padded rows beyond V are never used
  W.position_embedding, W.final_norm, W.final_norm_bias = t.wpe, t.lnfw, t.lnfb
  local function layer(tensor, l) return tensor:slice(1, l, l):reshape(table.unpack(tensor:shape(), 2)) end
  for l = 1, L do
    W.layers[l] = {
      attn_norm = layer(t.ln1w, l), attn_norm_bias = layer(t.ln1b, l), qkv = layer(t.qkvw, l), qkv_bias = layer(t.qkvb, l),
      out = layer(t.attprojw, l), out_bias = layer(t.attprojb, l), ffn_norm = layer(t.ln2w, l),
      ffn_norm_bias = layer(t.ln2b, l), up = layer(t.fcw, l), up_bias = layer(t.fcb, l), down = layer(t.fcprojw, l),
      down_bias = layer(t.fcprojb, l),
    }
  end
  W.source = path
  return W
end

return M

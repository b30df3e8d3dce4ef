-- ane.formats.llama2c: llama2.c checkpoints (Stories15M/42M/110M) as the Llama model's
-- weights. Legacy v0: 7 int32 header fields, then fp32 tensors field by field (each for all
-- layers); a negative vocab_size means an unshared classifier follows the unused freq_cis
-- tables. v1 ("ak42"): a 256-byte header with a shared-classifier flag, the norms first.
-- Tensors are views of the file's mapping (no copy).
--
--   local W = assert(require("ane.formats.llama2c").read("stories110M.bin"))
--   assert(require("ane.formats.llama2c").write("out.bin", config, params))
local ane = require("ane")
local arch = require("ane.models.llama_config")

local M = {}

local function fail(format, ...) return nil, string.format(format, ...) end

local LLAMA2C_MAGIC = 0x616b3432 -- "ak42"

--- The weights of a llama2.c checkpoint file, or nil and a message naming file and field.
function M.read(path)
  local mapping, size = ane._io.map_file(path)
  if not mapping then return nil, size end
  local file = io.open(path, "rb")
  local header = file and file:read(256)
  if file then file:close() end
  if not header or #header < 28 then return fail("%s: too short for the 28-byte header", path) end
  local version, offset, shared = 0, 28, nil
  local fields = { string.unpack("<i4i4i4i4i4i4i4", header) }
  if string.unpack("<I4", header) == LLAMA2C_MAGIC then
    if #header < 256 then return fail("%s: too short for the 256-byte v1 header", path) end
    version = string.unpack("<i4", header, 5)
    if version ~= 1 then
      return fail("%s: llama2.c export version %d; versions 0 (legacy) and 1 (fp32) are read", path, version)
    end
    fields = { string.unpack("<i4i4i4i4i4i4i4", header, 9) }
    shared = string.byte(header, 37) ~= 0
    offset = 256
  end
  local dim, hidden, L, H, KV, V, T = table.unpack(fields, 1, 7)
  if shared == nil then shared = V > 0 end
  local config, err = arch.check_config(arch.complete_config({ dim = dim, hidden = hidden, n_layer = L, n_head = H,
    n_kv_head = KV, vocab_size = math.abs(V), seq_len = T }), path .. " (header)")
  if not config then return nil, err end
  if dim % H ~= 0 then return fail("%s (header): dim %d is not divisible by %d heads", path, dim, H) end
  V = config.vocab_size
  local head = config.head_dim
  local kv_dim = KV * head
  local layout = {
    token_embedding = { V, dim }, rms_att = { L, dim }, wq = { L, dim, dim }, wk = { L, kv_dim, dim },
    wv = { L, kv_dim, dim }, wo = { L, dim, dim }, rms_ffn = { L, dim }, w1 = { L, hidden, dim },
    w2 = { L, dim, hidden }, w3 = { L, hidden, dim }, rms_final = { dim }, wcls = { V, dim },
    freq_cis_real = { T, head // 2 }, freq_cis_imag = { T, head // 2 },
  }
  local order = version == 0
      and { "token_embedding", "rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3", "rms_final",
        "freq_cis_real", "freq_cis_imag" }
      or { "rms_att", "rms_ffn", "rms_final", "token_embedding", "wq", "wk", "wv", "wo", "w1", "w2", "w3" }
  if not shared then order[#order + 1] = "wcls" end
  local t = {}
  for _, field in ipairs(order) do
    local n = 1
    for _, d in ipairs(layout[field]) do n = n * d end
    t[field], err = mapping:tensor(path, field, "F32", layout[field], offset, offset + n * 4)
    if not t[field] then return nil, err end
    offset = offset + n * 4
  end
  if offset ~= size then return fail("%s: the tensors end at byte %d but the file has %d bytes", path, offset, size) end
  local file_name = arch.NAMINGS.llama2c.name -- role -> the file's field (with no layer)
  return { -- weights by role (ane.models.transformer); the classifier absent when shared
    config = config, layers = arch.split_layers(t, config, arch.LAYER_ROLES, file_name), token_embedding = t.token_embedding,
    final_norm = t.rms_final, classifier = t.wcls, source = path, naming = "llama2c", format = "llama2.c v" .. version,
  }
end

--- Writes Llama weights (parameters in llama2.c names, fp32) as a legacy v0 file, atomically;
--- returns the path or nil and a message. The freq_cis tables are written as zeros (no
--- reader uses them).
function M.write(path, config, params)
  local shared = params.wcls == nil
  local parts = { string.pack("<i4i4i4i4i4i4i4", config.dim, config.hidden, config.n_layer, config.n_head,
    config.n_kv_head or config.n_head, shared and config.vocab_size or -config.vocab_size, config.seq_len) }
  local function add(t) parts[#parts + 1] = t:to("fp32"):bytes() end
  add(params.token_embedding)
  for _, role in ipairs(arch.LAYER_ROLES) do
    for l = 0, config.n_layer - 1 do add(params[arch.NAMINGS.llama2c.name(role, l)]) end
  end
  add(params.rms_final)
  local head = config.dim // config.n_head
  parts[#parts + 1] = string.rep("\0", config.seq_len * (head // 2) * 4 * 2) -- freq_cis tables (unused by readers)
  if not shared then add(params.wcls) end
  local ok, err = ane.io.write_file_atomic(path, table.concat(parts))
  if not ok then return nil, err end
  return path
end

return M

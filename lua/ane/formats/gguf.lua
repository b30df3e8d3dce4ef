-- ane.formats.gguf: llama.cpp's GGUF files (versions 2 and 3; docs/reference/model-formats.md)
-- as the Llama model's weights. The header: "GGUF", the version, the tensor and key counts;
-- then the metadata (key, type, value: integers, floats, booleans, strings and arrays of
-- them) and the tensor infos (name, dimensions innermost first, type, offset); the tensors'
-- bytes follow, aligned (general.alignment, default 32). Every count, length and offset is
-- checked against the file before it is used, and a bad file is one message naming the key,
-- tensor or offset. F32, F16 and BF16 tensors are views of the file's mapping; Q8_0, Q4_0,
-- Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K (the types of the Q4_K_M / Q5_K_M / Q6_K / Q8_0 files
-- people download) are dequantized as they load (ane.dequantize_blocks; to fp16 for an fp16
-- model), but for the matrices of Q8_0, Q4_0, Q4_K, Q5_K and Q6_K, which M.read keeps as stored
-- (ane.blocks_quantized: their codes and scales, Q4_K's and Q5_K's as a scale and an offset per
-- 32, Q6_K's blocks with a scale per 16, which sim's products read; the device's programs take
-- the layers dequantized); the other types are named and refused. Architectures "llama", "qwen2" and "qwen3" (ARCHITECTURES); the
-- tokenizers of tokenizer.ggml.model "llama" (SentencePiece pieces and scores) and "gpt2"
-- (byte-level BPE).
--
--   local file = assert(require("ane.formats.gguf").open("model.gguf"))  -- file.metadata, file.tensors
--   local W = assert(require("ane.formats.gguf").read("model.gguf"))     -- weights by role
--   assert(require("ane.formats.gguf").write("out.gguf", metadata, tensors)) -- (M.write)
local ane = require("ane")
local arch = require("ane.models.llama_config")

local M = {}

local function fail(format, ...) return nil, string.format(format, ...) end

-- ggml's tensor types: name, weights per block, bytes per block (ggml.c's type traits).
M.TYPES = {
  [0] = { "F32", 1, 4 }, [1] = { "F16", 1, 2 }, [2] = { "Q4_0", 32, 18 }, [3] = { "Q4_1", 32, 20 },
  [6] = { "Q5_0", 32, 22 }, [7] = { "Q5_1", 32, 24 }, [8] = { "Q8_0", 32, 34 }, [9] = { "Q8_1", 32, 36 },
  [10] = { "Q2_K", 256, 84 }, [11] = { "Q3_K", 256, 110 }, [12] = { "Q4_K", 256, 144 }, [13] = { "Q5_K", 256, 176 },
  [14] = { "Q6_K", 256, 210 }, [15] = { "Q8_K", 256, 292 }, [24] = { "I8", 1, 1 }, [25] = { "I16", 1, 2 },
  [26] = { "I32", 1, 4 }, [27] = { "I64", 1, 8 }, [28] = { "F64", 1, 8 }, [30] = { "BF16", 1, 2 },
}
-- How the types anelua reads become tensors: a view in a dtype, or blocks to dequantize.
local VIEWS = { F32 = "F32", F16 = "F16", BF16 = "BF16" }
local BLOCKS = { Q8_0 = "q8_0", Q4_0 = "q4_0", Q4_1 = "q4_1", Q5_0 = "q5_0", Q5_1 = "q5_1", Q4_K = "q4_k", Q5_K = "q5_k",
  Q6_K = "q6_k" }

-- Metadata value types: the string.unpack format of the fixed-size ones.
local SCALARS = { [0] = "<I1", [1] = "<i1", [2] = "<I2", [3] = "<i2", [4] = "<I4", [5] = "<i4", [6] = "<f",
  [7] = "<I1", [10] = "<I8", [11] = "<i8", [12] = "<d" }
local STRING, ARRAY, BOOL = 8, 9, 7
-- Their names (M.write's value types; an array's is its element's with "[]").
local TYPE_NAMES = { [0] = "u8", [1] = "i8", [2] = "u16", [3] = "i16", [4] = "u32", [5] = "i32", [6] = "f32", [7] = "bool",
  [8] = "string", [10] = "u64", [11] = "i64", [12] = "f64" }

-- A reader of the file's header bytes, buffered, that checks every read against the file's size.
local Reader = {}
Reader.__index = Reader

local function reader(path, size)
  local f, err = io.open(path, "rb")
  if not f then return nil, err end
  return setmetatable({ f = f, path = path, size = size, buffer = "", start = 0, at = 1 }, Reader)
end

function Reader:offset() return self.start + self.at - 1 end

-- The next n bytes (n checked against what the file has left), or an error naming `what`.
function Reader:bytes(n, what)
  if n < 0 or n > self.size - self:offset() then
    error(string.format("%s: %s at offset %d needs %d bytes, past the end of the %d-byte file", self.path, what,
      self:offset(), n, self.size), 0)
  end
  if self.at + n - 1 > #self.buffer then
    local kept = self.buffer:sub(self.at)
    self.start = self.start + self.at - 1
    self.buffer = kept .. (self.f:read(math.max(n - #kept, 1 << 20)) or "")
    self.at = 1
  end
  local bytes = self.buffer:sub(self.at, self.at + n - 1)
  self.at = self.at + n
  return bytes
end

function Reader:unpack(format, size, what) return (string.unpack(format, self:bytes(size, what))) end
function Reader:u32(what) return self:unpack("<I4", 4, what) end
function Reader:u64(what)
  local value = self:unpack("<i8", 8, what)
  if value < 0 then error(string.format("%s: %s at offset %d is beyond 2^63", self.path, what, self:offset() - 8), 0) end
  return value
end
function Reader:string(what)
  local at, buffer = self.at, self.buffer
  if at + 7 <= #buffer then -- (the common case, a string whole in the buffer, in one unpack)
    local n = string.unpack("<i8", buffer, at)
    if n >= 0 and at + 7 + n <= #buffer then
      self.at = at + 8 + n
      return buffer:sub(at + 8, at + 7 + n)
    end
  end
  return self:bytes(self:u64(what .. "'s length"), what)
end

-- `count` values of a fixed-size scalar format, read in runs of up to 1,024 (one unpack each).
function Reader:scalars(format, count, what)
  local size, list, done = string.packsize(format), {}, 0
  while done < count do
    local n = math.min(count - done, 1024)
    local values = table.pack(string.unpack("<" .. string.rep(format:sub(2), n), self:bytes(n * size, what)))
    table.move(values, 1, n, done + 1, list)
    done = done + n
  end
  return list
end

-- One metadata value of `type`.
local function value(r, type, what, depth)
  local format = SCALARS[type]
  if format then
    local size = string.packsize(format)
    local v = r:unpack(format, size, what)
    if type == BOOL then
      if v > 1 then error(string.format("%s: %s is a bool of value %d", r.path, what, v), 0) end
      return v == 1, "bool"
    end
    return v, TYPE_NAMES[type]
  elseif type == STRING then
    return r:string(what), "string"
  elseif type == ARRAY then
    if depth > 0 then error(string.format("%s: %s is an array of arrays", r.path, what), 0) end
    local element = r:u32(what .. "'s element type")
    local count = r:u64(what .. "'s count")
    local least = SCALARS[element] and string.packsize(SCALARS[element]) or element == STRING and 8 or nil
    if not least then error(string.format("%s: %s holds elements of unknown type %d", r.path, what, element), 0) end
    if count > (r.size - r:offset()) // least then
      error(string.format("%s: %s counts %d elements, more than the file holds", r.path, what, count), 0)
    end
    if element ~= BOOL and element ~= STRING then return r:scalars(SCALARS[element], count, what), TYPE_NAMES[element] .. "[]" end
    local list = {}
    for i = 1, count do list[i] = value(r, element, what, depth + 1) end
    return list, TYPE_NAMES[element] .. "[]"
  end
  error(string.format("%s: %s has unknown value type %d (at offset %d)", r.path, what, type, r:offset() - 4), 0)
end

--- The file's header: { version, metadata = {key = value}, metadata_types = {key = M.write's type name}, tensors = {name = {type = name,
--- shape = outermost first, first = byte, last = byte past}}, order = {names}, mapping }.
--- nil and a message naming the key, tensor or offset for a file that is not a sound GGUF.
function M.open(path)
  local mapping, size = ane._io.map_file(path)
  if not mapping then return nil, size end
  local r, err = reader(path, size)
  if not r then return nil, err end
  local ok, result = pcall(function()
    if r:bytes(4, "the magic") ~= "GGUF" then error(string.format("%s: not a GGUF file (no \"GGUF\" at offset 0)", path), 0) end
    local version = r:u32("the version")
    if version ~= 2 and version ~= 3 then
      error(string.format("%s: GGUF version %d at offset 4; versions 2 and 3 are read", path, version), 0)
    end
    local tensor_count, kv_count = r:u64("the tensor count"), r:u64("the metadata count")
    -- (a key is at least 8 + 4 bytes, a tensor info at least 8 + 4 + 8 + 4 + 8)
    if kv_count > size // 12 or tensor_count > size // 32 then
      error(string.format("%s: %d tensors and %d keys cannot fit in %d bytes", path, tensor_count, kv_count, size), 0)
    end
    local metadata, metadata_types = {}, {}
    for i = 1, kv_count do
      local key = r:string(string.format("key %d", i))
      local type = r:u32("key '" .. key .. "''s type")
      if metadata[key] ~= nil then error(string.format("%s: key '%s' appears twice", path, key), 0) end
      metadata[key], metadata_types[key] = value(r, type, "key '" .. key .. "'", 0)
    end
    local alignment = metadata["general.alignment"] or 32
    if math.type(alignment) ~= "integer" or alignment <= 0 or alignment & (alignment - 1) ~= 0 then
      error(string.format("%s: general.alignment is %s, not a power of two", path, tostring(alignment)), 0)
    end
    local tensors, order = {}, {}
    for i = 1, tensor_count do
      local name = r:string(string.format("tensor %d's name", i))
      local what = "tensor '" .. name .. "'"
      if tensors[name] then error(string.format("%s: %s appears twice", path, what), 0) end
      local ndim = r:u32(what .. "'s dimension count")
      if ndim < 1 or ndim > 4 then error(string.format("%s: %s has %d dimensions (1 to 4)", path, what, ndim), 0) end
      local dims, numel = {}, 1
      for d = 1, ndim do
        dims[d] = r:u64(what .. "'s dimension " .. d)
        if dims[d] < 1 or numel > (1 << 62) // dims[d] then
          error(string.format("%s: %s has dimension %d of %d", path, what, d, dims[d]), 0)
        end
        numel = numel * dims[d]
      end
      local type_id = r:u32(what .. "'s type")
      local type = M.TYPES[type_id]
      if not type then error(string.format("%s: %s has unknown type %d", path, what, type_id), 0) end
      if dims[1] % type[2] ~= 0 then
        error(string.format("%s: %s is %s, whose blocks of %d do not divide its rows of %d", path, what, type[1], type[2],
          dims[1]), 0)
      end
      local offset = r:u64(what .. "'s offset")
      if offset % alignment ~= 0 then
        error(string.format("%s: %s's offset %d is not a multiple of the alignment %d", path, what, offset, alignment), 0)
      end
      local shape = {}
      for d = 1, ndim do shape[d] = dims[ndim - d + 1] end -- GGUF lists the innermost dimension first
      tensors[name] = { type = type[1], shape = shape, offset = offset, bytes = numel // type[2] * type[3] }
      order[i] = name
    end
    local data = (r:offset() + alignment - 1) // alignment * alignment
    for _, name in ipairs(order) do
      local t = tensors[name]
      t.first, t.last = data + t.offset, data + t.offset + t.bytes
      if t.last > size then
        error(string.format("%s: tensor '%s' (%s, %d bytes at offset %d) runs past the end of the %d-byte file", path, name,
          t.type, t.bytes, t.first, size), 0)
      end
    end
    local ranges = {}
    for _, name in ipairs(order) do ranges[#ranges + 1] = { name, tensors[name].first, tensors[name].last } end
    table.sort(ranges, function(a, b) return a[2] < b[2] end)
    for i = 2, #ranges do
      if ranges[i][2] < ranges[i - 1][3] then
        error(string.format("%s: tensors '%s' and '%s' overlap (offsets %d and %d)", path, ranges[i - 1][1], ranges[i][1],
          ranges[i - 1][2], ranges[i][2]), 0)
      end
    end
    return { version = version, metadata = metadata, metadata_types = metadata_types, tensors = tensors, order = order, mapping = mapping, path = path }
  end)
  r.f:close()
  if not ok then return nil, tostring(result) end
  return result
end

-- The block types whose matrices M.read keeps as stored (quantized weights of that encoding):
-- Q4_K and Q5_K as a scale and an offset per 32, Q6_K as its blocks and a scale per 16 (quantize.h).
local KEPT_BLOCKS = { Q8_0 = "q8_0", Q4_0 = "q4_0", Q6_K = "q6_k", Q4_K = "q4_k", Q5_K = "q5_k" }
local SHIFTED = { Q4_K = true, Q5_K = true }

--- Tensor `name` of an opened file as an fp32, fp16 or bf16 tensor (a view where the file
--- holds it so; the block types dequantized, to `dtype` "fp32" (default) or "fp16") or, with
--- keep_blocks, a Q8_0 / Q4_0 / Q4_K / Q5_K / Q6_K matrix as a quantized weight of its codes and
--- scales, its table in `precision` ("fp16", the default, or "fp32": Q4_K's and Q5_K's scales and
--- offsets are rounded to it; a program rounds Q6_K's to its own precision); or
--- nil and a message naming it. A Q4_K / Q5_K matrix that form cannot hold (a sub-block of scale
--- 0 and a min) is dequantized, its reason added to file.dequantized.
function M.tensor(file, name, keep_blocks, dtype, precision)
  local t = file.tensors[name]
  if not t then return fail("%s: no tensor '%s'", file.path, name) end
  if VIEWS[t.type] then return file.mapping:tensor(file.path, name, VIEWS[t.type], t.shape, t.first, t.last) end
  if BLOCKS[t.type] then
    local bytes, err = file.mapping:tensor(file.path, name, "U8", { t.bytes }, t.first, t.last)
    if not bytes then return nil, err end
    local label = file.path .. ": tensor '" .. name .. "'"
    if keep_blocks and KEPT_BLOCKS[t.type] and #t.shape == 2 then
      local kept, why = ane.blocks_quantized(bytes, KEPT_BLOCKS[t.type], t.shape, label, precision)
      if kept or not SHIFTED[t.type] or not why:find("cannot hold", 1, true) then return kept, why end
      file.dequantized = file.dequantized or {}
      file.dequantized[#file.dequantized + 1] = why
    end
    return ane.dequantize_blocks(bytes, BLOCKS[t.type], t.shape, label, dtype)
  end
  return fail("%s: tensor '%s' is %s, which anelua does not read yet (F32, F16, BF16, Q8_0, "
    .. "Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)", file.path, name, t.type)
end

-- A metadata key the model needs: an integer (or number with `number`) above zero.
local function needed(file, key, default, number)
  local v = file.metadata[key]
  if v == nil then v = default end
  local sound = number and type(v) == "number" and v > 0 and v < math.huge or math.type(v) == "integer" and v > 0
  if not sound then
    return nil, string.format("%s: metadata '%s' is %s, expected a positive %s", file.path, key,
      v == nil and "missing" or tostring(v), number and "number" or "integer")
  end
  return v
end

-- The architectures anelua reads (general.architecture), as the Llama model's configuration:
-- "llama" (its q and k rows in the adjacent-pairs layout llama.cpp's converters permute them
-- to, read with llama2.c's interleaved rotation; Llama 2 and 3.x, SmolLM2, Mistral), "qwen2"
-- (q, k, v biases) and "qwen3" (RMSNorm on q and k), both rotate-half as their checkpoints.
-- Metadata keys are "<architecture>.<key>" (llama.cpp's llama-arch.cpp names them).
local ARCHITECTURES = {
  llama = { rope = "interleaved" },
  qwen2 = { rope = "half", qkv_bias = true },
  qwen3 = { rope = "half", qk_norm = true },
}

-- The frequencies' rescaling a file asks for: rope_freqs.weight (one factor per frequency that
-- divides it: Llama 3.1's "llama3" scaling as llama.cpp's converter stores it), or
-- <architecture>.rope.scaling.type "linear" with its factor; nil for none.
local function rope_scaling(file, architecture, head_dim)
  local factors = file.tensors["rope_freqs.weight"]
  if factors then
    if table.concat(factors.shape, ",") ~= tostring(head_dim // 2) then
      return fail("%s: tensor 'rope_freqs.weight' has shape [%s], expected [%d] (one factor per rotary frequency)",
        file.path, table.concat(factors.shape, ", "), head_dim // 2)
    end
    local values, err = M.tensor(file, "rope_freqs.weight")
    if not values then return nil, err end
    values = values:to("fp32"):totable()
    for i, v in ipairs(values) do
      if not (v > 0 and v < math.huge) then
        return fail("%s: tensor 'rope_freqs.weight' holds %s at index %d, expected a positive factor", file.path,
          tostring(v), i - 1)
      end
    end
    return { type = "factors", factors = values }
  end
  local kind = file.metadata[architecture .. ".rope.scaling.type"]
  if kind == nil or kind == "none" then return false end
  if kind ~= "linear" then
    return fail("%s: metadata '%s.rope.scaling.type' is '%s'; anelua reads 'linear' and rope_freqs.weight factors",
      file.path, architecture, tostring(kind))
  end
  local factor, err = needed(file, architecture .. ".rope.scaling.factor", nil, true)
  if not factor then return nil, err end
  return { type = "linear", factor = factor }
end

--- The weights of a GGUF file of architecture "llama", "qwen2" or "qwen3" (by role, as
--- ane.models.transformer takes them; W.header the file's header, for its tokenizer without
--- reading the file again); or nil and a message. The Q8_0, Q4_0, Q4_K, Q5_K and Q6_K
--- matrices are quantized weights as stored, unless opts.dequantize_blocks; the other block
--- types are dequantized to opts.dtype ("fp32", the
--- default, or "fp16" for a model that computes in fp16: half the memory, the same values).
function M.read(path, opts)
  local keep_blocks = not (opts and opts.dequantize_blocks)
  local dtype, precision = opts and opts.dtype, opts and opts.precision
  local file, err = M.open(path)
  if not file then return nil, err end
  local architecture = file.metadata["general.architecture"]
  local kind = ARCHITECTURES[architecture]
  if not kind then
    local names = {}
    for name in pairs(ARCHITECTURES) do names[#names + 1] = "'" .. name .. "'" end
    table.sort(names)
    return fail("%s: general.architecture is '%s'; anelua reads GGUF files of architecture %s", path,
      tostring(architecture), table.concat(names, ", "))
  end
  local config = { model_type = architecture, rope = kind.rope, qkv_bias = kind.qkv_bias, qk_norm = kind.qk_norm,
    naming = "gguf" }
  local keys = { dim = "embedding_length", hidden = "feed_forward_length", n_layer = "block_count",
    n_head = "attention.head_count", seq_len = "context_length" }
  for field, key in pairs(keys) do
    config[field], err = needed(file, architecture .. "." .. key)
    if not config[field] then return nil, err end
  end
  config.n_kv_head, err = needed(file, architecture .. ".attention.head_count_kv", config.n_head)
  if not config.n_kv_head then return nil, err end
  config.head_dim, err = needed(file, architecture .. ".attention.key_length", config.dim // config.n_head)
  if not config.head_dim then return nil, err end
  for _, key in ipairs({ ".attention.value_length", ".rope.dimension_count" }) do -- every head dimension rotates
    local v = file.metadata[architecture .. key]
    if v ~= nil and v ~= config.head_dim then
      return fail("%s: metadata '%s%s' is %s where the heads have %d dimensions; anelua's models need them equal",
        path, architecture, key, tostring(v), config.head_dim)
    end
  end
  config.norm_eps, err = needed(file, architecture .. ".attention.layer_norm_rms_epsilon", 1e-5, true)
  if not config.norm_eps then return nil, err end
  config.rope_theta, err = needed(file, architecture .. ".rope.freq_base", 10000, true)
  if not config.rope_theta then return nil, err end
  config.rope_scaling, err = rope_scaling(file, architecture, config.head_dim)
  if config.rope_scaling == nil then return nil, err end
  config.rope_scaling = config.rope_scaling or nil
  local embedding = file.tensors["token_embd.weight"]
  if not embedding then return fail("%s: no tensor 'token_embd.weight'", path) end
  config.vocab_size = embedding.shape[1]
  config, err = arch.check_config(arch.complete_config(config), path)
  if not config then return nil, err end
  local c, name = config, arch.NAMINGS.gguf.name
  local from_blocks = {} -- roles of block-quantized tensors (W.from_blocks: their values need no more than fp16 for the CPU's tables)
  local function tensor(role, l, shape)
    local key = name(role, l)
    local t = file.tensors[key]
    if not t then return fail("%s: no tensor '%s'", path, key) end
    if table.concat(t.shape, ",") ~= table.concat(shape, ",") then
      return fail("%s: tensor '%s' has shape [%s], expected [%s]", path, key, table.concat(t.shape, ", "),
        table.concat(shape, ", "))
    end
    if BLOCKS[t.type] then from_blocks[role] = true end -- (whether kept or dequantized)
    return M.tensor(file, key, keep_blocks, dtype, precision)
  end
  local eos = file.metadata["tokenizer.ggml.eos_token_id"]
  local W = { config = config, layers = {}, source = path, naming = "gguf", format = "GGUF v" .. file.version, header = file,
    stop_token = math.type(eos) == "integer" and eos < c.vocab_size and eos or nil, from_blocks = from_blocks }
  local filled, problem = arch.fill_weights(W, tensor, file.tensors["output.weight"] ~= nil)
  if filled and file.dequantized then
    filled.notes = { string.format("%d Q4_K / Q5_K matri%s dequantized at load (the first: %s)", #file.dequantized,
      #file.dequantized == 1 and "x" or "ces", file.dequantized[1]) }
  end
  return filled, problem
end

--- The chat template a GGUF file carries (tokenizer.chat_template, through ane.chat with the
--- file's BOS and EOS texts), or nil and why not.
function M.chat_template(path)
  local file, err = M.open(path)
  if not file then return nil, err end
  local source = file.metadata["tokenizer.chat_template"]
  if type(source) ~= "string" then
    return fail("%s: no chat template (tokenizer.chat_template); `anelua run` continues raw text", path)
  end
  local tokens = file.metadata["tokenizer.ggml.tokens"] or {}
  local function text_of(key)
    local id = file.metadata[key]
    return math.type(id) == "integer" and tokens[id + 1] or nil
  end
  local template, why = require("ane.chat").template_from_source(source, {
    bos_token = text_of("tokenizer.ggml.bos_token_id"), eos_token = text_of("tokenizer.ggml.eos_token_id") })
  if not template then return nil, path .. ": tokenizer.chat_template: " .. why end
  return template
end

-- Metadata value writers by type name (the types M.open reads).
local WRITE_TYPES = {}
for id, name in pairs(TYPE_NAMES) do WRITE_TYPES[name] = { id, SCALARS[id] } end

local function packed_string(text) return string.pack("<I8", #text) .. text end

local function packed_value(kind, value)
  if kind == "string" then return string.pack("<I4", STRING) .. packed_string(value) end
  local element = kind:match("^(.*)%[%]$")
  if element then
    local parts = { string.pack("<I4I4I8", ARRAY, element == "string" and STRING or WRITE_TYPES[element][1], #value) }
    for _, v in ipairs(value) do
      parts[#parts + 1] = element == "string" and packed_string(v)
        or string.pack(WRITE_TYPES[element][2], element == "bool" and (v and 1 or 0) or v)
    end
    return table.concat(parts)
  end
  local w = WRITE_TYPES[kind]
  if not w then error("gguf.write: unknown value type '" .. tostring(kind) .. "'", 3) end
  return string.pack("<I4", w[1]) .. string.pack(w[2], kind == "bool" and (value and 1 or 0) or value)
end

local TYPE_IDS = {}
for id, t in pairs(M.TYPES) do TYPE_IDS[t[1]] = id end

--- Writes a GGUF file (version 3, alignment 32), atomically: metadata a list of { key, type,
--- value } (types u32, i32, f32, bool, u64, f64, string, and arrays "u32[]", "f32[]",
--- "string[]", ...), tensors a list of { name, shape (outermost first), ggml type name, data }:
--- data the tensor's bytes, as a string or as a contiguous ane tensor whose memory is written as
--- it is (a model's weights go from memory to the file without a copy). Returns true, or nil and
--- a message.
function M.write(path, metadata, tensors)
  local entries = {}
  for _, m in ipairs(metadata) do entries[#entries + 1] = packed_string(m[1]) .. packed_value(m[2], m[3]) end
  local infos, data, offset = {}, {}, 0
  for _, t in ipairs(tensors) do
    local name, shape, ggml_type, bytes = table.unpack(t, 1, 4)
    local id = TYPE_IDS[ggml_type]
    if not id then error("gguf.write: unknown tensor type '" .. tostring(ggml_type) .. "'", 2) end
    local dims = { string.pack("<I4", #shape) }
    for d = #shape, 1, -1 do dims[#dims + 1] = string.pack("<I8", shape[d]) end -- innermost first
    infos[#infos + 1] = packed_string(name) .. table.concat(dims) .. string.pack("<I4I8", id, offset)
    if type(bytes) == "string" then bytes = ane.tensor.from_bytes(bytes, { #bytes }, "uint8") end
    local size = bytes:numel() * bytes:element_size()
    data[#data + 1] = bytes
    if size % 32 ~= 0 then data[#data + 1] = ane.tensor({ 32 - size % 32 }, "uint8") end -- (zeros to the alignment)
    offset = offset + (size + 31) // 32 * 32
  end
  local head = "GGUF" .. string.pack("<I4I8I8", 3, #tensors, #entries) .. table.concat(entries) .. table.concat(infos)
  return ane.io.write_file_atomic(path, head .. string.rep("\0", (32 - #head % 32) % 32), data)
end

-- The split regexes of the byte-level BPE pre-tokenizers tokenizer.ggml.pre names (llama.cpp's
-- llama-vocab.cpp maps the names; the regexes are the models' own tokenizer.json ones), false for
-- GPT-2's own, a list for stages applied in order (SmolLM2 cuts out each digit, then splits as
-- GPT-2), and whether the model's tokenizer.json normalizes to NFC first (Qwen2's does).
local LLAMA3_SPLIT = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
  .. "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
local QWEN2_SPLIT = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
  .. "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
M.PRE_TOKENIZERS = {
  ["gpt-2"] = { pattern = false }, default = { pattern = false },
  ["llama-bpe"] = { pattern = LLAMA3_SPLIT }, llama3 = { pattern = LLAMA3_SPLIT }, ["llama-v3"] = { pattern = LLAMA3_SPLIT },
  smollm = { pattern = { "\\p{N}", false } },
  qwen2 = { pattern = QWEN2_SPLIT, nfc = true }, ["deepseek-r1-qwen"] = { pattern = QWEN2_SPLIT, nfc = true },
}

-- Token types of tokenizer.ggml.token_type (llama.cpp's): normal, control, user-defined.
local NORMAL, CONTROL, USER_DEFINED = 1, 3, 4

-- The byte-level BPE ("gpt2") tokenizer of an opened file.
local function bpe_tokenizer(file, path)
  local tokens, types = file.metadata["tokenizer.ggml.tokens"], file.metadata["tokenizer.ggml.token_type"] or {}
  local merges, pre = file.metadata["tokenizer.ggml.merges"], file.metadata["tokenizer.ggml.pre"] or "default"
  if type(merges) ~= "table" then return fail("%s: tokenizer.ggml.merges is missing", path) end
  local how = M.PRE_TOKENIZERS[pre]
  if not how then
    local names = {}
    for name in pairs(M.PRE_TOKENIZERS) do names[#names + 1] = name end
    table.sort(names)
    return fail("%s: tokenizer.ggml.pre '%s' is not a pre-tokenizer anelua knows (%s)", path, tostring(pre),
      table.concat(names, ", "))
  end
  local vocab, added = {}, {}
  for i, token in ipairs(tokens) do
    local kind = types[i] or NORMAL
    if kind == CONTROL or kind == USER_DEFINED then added[#added + 1] = { content = token, id = i - 1 }
    elseif vocab[token] == nil then vocab[token] = i - 1 end
  end
  return require("ane.tokenizer").from_parts({ vocab = vocab, merges = merges, pattern = how.pattern, nfc = how.nfc,
    added = added }, path)
end

--- The tokenizer a GGUF file carries (`path`, or its header as M.open returned it):
--- tokenizer.ggml.model "llama" (SentencePiece pieces and scores) or "gpt2" (byte-level BPE:
--- tokens, merges, the pre-tokenizer tokenizer.ggml.pre names), or nil and why not.
function M.tokenizer(path)
  local file, err = path, nil
  if type(path) ~= "table" then file, err = M.open(path) end
  if not file then return nil, err end
  path = file.path
  local model = file.metadata["tokenizer.ggml.model"]
  if model == nil then return fail("%s: no tokenizer (tokenizer.ggml.model is not set)", path) end
  local tokens, scores = file.metadata["tokenizer.ggml.tokens"], file.metadata["tokenizer.ggml.scores"] or {}
  if type(tokens) ~= "table" or #tokens == 0 then return fail("%s: tokenizer.ggml.tokens is missing or empty", path) end
  for key, want in pairs({ ["tokenizer.ggml.tokens"] = "string", ["tokenizer.ggml.merges"] = "string",
    ["tokenizer.ggml.scores"] = "number", ["tokenizer.ggml.token_type"] = "number" }) do
    local list = file.metadata[key]
    if list ~= nil and type(list) ~= "table" then return fail("%s: %s is not an array", path, key) end
    for i, v in ipairs(list or {}) do
      if type(v) ~= want then return fail("%s: %s[%d] is a %s, not a %s", path, key, i - 1, type(v), want) end
    end
  end
  if model == "gpt2" then return bpe_tokenizer(file, path) end
  if model ~= "llama" then
    return fail("%s: tokenizer.ggml.model '%s'; anelua reads the 'llama' (SentencePiece) and 'gpt2' (byte-level BPE) "
      .. "tokenizers of GGUF files", path, tostring(model))
  end
  if #scores ~= 0 and #scores ~= #tokens then
    return fail("%s: %d tokenizer.ggml.scores for %d tokens", path, #scores, #tokens)
  end
  return require("ane.sentencepiece").from_pieces(tokens, scores, path, {
    bos = file.metadata["tokenizer.ggml.bos_token_id"], eos = file.metadata["tokenizer.ggml.eos_token_id"] })
end

return M

-- ane.io: reading and writing model files.
--
-- safetensors: the JSON header is parsed here with lua-cjson (the project's one JSON
-- parser); the bytes are handled in C (ane._io: mmap, bounds and size checks, atomic
-- writes), so loaded tensors are zero-copy, read-only views of the mapped file.
-- Every malformed input gives `nil, "<path>: <what is wrong>"`; nothing raises on bad files.
local ane = require("ane")
local cjson = require("cjson.safe")
local lfs = require("lfs")

local core = ane._io
local M = {}

local function fail(path, format, ...)
  return nil, path .. ": " .. string.format(format, ...)
end

-- JSON numbers arrive as floats; accept only exact non-negative integers.
local function as_count(value)
  if math.type(value) == "integer" then return value >= 0 and value or nil end
  if type(value) ~= "number" then return nil end
  local integer = math.tointeger(value)
  return integer and integer >= 0 and integer or nil
end

local function parse_entry(path, name, entry)
  if type(entry) ~= "table" then return fail(path, "entry '%s' is not an object", name) end
  if type(entry.dtype) ~= "string" then return fail(path, "tensor '%s' has no dtype string", name) end
  if type(entry.shape) ~= "table" then return fail(path, "tensor '%s' has no shape array", name) end
  local offsets = entry.data_offsets
  if type(offsets) ~= "table" or #offsets ~= 2 then
    return fail(path, "tensor '%s' needs data_offsets [begin, end]", name)
  end
  local shape = {}
  for i, size in ipairs(entry.shape) do
    shape[i] = as_count(size)
    if not shape[i] then return fail(path, "tensor '%s' shape[%d] is not a non-negative integer", name, i) end
  end
  local first, last = as_count(offsets[1]), as_count(offsets[2])
  if not first or not last then
    return fail(path, "tensor '%s' data_offsets are not non-negative integers", name)
  end
  return { dtype = entry.dtype, shape = shape, first = first, last = last }
end

-- Loads one .safetensors file: tensors (name -> read-only tensor view) and metadata.
local function load_file(path)
  local mapping, header = core.map_safetensors(path)
  if not mapping then return nil, header end
  local parsed, why = cjson.decode(header)
  if parsed == nil then return fail(path, "header is not valid JSON (%s)", why) end
  if type(parsed) ~= "table" or parsed[1] ~= nil then return fail(path, "header is not a JSON object") end

  local metadata = {}
  if parsed.__metadata__ ~= nil then
    if type(parsed.__metadata__) ~= "table" then return fail(path, "__metadata__ is not an object") end
    for key, value in pairs(parsed.__metadata__) do
      if type(value) ~= "string" then return fail(path, "__metadata__ value '%s' is not a string", key) end
      metadata[key] = value
    end
  end

  local names, firsts, lasts, tensors = {}, {}, {}, {}
  for name, entry in pairs(parsed) do
    if name ~= "__metadata__" then
      local info, err = parse_entry(path, name, entry)
      if not info then return nil, err end
      local tensor, terr = mapping:tensor(path, name, info.dtype, info.shape, info.first, info.last)
      if not tensor then return nil, terr end
      tensors[name] = tensor
      names[#names + 1], firsts[#firsts + 1], lasts[#lasts + 1] = name, info.first, info.last
    end
  end
  local ok, err = core.check_overlaps(path, names, firsts, lasts)
  if not ok then return nil, err end
  return tensors, metadata
end

local function is_directory(path)
  return lfs.attributes(path, "mode") == "directory"
end

local function exists(path)
  return lfs.attributes(path, "mode") ~= nil
end

--- The whole file as a string, or nil and "<path>: <problem>" (a directory opens on Linux
--- and fails only when read: that error is the answer too, never nil alone).
function M.read_file(path)
  local file, err = io.open(path, "rb")
  if not file then return nil, err end
  local text, why = file:read("a")
  file:close()
  if not text then return nil, string.format("%s: %s", path, why or "cannot be read") end
  return text
end
local read_text = M.read_file

--- The JSON object in a file (decoded with lua-cjson), or nil and "<path>: <problem>".
function M.read_json(path)
  local text, err = read_text(path)
  if not text then return nil, err end
  local value, why = cjson.decode(text)
  if type(value) ~= "table" then return nil, string.format("%s: not a JSON object (%s)", path, why or "wrong type") end
  return value
end

--- Writes `bytes` and then each tensor's bytes (optional array) to path atomically:
--- temporary file, fsync, rename. Returns true or nil, msg; on failure path is untouched.
function M.write_file_atomic(path, bytes, tensors)
  return core.write_atomic(path, bytes, tensors or {})
end

-- Loads a sharded model from its index (weight_map: tensor name -> shard file).
local function load_sharded(index_path)
  local index, err = M.read_json(index_path)
  if not index then return nil, err end
  if type(index.weight_map) ~= "table" then return fail(index_path, "not a safetensors index (no weight_map object)") end
  local directory = index_path:match("^(.*)/[^/]*$") or "."
  local shards, tensors, metadata = {}, {}, {}
  for name, shard in pairs(index.weight_map) do
    if type(shard) ~= "string" or shard:find("..", 1, true) or shard:sub(1, 1) == "/" then
      return fail(index_path, "weight_map entry '%s' names an invalid shard", name)
    end
    if not shards[shard] then
      local shard_tensors, shard_metadata = load_file(directory .. "/" .. shard)
      if not shard_tensors then return nil, shard_metadata end
      shards[shard] = shard_tensors
      for key, value in pairs(shard_metadata) do metadata[key] = value end
    end
    local tensor = shards[shard][name]
    if not tensor then return fail(index_path, "tensor '%s' is not in shard %s", name, shard) end
    tensors[name] = tensor
  end
  if type(index.metadata) == "table" then
    for key, value in pairs(index.metadata) do metadata[key] = tostring(value) end
  end
  return tensors, metadata
end

--- Loads safetensors: a file, a sharded index (*.index.json), or a model directory holding
--- model.safetensors or model.safetensors.index.json. Returns tensors, metadata or nil, msg.
function M.load_safetensors(path)
  if type(path) ~= "string" then error("load_safetensors: path must be a string", 2) end
  if is_directory(path) then
    local single, index = path .. "/model.safetensors", path .. "/model.safetensors.index.json"
    if exists(single) then return load_file(single) end
    if exists(index) then return load_sharded(index) end
    return fail(path, "no model.safetensors or model.safetensors.index.json in this directory")
  end
  if path:match("%.index%.json$") then return load_sharded(path) end
  return load_file(path)
end

local dtype_codes = {
  fp32 = "F32", fp16 = "F16", bf16 = "BF16", int32 = "I32", int64 = "I64", int16 = "I16",
  uint16 = "U16", int8 = "I8", uint8 = "U8", bool = "BOOL",
}

--- Writes tensors (name -> tensor) and optional metadata (string -> string) atomically.
--- Returns true or nil, msg. Names are written sorted, so the bytes are deterministic.
function M.save_safetensors(path, tensors, metadata)
  if type(path) ~= "string" then error("save_safetensors: path must be a string", 2) end
  if type(tensors) ~= "table" then error("save_safetensors: tensors must be a table", 2) end
  local names = {}
  for name, tensor in pairs(tensors) do
    if type(name) ~= "string" then error("save_safetensors: tensor names must be strings", 2) end
    if name == "__metadata__" then error("save_safetensors: '__metadata__' is reserved", 2) end
    if not ane.tensor.is(tensor) then
      error(string.format("save_safetensors: '%s' is not a tensor", name), 2)
    end
    names[#names + 1] = name
  end
  table.sort(names)
  local parts, ordered, offset = {}, {}, 0
  if metadata ~= nil then
    if type(metadata) ~= "table" then error("save_safetensors: metadata must be a table", 2) end
    local keys = {}
    for key, value in pairs(metadata) do
      if type(key) ~= "string" or type(value) ~= "string" then
        error("save_safetensors: metadata keys and values must be strings", 2)
      end
      keys[#keys + 1] = key
    end
    table.sort(keys)
    local entries = {}
    for _, key in ipairs(keys) do
      entries[#entries + 1] = cjson.encode(key) .. ":" .. cjson.encode(metadata[key])
    end
    parts[#parts + 1] = '"__metadata__":{' .. table.concat(entries, ",") .. "}"
  end
  for _, name in ipairs(names) do
    local tensor = tensors[name]
    local size = tensor:numel() * tensor:element_size()
    local shape = tensor:shape()
    parts[#parts + 1] = string.format('%s:{"dtype":"%s","shape":[%s],"data_offsets":[%d,%d]}',
      cjson.encode(name), dtype_codes[tensor:dtype()], table.concat(shape, ","), offset, offset + size)
    offset = offset + size
    ordered[#ordered + 1] = tensor
  end
  return core.write_safetensors(path, "{" .. table.concat(parts, ",") .. "}", ordered)
end

return M

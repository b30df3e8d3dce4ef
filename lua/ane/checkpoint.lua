-- ane.checkpoint: training state in one safetensors file per checkpoint, written atomically
-- (temporary file, fsync, rename: a crash mid-write leaves the previous checkpoint whole).
--
--   checkpoint.save(dir, step, { params =, m =, v = } , { data_position =, rng =, config = })
--     -> path  (dir/ckpt-<step>.safetensors; keeps the newest opts.keep files)
--   checkpoint.load(path) -> { params, m, v, step, data_position, rng, config } | nil, msg
--   checkpoint.latest(dir) -> path of the newest checkpoint, or nil
-- Tensors are stored as fp32 under "param.<name>", "adam_m.<name>", "adam_v.<name>"; the
-- scalars and the config go in the metadata, with a checksum per tensor (t:checksum(): dtype,
-- shape and values) and one over the whole metadata, both verified on load: a flipped byte
-- anywhere is an error naming the tensor or the metadata, never a silently different state.
local ane = require("ane")
local cjson = require("cjson.safe")
local lfs = require("lfs")

local M = {}

local PATTERN = "^ckpt%-(%d+)%.safetensors$"

local function checkpoints(dir)
  local found = {}
  if lfs.attributes(dir, "mode") ~= "directory" then return found end
  for entry in lfs.dir(dir) do
    local step = entry:match(PATTERN)
    if step then found[#found + 1] = { step = tonumber(step), path = dir .. "/" .. entry } end
  end
  table.sort(found, function(a, b) return a.step < b.step end)
  return found
end

--- Removes the partial files (<name>.tmp-<pid>) that writers killed mid-write left in dir,
--- those of processes still running excepted. Returns how many files and bytes.
function M.sweep(dir)
  local files, bytes = 0, 0
  if lfs.attributes(dir, "mode") ~= "directory" then return files, bytes end
  for entry in lfs.dir(dir) do
    local pid = tonumber(entry:match("%.tmp%-(%d+)$"))
    if pid and pid ~= ane._io.pid() and not ane._io.process_alive(pid) then
      local path = dir .. "/" .. entry
      local size = lfs.attributes(path, "size") or 0
      if os.remove(path) then files, bytes = files + 1, bytes + size end
    end
  end
  return files, bytes
end

--- Newest checkpoint in dir, or nil.
function M.latest(dir)
  local all = checkpoints(dir)
  return all[#all] and all[#all].path or nil
end

-- The checksum of every metadata entry but itself, in name order.
local function metadata_checksum(metadata)
  local names, parts = {}, {}
  for name in pairs(metadata) do if name ~= "metadata_checksum" then names[#names + 1] = name end end
  table.sort(names)
  for _, name in ipairs(names) do parts[#parts + 1] = name .. "\0" .. tostring(metadata[name]) .. "\0" end
  return ane.checksum(table.concat(parts))
end

-- The metadata keys of the checkpoints written before checksums existed (commit 188f08c
-- added them; trainer came with loss scaling): a file without metadata_checksum is taken as
-- one of those only when its keys are some of these and nothing else. A flipped bit in the
-- key "metadata_checksum" leaves it and "checksums" behind, so it cannot pass as old.
local PRE_CHECKSUM_KEYS = { format = true, step = true, data_position = true, rng = true, config = true, trainer = true }

-- Verifies what save wrote; returns true or nil and a message naming what differs.
local function verify(path, tensors, metadata)
  if metadata.metadata_checksum == nil then
    for key in pairs(metadata) do
      if not PRE_CHECKSUM_KEYS[key] then
        return nil, path .. ": the checkpoint has no metadata_checksum but holds '" .. key ..
            "', which only checkpoints with checksums hold (a damaged header)"
      end
    end
    return true -- written before checksums existed: nothing to verify
  end
  if metadata_checksum(metadata) ~= metadata.metadata_checksum then
    return nil, path .. ": the checkpoint's metadata does not match its checksum (the header is corrupt)"
  end
  local checksums = cjson.decode(metadata.checksums or "")
  if type(checksums) ~= "table" then return nil, path .. ": the checkpoint's tensor checksums are unreadable" end
  for name, want in pairs(checksums) do
    local t = tensors[name]
    if not t then return nil, path .. ": tensor '" .. name .. "' is missing" end
    if t:checksum() ~= want then
      return nil, path .. ": tensor '" .. name .. "' does not match its checksum (its data is corrupt)"
    end
  end
  for name in pairs(tensors) do
    if not checksums[name] then return nil, path .. ": tensor '" .. name .. "' has no checksum" end
  end
  return true
end

--- Saves state; returns the path, or nil and a message (the previous files stay intact).
function M.save(dir, step, state, extra, opts)
  extra, opts = extra or {}, opts or {}
  if lfs.attributes(dir, "mode") ~= "directory" then
    local ok, err = lfs.mkdir(dir)
    if not ok then return nil, dir .. ": " .. tostring(err) end
  end
  local tensors = {}
  for kind, prefix in pairs({ params = "param.", m = "adam_m.", v = "adam_v." }) do
    for name, t in pairs(state[kind] or {}) do tensors[prefix .. name] = t end
  end
  local metadata = {
    format = "anelua-checkpoint-1", step = tostring(step),
    data_position = tostring(extra.data_position or 0), rng = tostring(extra.rng or 0),
    config = cjson.encode(extra.config or {}), trainer = cjson.encode(extra.trainer or {}),
  }
  local checksums = {}
  for name, t in pairs(tensors) do checksums[name] = t:checksum() end
  metadata.checksums = cjson.encode(checksums)
  metadata.metadata_checksum = metadata_checksum(metadata)
  local path = string.format("%s/ckpt-%08d.safetensors", dir, step)
  local ok, err = ane.io.save_safetensors(path, tensors, metadata)
  if not ok then return nil, err end
  local keep = opts.keep or 3
  local all = checkpoints(dir)
  for i = 1, #all - keep do os.remove(all[i].path) end
  return path
end

--- Loads a checkpoint into writable fp32 tensors.
function M.load(path)
  local tensors, metadata = ane.io.load_safetensors(path)
  if not tensors then return nil, metadata end
  if metadata.format ~= "anelua-checkpoint-1" then return nil, path .. ": not an anelua checkpoint (format '" .. tostring(metadata.format) .. "')" end
  local intact, why = verify(path, tensors, metadata)
  if not intact then return nil, why end
  local config, trainer = cjson.decode(metadata.config or "{}"), cjson.decode(metadata.trainer or "{}")
  if type(config) ~= "table" then return nil, path .. ": the checkpoint's config is not a JSON object" end
  if type(trainer) ~= "table" then return nil, path .. ": the checkpoint's trainer state is not a JSON object" end
  local step = math.tointeger(tonumber(metadata.step))
  if not step or step < 0 then return nil, path .. ": the checkpoint's step '" .. tostring(metadata.step) .. "' is not a count" end
  local data_position = math.tointeger(tonumber(metadata.data_position))
  if not data_position or data_position < 0 then
    return nil, path .. ": the checkpoint's data_position '" .. tostring(metadata.data_position) .. "' is not a count"
  end
  local rng = math.tointeger(tonumber(metadata.rng))
  if not rng then return nil, path .. ": the checkpoint's rng '" .. tostring(metadata.rng) .. "' is not an integer" end
  local state = { params = {}, m = {}, v = {}, step = step, data_position = data_position,
    rng = rng, config = config, trainer = trainer }
  for key, value in pairs(state.config) do -- JSON numbers come back as floats
    if math.type(value) == "float" then state.config[key] = math.tointeger(value) or value end
  end
  for name, t in pairs(tensors) do
    local kind, field = name:match("^(%a+_?%a*)%.(.+)$")
    local slot = kind == "param" and state.params or kind == "adam_m" and state.m or kind == "adam_v" and state.v
    if not slot then return nil, path .. ": unexpected tensor '" .. name .. "'" end
    local sum = t:sum_of_squares() -- fp64: finite for every finite fp32 tensor
    if sum ~= sum or sum == math.huge then
      return nil, path .. ": tensor '" .. name .. "' holds NaN or infinite values; resume from an earlier checkpoint"
    end
    slot[field] = t:to("fp32")
  end
  return state
end

--- Writes Llama weights (checkpoint-layout fp32 params) as a llama2.c legacy v0 .bin
--- (ane.formats.llama2c.write).
function M.export_llama2c(path, config, params) return require("ane.formats.llama2c").write(path, config, params) end

return M

-- ane.data: token shards for training, and batches drawn from them.
--
-- Two on-disk formats, both little-endian uint16 token ids:
--   llama2.c: headerless, the whole file is tokens (its pretokenize writes `data*.bin`);
--   llm.c:    a 256 x int32 header (magic 20240520, version 1, token count), then tokens.
--
--   local data = require("ane.data")
--   local shard = assert(data.open("train.bin"))       -- format detected from the header
--   shard.count, shard.format, shard:tokens(first, n)  -- 1-based window of ids
--   data.write("out.bin", ids, { format = "llmc" })    -- atomic; "llama2c" is the default
--   local batches = data.batches({ shard1, ... }, { batch = 4, seq = 64, position = 0 })
--   local ids, targets, position = batches:next()      -- targets = ids shifted by one
-- Batches walk the shards sequentially in windows of seq + 1 tokens; `position` counts the
-- windows handed out so far, so a checkpoint that stores it resumes at the same data.
local ane = require("ane")

local M = {}

local LLMC_MAGIC, LLMC_VERSION, LLMC_HEADER_BYTES = 20240520, 1, 256 * 4

local Shard = {}
Shard.__index = Shard

--- Opens a shard. Returns the shard, or nil and a message naming the file and the problem.
function M.open(path)
  local mapping, size = ane._io.map_file(path)
  if not mapping then return nil, size end
  local file = io.open(path, "rb") -- the header only: the tokens stay in the mapping
  local first = file and file:read(12)
  if file then file:close() end
  if not first and size > 0 then return nil, path .. ": cannot read" end
  first = first or ""
  local magic, version, declared = 0, 0, 0
  if #first >= 12 then magic, version, declared = string.unpack("<i4i4i4", first) end
  local format, offset, count
  if magic == LLMC_MAGIC then
    format, offset = "llmc", LLMC_HEADER_BYTES
    if version ~= LLMC_VERSION then
      return nil, string.format("%s: llm.c shard version %d at offset 4 (only version %d is known)", path, version, LLMC_VERSION)
    end
    if size ~= offset + 2 * declared then
      return nil, string.format("%s: the llm.c header (offset 8) declares %d tokens = %d bytes after the %d-byte header, but the file has %d bytes",
        path, declared, 2 * declared, offset, size)
    end
    count = declared
  elseif version == LLMC_VERSION and size == LLMC_HEADER_BYTES + 2 * declared then
    -- an llm.c header in every field but the magic: a damaged file, not 512 tokens of a
    -- headerless shard that happen to spell llm.c's version and this file's token count
    return nil, string.format("%s: magic %d at offset 0, expected llm.c's %d (the rest is an llm.c shard header)",
      path, magic, LLMC_MAGIC)
  else
    format, offset = "llama2c", 0
    if size % 2 ~= 0 then
      return nil, string.format("%s: %d bytes is not a whole number of uint16 tokens (headerless llama2.c shard)", path, size)
    end
    count = size // 2
  end
  if count == 0 then return nil, path .. ": the shard holds no tokens" end
  local tokens, err = mapping:tensor(path, "tokens", "U16", { count }, offset, offset + 2 * count)
  if not tokens then return nil, err end
  return setmetatable({ path = path, format = format, count = count, ids = tokens }, Shard)
end

--- Token ids first .. first + n - 1 (1-based) as a Lua array.
function Shard:tokens(first, n)
  if first < 1 or first + n - 1 > self.count then
    error(string.format("%s: tokens %d..%d are outside the shard's %d", self.path, first, first + n - 1, self.count), 2)
  end
  return self.ids:slice(1, first, first + n - 1):totable()
end

--- An in-memory shard over a Lua array of ids (any non-negative integers: vocabularies
--- beyond uint16, such as Qwen3's, cannot be written as llama2.c or llm.c shards).
function M.from_ids(ids, label)
  for i, id in ipairs(ids) do
    if math.type(id) ~= "integer" or id < 0 or id > 0x7fffffff then
      error(string.format("data.from_ids: token %d (%s) is not an id", i, tostring(id)), 2)
    end
  end
  if #ids == 0 then error("data.from_ids: no tokens", 2) end
  return setmetatable({ path = label or "(in memory)", format = "memory", count = #ids,
    ids = ane.tensor.from(ids, { #ids }, "int32") }, Shard)
end

--- Writes ids (a Lua array of integers in [0, 65535]) as a shard, atomically.
function M.write(path, ids, opts)
  local format = (opts and opts.format) or "llama2c"
  if format ~= "llama2c" and format ~= "llmc" then error("data.write: format must be 'llama2c' or 'llmc'", 2) end
  local parts = {}
  if format == "llmc" then
    parts[1] = string.pack("<i4i4i4", LLMC_MAGIC, LLMC_VERSION, #ids) .. string.rep("\0", LLMC_HEADER_BYTES - 12)
  end
  local CHUNK = 4096
  for first = 1, #ids, CHUNK do
    local last = math.min(#ids, first + CHUNK - 1)
    for i = first, last do
      local id = ids[i]
      if math.type(id) ~= "integer" or id < 0 or id > 65535 then
        error(string.format("data.write: token %d (%s) does not fit in uint16", i, tostring(id)), 2)
      end
    end
    parts[#parts + 1] = string.pack("<" .. string.rep("I2", last - first + 1), table.unpack(ids, first, last))
  end
  return ane.io.write_file_atomic(path, table.concat(parts))
end

local Batches = {}
Batches.__index = Batches

--- A sequential batch source over shards. opts: batch, seq, position (windows already used).
--- Too little data for one batch (a user's data, not a programming error) is nil, message.
function M.batches(shards, opts)
  local seq, batch = opts.seq, opts.batch or 1
  local windows = {}
  for index, shard in ipairs(shards) do
    windows[index] = shard.count // (seq + 1)
  end
  local total = 0
  for _, n in ipairs(windows) do total = total + n end
  if total < batch then
    local tokens = 0
    for _, shard in ipairs(shards) do tokens = tokens + shard.count end
    return nil, string.format("the data holds %d tokens: %d windows of %d tokens (seq + 1), fewer than one batch of %d; " ..
      "give more data or a smaller --seq / --batch", tokens, total, seq + 1, batch)
  end
  return setmetatable({ shards = shards, windows = windows, total = total, seq = seq, batch = batch,
    position = opts.position or 0 }, Batches)
end

-- The tokens of window number w (0-based, wrapping around the whole data set).
function Batches:window(w)
  w = w % self.total
  for index, n in ipairs(self.windows) do
    if w < n then return self.shards[index]:tokens(w * (self.seq + 1) + 1, self.seq + 1) end
    w = w - n
  end
end

--- The next batch: ids and targets (arrays of `batch` arrays of `seq` ids) and the position
--- after it (store it in a checkpoint to resume here).
function Batches:next()
  local ids, targets = {}, {}
  for b = 1, self.batch do
    local tokens = self:window(self.position)
    self.position = self.position + 1
    ids[b] = table.move(tokens, 1, self.seq, 1, {})
    targets[b] = table.move(tokens, 2, self.seq + 1, 1, {})
  end
  return ids, targets, self.position
end

-- Word lists of the synthetic corpus.
local NAMES = { "Lily", "Tom", "Mia", "Ben", "Sam", "Anna", "Max", "Sue" }
local ANIMALS = { "cat", "dog", "bird", "frog", "bunny", "duck" }
local THINGS = { "ball", "kite", "box", "hat", "cake", "boat", "flower", "book" }
local PLACES = { "park", "garden", "forest", "beach", "house", "river" }
local FEELINGS = { "happy", "sad", "sleepy", "excited", "scared", "proud" }
local COLORS = { "red", "blue", "green", "yellow", "big", "little" }

--- A small corpus of simple stories, identical for the same seed and count: template
--- sentences over a few word lists, so a tiny model can learn it within a few hundred steps.
function M.synthetic_stories(count, seed)
  local state = (seed or 1) * 2654435761 % 4294967296
  local function pick(list)
    state = (state * 1103515245 + 12345) % 2147483648
    return list[state % #list + 1]
  end
  local stories = {}
  for i = 1, count do
    local name, animal, thing, place = pick(NAMES), pick(ANIMALS), pick(THINGS), pick(PLACES)
    local color, feeling, friend = pick(COLORS), pick(FEELINGS), pick(NAMES)
    stories[i] = string.format("Once upon a time, there was a %s named %s. %s had a %s %s. " ..
      "One day, %s went to the %s with the %s. %s met %s there. %s was %s. " ..
      "They played with the %s all day. The end.",
      animal, name, name, color, thing, name, place, thing, name, friend, name, feeling, thing)
  end
  return stories
end

--- Epochs completed so far, as a fraction.
function Batches:epoch() return self.position / self.total end

return M

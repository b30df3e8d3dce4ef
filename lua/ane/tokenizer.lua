-- ane.tokenizer: GPT-2's byte-level BPE.
--
--   local tok = require("ane.tokenizer").load("path/to/dir")   -- vocab.json + merges.txt
--   local tok = require("ane.tokenizer").load{ vocab = "vocab.json", merges = "merges.txt" }
--   local tok = require("ane.tokenizer").load("gpt2_tokenizer.bin")  -- llm.c's file: decode only
--   tok:encode("Hello world!")  --> { 15496, 995, 0 }
--   tok:decode({ 15496, 995, 0 }) --> "Hello world!"
-- Files are read here (vocab.json with lua-cjson); the pre-split regex (PCRE2) and the
-- merges run in C (ane_core/text/bpe.c). Malformed files give nil, "<file>: <problem>".
local ane = require("ane")
local cjson = require("cjson.safe")
local lfs = require("lfs")

local M = {}
local Tokenizer = {}
Tokenizer.__index = Tokenizer

local LLMC_TOKENIZER_MAGIC = 20240328

local read_file = ane.io.read_file

local function fail(path, format, ...)
  return nil, path .. ": " .. string.format(format, ...)
end

local function load_vocab_and_merges(vocab_path, merges_path)
  local bpe = ane._bpe()
  local text, err = read_file(vocab_path)
  if not text then return nil, err end
  local vocab, why = cjson.decode(text)
  if type(vocab) ~= "table" then return fail(vocab_path, "not a JSON object (%s)", why or "wrong type") end
  local count = 0
  for token, id in pairs(vocab) do
    if type(token) ~= "string" or math.type(id) == nil or id ~= math.floor(id) then
      return fail(vocab_path, "entry %s is not a token -> integer id", tostring(token))
    end
    local ok, message = bpe:add_token(token, math.tointeger(id))
    if not ok then return fail(vocab_path, "%s", message) end
    count = count + 1
  end
  local merges, merr = read_file(merges_path)
  if not merges then return nil, merr end
  local rank, line_number = 0, 0
  for line in merges:gmatch("[^\n]*") do
    line_number = line_number + 1
    line = line:gsub("\r$", "")
    if line ~= "" and not line:match("^#version") then
      local left, right = line:match("^(%S+) (%S+)$")
      if not left then return fail(merges_path, "line %d is not 'left right': %q", line_number, line:sub(1, 60)) end
      local ok, message = bpe:add_merge(left, right, rank)
      if not ok then return fail(merges_path, "line %d: %s", line_number, message) end
      rank = rank + 1
    end
  end
  local ok, message = bpe:finish()
  if not ok then return nil, message end
  return setmetatable({ bpe = bpe, vocab_size = bpe:vocab_size(), eot = vocab["<|endoftext|>"], merges = rank,
    source = vocab_path, tokens = count }, Tokenizer)
end

-- llm.c's gpt2_tokenizer.bin: u32[256] header (magic, version, vocab size, EOT), then per
-- token a u8 length and the bytes.
local function load_llmc(path)
  local bytes, err = read_file(path)
  if not bytes then return nil, err end
  if #bytes < 1024 then return fail(path, "%d bytes is too short for the 1024-byte header", #bytes) end
  local magic, version, vocab, eot = string.unpack("<I4I4I4I4", bytes)
  if magic ~= LLMC_TOKENIZER_MAGIC then return fail(path, "magic %d at offset 0, expected %d", magic, LLMC_TOKENIZER_MAGIC) end
  if version ~= 1 and version ~= 2 then return fail(path, "version %d at offset 4 is not 1 or 2", version) end
  if version == 1 then eot = 50256 end
  local bpe = ane._bpe()
  local offset = 1025
  for id = 0, vocab - 1 do
    if offset > #bytes then return fail(path, "truncated at token %d (offset %d)", id, offset - 1) end
    local length = bytes:byte(offset)
    if length == 0 or offset + length > #bytes then
      return fail(path, "token %d at offset %d has length %d past the end of the file", id, offset - 1, length)
    end
    local ok, message = bpe:add_token_bytes(bytes:sub(offset + 1, offset + length), id)
    if not ok then return fail(path, "token %d: %s", id, message) end
    offset = offset + 1 + length
  end
  return setmetatable({ bpe = bpe, vocab_size = vocab, eot = eot, source = path, tokens = vocab }, Tokenizer)
end

--- Loads a tokenizer from a directory, a table of files, or llm.c's tokenizer.bin.
function M.load(source)
  if type(source) == "table" then
    if source.bin then return load_llmc(source.bin) end
    if not (source.vocab and source.merges) then error("load: give {vocab =, merges =} or {bin =}", 2) end
    return load_vocab_and_merges(source.vocab, source.merges)
  end
  if type(source) ~= "string" then error("load: expected a path or a table of files", 2) end
  if lfs.attributes(source, "mode") == "directory" then
    local vocab, merges = source .. "/vocab.json", source .. "/merges.txt"
    if lfs.attributes(vocab) and lfs.attributes(merges) then return load_vocab_and_merges(vocab, merges) end
    local bin = source .. "/gpt2_tokenizer.bin"
    if lfs.attributes(bin) then return load_llmc(bin) end
    return fail(source, "no vocab.json + merges.txt or gpt2_tokenizer.bin here")
  end
  return load_llmc(source)
end

--- text -> array of ids (byte-exact: invalid UTF-8 is kept byte by byte).
function Tokenizer:encode(text)
  if type(text) ~= "string" then error("encode: text must be a string", 2) end
  return self.bpe:encode(text)
end

--- array of ids -> the exact bytes they stand for.
function Tokenizer:decode(ids)
  if type(ids) ~= "table" then error("decode: ids must be an array", 2) end
  return self.bpe:decode(ids)
end

--- Whether this tokenizer can encode (llm.c's file has no merges: decode only).
function Tokenizer:can_encode() return self.bpe:can_encode() end

function Tokenizer:__tostring()
  return string.format("ane.tokenizer %s (%d tokens%s)", self.source, self.tokens,
    self.merges and (", " .. self.merges .. " merges") or ", decode only")
end

return M

-- ane.tokenizer: byte-level BPE (GPT-2's, and Hugging Face tokenizer.json files such as
-- Qwen3's).
--
--   local tok = require("ane.tokenizer").load("path/to/dir")   -- vocab.json + merges.txt, or tokenizer.json
--   local tok = require("ane.tokenizer").load{ vocab = "vocab.json", merges = "merges.txt" }
--   local tok = require("ane.tokenizer").load("gpt2_tokenizer.bin")  -- llm.c's file: decode only
--   tok:encode("Hello world!")  --> { 15496, 995, 0 }
--   tok:decode({ 15496, 995, 0 }) --> "Hello world!"
-- Files are read here (vocab.json with lua-cjson); the pre-split regex (PCRE2) and the
-- merges run in C (ane_core/text/bpe.c). Malformed files give nil, "<file>: <problem>".
local ane = require("ane")
local lfs = require("lfs")

local M = {}
local Tokenizer = {}
Tokenizer.__index = Tokenizer

local LLMC_TOKENIZER_MAGIC = 20240328

local read_file = ane.io.read_file

local function fail(path, format, ...)
  return nil, path .. ": " .. string.format(format, ...)
end

-- Adds every token -> id entry of a decoded vocabulary to bpe; returns how many, or nil and
-- an error naming the file.
local function add_vocabulary(bpe, vocab, path)
  local count, message = bpe:add_vocabulary(vocab)
  if not count then return fail(path, "%s", message) end
  return count
end

-- A byte-level BPE encodes any text only when every byte has a token of its own: refused at
-- load otherwise (encode would fail on the first text that needs the missing one).
local function check_bytes(bpe, path)
  local missing = bpe:first_missing_byte()
  if missing then
    return fail(path, "no token for the byte 0x%02X (byte-level BPE needs one for each of the 256 bytes)", missing)
  end
  return true
end

local function load_vocab_and_merges(vocab_path, merges_path)
  local bpe = ane._bpe()
  local vocab, err = ane.io.read_json(vocab_path)
  if not vocab then return nil, err end
  local count, verr = add_vocabulary(bpe, vocab, vocab_path)
  if not count then return nil, verr end
  local merges, merr = read_file(merges_path)
  if not merges then return nil, merr end
  local rank, message = bpe:add_merges_text(merges)
  if not rank then return fail(merges_path, "%s", message) end
  local ok, message = bpe:finish()
  if not ok then return nil, message end
  ok, message = check_bytes(bpe, vocab_path)
  if not ok then return nil, message end
  return setmetatable({ bpe = bpe, vocab_size = bpe:vocab_size(), eot = vocab["<|endoftext|>"], merges = rank,
    source = vocab_path, tokens = count }, Tokenizer)
end

-- Hugging Face tokenizer.json of a byte-level BPE (Qwen3, GPT-2 and alike): vocabulary and
-- merges from "model", the split stages from "pre_tokenizer" (Split by regex, Digits one by one,
-- ByteLevel with or without GPT-2's own regex, in the file's order), NFC when "normalizer" asks
-- for it, and the added tokens, found in the raw text before anything else.
local function load_tokenizer_json(path)
  local json, err = ane.io.read_json(path)
  if not json then return nil, err end
  if type(json.model) ~= "table" then return fail(path, "not a tokenizer.json (no \"model\" object)") end
  local model = json.model
  if model.type ~= "BPE" or type(model.vocab) ~= "table" or type(model.merges) ~= "table" then
    return fail(path, "model type %s: only byte-level BPE with vocab and merges is read", tostring(model.type))
  end
  -- normalizer: none or NFC
  local normalizer = json.normalizer
  local nfc = false
  if type(normalizer) == "table" then
    if normalizer.type ~= "NFC" then return fail(path, "normalizer %s is not supported (NFC is)", tostring(normalizer.type)) end
    nfc = true
  end
  -- pre_tokenizer: the split stages, in order (Digits with individual_digits cuts out each
  -- digit; a Split by regex, Isolated; a ByteLevel with its own (GPT-2's) regex or none)
  local stages = {}
  local steps = json.pre_tokenizer
  steps = type(steps) == "table" and (steps.type == "Sequence" and steps.pretokenizers or { steps }) or {}
  for _, step in ipairs(steps) do
    if type(step) ~= "table" then return fail(path, "a pre_tokenizer step is not an object") end
    if step.type == "Split" and type(step.pattern) == "table" and type(step.pattern.Regex) == "string" then
      if step.behavior ~= "Isolated" or step.invert then return fail(path, "only Split with behavior Isolated is read") end
      stages[#stages + 1] = step.pattern.Regex
    elseif step.type == "Digits" then
      if step.individual_digits ~= true then return fail(path, "only Digits with individual_digits is read") end
      stages[#stages + 1] = "\\p{N}"
    elseif step.type == "ByteLevel" then
      if step.add_prefix_space then return fail(path, "ByteLevel with add_prefix_space is not supported") end
      if step.use_regex ~= false then stages[#stages + 1] = false end -- false: the ByteLevel's own (GPT-2's) regex
    else
      return fail(path, "pre-tokenizer %s is not supported", tostring(step.type))
    end
  end
  if #stages == 0 then return fail(path, "no split pattern in pre_tokenizer") end
  local pattern = #stages == 1 and stages[1] or stages
  return M.from_parts({ vocab = model.vocab, merges = model.merges, pattern = pattern, nfc = nfc,
    added = type(json.added_tokens) == "table" and json.added_tokens or {} }, path)
end

--- A byte-level BPE tokenizer from its parts: vocab (token -> id), merges (ranked "a b" strings
--- or pairs), pattern (the split regex, false for GPT-2's own, or an array of split stages
--- applied in order, false in it for GPT-2's), nfc (normalize first), added
--- (tokens matched in the raw text first: { content =, id = }). `path` names the source in
--- messages. Returns the tokenizer, or nil and a message.
function M.from_parts(parts, path)
  local bpe = ane._bpe()
  local count, verr = add_vocabulary(bpe, parts.vocab, path)
  if not count then return nil, verr end
  local merged, message = bpe:add_merges(parts.merges)
  if not merged then return fail(path, "%s", message) end
  local added = {}
  for i, token in ipairs(parts.added) do
    if type(token) ~= "table" then return fail(path, "added_tokens[%d] is not an object", i) end
    local content, id = token.content, type(token.id) == "number" and math.tointeger(token.id) or nil
    if type(content) ~= "string" or content == "" or not id then
      return fail(path, "added_tokens[%d] lacks a content string or an integer id", i)
    end
    if parts.vocab[content] == nil then
      local ok, message = bpe:add_token_bytes(content, id) -- decodes to its text as written
      if not ok then return fail(path, "added token %q: %s", content, message) end
      count = count + 1
    end
    added[#added + 1] = { text = content, id = id }
  end
  table.sort(added, function(a, b) return #a.text > #b.text end) -- longest first where two start together
  local ok
  ok, message = bpe:finish(parts.pattern or nil)
  if not ok then return fail(path, "%s", message) end
  ok, message = check_bytes(bpe, path)
  if not ok then return nil, message end
  local eot
  for _, token in ipairs(added) do if token.text == "<|endoftext|>" then eot = token.id end end
  return setmetatable({ bpe = bpe, vocab_size = bpe:vocab_size(), eot = eot, merges = #parts.merges, source = path,
    tokens = count, added = added, nfc = parts.nfc, pattern = parts.pattern }, Tokenizer)
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
  if vocab == 0 then return fail(path, "the header at offset 8 says 0 tokens") end
  if eot >= vocab then return fail(path, "end-of-text token %d (offset 12) is not below the %d tokens", eot, vocab) end
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
  if offset <= #bytes then
    return fail(path, "%d bytes follow the %d tokens the header at offset 8 counts (from offset %d)",
      #bytes - offset + 1, vocab, offset - 1)
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
    local json = source .. "/tokenizer.json"
    if lfs.attributes(json) then return load_tokenizer_json(json) end
    local bin = source .. "/gpt2_tokenizer.bin"
    if lfs.attributes(bin) then return load_llmc(bin) end
    return fail(source, "no vocab.json + merges.txt, tokenizer.json or gpt2_tokenizer.bin here")
  end
  if source:match("%.json$") then return load_tokenizer_json(source) end
  return load_llmc(source)
end

-- The ids of a text segment without added tokens: NFC first when the tokenizer asks for it.
local function encode_plain(self, text, ids)
  if text == "" then return end
  for _, id in ipairs(self.bpe:encode(self.nfc and ane._nfc(text) or text)) do ids[#ids + 1] = id end
end

--- text -> array of ids (byte-exact: invalid UTF-8 is kept byte by byte). Added tokens
--- of a tokenizer.json ("<|endoftext|>", ...) are found in the text first and become their
--- ids; the text between them is normalized (NFC where the file says so) and split.
function Tokenizer:encode(text)
  if type(text) ~= "string" then error("encode: text must be a string", 2) end
  if not self.bpe:can_encode() then -- llm.c's file: no merges
    error(self.source .. ": this tokenizer can only decode (llm.c's tokenizer file holds no merges); load the " ..
      "model's vocab.json and merges.txt or tokenizer.json to encode", 2)
  end
  if not self.added then return self.bpe:encode(text) end
  local ids, position = {}, 1
  while true do
    local first, token -- the earliest added token from `position` (the longest of those starting there)
    for _, candidate in ipairs(self.added) do
      local at = text:find(candidate.text, position, true)
      if at and (not first or at < first) then first, token = at, candidate end
    end
    if not first then break end
    encode_plain(self, text:sub(position, first - 1), ids)
    ids[#ids + 1] = token.id
    position = first + #token.text
  end
  encode_plain(self, text:sub(position), ids)
  return ids
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

-- ane.sentencepiece: the Llama-2 tokenizer (SentencePiece BPE with scores and byte fallback).
--
--   local spm = require("ane.sentencepiece")
--   local tok = assert(spm.load("tokenizer.model"))   -- the SentencePiece protobuf, or
--   local tok = assert(spm.load("tokenizer.bin"))     -- llama2.c's export of the same vocabulary
--   tok:encode("Hello world!")               --> { 15043, 3186, 29991 }
--   tok:encode("Hello world!", { bos = true }) --> { 1, 15043, 3186, 29991 }
--   tok:decode(ids)                           --> "Hello world!"
-- Files are parsed here; the merges run in C (ane_core/text/sentencepiece.c). Malformed
-- files give nil, "<file>: <problem at offset>".
local ane = require("ane")

local M = {}
local Tokenizer = {}
Tokenizer.__index = Tokenizer

local function fail(path, format, ...) return nil, path .. ": " .. string.format(format, ...) end

-- Protobuf varint at `pos` (1-based) -> value, next position (nil when truncated).
local function varint(bytes, pos)
  local value, shift = 0, 0
  while pos <= #bytes and shift < 64 do
    local b = bytes:byte(pos)
    value = value | ((b & 0x7F) << shift)
    pos = pos + 1
    if b < 0x80 then return value, pos end
    shift = shift + 7
  end
  return nil
end

-- A non-negative varint (a 10-byte varint can set bit 63, which would move the read
-- position backwards).
local function key_varint(bytes, pos)
  local value, next_pos = varint(bytes, pos)
  if not value or value < 0 then return nil end
  return value, next_pos
end

-- A length: non-negative and no longer than the file (a huge one would wrap the callers'
-- start + length checks around: found by fuzzing). A field key is read by key_varint.
local function size_varint(bytes, pos)
  local value, next_pos = key_varint(bytes, pos)
  if not value or value > #bytes then return nil end
  return value, next_pos
end

-- Skips one field of wire type `wire` at `pos`; returns the next position or nil.
local function skip(bytes, pos, wire)
  if wire == 0 then return select(2, varint(bytes, pos))
  elseif wire == 1 then return pos + 8
  elseif wire == 5 then return pos + 4
  elseif wire == 2 then
    local length, next_pos = size_varint(bytes, pos)
    return length and next_pos + length or nil
  end
  return nil
end

-- TrainerSpec (ModelProto field 2): its vocab_size (field 4), or nil.
local function trainer_vocab_size(bytes, start, stop)
  local p = start
  while p < stop do
    local k, np = varint(bytes, p)
    if not k or k < 0 then return nil end
    local f, w = k >> 3, k & 7
    if f == 4 and w == 0 then return (varint(bytes, np)) end
    p = skip(bytes, np, w)
    if not p or p > stop then return nil end
  end
  return nil
end

-- ModelProto: field 1 = repeated SentencePiece { 1: piece (string), 2: score (float), 3: type }.
local function load_model_proto(path, bytes, spm)
  local pos, id, declared, has_trainer_spec = 1, 0, nil, false
  while pos <= #bytes do
    local key, next_pos = key_varint(bytes, pos)
    if not key then return fail(path, "bad or truncated field key at offset %d", pos - 1) end
    local field, wire = key >> 3, key & 7
    if field == 2 and wire == 2 then
      local length, start = size_varint(bytes, next_pos)
      if not length or start + length - 1 > #bytes then return fail(path, "trainer spec at offset %d runs past the end", pos - 1) end
      declared, has_trainer_spec = trainer_vocab_size(bytes, start, start + length), true
    end
    if field == 1 and wire == 2 then
      local length, start = size_varint(bytes, next_pos)
      if not length or start + length - 1 > #bytes then return fail(path, "piece %d at offset %d runs past the end", id, pos - 1) end
      local piece, score = nil, 0.0
      local p, stop = start, start + length
      while p < stop do
        local k, np = key_varint(bytes, p)
        if not k then return fail(path, "piece %d: bad or truncated field at offset %d", id, p - 1) end
        local f, w = k >> 3, k & 7
        if f == 1 and w == 2 then
          local n, s = size_varint(bytes, np)
          if not n or s + n > stop then return fail(path, "piece %d: string at offset %d runs past its message", id, np - 1) end
          piece, p = bytes:sub(s, s + n - 1), s + n
        elseif f == 2 and w == 5 then
          if np + 4 > stop then return fail(path, "piece %d: score at offset %d runs past its message", id, np - 1) end
          score, p = string.unpack("<f", bytes, np), np + 4
        else
          p = skip(bytes, np, w)
          if not p or p > stop then return fail(path, "piece %d: bad field %d at offset %d", id, f, np - 1) end
        end
      end
      if not piece then return fail(path, "piece %d at offset %d has no text", id, pos - 1) end
      local ok, err = spm:add_piece(piece, score, id)
      if not ok then return fail(path, "%s", err) end
      id = id + 1
      pos = stop
    else
      pos = skip(bytes, next_pos, wire)
      if not pos or pos > #bytes + 1 then return fail(path, "field %d at offset %d runs past the end", field, next_pos - 1) end
    end
  end
  if id == 0 then return fail(path, "no pieces found (not a SentencePiece model?)") end
  if not has_trainer_spec then -- every SentencePiece model has one, after its pieces
    return fail(path, "ends after piece %d without the trainer spec a SentencePiece model holds (truncated?)", id - 1)
  end
  if declared and declared ~= id then
    return fail(path, "holds %d pieces but its trainer spec says vocab_size %d (truncated?)", id, declared)
  end
  return id
end

-- llama2.c's tokenizer.bin (its format: ane_spm_add_llama2c_pieces in
-- ane_core/text/sentencepiece.h, which reads it in C: 32,000 pieces in Lua took ~12 ms).
local function load_llama2c(path, bytes, spm)
  local count, err = spm:add_llama2c_pieces(bytes)
  if not count then return fail(path, "%s", err) end
  return count
end

--- Loads tokenizer.model (protobuf) or llama2.c's tokenizer.bin; the format is recognized
--- from the first byte (a protobuf starts with field 1's tag, 0x0A). opts.vocab_size (the
--- model's) is checked: llama2.c's file has no count of its own, so a file cut at a record
--- boundary is only caught against the model it goes with.
function M.load(path, opts)
  if type(path) ~= "string" then error("sentencepiece.load: path must be a string", 2) end
  local bytes, err = ane.io.read_file(path)
  if not bytes then return nil, err end
  local spm = ane._spm()
  local count, why
  if bytes:byte(1) == 0x0A then count, why = load_model_proto(path, bytes, spm) else count, why = load_llama2c(path, bytes, spm) end
  if not count then return nil, why end
  local encodes, refusal = spm:check_encodes()
  if not encodes then return fail(path, "%s", refusal) end
  local expected = opts and opts.vocab_size
  if expected and count ~= expected then
    return fail(path, "holds %d tokens, the model's vocabulary has %d", count, expected)
  end
  return setmetatable({ spm = spm, vocab_size = count, bos = 1, eos = 2, source = path }, Tokenizer)
end

--- A tokenizer from its pieces in id order (strings with SentencePiece's "▁" and "<0xNN>" byte
--- pieces) and their scores, as a GGUF file's tokenizer.ggml.tokens / scores hold them; bos and
--- eos ids (default 1 and 2). `source` names where they came from. Returns it, or nil and why.
function M.from_pieces(pieces, scores, source, opts)
  local spm = ane._spm()
  for i, piece in ipairs(pieces) do
    local ok, err = spm:add_piece(piece, scores[i] or 0.0, i - 1)
    if not ok then return fail(source, "%s", err) end
  end
  local encodes, refusal = spm:check_encodes()
  if not encodes then return fail(source, "%s", refusal) end
  return setmetatable({ spm = spm, vocab_size = #pieces, bos = opts and opts.bos or 1, eos = opts and opts.eos or 2,
    source = source }, Tokenizer)
end

--- text -> ids; opts.bos = true prepends <s> (id 1).
function Tokenizer:encode(text, opts)
  if type(text) ~= "string" then error("encode: text must be a string", 2) end
  return self.spm:encode(text, opts and opts.bos or false)
end

--- ids -> text (the dummy prefix space removed, <s> and </s> skipped).
function Tokenizer:decode(ids)
  if type(ids) ~= "table" then error("decode: ids must be an array", 2) end
  return self.spm:decode(ids)
end

function Tokenizer:__tostring()
  return string.format("ane.sentencepiece %s (%d pieces)", self.source, self.vocab_size)
end

return M

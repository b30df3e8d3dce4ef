-- The Llama-2 SentencePiece tokenizer: every golden line (from python3-sentencepiece), with
-- and without BOS, from both tokenizer.model and llama2.c's tokenizer.bin; round trips; bad
-- files.
local ane = require("ane")
local cjson = require("cjson")
local helpers = require("spec.helpers")
local sentencepiece = require("ane.sentencepiece")

for _, data in ipairs(helpers.data_sets()) do
describe("Llama-2 tokenizer [" .. data.label .. "]", function()
  for _, file in ipairs({ "tokenizer.model", "tokenizer.bin" }) do
    it("reproduces the golden encodings from " .. file, function()
      local dir = data:tokenizer("llama2")
      local tok = assert(sentencepiece.load(dir .. "/" .. file))
      assert.are.equal(32000, tok.vocab_size)
      local lines = 0
      for line in io.lines(data:golden("llama2")) do
        local case = cjson.decode(line)
        assert.are.same(case.ids, tok:encode(case.text), case.text)
        assert.are.same(case.ids_with_bos, tok:encode(case.text, { bos = true }), case.text)
        assert.are.equal(case.text, tok:decode(case.ids))
        assert.are.equal(case.text, tok:decode(case.ids_with_bos))
        lines = lines + 1
      end
      assert.are.equal(50, lines)
    end)
  end

  it("falls back to bytes for characters outside the vocabulary", function()
    local dir = data:tokenizer("llama2")
    local tok = assert(sentencepiece.load(dir .. "/tokenizer.model"))
    local text = "\u{1F9EC} and \u{E000}" -- characters without pieces
    assert.are.equal(text, tok:decode(tok:encode(text)))
    assert.error_matches(function() tok:decode({ 32000 }) end, "id 32000 at position 1 is not in the vocabulary")
  end)
end)
end

describe("Llama-2 tokenizer files", function()

  it("reads llama2.c's records: spaces back to U+2581, ids in file order", function()
    local tmp = helpers.tmpdir()
    local pieces = { "<unk>", "<s>", "</s>", " ", "a", "b", " a", " ab" }
    local bytes = { string.pack("<I4", 3) }
    for i, piece in ipairs(pieces) do bytes[#bytes + 1] = string.pack("<fi4", -i, #piece) .. piece end
    helpers.write_file(tmp .. "/tiny.bin", table.concat(bytes))
    local tok = assert(sentencepiece.load(tmp .. "/tiny.bin"))
    assert.are.equal(8, tok.vocab_size)
    -- " a" and " ab" are the pieces "\u{2581}a" and "\u{2581}ab": the text's dummy prefix and
    -- inner spaces merge with "a", then "\u{2581}a" with "b"
    assert.are.same({ 7 }, tok:encode("ab"))
    assert.are.same({ 6, 6 }, tok:encode("a a"))
    assert.are.equal("ab a", tok:decode({ 7, 6 }))
  end)

  -- a fuzzer's 4-byte tokenizer.bin loaded as 0 pieces, then encode read piece 0, which did
  -- not exist (a segfault): a vocabulary without the control pieces is refused at load, and
  -- the core's encode refuses it too
  it("refuses vocabularies that cannot encode: no <unk>, <s>, </s>", function()
    local tmp = helpers.tmpdir()
    helpers.write_file(tmp .. "/empty.bin", string.pack("<I4", 16))
    local ok, err = sentencepiece.load(tmp .. "/empty.bin")
    assert.is_nil(ok)
    assert.are.equal(tmp .. "/empty.bin: has 0 pieces; a SentencePiece vocabulary starts with <unk>, <s> and </s> " ..
      "(ids 0-2), which encoding uses for unknown characters and the start of text", err)
    helpers.write_file(tmp .. "/two.bin", string.pack("<I4", 3) .. string.pack("<fi4", 0, 5) .. "<unk>" ..
      string.pack("<fi4", 0, 3) .. "<s>")
    ok, err = sentencepiece.load(tmp .. "/two.bin")
    assert.is_nil(ok)
    assert.matches("two%.bin: has 2 pieces; a SentencePiece vocabulary starts with", err)
    local bare = ane._spm()
    local encoded, why = pcall(bare.encode, bare, "a")
    assert.is_false(encoded)
    assert.matches("has 0 pieces", why)
  end)

  it("reports truncated and foreign files by offset", function()
    local tmp = helpers.tmpdir()
    helpers.write_file(tmp .. "/short.bin", string.pack("<I4fi4", 16, 0.5, 40) .. "abc")
    local ok, err = sentencepiece.load(tmp .. "/short.bin")
    assert.is_nil(ok)
    assert.matches("short%.bin: token 0 at offset 4 has length 40 past the end of the file", err)
    helpers.write_file(tmp .. "/cut.bin", string.pack("<I4fi4", 16, 0.5, 3) .. "a b" .. string.pack("<f", 0.25) .. "\1")
    ok, err = sentencepiece.load(tmp .. "/cut.bin")
    assert.is_nil(ok)
    assert.matches("cut%.bin: token 1 at offset 15 is truncated", err)
    helpers.write_file(tmp .. "/header.bin", "\16\0")
    ok, err = sentencepiece.load(tmp .. "/header.bin")
    assert.matches("header%.bin: too short for the 4%-byte header", err)
    helpers.write_file(tmp .. "/bad.model", "\x0A\x7F\x0A")
    ok, err = sentencepiece.load(tmp .. "/bad.model")
    assert.matches("bad%.model: piece 0 at offset 0 runs past the end", err)
  end)
end)

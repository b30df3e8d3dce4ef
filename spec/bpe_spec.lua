-- text/bpe.c through the GPT-2 tokenizer (byte-level BPE over vocab.json + merges.txt): every
-- golden encoding exactly, round trips of random bytes, the vocabulary, llm.c's decoder
-- file, and malformed vocabularies and merges reported by file and line.
local helpers = require("spec.helpers")
local tokenizer = require("ane.tokenizer")

local check_golden = helpers.check_golden -- every line of a golden.jsonl, exactly

-- The tokenizer files shipped in data/tokenizers (golden lines in spec/data) and, where present,
-- the shared data's copies.
for _, data in ipairs(helpers.data_sets()) do
local label = " [" .. data.label .. "]"

describe("GPT-2 tokenizer" .. label, function()
  local dir, tok

  before_each(function()
    dir = data:tokenizer("gpt2")
    if not tok then tok = assert(tokenizer.load(dir)) end
  end)

  it("reproduces every golden encoding exactly and round-trips it", function()
    assert.are.equal(49, check_golden(tok, data:golden("gpt2"), function(text) return text end))
  end)

  it("round-trips random byte strings, invalid UTF-8 included", function()
    math.randomseed(1234)
    for _ = 1, 300 do
      local length = math.random(0, 64)
      local bytes = {}
      for i = 1, length do bytes[i] = string.char(math.random(0, 255)) end
      local text = table.concat(bytes)
      assert.are.equal(text, tok:decode(tok:encode(text)))
    end
  end)

  it("knows its vocabulary", function()
    assert.are.equal(50257, tok.vocab_size)
    assert.are.equal(50256, tok.eot)
    assert.are.equal("<|endoftext|>", tok:decode({ 50256 }))
    assert.error_matches(function() tok:decode({ 50257 }) end, "id 50257 at position 1 is not in the vocabulary")
    assert.error_matches(function() tok:encode(42) end, "text must be a string")
  end)

  it("decodes with llm.c's gpt2_tokenizer.bin", function()
    -- Write the llm.c file from the vocabulary (its documented layout), then load it.
    local tmp = helpers.tmpdir()
    local parts = { string.pack("<I4I4I4I4", 20240328, 2, 50257, 50256) .. string.rep("\0", 1024 - 16) }
    for id = 0, 50256 do
      local bytes = tok:decode({ id })
      parts[#parts + 1] = string.char(#bytes) .. bytes
    end
    helpers.write_file(tmp .. "/gpt2_tokenizer.bin", table.concat(parts))
    local bin = assert(tokenizer.load(tmp .. "/gpt2_tokenizer.bin"))
    local ids = tok:encode("Once upon a time, naïve café 東京 😀")
    assert.are.equal(tok:decode(ids), bin:decode(ids))
    assert.is_false(bin:can_encode())
    -- a user's mistake: raised at the caller (here pcall: no position at all), naming the
    -- tokenizer's file, never a position inside the library
    local encoded, why = pcall(bin.encode, bin, "x")
    assert.is_false(encoded)
    assert.matches("^" .. (tmp .. "/gpt2_tokenizer.bin"):gsub("%p", "%%%0") .. ": this tokenizer can only decode", why)
    -- the header's count must be the file's: 0 tokens, 3 of 5, an end-of-text beyond them
    local five = { string.pack("<I4I4I4I4", 20240328, 2, 5, 4) .. string.rep("\0", 1024 - 16) }
    for _, piece in ipairs({ "a", "b", "c", "d", "e" }) do five[#five + 1] = string.char(#piece) .. piece end
    for _, case in ipairs({ { 0, 0, "the header at offset 8 says 0 tokens" },
      { 3, 2, "4 bytes follow the 3 tokens the header at offset 8 counts %(from offset 1030%)" },
      { 5, 5, "end%-of%-text token 5 %(offset 12%) is not below the 5 tokens" } }) do
      local text = table.concat(five)
      text = string.pack("<I4I4I4I4", 20240328, 2, case[1], case[2]) .. text:sub(17)
      helpers.write_file(tmp .. "/count.bin", text)
      local loaded, err = tokenizer.load(tmp .. "/count.bin")
      assert.is_nil(loaded, case[3])
      assert.matches("count%.bin: " .. case[3], err)
    end
    helpers.write_file(tmp .. "/bad.bin", string.pack("<I4", 7) .. string.rep("\0", 1020))
    local ok, err = tokenizer.load(tmp .. "/bad.bin")
    assert.is_nil(ok)
    assert.matches("bad%.bin: magic 7 at offset 0, expected 20240328", err)
    helpers.write_file(tmp .. "/short.bin", table.concat(parts):sub(1, 5000))
    ok, err = tokenizer.load(tmp .. "/short.bin")
    assert.is_nil(ok)
    assert.matches("short%.bin: token %d+ at offset %d+ has length %d+ past the end of the file", err)
  end)

  it("reports malformed vocabularies and merges by file and line", function()
    local tmp = helpers.tmpdir()
    helpers.write_file(tmp .. "/vocab.json", '{"a": 0, "b": 1, "ab": 2}')
    helpers.write_file(tmp .. "/merges.txt", "#version: 0.2\na b\nab c\n")
    local ok, err = tokenizer.load(tmp)
    assert.is_nil(ok)
    assert.matches("merges%.txt: line 3: merge 2 %('ab' %+ 'c'%) names a token that is not in the vocabulary", err)
    helpers.write_file(tmp .. "/vocab.json", '{"a": 0,')
    ok, err = tokenizer.load(tmp)
    assert.is_nil(ok)
    assert.matches("vocab%.json: not a JSON object", err)
    helpers.write_file(tmp .. "/vocab.json", '{"\\u4e00": 0}')
    ok, err = tokenizer.load(tmp)
    assert.matches("outside GPT%-2's byte alphabet", err)
    ok, err = tokenizer.load(helpers.tmpdir())
    assert.matches("no vocab%.json %+ merges%.txt, tokenizer%.json or gpt2_tokenizer%.bin here", err)
    helpers.write_file(tmp .. "/vocab.json", '{"a": 0, "b": 1, "ab": 2}')
    for _, bad in ipairs({ "a  b", "a\tb", "a\tb c", "ab", "a b c", " a b" }) do -- one space between two runs of non-space
      helpers.write_file(tmp .. "/merges.txt", "#version: 0.2\n\n" .. bad .. "\n")
      ok, err = tokenizer.load(tmp)
      assert.is_nil(ok)
      assert.matches("merges%.txt: line 3: '" .. bad:gsub("%p", "%%%0") .. "' is not 'left right'", err)
    end
    helpers.write_file(tmp .. "/vocab.json", '{"a": 0, "b": "1"}')
    ok, err = tokenizer.load(tmp)
    assert.matches("vocab%.json: vocabulary entry b is not a token %-> integer id %(1%)", err)
    helpers.write_file(tmp .. "/vocab.json", '{"a": 0, "b": 1.5}')
    ok, err = tokenizer.load(tmp)
    assert.matches("vocab%.json: vocabulary entry b is not a token %-> integer id %(1%.5%)", err)
    helpers.write_file(tmp .. "/vocab.json", '{"a": 0, "b": -1}')
    ok, err = tokenizer.load(tmp)
    assert.matches("vocab%.json: token id %-1 is out of range", err)
  end)

  it("reads merges.txt with CRLF line ends and blank lines as the plain file", function()
    local tmp = helpers.tmpdir()
    helpers.write_file(tmp .. "/vocab.json", helpers.read_file(dir .. "/vocab.json"))
    local merges = helpers.read_file(dir .. "/merges.txt")
    helpers.write_file(tmp .. "/merges.txt", (merges:gsub("\n", "\r\n\r\n")))
    local crlf = assert(tokenizer.load(tmp))
    assert.are.equal(tok.merges, crlf.merges)
    local text = "Once upon a time, naïve café 東京 😀 it's 1234 tokens\n\n  and spaces"
    assert.are.same(tok:encode(text), crlf:encode(text))
  end)

  it("merges tokens longer than the loader's short buffers", function()
    -- GPT-2's 256 byte tokens, then xx, x^4, ..., x^1024 and the merges that double x: tokens up
    -- to 1,024 bytes, merges whose halves join to 1,024, so "x" * 1024 is one token and "x" * 1536 two.
    local cjson = require("cjson")
    local vocab, merges = {}, {}
    for token, id in pairs(cjson.decode(helpers.read_file(dir .. "/vocab.json"))) do
      if id < 256 then vocab[token] = id end
    end
    assert.are.equal(87, vocab.x)
    for level = 1, 10 do
      vocab[string.rep("x", 2 ^ level)] = 255 + level
      merges[level] = string.rep("x", 2 ^ (level - 1)) .. " " .. string.rep("x", 2 ^ (level - 1))
    end
    local tmp = helpers.tmpdir()
    helpers.write_file(tmp .. "/vocab.json", cjson.encode(vocab))
    helpers.write_file(tmp .. "/merges.txt", table.concat(merges, "\n"))
    local long = assert(tokenizer.load(tmp))
    assert.are.same({ 265 }, long:encode(string.rep("x", 1024)))
    assert.are.same({ 265, 264 }, long:encode(string.rep("x", 1536)))
    assert.are.equal(string.rep("x", 1024), long:decode({ 265 }))
  end)
end)

end

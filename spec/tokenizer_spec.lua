-- Qwen3's tokenizer.json through ane.tokenizer: its golden lines, added tokens, NFC, random
-- bytes, unsupported files. (GPT-2's byte-level BPE: bpe_spec.)
local ane = require("ane")
local cjson = require("cjson")
local helpers = require("spec.helpers")
local tokenizer = require("ane.tokenizer")

local check_golden = helpers.check_golden -- every line of a golden.jsonl, exactly

-- The tokenizer files shipped in data/tokenizers (golden lines in spec/data) and, where present,
-- the shared data's copies.
for _, data in ipairs(helpers.data_sets()) do
local label = " [" .. data.label .. "]"

describe("Qwen3 tokenizer (Hugging Face tokenizer.json)" .. label, function()
  local dir, tok

  before_each(function()
    dir = data:tokenizer("qwen3")
    if not tok then tok = assert(tokenizer.load(dir)) end
  end)

  it("reproduces every golden encoding exactly and decodes to the NFC text", function()
    assert.are.equal(50, check_golden(tok, data:golden("qwen3"), ane._nfc))
  end)

  it("finds added tokens in the raw text and normalizes the rest to NFC", function()
    assert.are.same({ 151644, 872, 198 }, tok:encode("<|im_start|>user\n"))
    assert.are.equal("<|im_start|>user\n", tok:decode({ 151644, 872, 198 }))
    -- e + combining acute (U+0301) is NFC's single e-acute: the same ids
    assert.are.same(tok:encode("caf\u{e9}"), tok:encode("cafe\u{301}"))
    assert.are.equal(151643, tok.eot)
  end)

  it("round-trips random byte strings through NFC, invalid UTF-8 included", function()
    local random = ane.tensor.rand({ 4000 }, { seed = 5, low = 0, high = 256 }):totable()
    for start = 1, 4000, 400 do
      local bytes = {}
      for i = start, start + 399 do bytes[#bytes + 1] = string.char(math.floor(random[i]) % 256) end
      local text = table.concat(bytes)
      assert.are.equal(ane._nfc(text), tok:decode(tok:encode(text)))
    end
  end)

  it("refuses what it cannot read, naming the file", function()
    local tmp = helpers.tmpdir()
    local function write(json) helpers.write_file(tmp .. "/tokenizer.json", cjson.encode(json)) end
    write({ model = { type = "WordPiece", vocab = {} } })
    local ok, err = tokenizer.load(tmp)
    assert.is_nil(ok)
    assert.matches("tokenizer%.json: model type WordPiece", err)
    write({ model = { type = "BPE", vocab = { a = 0 }, merges = {} }, normalizer = { type = "NFKC" },
      pre_tokenizer = { type = "ByteLevel", add_prefix_space = false } })
    ok, err = tokenizer.load(tmp)
    assert.matches("normalizer NFKC is not supported", err)
    write({ model = { type = "BPE", vocab = { a = 0 }, merges = { { "a", "b" } } },
      pre_tokenizer = { type = "ByteLevel", add_prefix_space = false } })
    ok, err = tokenizer.load(tmp)
    assert.matches("tokenizer%.json: merge 1: ", err)
    write({ model = { type = "BPE", vocab = { a = 0, b = 1, ab = 2 }, merges = { "a b", { 1, 2 } } },
      pre_tokenizer = { type = "ByteLevel", add_prefix_space = false } })
    ok, err = tokenizer.load(tmp)
    assert.matches("tokenizer%.json: merge 2: not a pair of tokens", err)
    write({ model = { type = "BPE", vocab = { a = 0, b = 1, ab = 2 }, merges = { "ab" } },
      pre_tokenizer = { type = "ByteLevel", add_prefix_space = false } })
    ok, err = tokenizer.load(tmp)
    assert.matches("tokenizer%.json: merge 1: 'ab' is not 'left right'", err)
    -- a fuzzer's mutants: an added token that is not an object (a traceback), and a vocabulary
    -- without one byte's token, which loaded and then failed every encode
    local json = cjson.decode(helpers.read_file(dir .. "/tokenizer.json"))
    local added = json.added_tokens
    json.added_tokens = { added[1], "<|im_start|>" }
    helpers.write_file(tmp .. "/tokenizer.json", cjson.encode(json))
    ok, err = tokenizer.load(tmp)
    assert.is_nil(ok)
    assert.matches("tokenizer%.json: added_tokens%[2%] is not an object", err)
    json.added_tokens = added
    json.model.vocab["\u{100}"] = nil -- byte 0x00's token in GPT-2's byte alphabet (no merge uses it)
    helpers.write_file(tmp .. "/tokenizer.json", cjson.encode(json))
    ok, err = tokenizer.load(tmp)
    assert.is_nil(ok)
    assert.matches("tokenizer%.json: no token for the byte 0x00 %(byte%-level BPE needs one for each of the 256 bytes%)", err)
  end)

  it("reads merges written as pairs and as \"left right\" strings alike", function()
    -- tokenizer.json files write "model.merges" either way (newer ones as pairs).
    local json = cjson.decode(helpers.read_file(dir .. "/tokenizer.json"))
    local as_strings, as_pairs = {}, {}
    for rank, merge in ipairs(json.model.merges) do
      if type(merge) == "table" then
        as_pairs[rank], as_strings[rank] = merge, merge[1] .. " " .. merge[2]
      else
        as_strings[rank], as_pairs[rank] = merge, { merge:match("^(%S+) (%S+)$") }
      end
    end
    local tmp = helpers.tmpdir()
    json.model.merges = as_strings
    helpers.write_file(tmp .. "/tokenizer.json", cjson.encode(json))
    local from_strings = assert(tokenizer.load(tmp))
    json.model.merges = as_pairs
    helpers.write_file(tmp .. "/tokenizer.json", cjson.encode(json))
    local from_pairs = assert(tokenizer.load(tmp))
    local text = "Hello, 世界! <|im_start|>user\nnaïve café 😀 1234"
    assert.are.same(tok:encode(text), from_strings:encode(text))
    assert.are.same(tok:encode(text), from_pairs:encode(text))
  end)
end)
end

-- Split stages in sequence (SmolLM2's tokenizer.json: Digits with individual_digits, then a
-- ByteLevel with GPT-2's regex), on GPT-2's vocabulary. The reference is the definition: the
-- text cut before and after every numeric character (Unicode category N: the digits and
-- numerals these texts hold, listed below), each part encoded by plain GPT-2, concatenated.
describe("a tokenizer.json whose pre_tokenizer chains Digits and ByteLevel", function()
  local numerals = { ["\u{B2}"] = true, ["\u{BD}"] = true, ["\u{663}"] = true, ["\u{216B}"] = true }
  local function numeric(char) return char:match("^%d$") ~= nil or numerals[char] == true end

  it("encodes as GPT-2 does on each part between digits", function()
    local dir = helpers.root .. "/data/tokenizers/gpt2/"
    local vocab, merges = helpers.gpt2_vocab_and_merges()
    local tmp = helpers.tmpdir()
    helpers.write_file(tmp .. "/tokenizer.json", cjson.encode({ model = { type = "BPE", vocab = vocab, merges = merges },
      pre_tokenizer = { type = "Sequence", pretokenizers = { { type = "Digits", individual_digits = true },
        { type = "ByteLevel", add_prefix_space = false, trim_offsets = true, use_regex = true } } } }))
    local chained = assert(tokenizer.load(tmp))
    local gpt2 = assert(tokenizer.load(dir))
    local texts = { "Hello world! 123", "abc  123  def", "x 1", "\n\n 42\t7.5%", "It's 2\u{B2} = 4, \u{BD} of it",
      "\u{663}\u{663} and \u{216B}", "no digits here", "9", "  3333333 ", "a1b2c3" }
    local changed = 0
    for _, text in ipairs(texts) do
      local expected, part = {}, ""
      local function flush()
        for _, id in ipairs(gpt2:encode(part)) do expected[#expected + 1] = id end
        part = ""
      end
      for _, code in utf8.codes(text) do
        local char = utf8.char(code)
        if numeric(char) then
          flush()
          part = char
          flush()
        else
          part = part .. char
        end
      end
      flush()
      assert.are.same(expected, chained:encode(text), text)
      if #expected ~= #gpt2:encode(text) then changed = changed + 1 end
    end
    assert.is_true(changed >= 5, changed .. " texts differ from plain GPT-2") -- the Digits stage is not a no-op
    assert.are.equal("Hello world! 123", chained:decode(chained:encode("Hello world! 123")))
  end)

  it("refuses Digits that keep runs together, naming the file", function()
    local tmp = helpers.tmpdir()
    helpers.write_file(tmp .. "/tokenizer.json", cjson.encode({ model = { type = "BPE", vocab = { a = 0 }, merges = {} },
      pre_tokenizer = { type = "Digits", individual_digits = false } }))
    local tok, err = tokenizer.load(tmp)
    assert.is_nil(tok)
    assert.matches("tokenizer%.json: only Digits with individual_digits is read", err)
  end)
end)

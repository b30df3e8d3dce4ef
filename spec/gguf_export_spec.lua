-- Models written as GGUF files (ane.formats.gguf_export, scripts/quantize.lua OUT.gguf), held to
-- files written by other programs from the same weights: llama.cpp's own converter and
-- llama-quantize --pure (spec/data/gguf/llama-tiny-*.gguf, scripts/make_gguf_fixtures.sh) and
-- gguf-py's writer with llama.cpp's layout (spec/data/gguf/<family>-tiny-f32.gguf,
-- scripts/make_gguf_families.py). A tensor is compared as its bytes in the file, so the q / k
-- permutation, the rope_freqs factors and the Q8_0 / Q4_0 blocks (ggml's reference quantizer)
-- must each come out bit for bit as those programs make them.
local ane = require("ane")
local helpers = require("spec.helpers")
local gguf = require("ane.formats.gguf")
local export = require("ane.formats.gguf_export")
local llama = require("ane.models.llama")
local models = require("ane.models")

local fixtures = helpers.root .. "/spec/data/gguf/"
local reference = helpers.root .. "/spec/data/reference/"

-- Every tensor of `theirs` in `mine` with the same type and bytes, and no other tensor: the
-- names of those that differ.
local function differing_tensors(mine, theirs)
  local differ = {}
  local function bytes(file, name)
    local t = file.tensors[name]
    return assert(file.mapping:tensor(file.path, name, "U8", { t.bytes }, t.first, t.last)):bytes()
  end
  for name, t in pairs(theirs.tensors) do
    local u = mine.tensors[name]
    if not u or u.type ~= t.type or bytes(mine, name) ~= bytes(theirs, name) then differ[#differ + 1] = name end
  end
  for name in pairs(mine.tensors) do
    if not theirs.tensors[name] then differ[#differ + 1] = "(extra) " .. name end
  end
  table.sort(differ)
  return differ
end

-- The metadata keys of `theirs` whose values `mine` does not hold equal (arrays element by
-- element), but for `except`.
local function differing_keys(mine, theirs, except)
  local differ = {}
  for key, value in pairs(theirs.metadata) do
    local other = mine.metadata[key]
    local same = other == value
    if type(value) == "table" and type(other) == "table" and #value == #other then
      same = true
      for i = 1, #value do same = same and value[i] == other[i] end
    end
    if not same and not except[key] then differ[#differ + 1] = key end
  end
  table.sort(differ)
  return differ
end

-- llama-tiny's checkpoint beside the 320-token tokenizer.bin its GGUF fixtures were made with.
local function llama_tiny_with_tokenizer()
  local dir = helpers.tmpdir()
  local bytes = helpers.read_file(helpers.root .. "/data/tokenizers/llama2/tokenizer.bin")
  local at = 5
  for _ = 1, 320 do at = at + 8 + string.unpack("<i4", bytes, at + 4) end
  helpers.write_file(dir .. "/tokenizer.bin", bytes:sub(1, at - 1))
  helpers.write_file(dir .. "/model.bin", helpers.read_file(reference .. "llama-tiny/model.bin"))
  return dir
end

local function quantize(args) return helpers.run_anelua(helpers.quote(helpers.root .. "/scripts/quantize.lua") .. " " .. args) end

describe("GGUF files anelua writes", function()
  -- general.name: llama.cpp's converter names the file "llama", anelua by its source; the
  -- padding and separator ids llama.cpp writes are -1 (none), which no key also says.
  local NAMED_OTHERWISE = { ["general.name"] = true, ["tokenizer.ggml.padding_token_id"] = true,
    ["tokenizer.ggml.seperator_token_id"] = true }

  it("are llama.cpp's own files, tensor for tensor: F32 (its converter), Q8_0 and Q4_0 (llama-quantize --pure)", function()
    local dir = llama_tiny_with_tokenizer()
    for _, case in ipairs({ { "none", "f32", "--precision fp32" }, { "q8_0", "q8_0", "" }, { "q4_0", "q4_0", "" } }) do
      local out = dir .. "/" .. case[2] .. ".gguf"
      local stdout, err, code = quantize(helpers.quote(dir .. "/model.bin") .. " " .. helpers.quote(out) .. " --mode "
        .. case[1] .. " " .. case[3])
      assert.are.equal(0, code, err)
      assert.matches("-> " .. out:gsub("%p", "%%%0"), stdout)
      local mine, theirs = assert(gguf.open(out)), assert(gguf.open(fixtures .. "llama-tiny-" .. case[2] .. ".gguf"))
      assert.are.same({}, differing_tensors(mine, theirs), case[2])
      -- every key llama.cpp wrote, the 320 tokens, scores and types among them
      assert.are.same({}, differing_keys(mine, theirs, NAMED_OTHERWISE), case[2])
      assert.are.equal(320, #mine.metadata["tokenizer.ggml.tokens"])
    end
  end)

  it("lay out each Llama-like family as llama.cpp's converter does (against gguf-py's files)", function()
    -- (the fixtures carry no tokenizer; Mistral's file ends its context at the 16-position window)
    for _, family in ipairs({ "llama3", "smollm2", "mistral", "qwen2", "qwen3" }) do
      local model = assert(llama.load(reference .. family .. "-tiny", { precision = "fp32", profile = "cpu" }))
      local out = helpers.tmpdir() .. "/" .. family .. ".gguf"
      local ok, notes = export.write(out, model, { type = "F32", tokenizer = false })
      assert.is_true(ok, notes)
      local mine, theirs = assert(gguf.open(out)), assert(gguf.open(fixtures .. family .. "-tiny-f32.gguf"))
      assert.are.same({}, differing_tensors(mine, theirs), family)
      if family == "mistral" then
        assert.are.same({ "llama.context_length" }, differing_keys(mine, theirs, {}))
        assert.are.equal(16, mine.metadata["llama.context_length"])
        assert.matches("the context is 16 positions, the model's attention window", notes[1], 1, true)
      else
        assert.are.same({}, differing_keys(mine, theirs, {}), family)
        assert.are.same({}, notes)
      end
    end
  end)

  it("read back as the model they were written from, with its BPE tokenizer and chat template", function()
    local source = reference .. "qwen3-tiny"
    local out = helpers.tmpdir() .. "/qwen3.gguf"
    local _, err, code = quantize(helpers.quote(source) .. " " .. helpers.quote(out) .. " --mode none --precision fp32")
    assert.are.equal(0, code, err)
    local ids = { 3, 17, 200, 5, 99, 543 }
    local want = assert(models.load(source, { precision = "fp32" }))
    local got = assert(models.load(out, { precision = "fp32" }))
    assert.are.equal(0, got:logits(ids):max_abs_diff(want:logits(ids))) -- F32: the same numbers, the same program
    local texts = { "Hello world, 123 and 4567!", "  spaces\tand\nlines", "Ünïcödé — ok?", "<|im_start|>user\nhi<|im_end|>" }
    for _, text in ipairs(texts) do
      assert.are.same(want.tokenizer:encode(text), got.tokenizer:encode(text), text)
    end
    local messages = { { role = "user", content = "hi" } }
    assert.are.equal(assert(want:chat_template()):render(messages, { add_generation_prompt = true }),
      assert(got:chat_template()):render(messages, { add_generation_prompt = true }))
    -- and a GGUF file written again carries the same tokenizer, copied
    local again = helpers.tmpdir() .. "/again.gguf"
    _, err, code = quantize(helpers.quote(out) .. " " .. helpers.quote(again) .. " --mode none --precision fp32")
    assert.are.equal(0, code, err)
    assert.are.same({}, differing_tensors(assert(gguf.open(again)), assert(gguf.open(out))))
    assert.are.same({}, differing_keys(assert(gguf.open(again)), assert(gguf.open(out)), { ["general.name"] = true }))
  end)

  it("write a GGUF file read back as it was: its blocks, keys and tokenizer (llama.cpp's Q8_0 and Q4_0 files)", function()
    for _, type in ipairs({ "q8_0", "q4_0" }) do
      local out = helpers.tmpdir() .. "/again.gguf"
      local _, err, code = quantize(helpers.quote(fixtures .. "llama-tiny-" .. type .. ".gguf") .. " " .. helpers.quote(out)
        .. " --mode " .. type)
      assert.are.equal(0, code, err)
      local mine, theirs = assert(gguf.open(out)), assert(gguf.open(fixtures .. "llama-tiny-" .. type .. ".gguf"))
      assert.are.same({}, differing_tensors(mine, theirs), type)
      assert.are.same({}, differing_keys(mine, theirs, { ["general.name"] = true }), type)
    end
  end)

  it("keep a GGUF file's Q8_0, Q4_0 and Q6_K blocks as they were read", function()
    local file = assert(gguf.open(fixtures .. "blocks-reference.gguf"))
    local kept = 0
    for name, t in pairs(file.tensors) do
      local kind = ({ Q8_0 = "q8_0", Q4_0 = "q4_0", Q6_K = "q6_k" })[t.type]
      if kind and #t.shape == 2 then
        local bytes = assert(file.mapping:tensor(file.path, name, "U8", { t.bytes }, t.first, t.last))
        assert.are.equal(bytes:bytes(), assert(ane.blocks_quantized(bytes, kind, t.shape, name):blocks()):bytes(), name)
        kept = kept + 1
      end
    end
    assert.are.equal(3, kept)
  end)

  it("refuse what GGUF cannot hold, naming it", function()
    local dir = llama_tiny_with_tokenizer()
    local _, err, code = quantize(helpers.quote(dir .. "/model.bin") .. " " .. helpers.quote(dir .. "/x.gguf") .. " --mode int8")
    assert.are_not.equal(0, code)
    assert.matches("--mode int8 has no GGUF type (its scales are per row); a .gguf takes q8_0, q4_0 or none", err, 1, true)
    _, err, code = quantize(helpers.quote(reference .. "gemma3-tiny") .. " " .. helpers.quote(dir .. "/g.gguf") .. " --mode none")
    assert.are_not.equal(0, code)
    assert.matches("anelua writes GGUF for the Llama, Mistral, Phi-3, Qwen2 and Qwen3 families, not 'gemma3_text'", err, 1, true)
    _, err, code = quantize(helpers.quote(reference .. "llama3-tiny") .. " " .. helpers.quote(dir .. "/l.gguf") .. " --mode none")
    assert.are_not.equal(0, code)
    assert.matches("no tokenizer beside .- which a GGUF file must carry for llama.cpp to run it", err)
    assert.is_nil(io.open(dir .. "/l.gguf")) -- nothing written
    -- a scale fp16 cannot hold has no Q8_0 block
    local q = ane.quantized { encoding = "q8_0", dtype = "fp32", shape = { 1, 32 }, data = ane.tensor({ 1, 32 }, "int8"),
      table = ane.tensor.from({ 0.1 }, { 1, 1 }) }
    local blocks, why = q:blocks("w")
    assert.is_nil(blocks)
    assert.matches("w: block 0's scale 0.100000001 is not an fp16 value, which GGUF's q8_0 blocks store", why, 1, true)
    -- an F16 file cannot hold a weight beyond fp16's range (it would read as infinity)
    local model = assert(llama.load(reference .. "qwen3-tiny", { precision = "fp32", profile = "cpu" }))
    model.P.layers[1].q = model.P.layers[1].q:copy()
    model.P.layers[1].q:set(1e6, 3, 5, 1, 1)
    local written, message = export.write(dir .. "/big.gguf", model, { type = "F16", tokenizer = false })
    assert.is_nil(written)
    assert.matches("tensor 'blk.0.attn_q.weight' holds 1000000 at element 132, beyond fp16's range: write it F32", message, 1, true)
    assert.is_true(export.write(dir .. "/big.gguf", model, { type = "F32", tokenizer = false }))
    local ok, raised = pcall(function() return ane.quantize(ane.tensor.randn({ 2, 32 }, { seed = 1 }), "int8"):blocks() end)
    assert.is_false(ok)
    assert.matches("a int8 weight has no GGUF blocks", raised, 1, true)
  end)
end)

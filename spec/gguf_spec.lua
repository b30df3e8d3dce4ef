-- GGUF files (ane.formats.gguf) written by llama.cpp's own tools (spec/data/gguf/,
-- scripts/make_gguf_fixtures.sh): llama-tiny, a llama2.c checkpoint, converted to GGUF F32 and
-- quantized to Q8_0 and Q4_0 with llama-quantize --pure. The F32 file is the same model as the
-- checkpoint; each quantized tensor is what its blocks define (read here from the file's bytes
-- with string.unpack, apart from the C reader); the tokenizer the file carries encodes as the
-- tokenizer.bin it was made from; a damaged file is one message naming the key, tensor or offset.
local ane = require("ane")
local helpers = require("spec.helpers")
local gguf = require("ane.formats.gguf")
local llama = require("ane.models.llama")
local models = require("ane.models")

local dir = helpers.root .. "/spec/data/gguf/"
local checkpoint = helpers.root .. "/spec/data/reference/llama-tiny/model.bin"

-- The 320-token tokenizer.bin the fixtures were made with (make_gguf_fixtures.sh cuts it so).
local function cut_tokenizer()
  local bytes = helpers.read_file(helpers.root .. "/data/tokenizers/llama2/tokenizer.bin")
  local at = 5
  for _ = 1, 320 do at = at + 8 + string.unpack("<i4", bytes, at + 4) end
  local path = helpers.tmpdir() .. "/tokenizer.bin"
  helpers.write_file(path, bytes:sub(1, at - 1))
  return path
end

describe("GGUF files", function()
  it("read as the model they were converted from: F32 gives the checkpoint's logits exactly", function()
    local ids = { 1, 5, 300, 7, 99, 260, 12, 31 }
    local want = assert(llama.load(checkpoint, { precision = "fp32" })):logits(ids)
    local model = assert(models.load(dir .. "llama-tiny-f32.gguf", { precision = "fp32" }))
    assert.matches("^llama %(2 layers, 4 heads of 16, dim 64, hidden 192, vocab 320", tostring(model))
    assert.are.equal(64, model.context_length) -- llama.context_length
    assert.are.equal(0, model:logits(ids):max_abs_diff(want))
    -- and the fp16 device profile decodes as its own prefill does
    helpers.assert_decode_matches_prefill(assert(models.load(dir .. "llama-tiny-f32.gguf",
      { precision = "fp16", profile = "ane" })), { 1, 5, 300 }, 6)
  end)

  -- The Llama-like families as GGUF files (spec/data/gguf/<family>-tiny-f32.gguf: the Hugging
  -- Face fixtures converted by gguf-py's writer and name map, scripts/make_gguf_families.py):
  -- architecture llama with permuted q/k rows and Llama 3.1's rope_freqs factors, qwen2 with
  -- biases, qwen3 with q/k norms. Each gives PyTorch's logits (float64, from the directory)
  -- within the families' bar, its greedy choices, and decodes as it prefills.
  local GGUF_FAMILIES = {
    { "llama3-tiny", "llama", function(model) assert.are.equal("factors", model.arch.rope_scaling.type) end },
    { "smollm2-tiny", "llama", function(model) assert.is_true(model.shared_classifier) end },
    { "mistral-tiny", "llama", function(model) assert.is_nil(model.arch.rope_scaling) end },
    { "qwen2-tiny", "qwen2", function(model) assert.is_true(model.arch.qkv_bias) end },
    { "qwen3-tiny", "qwen3", function(model) assert.is_true(model.arch.qk_norm) end },
  }
  for _, family in ipairs(GGUF_FAMILIES) do
    local name, architecture, check = family[1], family[2], family[3]
    it(name .. " as GGUF (architecture " .. architecture .. "): PyTorch's logits, greedy, decode as prefill", function()
      local path = dir .. name .. "-f32.gguf"
      assert.are.equal(architecture, assert(gguf.open(path)).metadata["general.architecture"])
      local model = assert(models.load(path, { precision = "fp32" }))
      assert.matches("^" .. architecture .. " %(", tostring(model))
      check(model)
      local _, expected, V = helpers.repo_data():reference(name)
      local ids = expected.input_ids:totable()[1]
      local logits, want = model:logits(ids), expected.logits:reshape(#ids, V)
      -- fp32 sums against float64 (bf16 weights exact in both), as families_spec: order only
      assert.is_true(logits:max_abs_diff(want) < 1e-4, tostring(logits:max_abs_diff(want)))
      for t = 1, #ids do
        assert.are.equal(want:slice(1, t, t):argmax(), logits:slice(1, t, t):argmax(), "position " .. t)
      end
      helpers.assert_decode_matches_prefill(assert(models.load(path, { precision = "fp16", profile = "ane" })),
        { ids[1], ids[2], ids[3] }, 6)
      -- saved as a Hugging Face directory (rope_freqs factors included), it loads back the same
      local saved = helpers.tmpdir() .. "/" .. name
      assert(model:save(saved))
      assert.are.equal(0, assert(models.load(saved, { precision = "fp32" })):logits(ids):max_abs_diff(logits))
    end)
  end

  it("refuses what its architectures cannot hold, naming the key or tensor", function()
    local base = assert(gguf.open(dir .. "qwen2-tiny-f32.gguf"))
    local function with(changes)
      local metadata = {}
      local types = { ["general.architecture"] = "string", ["qwen2.rope.scaling.type"] = "string" }
      for key, value in pairs(base.metadata) do
        if key:match("^qwen2%.") or key == "general.architecture" then
          metadata[#metadata + 1] = { key, types[key] or (math.type(value) == "integer" and "u32" or "f32"), value }
        end
      end
      for key, value in pairs(changes) do
        local found = false
        for _, entry in ipairs(metadata) do if entry[1] == key then entry[3], found = value, true end end
        if not found then metadata[#metadata + 1] = { key, types[key] or "u32", value } end
      end
      local list = {}
      for _, tensor_name in ipairs(base.order) do
        local t = base.tensors[tensor_name]
        list[#list + 1] = { tensor_name, t.shape, "F32", assert(gguf.tensor(base, tensor_name)):bytes() }
      end
      local path = helpers.tmpdir() .. "/changed.gguf"
      assert(gguf.write(path, metadata, list))
      return path
    end
    local _, err = models.load(with({ ["general.architecture"] = "gemma3" }), { precision = "fp32" })
    assert.matches("general%.architecture is 'gemma3'; anelua reads GGUF files of architecture 'llama', 'qwen2', 'qwen3'", err)
    _, err = models.load(with({ ["qwen2.rope.scaling.type"] = "yarn" }), { precision = "fp32" })
    assert.matches("metadata 'qwen2%.rope%.scaling%.type' is 'yarn'; anelua reads 'linear'", err)
    _, err = models.load(with({ ["qwen2.rope.dimension_count"] = 8 }), { precision = "fp32" })
    assert.matches("metadata 'qwen2%.rope%.dimension_count' is 8 where the heads have 16 dimensions", err)
  end)

  for _, type in ipairs({ "Q8_0", "Q4_0" }) do
    it("dequantizes every " .. type .. " tensor as its blocks define it", function()
      local path = dir .. "llama-tiny-" .. type:lower() .. ".gguf"
      local file = assert(gguf.open(path))
      local bytes = helpers.read_file(path)
      local checked = 0
      for _, name in ipairs(file.order) do
        local info = file.tensors[name]
        if info.type == type then
          local values, at = {}, info.first + 1
          while at <= info.last do
            local d = ane.tensor.from_bytes(bytes:sub(at, at + 1), { 1 }, "fp16"):to("fp32"):get(1)
            if type == "Q8_0" then
              for i = 0, 31 do values[#values + 1] = d * string.unpack("<i1", bytes, at + 2 + i) end
              at = at + 34
            else
              local low, high = {}, {}
              for j = 0, 15 do
                local byte = bytes:byte(at + 2 + j)
                low[j + 1], high[j + 1] = d * ((byte & 15) - 8), d * ((byte >> 4) - 8)
              end
              table.move(low, 1, 16, #values + 1, values)
              table.move(high, 1, 16, #values + 1, values)
              at = at + 18
            end
          end
          -- (each product d * code is exact in double and rounds once to fp32, as in C)
          local want = ane.tensor.from(values, info.shape, "fp32")
          assert.are.equal(0, assert(gguf.tensor(file, name)):max_abs_diff(want), name)
          if #info.shape == 2 then -- kept as stored: the codes and scales stand for the same values
            local kept = assert(gguf.tensor(file, name, true))
            assert.are.equal(type:lower(), kept:encoding())
            assert.are.equal(0, kept:dequantize():max_abs_diff(want), name)
          end
          checked = checked + 1
        end
      end
      assert.are.equal(16, checked) -- 7 matrices in each of 2 layers, the embedding and the classifier
      local model = assert(models.load(path, { precision = "fp32" }))
      assert.is_true(model:logits({ 1, 5, 300 }):max_abs_diff(assert(llama.load(checkpoint, { precision = "fp32" })):logits({ 1, 5, 300 })) > 0)
    end)

    it("keeps " .. type .. " matrices as stored on sim: decode steps give the dequantized weights' logits bit for bit", function()
      local path = dir .. "llama-tiny-" .. type:lower() .. ".gguf"
      -- (float activations: the exact products; the default for a GGUF file's blocks is int8)
      local options = { backend = "sim", precision = "fp32", profile = "cpu", activations = "float" }
      local kept = assert(models.load(path, options))
      assert.matches("sim, fp32, " .. type:lower() .. " weights %(classifier " .. type:lower() .. "%), profile cpu", tostring(kept))
      local dequantized = assert(models.load(path, { backend = "sim", precision = "fp32", profile = "cpu",
        dequantize_blocks = true }))
      assert.matches("sim, fp32, profile cpu", tostring(dequantized))
      -- a decode step multiplies one position: each product the fp32 kernel's sums over the
      -- dequantized values (tensor/gemv.h), so the logits are the same bits; a prompt's
      -- positions go through other fp32 paths for dense weights, within rounding
      local ids = { 1, 5, 300, 7 }
      local steps_kept, steps_dequantized = {}, {}
      for _, m in ipairs({ { kept, steps_kept }, { dequantized, steps_dequantized } }) do
        local session = m[1]:session()
        for _, id in ipairs(ids) do m[2][#m[2] + 1] = assert(session:feed({ id })):copy() end
      end
      for i = 1, #ids do assert.are.equal(0, steps_kept[i]:max_abs_diff(steps_dequantized[i]), "step " .. i) end
      assert.is_true(kept:logits(ids):max_abs_diff(dequantized:logits(ids)) < 1e-5)
      -- the device's programs take them dequantized (the ane rows, on the test double: its fp16
      -- profile decodes as it prefills)
      if ane.backends().ane == true then
        local on_device = assert(models.load(path, { backend = "ane", precision = "fp16" }))
        -- (the CPU's classifier and embedding still read the blocks)
        assert.matches("ane, fp16, dense weights %(classifier " .. type:lower() .. "%), profile ane", tostring(on_device))
        helpers.assert_decode_matches_prefill(on_device, { 1, 5, 300 }, 4)
      end
    end)
  end

  -- Q4_K, Q5_K and Q6_K matrices (rows of whole 256-blocks: llama-tiny's 64 are too short, so a Llama
  -- of dim 256 written here with random blocks, each d and dmin small) kept on sim as a scale and
  -- an offset per 32 (Q6_K: its blocks, a scale per 16): decode steps give, bit for bit, the
  -- logits of the same model with those weights dequantized (float activations: the fp32
  -- kernel's sums over the same values); int8 activations within 2^-6 of the logits' range; a
  -- Q4_K / Q5_K matrix with a sub-block of scale 0 and a min, which that form cannot hold,
  -- dequantized with a note.
  for _, block_type in ipairs({ "Q4_K", "Q5_K", "Q6_K" }) do
    it("keeps " .. block_type .. " matrices on sim as stored, or dequantizes one with a note", function()
      local dim, hidden, vocab = 256, 512, 64
      local seed = 7
      local function byte() seed = (seed * 1103515245 + 12345) % 2147483648; return seed >> 16 & 255 end
      local function q6_k_bytes(rows, k) -- ql[128], qh[64], int8 scales[16], fp16 d
        local parts = {}
        for _ = 1, rows * k // 256 do
          local codes, scales = {}, {}
          for i = 1, 192 do codes[i] = byte() end
          for i = 1, 16 do scales[i] = byte() % 64 + 1 end -- (1..64: positive int8 scales)
          local d = ane.tensor.from({ 0.0001 + byte() / 255 * 0.0001 }, { 1 }, "fp16"):bytes()
          parts[#parts + 1] = string.char(table.unpack(codes)) .. string.char(table.unpack(scales)) .. d
        end
        return table.concat(parts)
      end
      local function q4_k_bytes(rows, k, zero_scale)
        if block_type == "Q6_K" then return q6_k_bytes(rows, k) end
        local parts = {}
        for b = 1, rows * k // 256 do
          local d = ane.tensor.from({ 0.0004 + byte() / 255 * 0.0004 }, { 1 }, "fp16"):bytes()
          local dmin = ane.tensor.from({ 0.0002 + byte() / 255 * 0.0002 }, { 1 }, "fp16"):bytes()
          local scales = {}
          for i = 1, 12 do scales[i] = byte() | 0x01 end -- (odd: no 6-bit scale of 0 in the first four)
          if zero_scale and b == 2 then scales[1], scales[5] = 0, 9 end -- sub-block 0: scale 0, min 9
          local codes = {}
          for i = 1, block_type == "Q5_K" and 160 or 128 do codes[i] = byte() end -- (Q5_K: qh[32], then qs[128])
          parts[#parts + 1] = d .. dmin .. string.char(table.unpack(scales)) .. string.char(table.unpack(codes))
        end
        return table.concat(parts)
      end
      local function f32_bytes(shape, scale)
        local n = 1
        for _, size in ipairs(shape) do n = n * size end
        return ane.tensor.randn({ n }, { seed = n + #shape, std = scale }):bytes()
      end
      local function write(path, zero_scale)
        local metadata = { { "general.architecture", "string", "llama" }, { "llama.embedding_length", "u32", dim },
          { "llama.feed_forward_length", "u32", hidden }, { "llama.block_count", "u32", 1 },
          { "llama.attention.head_count", "u32", 4 }, { "llama.context_length", "u32", 16 } }
        local tensors = { { "token_embd.weight", { vocab, dim }, "F32", f32_bytes({ vocab, dim }, 0.5) },
          { "blk.0.attn_norm.weight", { dim }, "F32", string.rep(string.pack("<f", 1), dim) },
          { "blk.0.ffn_norm.weight", { dim }, "F32", string.rep(string.pack("<f", 1), dim) },
          { "output_norm.weight", { dim }, "F32", string.rep(string.pack("<f", 1), dim) },
          { "output.weight", { vocab, dim }, "F32", f32_bytes({ vocab, dim, 1 }, 0.05) } }
        for _, m in ipairs({ { "attn_q", dim, dim }, { "attn_k", dim, dim }, { "attn_v", dim, dim },
          { "attn_output", dim, dim }, { "ffn_gate", hidden, dim }, { "ffn_up", hidden, dim }, { "ffn_down", dim, hidden } }) do
          tensors[#tensors + 1] = { "blk.0." .. m[1] .. ".weight", { m[2], m[3] }, block_type,
            q4_k_bytes(m[2], m[3], zero_scale and m[1] == "ffn_up") }
        end
        assert(gguf.write(path, metadata, tensors))
        return path
      end
      local path = write(helpers.tmpdir() .. "/" .. block_type:lower() .. ".gguf")
      local options = { backend = "sim", precision = "fp32", profile = "cpu", activations = "float" }
      local kept = assert(models.load(path, options))
      assert.matches("sim, fp32, " .. block_type:lower() .. " weights %(classifier fp32%), profile cpu", tostring(kept))
      assert.is_nil(tostring(kept):find("note:", 1, true))
      -- the same weights dequantized: every Q4_K layer weight replaced by its values
      local W = assert(gguf.read(path, { precision = "fp32" }))
      for _, L in ipairs(W.layers) do
        for role, t in pairs(L) do
          if ane.quantized.is(t) then
            assert.are.equal(block_type:lower(), t:encoding())
            L[role] = t:dequantize()
          end
        end
      end
      local dense = assert(llama.from_weights(W, { backend = "sim", precision = "fp32", profile = "cpu" }))
      local ids = { 1, 5, 30, 7 }
      local a, b = kept:session(), dense:session()
      for i, id in ipairs(ids) do
        local got, want = assert(a:feed({ id })), assert(b:feed({ id }))
        assert.are.equal(0, got:max_abs_diff(want), "step " .. i)
      end
      -- saved (as a directory: the blocks dequantized, no GGUF K-type in its quantized forms) and
      -- loaded again, it is the dequantized twin
      local dir = helpers.tmpdir() .. "/" .. block_type:lower() .. "-saved"
      assert(kept:save(dir))
      assert.are.equal(0, assert(models.load(dir, options)):logits(ids):max_abs_diff(dense:logits(ids)))
      -- int8 activations (the default for a GGUF file's blocks on sim): llama.cpp's arithmetic
      local int8 = assert(models.load(path, { backend = "sim", precision = "fp32", profile = "cpu" }))
      assert.matches("int8 activations", tostring(int8))
      local want = dense:logits(ids)
      local low, high = math.huge, -math.huge
      for _, v in ipairs(want:reshape(-1):totable()) do low, high = math.min(low, v), math.max(high, v) end
      local off = int8:logits(ids):max_abs_diff(want)
      -- (each activation moves by at most half a step, 2^-8 of its block's largest, so a product's
      -- output by at most 2^-8 sum |w| |x|max; where a row's weights have a sign of their own (these
      -- Q4_K and Q5_K rows: x - offset mostly positive) the output is of that size and moves by
      -- ~2^-8 of it at most, the errors mostly cancelling (0.013-0.016% of the logits' range
      -- measured); where they are centred (these Q6_K ones, as trained weights are) the output is
      -- ~sqrt(k) smaller and moves by ~2^-8 of it, through seven products and the classifier
      -- (0.83% measured): held to 2^-6 of the range)
      assert.is_true(off > 0 and off < 2 ^ -6 * (high - low), "int8 activations: " .. off .. " of a range of " .. high - low)
      if block_type == "Q6_K" then return end -- (its scales have no min to hold)
      -- a sub-block of scale 0 with a min: that matrix dequantized, and said so
      local noted = assert(models.load(write(helpers.tmpdir() .. "/" .. block_type:lower() .. "-zero.gguf", true), options))
      assert.matches("\nnote: 1 Q4_K / Q5_K matrix dequantized at load %(the first: .*tensor 'blk%.0%.ffn_up%.weight': sub%-block 0 of "
        .. "block 1 .* which a scale and offset cannot hold%)", tostring(noted))
    end)
  end

  it("quantizes to Q8_0 and Q4_0 on sim only, with float or int8 activations", function()
    local model = assert(llama.load(checkpoint, { backend = "sim", precision = "fp32", profile = "cpu", quantize = "q8_0" }))
    assert.matches("q8_0 weights %(classifier q8_0%)", tostring(model))
    if ane.backends().ane == true then -- (the ane rows)
      local ok, err = pcall(llama.load, checkpoint, { backend = "ane", precision = "fp16", quantize = "q4_0" })
      assert.is_false(ok)
      assert.matches("quantize = 'q4_0' runs on the sim backend", err)
    end
    local ok, err = pcall(llama.load, checkpoint, { backend = "sim", profile = "cpu", quantize = "q8_0", activations = "int16" })
    assert.is_false(ok)
    assert.matches("activations = 'int16' is for int8 and int4 weights; q8_0 weights multiply float or int8 activations",
      err, 1, true)
    -- int8 activations: llama.cpp's arithmetic for the blocks (tensor/gemv.h; test_gemv checks it bit for bit),
    -- near the float product's logits (the activations' codes round to 1/254 of each block's largest)
    local q4 = dir .. "llama-tiny-q4_0.gguf"
    local int8 = assert(models.load(q4, { backend = "sim", precision = "fp32", profile = "cpu", activations = "int8" }))
    assert.matches("q4_0 weights %(classifier q4_0%), int8 activations", tostring(int8))
    local float = assert(models.load(q4, { backend = "sim", precision = "fp32", profile = "cpu", activations = "float" }))
    assert.matches("q4_0 weights %(classifier q4_0%), profile cpu", tostring(float))
    -- without a choice, a GGUF file's Q8_0 / Q4_0 layers on sim's cpu profile take llama.cpp's arithmetic
    local default = assert(models.load(q4, { backend = "sim", precision = "fp32", profile = "cpu" }))
    assert.are.equal("int8", default.activations)
    assert.are.equal(0, default:logits({ 1, 5 }):max_abs_diff(int8:logits({ 1, 5 })))
    -- (but not anelua's own quantization of a checkpoint, nor the ane profile)
    assert.are.equal("float", assert(llama.load(checkpoint, { backend = "sim", profile = "cpu", quantize = "q8_0" })).activations)
    assert.are.equal("float", assert(models.load(q4, { backend = "sim", precision = "fp16", profile = "ane" })).activations)
    local ids = { 1, 5, 300, 7 }
    local range = 0
    for _, row in ipairs(float:logits(ids):totable()) do
      for _, v in ipairs(row) do range = math.max(range, math.abs(v)) end
    end
    -- (each activation within 1/254 of its block's largest: a few percent of the logits' range
    -- at most through two layers; the exact arithmetic is test_gemv's check)
    local drift = int8:logits(ids):max_abs_diff(float:logits(ids))
    assert.is_true(drift > 0 and drift < 0.05 * range, string.format("drift %g of a range %g", drift, range))
  end)

  it("carries a tokenizer that encodes as the tokenizer.bin it was made from", function()
    local from_file = assert(models.tokenizer(dir .. "llama-tiny-f32.gguf"))
    local original = assert(require("ane.sentencepiece").load(cut_tokenizer(), { vocab_size = 320 }))
    local lines = 0
    for line in io.lines(helpers.root .. "/spec/data/tokenizers/llama2/golden.jsonl") do
      local text = require("cjson").decode(line).text
      assert.are.same(original:encode(text, { bos = true }), from_file:encode(text, { bos = true }), text)
      assert.are.equal(original:decode(original:encode(text)), from_file:decode(from_file:encode(text)))
      lines = lines + 1
    end
    assert.is_true(lines >= 10, lines .. " lines")
  end)

  -- llama.cpp's tokenizer tests (models/ggml-vocab-*.gguf.inp / .out: 46 texts, and the ids
  -- Hugging Face's tokenizers give them), kept in spec/data/tokenizers/gguf/
  local function vocab_cases(name)
    local inp = helpers.read_file(helpers.root .. "/spec/data/tokenizers/gguf/" .. name .. ".inp")
    local out = helpers.read_file(helpers.root .. "/spec/data/tokenizers/gguf/" .. name .. ".out")
    local texts, ids, at = {}, {}, 1
    while true do
      local first, last = inp:find("\n__ggml_vocab_test__\n", at, true)
      if not first then break end
      texts[#texts + 1], at = inp:sub(at, first - 1), last + 1
    end
    for line in out:gmatch("([^\n]*)\n") do
      local list = {}
      for n in line:gmatch("%d+") do list[#list + 1] = tonumber(n) end
      ids[#ids + 1] = list
    end
    assert.are.equal(46, #texts)
    return texts, ids
  end
  local function assert_encodes(tok, name)
    local texts, ids = vocab_cases(name)
    for i, text in ipairs(texts) do assert.are.same(ids[i], tok:encode(text), string.format("%s: %q", name, text)) end
  end

  it("reads Llama's SentencePiece vocabulary from llama.cpp's own GGUF as Hugging Face encodes", function()
    assert_encodes(assert(gguf.tokenizer(helpers.root .. "/spec/data/tokenizers/gguf/llama-spm.gguf")), "llama-spm")
  end)

  -- The byte-level BPE of a GGUF (tokenizer.ggml.model "gpt2"): files written here from GPT-2's
  -- vocab.json + merges.txt (pre-tokenizer "gpt-2") and Qwen3's tokenizer.json (Qwen2's
  -- vocabulary, pre-tokenizer "qwen2"), as llama.cpp's converter lays them out: tokens by id,
  -- token types (1 normal, 3 control), merges as "a b".
  local function bpe_gguf(vocab, merges, added, pre)
    local tokens, types = {}, {}
    for token, id in pairs(vocab) do tokens[id + 1], types[id + 1] = token, 1 end
    for _, token in ipairs(added) do tokens[token.id + 1], types[token.id + 1] = token.content, 3 end
    local lines = {}
    for i, merge in ipairs(merges) do lines[i] = type(merge) == "table" and (merge[1] .. " " .. merge[2]) or merge end
    local path = helpers.tmpdir() .. "/" .. pre .. ".gguf"
    assert(gguf.write(path, { { "general.architecture", "string", "gpt2" }, { "tokenizer.ggml.model", "string", "gpt2" },
      { "tokenizer.ggml.pre", "string", pre }, { "tokenizer.ggml.tokens", "string[]", tokens },
      { "tokenizer.ggml.token_type", "i32[]", types }, { "tokenizer.ggml.merges", "string[]", lines } }, {}))
    return path
  end

  it("reads byte-level BPE vocabularies (gpt-2, qwen2 pre-tokenizers) as Hugging Face encodes", function()
    local cjson = require("cjson")
    local vocab, merges = helpers.gpt2_vocab_and_merges()
    assert_encodes(assert(gguf.tokenizer(bpe_gguf(vocab, merges, {}, "gpt-2"))), "gpt-2")
    local qwen = cjson.decode(helpers.read_file(helpers.root .. "/data/tokenizers/qwen3/tokenizer.json"))
    local tok = assert(gguf.tokenizer(bpe_gguf(qwen.model.vocab, qwen.model.merges, qwen.added_tokens, "qwen2")))
    assert_encodes(tok, "qwen2")
    assert.are.same({ 151644 }, tok:encode("<|im_start|>")) -- a control token, found in the text first
    local _, err = gguf.tokenizer(bpe_gguf(vocab, merges, {}, "tekken"))
    assert.matches("tokenizer%.ggml%.pre 'tekken' is not a pre%-tokenizer anelua knows %(deepseek%-r1%-qwen, default, "
      .. "gpt%-2, llama%-bpe, llama%-v3, llama3, qwen2, smollm%)", err)
  end)

  -- SmolLM2's pre-tokenizer ("smollm": each digit cut out, then GPT-2's split) on GPT-2's
  -- vocabulary, against the same stages read from a tokenizer.json (tokenizer_spec holds that
  -- one to the definition), over llama.cpp's 46 texts.
  it("reads the smollm pre-tokenizer as the tokenizer.json with Digits and ByteLevel", function()
    local cjson = require("cjson")
    local vocab, merges = helpers.gpt2_vocab_and_merges()
    local json_dir = helpers.tmpdir()
    helpers.write_file(json_dir .. "/tokenizer.json", cjson.encode({ model = { type = "BPE", vocab = vocab, merges = merges },
      pre_tokenizer = { type = "Sequence", pretokenizers = { { type = "Digits", individual_digits = true },
        { type = "ByteLevel", add_prefix_space = false, use_regex = true } } } }))
    local from_json = assert(require("ane.tokenizer").load(json_dir))
    local from_gguf = assert(gguf.tokenizer(bpe_gguf(vocab, merges, {}, "smollm")))
    local texts = vocab_cases("gpt-2")
    local differs = 0
    for _, text in ipairs(texts) do
      assert.are.same(from_json:encode(text), from_gguf:encode(text), text)
      if #from_gguf:encode(text) ~= #(assert(gguf.tokenizer(bpe_gguf(vocab, merges, {}, "gpt-2"))):encode(text)) then
        differs = differs + 1
      end
    end
    assert.is_true(differs >= 5, differs .. " texts encode differently from GPT-2's split") -- the digit stage acts
  end)

  it("runs through anelua run with the tokenizer it carries", function()
    local out, err, code = helpers.run_anelua("run " .. helpers.quote(dir .. "llama-tiny-q8_0.gguf")
      .. " --prompt 'in the end' --max-tokens 4 --temperature 0")
    assert.are.equal(0, code, err)
    assert.matches("^in the end", out)
    assert.matches("^llama %(2 layers.- from [^\n]*llama%-tiny%-q8_0%.gguf\n", err)
  end)

  -- gguf.write's file read back; its chat template through anelua chat. A tiny llama (dim 32,
  -- vocabulary 8, F32 and Q8_0 matrices) with a template in tokenizer.chat_template.
  it("writes a file its reader reads back, and chats in the template the file carries", function()
    local vocabulary = { "<unk>", "<s>", "</s>", "\u{2581}a", "a", "b", "\u{2581}", "<0x41>" }
    local scores = { 0, 0, 0, -1, -2, -3, -4, 0 }
    local template = "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
      .. "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    local metadata = { { "general.architecture", "string", "llama" }, { "llama.embedding_length", "u32", 32 },
      { "llama.feed_forward_length", "u32", 32 }, { "llama.block_count", "u32", 1 }, { "llama.context_length", "u32", 64 },
      { "llama.attention.head_count", "u32", 2 }, { "llama.rope.freq_base", "f32", 10000 },
      { "tokenizer.ggml.model", "string", "llama" }, { "tokenizer.ggml.tokens", "string[]", vocabulary },
      { "tokenizer.ggml.scores", "f32[]", scores }, { "tokenizer.ggml.bos_token_id", "u32", 1 },
      { "tokenizer.ggml.eos_token_id", "u32", 2 }, { "tokenizer.chat_template", "string", template } }
    local function f32(shape, seed) return { shape, "F32", ane.tensor.randn(shape, { seed = seed }):scale(0.1):bytes() } end
    local tensors = {}
    for i, entry in ipairs({ { "token_embd.weight", { 8, 32 } }, { "output_norm.weight", { 32 } },
      { "blk.0.attn_norm.weight", { 32 } }, { "blk.0.ffn_norm.weight", { 32 } }, { "blk.0.attn_q.weight", { 32, 32 } },
      { "blk.0.attn_k.weight", { 32, 32 } }, { "blk.0.attn_v.weight", { 32, 32 } }, { "blk.0.attn_output.weight", { 32, 32 } },
      { "blk.0.ffn_gate.weight", { 32, 32 } }, { "blk.0.ffn_up.weight", { 32, 32 } }, { "blk.0.ffn_down.weight", { 32, 32 } } }) do
      tensors[i] = { entry[1], table.unpack(f32(entry[2], i)) }
    end
    local path = helpers.tmpdir() .. "/tiny.gguf"
    assert(gguf.write(path, metadata, tensors))
    local file = assert(gguf.open(path))
    assert.are.same(vocabulary, file.metadata["tokenizer.ggml.tokens"])
    assert.are.equal(template, file.metadata["tokenizer.chat_template"])
    assert.are.same({ 8, 32 }, file.tensors["token_embd.weight"].shape)
    assert.are.equal(tensors[5][4], assert(gguf.tensor(file, "blk.0.attn_q.weight")):bytes())
    local model = assert(models.load(path, { precision = "fp32" }))
    local chat_template = assert(model:chat_template())
    assert.are.equal("<s><|user|>ab<|assistant|>", assert(chat_template:render({ { role = "user", content = "ab" } },
      { add_generation_prompt = true })))
    local out, err, code = helpers.run_anelua("chat " .. helpers.quote(path) .. " --prompt ab --max-tokens 3 --temperature 0")
    assert.are.equal(0, code, err)
    assert.matches("%(%d tokens at [%d.]+ tokens/s; prompt: %d+ tokens", err)
    assert.is_string(out)
  end)

  -- Damaged copies of the F32 file: its header is "GGUF", version 3 (offset 4), the tensor
  -- count (8) and the key count (16), then the first key at offset 24.
  it("refuses a damaged file with one message naming the place", function()
    local bytes = helpers.read_file(dir .. "llama-tiny-f32.gguf")
    local function with(at, replacement, length)
      local path = helpers.tmpdir() .. "/damaged.gguf"
      helpers.write_file(path, length and bytes:sub(1, length) or bytes:sub(1, at) .. replacement .. bytes:sub(at + #replacement + 1))
      local W, err = gguf.read(path)
      assert.is_nil(W)
      return err
    end
    assert.matches("not a GGUF file %(no \"GGUF\" at offset 0%)", with(0, "GGUX"))
    assert.matches("GGUF version 7 at offset 4; versions 2 and 3 are read", with(4, string.pack("<I4", 7)))
    assert.matches("tensors and %d+ keys cannot fit in %d+ bytes", with(8, string.pack("<I8", 1 << 40)))
    assert.matches("key 'tokenizer%.ggml%.tokens' counts 320 elements, more than the file holds", with(0, "", 1000))
    assert.matches("key 'tokenizer%.ggml%.tokens' at offset 2997 needs 6 bytes, past the end of the 3000%-byte file",
      with(0, "", 3000))
    assert.matches("tensor 'blk%.1%.ffn_norm%.weight' %(F32, 256 bytes at offset 599808%) runs past the end of the "
      .. "600060%-byte file", with(0, "", #bytes - 4))
    local file = assert(gguf.open(dir .. "llama-tiny-f32.gguf"))
    -- the first tensor's type: the four bytes before its offset's eight, at the end of its info
    local header = bytes:sub(1, file.tensors[file.order[1]].first)
    local name = file.order[1]
    local info_at = select(2, header:find(name, 1, true))
    local type_at = info_at + 4 + 8 * #file.tensors[name].shape
    assert.matches("tensor '" .. name:gsub("%p", "%%%0") .. "' has unknown type 99", with(type_at, string.pack("<I4", 99)))
    assert.matches("tensor '" .. name:gsub("%p", "%%%0") .. "' is Q4_K, whose blocks of 256 do not divide its rows of 64",
      with(type_at, string.pack("<I4", 12)))
  end)
end)

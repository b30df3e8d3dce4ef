-- ane.dequantize_blocks (ane_core/tensor/blocks.c): llama.cpp's Q8_0 and Q4_0 blocks against a
-- dequantization written here from the format's definition (ggml-common.h's block_q8_0 /
-- block_q4_0: an fp16 scale d, then 32 int8 codes, or 16 bytes of two 4-bit codes each, low
-- nibbles the first 16 weights, w = d * (code - 8)). Both compute d * code in fp32 from the
-- same fp16 d: the results must be the same bits.
local ane = require("ane")

-- The fp16 bits of d, from its fp32 value (exactly representable in fp16 for the scales used).
local function half_bits(d) return ane.tensor.from({ d }, { 1 }, "fp16"):bytes() end

-- Blocks of `type` holding codes[b][i] (ints as the format stores them) with scales d[b].
local function blocks_of(type, scales, codes)
  local parts = {}
  for b, d in ipairs(scales) do
    parts[#parts + 1] = half_bits(d)
    local c = codes[b]
    if type == "q8_0" then
      for i = 1, 32 do parts[#parts + 1] = string.pack("<i1", c[i]) end
    else
      for j = 1, 16 do parts[#parts + 1] = string.char(c[j] | (c[j + 16] << 4)) end
    end
  end
  local bytes = table.concat(parts)
  return ane.tensor.from_bytes(bytes, { #bytes }, "uint8")
end

-- The reference: w = d * q (Q8_0) or d * (q - 8) (Q4_0), rounded to fp32 as the product is.
local function reference(type, scales, codes)
  local values = {}
  for b, d in ipairs(scales) do
    local d32 = ane.tensor.from({ d }, { 1 }, "fp16"):to("fp32"):get(1)
    for i = 1, 32 do
      local q = type == "q8_0" and codes[b][i] or codes[b][i] - 8
      values[#values + 1] = ane.tensor.from({ d32 * q }, { 1 }, "fp32"):get(1)
    end
  end
  return values
end

local function random_codes(type, blocks, seed)
  local state, codes = seed, {}
  local function next_int(n) state = (state * 1103515245 + 12345) % 2147483648; return state % n end
  for b = 1, blocks do
    codes[b] = {}
    for i = 1, 32 do codes[b][i] = type == "q8_0" and next_int(256) - 128 or next_int(16) end
  end
  return codes
end

describe("llama.cpp's blocks", function()
  for _, type in ipairs({ "q8_0", "q4_0" }) do
    it("dequantizes " .. type .. " to the definition's fp32 products, bit for bit", function()
      local scales = { 0.0123, -0.5, 3.25, 1 / 1024, 0, 65504 }
      local codes = random_codes(type, #scales, 7)
      local w = assert(ane.dequantize_blocks(blocks_of(type, scales, codes), type, { 2, 96 }))
      assert.are.same({ 2, 96 }, w:shape())
      assert.are.same(reference(type, scales, codes), w:reshape(-1):totable())
    end)
  end

  -- dtype "fp16" (an fp16 model's load): each weight of the definition rounded to nearest, as an
  -- fp32 tensor's conversion rounds it; 65504 x 7 overflows to inf there too
  it("dequantizes to fp16 as the definition's fp32 weights rounded", function()
    for _, type in ipairs({ "q8_0", "q4_0" }) do
      local scales = { 0.0123, -0.5, 3.25, 1 / 1024, 0, 65504 }
      local codes = random_codes(type, #scales, 11)
      local w = assert(ane.dequantize_blocks(blocks_of(type, scales, codes), type, { 2, 96 }, "t", "fp16"))
      assert.are.equal("fp16", w:dtype())
      local rounded = ane.tensor.from(reference(type, scales, codes), { 2, 96 }, "fp32"):to("fp16")
      assert.are.equal(rounded:bytes(), w:bytes())
    end
    assert.error_matches(function() ane.dequantize_blocks(blocks_of("q8_0", { 1 }, random_codes("q8_0", 1, 3)), "q8_0",
      { 32 }, "t", "int8") end, "dtype must be fp32 or fp16")
  end)

  it("names the tensor when the bytes do not fit the shape or a scale is not finite", function()
    local good = blocks_of("q8_0", { 1 }, random_codes("q8_0", 1, 3))
    local w, err = ane.dequantize_blocks(good, "q8_0", { 2, 32 }, "blk.0.attn_q.weight")
    assert.is_nil(w)
    assert.matches("blk%.0%.attn_q%.weight: 34 bytes of blocks, expected 68 %(2 blocks of 34%)", err)
    w, err = ane.dequantize_blocks(good, "q8_0", { 1, 48 }, "t")
    assert.matches("t: rows of 48 weights do not split into blocks of 32", err)
    local inf = blocks_of("q4_0", { math.huge }, random_codes("q4_0", 1, 3))
    w, err = ane.dequantize_blocks(inf, "q4_0", { 32 }, "t")
    assert.matches("t: block 0 %(byte 0 of its data%) has scale inf", err)
    assert.error_matches(function() ane.dequantize_blocks(good, "q3_k", { 32 }) end,
      "block type 'q3_k' is not one of q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k")
    w, err = ane.dequantize_blocks(good, "q6_k", { 2, 128 }, "t")
    assert.matches("t: rows of 128 weights do not split into blocks of 256", err)
  end)

  -- ane.blocks_quantized splits a matrix's blocks over the helper threads (ranges of 4,096
  -- blocks): 12,288 blocks keep the definition's weights, and of two infinite scales in
  -- different ranges the first is named, whichever thread meets it first.
  for _, type in ipairs({ "q8_0", "q4_0" }) do
    it("keeps " .. type .. " blocks split over threads as the definition reads them, naming the first bad block", function()
      local scales = {}
      for b = 1, 12288 do scales[b] = (b % 97 - 48) / 64 end
      local codes = random_codes(type, #scales, 11)
      local q = assert(ane.blocks_quantized(blocks_of(type, scales, codes), type, { 96, 4096 }, "m", "fp32"))
      assert.are.same(reference(type, scales, codes), q:dequantize():reshape(-1):totable())
      scales[9000], scales[5000] = math.huge, -math.huge
      local bad, err = ane.blocks_quantized(blocks_of(type, scales, codes), type, { 96, 4096 }, "m")
      assert.is_nil(bad)
      assert.matches(string.format("m: block 4999 %%(byte %d of its data%%) has scale %%-inf", 4999 * (type == "q8_0" and 34 or 18)),
        err)
    end)

    -- ane.dequantize_blocks likewise over the helper threads (ranges of 4,096 blocks of 32)
    it("dequantizes " .. type .. " blocks over threads to the definition's weights, naming the first bad block", function()
      local scales = {}
      for b = 1, 12288 do scales[b] = (b % 97 - 48) / 64 end
      local codes = random_codes(type, #scales, 13)
      local blocks = blocks_of(type, scales, codes)
      local expected = reference(type, scales, codes)
      assert.are.same(expected, assert(ane.dequantize_blocks(blocks, type, { 96, 4096 }, "m")):reshape(-1):totable())
      assert.are.equal(ane.tensor.from(expected, { 96, 4096 }, "fp32"):to("fp16"):bytes(),
        assert(ane.dequantize_blocks(blocks, type, { 96, 4096 }, "m", "fp16")):bytes())
      scales[9000], scales[5000] = math.huge, -math.huge
      local bad, err = ane.dequantize_blocks(blocks_of(type, scales, codes), type, { 96, 4096 }, "m", "fp16")
      assert.is_nil(bad)
      assert.matches(string.format("m: block 4999 %%(byte %d of its data%%) has scale %%-inf", 4999 * (type == "q8_0" and 34 or 18)),
        err)
    end)
  end
end)

-- Every block type against gguf-py's own dequantization (llama.cpp's gguf-py/gguf/quants.py,
-- numpy, in fp32 with the same products and sums): spec/data/gguf/blocks-reference.gguf holds,
-- per type, 1,024 weights of random blocks and the F32 weights gguf-py gives them
-- (scripts/make_block_reference.py). Read through anelua's GGUF reader: the same bits, dequantized
-- or kept as stored.
describe("llama.cpp's blocks against gguf-py", function()
  local gguf = require("ane.formats.gguf")
  local helpers = require("spec.helpers")
  local file = assert(gguf.open(helpers.root .. "/spec/data/gguf/blocks-reference.gguf"))
  for _, type in ipairs({ "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K" }) do
    it("dequantizes " .. type .. " to gguf-py's weights, bit for bit", function()
      local name = type:lower()
      assert.are.equal(type, file.tensors[name .. ".blocks"].type)
      local got = assert(gguf.tensor(file, name .. ".blocks"))
      local expected = assert(gguf.tensor(file, name .. ".expected"))
      assert.are.same({ 2, 512 }, got:shape())
      assert.are.equal(expected:bytes(), got:bytes())
      local half = assert(gguf.tensor(file, name .. ".blocks", false, "fp16")) -- (an fp16 model's load)
      assert.are.equal(expected:to("fp16"):bytes(), half:bytes())
    end)
  end

  -- Q8_0, Q4_0 and Q6_K kept as stored (a classifier's Q6_K): the same weights, and products
  -- that read them as stored (this CPU's kernels) within fp32's summation bound of the sum in
  -- double, 2 k u sum |w x| (u = 2^-24; tensor/gemv.h: the sums of the fp32 kernel over these
  -- weights, which test_gemv checks bit for bit)
  for _, type in ipairs({ "Q8_0", "Q4_0", "Q6_K" }) do
    it("keeps " .. type .. " as stored: the same weights, multiplied as stored", function()
      local name = type:lower()
      local kept = assert(gguf.tensor(file, name .. ".blocks", true))
      assert.are.equal(name, kept:encoding())
      local expected = assert(gguf.tensor(file, name .. ".expected"))
      assert.are.equal(expected:bytes(), kept:dequantize():bytes())
      assert.are.equal(expected:gather({ 1, 0, 1 }):bytes(), kept:gather({ 1, 0, 1 }):bytes()) -- (an embedding's lookups)
      assert.error_matches(function() kept:gather({ 2 }) end, "row id 2 %(position 1%) is outside 0..1")
      local x = ane.tensor.randn({ 512, 1 }, { seed = 5 })
      local y, w, xs = kept:matmul(x):totable(), expected:totable(), x:totable()
      for r = 1, 2 do
        local sum, magnitude = 0, 0
        for j = 1, 512 do
          sum, magnitude = sum + w[r][j] * xs[j][1], magnitude + math.abs(w[r][j] * xs[j][1])
        end
        assert.is_true(math.abs(y[r][1] - sum) <= 2 * 512 * 2 ^ -24 * magnitude, type .. " row " .. r)
      end
    end)
  end

  -- Q4_K kept as a scale and an offset per 32 (tensor/quantize.h), decoded here from the
  -- format's definition (ggml-common.h's block_q4_K: fp16 d and dmin, 12 bytes of eight 6-bit
  -- scales and mins, 128 bytes of codes: sub-block s in the low (s even) or high nibbles of
  -- qs[32 (s // 2) ..]). Scale d sc is exact in fp32 (11 x 6 bits); offset fl(dmin m / scale), both
  -- rounded to the table's dtype, the offset from the rounded scale.
  local function f16(v) return ane.tensor.from({ v }, { 1 }, "fp32"):to("fp16"):to("fp32"):get(1) end
  local function f32(v) return (string.unpack("f", string.pack("f", v))) end
  local function shifted_reference(bytes, rows, k, dtype, five_bits)
    local round = dtype == "fp16" and f16 or f32
    local size = five_bits and 176 or 144
    local pairs_, codes, sums = {}, {}, {} -- pairs per row; codes per row; per weight 15 scale + min
    local at = 1
    for r = 1, rows do
      pairs_[r], codes[r], sums[r] = {}, {}, {}
      for _ = 1, k // 256 do
        local d = ane.tensor.from_bytes(bytes:sub(at, at + 1), { 1 }, "fp16"):to("fp32"):get(1)
        local dmin = ane.tensor.from_bytes(bytes:sub(at + 2, at + 3), { 1 }, "fp16"):to("fp32"):get(1)
        local sc = { bytes:byte(at + 4, at + 15) }
        for s = 0, 7 do
          local scale, min
          if s < 4 then
            scale, min = sc[s + 1] & 63, sc[s + 5] & 63
          else
            scale, min = (sc[s + 5] & 15) | (sc[s - 3] >> 6) << 4, (sc[s + 5] >> 4) | (sc[s + 1] >> 6) << 4
          end
          local step, offset_total = round(f32(d * scale)), f32(dmin * min)
          local offset = round(step ~= 0 and f32(offset_total / step) or 0)
          table.move({ step, offset }, 1, 2, #pairs_[r] + 1, pairs_[r])
          for l = 0, 31 do -- Q5_K: qh[32] after the scales (bit s of qh[l]: weight l's fifth bit), then qs
            local code = (bytes:byte(at + (five_bits and 48 or 16) + 32 * (s // 2) + l) >> 4 * (s % 2)) & 15
            if five_bits then code = code | ((bytes:byte(at + 16 + l) >> s) & 1) << 4 end
            codes[r][#codes[r] + 1] = code
            sums[r][#sums[r] + 1] = (five_bits and 31 or 15) * math.abs(d * scale) + math.abs(offset_total)
          end
        end
        at = at + size
      end
    end
    return pairs_, codes, sums
  end

  for _, case in ipairs({ { "q4_k", "fp32" }, { "q4_k", "fp16" }, { "q5_k", "fp32" }, { "q5_k", "fp16" } }) do
    local name, dtype = case[1], case[2]
    it("keeps " .. name:upper() .. " as a scale and an offset per 32 (" .. dtype .. " table), within a rounding of its weights", function()
      local info = file.tensors[name .. ".blocks"]
      local bytes = helpers.read_file(helpers.root .. "/spec/data/gguf/blocks-reference.gguf"):sub(info.first + 1, info.last)
      local kept = assert(gguf.tensor(file, name .. ".blocks", true, nil, dtype))
      assert.are.equal(name, kept:encoding())
      local pairs_, codes, sums = shifted_reference(bytes, 2, 512, dtype, name == "q5_k")
      assert.are.same(pairs_, kept:table():totable())
      local packed, data = {}, kept:data():totable()
      for r = 1, 2 do -- (Q4_K's two codes a byte, low nibble first; Q5_K's so per block of 32, then
        packed[r] = {} -- the block's fifth bits, bit i % 8 of byte 16 + i / 8: tensor/quantize.h)
        for b = 0, 512 // 32 - 1 do
          for i = 0, 31, 2 do
            local x0, x1 = codes[r][32 * b + i + 1], codes[r][32 * b + i + 2]
            packed[r][#packed[r] + 1] = (x0 & 15) | (x1 & 15) << 4
          end
          if name == "q5_k" then
            for byte = 0, 3 do
              local bits = 0
              for i = 0, 7 do bits = bits | (codes[r][32 * b + 8 * byte + i + 1] >> 4) << i end
              packed[r][#packed[r] + 1] = bits
            end
          end
        end
      end
      assert.are.same(packed, data)
      -- each weight scale (x - offset) against gguf-py's (d sc) x - dmin m: fp32 tables differ by
      -- the offset's, the subtraction's and the product's roundings, at most 3 u (x_max |d sc| +
      -- |dmin m|) (u = 2^-24, x_max 15 or 31) plus gguf-py's own two (2 u); fp16 tables by the scale's
      -- and the offset's roundings (2^-11 each of x_max |d sc| and |dmin m|) and those
      local expected, got = assert(gguf.tensor(file, name .. ".expected")):totable(), kept:dequantize():totable()
      local unit = dtype == "fp16" and 2 ^ -10 + 5 * 2 ^ -24 or 5 * 2 ^ -24
      local worst = 0
      for r = 1, 2 do
        for j = 1, 512 do
          local err = math.abs(got[r][j] - expected[r][j])
          assert.is_true(err <= unit * sums[r][j], string.format("row %d weight %d: %g from %g", r, j, got[r][j], expected[r][j]))
          worst = math.max(worst, err / sums[r][j])
        end
      end
      assert.is_true(worst > 0) -- (the offset's rounding shows: the comparison is not vacuous)
    end)
  end

  it("refuses a Q4_K sub-block of scale 0 with a min, naming it (the reader dequantizes that matrix)", function()
    local info = file.tensors["q4_k.blocks"]
    local bytes = helpers.read_file(helpers.root .. "/spec/data/gguf/blocks-reference.gguf"):sub(info.first + 1, info.last)
    -- block 1's sub-block 2: its 6-bit scale (byte 4 + 2, low six bits) 0, its min (byte 4 + 6) 5
    local at = 145
    local changed = bytes:sub(1, at + 3 + 2) .. string.char(bytes:byte(at + 4 + 2) & 0xC0) .. bytes:sub(at + 4 + 3, at + 3 + 6)
      .. string.char((bytes:byte(at + 4 + 6) & 0xC0) | 5) .. bytes:sub(at + 4 + 7)
    assert.are.equal(#bytes, #changed)
    local blocks = ane.tensor.from_bytes(changed, { #changed }, "uint8")
    local q, err = ane.blocks_quantized(blocks, "q4_k", { 2, 512 }, "t")
    assert.is_nil(q)
    assert.matches("^t: sub%-block 2 of block 1 %(byte 144 of its data%) has min [%d.e-]+ over scale %-?0, which an fp16 scale and "
      .. "offset cannot hold$", err)
    assert.is_not_nil(ane.dequantize_blocks(blocks, "q4_k", { 2, 512 }, "t"))
    -- split over the helper threads (ranges of 1,024 blocks): of two such blocks in different
    -- ranges the first is named, whichever thread meets it first; the others as one block alone
    local sub_block_zero = function(block) -- sub-block 0: scale 0, min 5
      return block:sub(1, 4) .. string.char(block:byte(5) & 0xC0) .. block:sub(6, 8) .. string.char((block:byte(9) & 0xC0) | 5)
        .. block:sub(10)
    end
    local many = {}
    for i = 0, 2999 do
      local block = bytes:sub(144 * (i % 4) + 1, 144 * (i % 4) + 144)
      many[#many + 1] = (i == 1500 or i == 2500) and sub_block_zero(block) or block
    end
    local whole = table.concat(many)
    q, err = ane.blocks_quantized(ane.tensor.from_bytes(whole, { #whole }, "uint8"), "q4_k", { 3000, 256 }, "m")
    assert.is_nil(q)
    assert.matches("^m: sub%-block 0 of block 1500 %(byte 216000 of its data%)", err)
    local fine = table.concat(many, "", 1, 1500)
    local kept = assert(ane.blocks_quantized(ane.tensor.from_bytes(fine, { #fine }, "uint8"), "q4_k", { 1500, 256 }, "m"))
    local alone = assert(ane.blocks_quantized(ane.tensor.from_bytes(fine:sub(1, 144), { 144 }, "uint8"), "q4_k", { 1, 256 }, "m"))
    assert.are.equal(alone:table():bytes(), kept:table():reshape(-1):slice(1, 1, 16):bytes())
    assert.are.equal(alone:table():bytes(), kept:table():reshape(-1):slice(1, 1 + 16 * 1496, 16 * 1497):bytes())
  end)
end)

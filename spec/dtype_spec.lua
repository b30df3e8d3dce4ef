-- tensor/dtype.c through ane.tensor: fp16 and bf16 rounding exactly as computed here, every
-- dtype to every other through copy_from, and fills of strided views.
local ane = require("ane")

local dtypes = { "fp32", "fp16", "bf16", "int32", "int64", "int16", "uint16", "int8", "uint8", "bool" }

describe("ane.tensor conversion", function()
  it("rounds to fp16 and bf16 exactly", function()
    local values = ane.tensor.from({ 1 + 2 ^ -11, 1 + 3 * 2 ^ -11, 65519, 65520, 2 ^ -24, 2 ^ -26, 1 + 2 ^ -8 })
    -- ties to even at 1 + 2^-11 (down) and 1 + 3 * 2^-11 (up); 65520 overflows; 2^-26 underflows
    assert.are.same({ 1, 1 + 2 ^ -9, 65504, math.huge, 2 ^ -24, 0, 1 + 2 ^ -8 }, values:to("fp16"):totable())
    assert.are.same({ 1, 1, 65536, 65536, 2 ^ -24, 2 ^ -26, 1 }, values:to("bf16"):totable())
  end)

  it("converts bf16 to fp16 and back as through fp32, for every bit pattern", function()
    -- every 16-bit pattern as bf16 (zeros, subnormals, both infinities, NaNs) and as fp16; the
    -- direct conversions (one vector pass through fp32 chunks) against two tested ones
    local patterns = {}
    for i = 0, 65535 do patterns[i + 1] = string.pack("<I2", i) end
    local bytes = table.concat(patterns)
    for _, pair in ipairs({ { "bf16", "fp16" }, { "fp16", "bf16" } }) do
      local from = ane.tensor.from_bytes(bytes, { 65536 }, pair[1])
      local direct, through = from:to(pair[2]):to("fp32"), from:to("fp32"):to(pair[2]):to("fp32")
      local a, b = direct:totable(), through:totable()
      local same = 0
      for i = 1, 65536 do
        if a[i] == b[i] or (a[i] ~= a[i] and b[i] ~= b[i]) then same = same + 1 end
      end
      assert.are.equal(65536, same, pair[1] .. " -> " .. pair[2])
    end
  end)

  it("converts tensors of a million elements and more (over the helper threads) as row by row", function()
    -- 2^20 + 3 values (a tail shorter than a block); the reference converts slices of under a
    -- million elements, which take the one-thread path
    local n, half = 1048579, 524289
    local x = ane.tensor.randn({ n }, { seed = 3, std = 1000 })
    for _, dtype in ipairs({ "fp16", "bf16", "int32" }) do
      local whole = x:to(dtype)
      local parts = ane.tensor({ n }, dtype)
      parts:slice(1, 1, half):copy_from(x:slice(1, 1, half))
      parts:slice(1, half + 1, n):copy_from(x:slice(1, half + 1, n))
      assert.are.equal(parts:checksum(), whole:checksum(), dtype)
      assert.are.equal(whole:to("fp32"):checksum(), parts:to("fp32"):checksum(), dtype .. " back")
    end
  end)

  it("converts between all dtypes through copy_from", function()
    local source = ane.tensor.from({ 0, 1, 2, 3 }, { 2, 2 }, "int16")
    for _, dtype in ipairs(dtypes) do
      local target = ane.tensor({ 2, 2 }, dtype):copy_from(source)
      if dtype == "bool" then
        assert.are.same({ { false, true }, { true, true } }, target:totable())
      else
        assert.are.same({ { 0, 1 }, { 2, 3 } }, target:totable())
      end
    end
  end)

  it("fills a strided view only", function()
    local t = ane.tensor({ 3, 3 })
    t:slice(2, 2, 2):fill(7)
    assert.are.same({ { 0, 7, 0 }, { 0, 7, 0 }, { 0, 7, 0 } }, t:totable())
  end)
end)

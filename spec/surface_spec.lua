-- ane.surface: the device's I/O buffer layout rules (ANE-04 minimum allocation, ANE-21
-- 64-byte row stride, shared alloc_size for ANE-02/18) and conversion to/from tensors.
local ane = require("ane")

describe("ane.surface", function()
  it("pads rows to 64 bytes and allocations to at least 49,152 bytes", function()
    local s = ane.surface { channels = 3, seq = 5, dtype = "fp16" }
    local info = s:info()
    assert.are.same({ 1, 3, 1, 5 }, info.shape)
    assert.are.equal(64, info.row_stride) -- 5 fp16 = 10 bytes -> one 64-byte row
    assert.are.equal(49152, info.alloc_size)
    assert.are.equal("fp16", info.dtype)

    local wide = ane.surface { channels = 768, seq = 48, dtype = "fp32" }
    assert.are.equal(192, wide:info().row_stride) -- 48 * 4 = 192, already a multiple of 64
    assert.are.equal(768 * 192, wide:info().alloc_size)
    local odd = ane.surface { channels = 2, seq = 33, dtype = "fp16" }
    assert.are.equal(128, odd:info().row_stride) -- 66 bytes round up to 128
  end)

  it("honours a larger common alloc_size and rejects a too small one", function()
    local s = ane.surface { channels = 4, seq = 32, alloc_size = 100000 }
    assert.is_true(s:info().alloc_size >= 100000)
    assert.are.equal(0, s:info().alloc_size % 4096)
    assert.error_matches(function() ane.surface { channels = 4, seq = 32, alloc_size = 1000 } end,
      "alloc_size 1000 is smaller than the 49152 bytes a [1, 4, 1, 32] fp16 surface needs", 1, true)
    assert.are.same({ 64, 49152 }, { ane.surface.layout { channels = 4, seq = 32 } })
  end)

  it("writes and reads tensors, converting dtype", function()
    local s = ane.surface { channels = 3, seq = 5, dtype = "fp16" }
    local values = ane.tensor.randn({ 3, 5 }, { seed = 11 })
    s:write(values)
    local back = s:read()
    assert.are.equal("fp16", back:dtype())
    assert.are.same({ 1, 3, 1, 5 }, back:shape())
    -- exactly what fp16 rounding of each value gives
    assert.are.equal(0, back:reshape(3, 5):max_abs_diff(values:to("fp16")))
    assert.are.equal(0, s:read("fp32"):reshape(3, 5):max_abs_diff(values:to("fp16"):to("fp32")))
    local packed = ane.tensor.from_bytes(s:tensor():bytes(), { 3, 5 }, "fp16")
    assert.are.equal(0, packed:max_abs_diff(values:to("fp16")))
    local padded = s:tensor()
    assert.are.same({ 96, 32, 32, 1 }, padded:strides()) -- row stride 64 bytes = 32 fp16
  end)

  it("accepts [1, C, 1, S] tensors and strided views", function()
    local s = ane.surface { channels = 2, seq = 3, dtype = "fp32" }
    local t = ane.tensor.from({ { 1, 4 }, { 2, 5 }, { 3, 6 } }):transpose() -- [2, 3] view
    s:write(t)
    assert.are.same({ { { { 1, 2, 3 } }, { { 4, 5, 6 } } } }, s:read():totable())
    s:write(ane.tensor.from({ 7, 8, 9, 10, 11, 12 }, { 1, 2, 1, 3 }))
    assert.are.same({ { { { 7, 8, 9 } }, { { 10, 11, 12 } } } }, s:read():totable())
  end)

  it("rejects wrong shapes, dtypes and closed surfaces", function()
    local s = ane.surface { channels = 2, seq = 3 }
    assert.error_matches(function() s:write(ane.tensor({ 3, 2 })) end,
      "cannot write a %[3, 2%] tensor to a %[1, 2, 1, 3%] surface")
    assert.error_matches(function() ane.surface { channels = 2, seq = 3, dtype = "int8" } end,
      "a surface holds fp16 or fp32, not int8")
    assert.error_matches(function() ane.surface { seq = 3 } end, "field 'channels' is required")
    local view = s:tensor()
    s:close()
    s:close() -- idempotent
    assert.error_matches(function() s:read() end, "attempt to use a closed surface")
    assert.are.equal("ane.surface (closed)", tostring(s))
    assert.are.equal(0, view:get(1, 1, 1, 1)) -- a view keeps the memory alive
    do
      local scoped <close> = ane.surface { channels = 1, seq = 1 }
      assert.matches("^ane.surface fp16 %[1, 1, 1, 1%]", tostring(scoped))
    end
  end)
end)

-- tensor/storage.c: heap blocks, the large-block pool's reuse (zeroed again) and file
-- mappings.
local ane = require("ane")
local helpers = require("spec.helpers")

describe("storage", function()
  it("makes zeros from reused large blocks too", function()
    for _, n in ipairs({ 9 * 1048576, 17 * 524288 }) do -- 36 MB, then 34 MB (within the reuse margin)
      local used = ane.tensor({ n }):fill(7)
      assert.are.equal(7, used:get(n))
      used = nil
      collectgarbage()
      collectgarbage()
      local fresh = ane.tensor({ n })
      assert.are.equal(0, fresh:sum_of_squares())
    end
  end)

  it("maps a file: tensors are views of its bytes, ranges beyond it are refused by name", function()
    local values = { 1.5, -2.25, 3.0, 0.125, 1e-3, -7.0 }
    local path = helpers.tmpdir() .. "/mapped.bin"
    helpers.write_file(path, "HEAD" .. string.pack("<" .. string.rep("f", #values), table.unpack(values)))
    local mapping = assert(ane._io.map_file(path))
    local t = assert(mapping:tensor(path, "weights", "F32", { 2, 3 }, 4, 4 + 24)) -- after a 4-byte header
    assert.are.same({ 2, 3 }, t:shape())
    for i, v in ipairs(values) do
      local as_stored = string.unpack("<f", string.pack("<f", v)) -- the fp32 value written
      assert.are.equal(as_stored, t:get((i - 1) // 3 + 1, (i - 1) % 3 + 1))
    end
    local none, err = mapping:tensor(path, "beyond", "F32", { 2, 4 }, 4, 4 + 32)
    assert.is_nil(none)
    assert.matches("mapped%.bin", err)
    assert.matches("beyond", err)
    local missing, why = ane._io.map_file(path .. ".absent")
    assert.is_nil(missing)
    assert.matches("mapped%.bin%.absent", why)
  end)
end)

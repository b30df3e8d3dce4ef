-- MILBlob v2 weight files: byte-exact vectors from reference/milblob.md (its worked
-- example, and a three-blob file), reader round trips, the loose variants other tools
-- write, and one corrupted file per field the reader validates.
local ane = require("ane")

local function u32(v) return string.pack("<I4", v) end
local function u64(v) return string.pack("<I8", v) end
local function zeros(n) return string.rep("\0", n) end

-- A 64-byte record as the format describes it, written field by field.
local function record(code, size, data_offset)
  return u32(0xDEADBEEF) .. u32(code) .. u64(size) .. u64(data_offset) .. u64(0) .. zeros(32)
end

describe("MILBlob writing", function()
  it("matches the worked example: one 768x768 fp16 tensor", function()
    local data = string.rep("\1\2", 768 * 768)
    local bytes, offsets = ane.milblob.write({ { dtype = "fp16", data = data } })
    assert.are.same({ 64 }, offsets) -- BLOBFILE offset points at the record
    local expected = u32(1) .. u32(2) .. zeros(56) .. record(1, 1179648, 128) .. data
    assert.are.equal(#expected, #bytes) -- 1179776: the data ends on a 64-byte boundary
    assert.are.equal(expected, bytes)
    assert.are.equal("\1\0\0\0\2\0\0\0", bytes:sub(1, 8))
    assert.are.equal("\xEF\xBE\xAD\xDE\1\0\0\0", bytes:sub(65, 72))
  end)

  it("aligns every record of a three-blob file to 64 bytes", function()
    local a, b, c = string.rep("a", 10), string.rep("b", 128), string.rep("c", 4)
    local bytes, offsets = ane.milblob.write({
      { dtype = "fp16", data = a }, { dtype = "fp32", data = b }, { dtype = "int8", data = c },
    })
    -- record at 64, data 128..138, pad to 192; record 192, data 256..384; record 384, data 448..452, pad to 512
    assert.are.same({ 64, 192, 384 }, offsets)
    local expected = u32(3) .. u32(2) .. zeros(56)
        .. record(1, 10, 128) .. a .. zeros(54)
        .. record(2, 128, 256) .. b
        .. record(4, 4, 448) .. c .. zeros(60)
    assert.are.equal(expected, bytes)
  end)

  it("uses the format's data type codes", function()
    local codes = { fp16 = 1, fp32 = 2, uint8 = 3, int8 = 4, bf16 = 5, int16 = 6, uint16 = 7, int32 = 14 }
    for dtype, code in pairs(codes) do
      local bytes = ane.milblob.write({ { dtype = dtype, data = "xx" } })
      assert.are.equal(code, string.unpack("<I4", bytes, 69), dtype)
    end
    assert.error_matches(function() ane.milblob.write({ { dtype = "bool", data = "x" } }) end, "MILBlob code")
  end)
end)

describe("MILBlob reading", function()
  local a, b = string.rep("\7", 100), string.rep("\9", 64)
  local bytes = ane.milblob.write({ { dtype = "fp16", data = a }, { dtype = "fp32", data = b } })

  it("round-trips what the writer wrote", function()
    local records = assert(ane.milblob.read(bytes))
    assert.are.same({ { offset = 64, dtype_code = 1, size = 100, data_offset = 128 },
      { offset = 256, dtype_code = 2, size = 64, data_offset = 320 } }, records)
    assert.are.equal(a, ane.milblob.lookup(bytes, 64, "fp16", 100))
    assert.are.equal(b, ane.milblob.lookup(bytes, 256, "fp32", 64))
  end)

  it("accepts the loose variants: count 1 with more records, trailing zero padding", function()
    local loose = u32(1) .. bytes:sub(5) .. zeros(128)
    local records = assert(ane.milblob.read(loose))
    assert.are.equal(2, #records)
  end)

  local function expect(bad, pattern, ...)
    local records, err = ane.milblob.read(bad, "w.bin", ...)
    assert.is_nil(records)
    assert.matches(pattern, err)
  end

  it("rejects a bad sentinel, naming the record offset", function()
    local bad = bytes:sub(1, 256) .. u32(0x12345678) .. bytes:sub(261)
    expect(bad, "^w%.bin: record at offset 256: sentinel is 0x12345678, not 0xDEADBEEF")
  end)

  it("rejects data running past the end of the file", function()
    local bad = bytes:sub(1, 64 + 8) .. u64(1e6) .. bytes:sub(64 + 17)
    expect(bad, "record at offset 64: 1000000 data bytes at offset 128 run past the end of the 384%-byte file")
  end)

  it("rejects a data offset that does not follow its record", function()
    local bad = bytes:sub(1, 64 + 16) .. u64(1000) .. bytes:sub(64 + 25)
    expect(bad, "record at offset 64: data offset 1000 should be 128")
  end)

  it("rejects truncated files and wrong versions", function()
    expect(bytes:sub(1, 300), "header declares 2 blobs but only 1 follow %(truncated%?%)")
    expect(bytes:sub(1, 330), "record at offset 256: 64 data bytes at offset 320 run past the end of the 330%-byte file")
    expect(bytes:sub(1, 40), "too short for the 64%-byte MILBlob header")
    expect(u32(1) .. u32(2) .. zeros(56), "header declares 1 blobs but the file holds none")
    expect(u32(1) .. u32(3) .. zeros(56), "header at offset 4: version 3, expected 2")
    expect(u32(3) .. bytes:sub(5), "header declares 3 blobs but only 2 follow")
  end)

  it("checks lookups against the MIL type (ANE-08: offsets point at records)", function()
    local _, err = ane.milblob.lookup(bytes, 128, "fp16", 100, "w.bin")
    assert.matches("record at offset 128: sentinel", err) -- the data offset is not a record
    _, err = ane.milblob.lookup(bytes, 64, "fp16", 98, "w.bin")
    assert.matches("holds 100 bytes, the MIL type needs 98", err)
    _, err = ane.milblob.lookup(bytes, 64, "fp32", 100, "w.bin")
    assert.matches("holds type code 1, the MIL type needs 2", err)
    _, err = ane.milblob.lookup(bytes, 100, "fp16", 100, "w.bin")
    assert.matches("not 64%-byte aligned", err)
  end)
end)

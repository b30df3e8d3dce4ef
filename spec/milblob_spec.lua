-- MILBlob v2 weight files: byte-exact vectors from docs/reference/milblob.md (its worked
-- example, and a three-blob file), reader round trips, the layouts other writers use (read
-- as the device reads them, with notes), and the corruptions that must fail.
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

  it("round-trips with no notes", function()
    local _, notes = ane.milblob.read(bytes)
    assert.are.same({}, notes)
    local data, lookup_notes = ane.milblob.lookup(bytes, 64, "fp16", 100)
    assert.are.same({ a, {} }, { data, lookup_notes })
  end)

  -- Reading follows the device (docs/reference/constraints.md, "Weight-file layouts seen from other
  -- writers"): what would give garbage fails, naming file, offset and field; what only
  -- disagrees with the format is read as the device reads it, and noted.
  local function fails(bad, pattern, ...)
    local records, err = ane.milblob.read(bad, "w.bin", ...)
    assert.is_nil(records)
    assert.matches(pattern, err)
  end

  local function notes_of(file)
    local records, notes = assert(ane.milblob.read(file, "w.bin"))
    return records, table.concat(notes, "\n")
  end

  it("accepts a count of 1 followed by more records, and trailing zero padding, noting the count", function()
    local records, notes = notes_of(u32(1) .. bytes:sub(5) .. zeros(128))
    assert.are.equal(2, #records)
    assert.matches("the header declares 1 blob, the file holds 2", notes)
  end)

  it("fails on what holds no blob: a short file, another version, no record at offset 64", function()
    fails(bytes:sub(1, 40), "^w%.bin: 40 bytes is too short for the 64%-byte MILBlob header")
    fails(u32(1) .. u32(2) .. zeros(56), "header declares 1 blobs but the file holds none")
    fails(u32(1) .. u32(3) .. zeros(56), "header at offset 4: version 3, expected 2")
    fails(bytes:sub(1, 64) .. u32(0x12345678) .. bytes:sub(69), "record at offset 64: sentinel is 0x12345678, not 0xDEADBEEF")
  end)

  it("notes bytes after the last record that are no record, and lookups of them fail", function()
    local bad = bytes:sub(1, 256) .. u32(0x12345678) .. bytes:sub(261)
    local records, notes = notes_of(bad)
    assert.are.equal(1, #records)
    assert.matches("the 128 bytes from offset 256, after the last record, are not a record %(ignored%)", notes)
    local data, err = ane.milblob.lookup(bad, 256, "fp32", 64, "w.bin")
    assert.is_nil(data)
    assert.matches("^w%.bin: record at offset 256: sentinel is 0x12345678, not 0xDEADBEEF %(ANE%-08%)", err)
  end)

  it("reads data after its record whatever the record's data offset says (maderix's benchmark writer: 0)", function()
    local loose = bytes:sub(1, 64 + 16) .. u64(0) .. bytes:sub(64 + 25)
    local _, notes = notes_of(loose)
    assert.matches("record at offset 64: its data offset field says 0; the data is read at 128", notes)
    local data, lookup_notes = ane.milblob.lookup(loose, 64, "fp16", 100, "w.bin")
    assert.are.equal(a, data)
    assert.matches("data offset field says 0", lookup_notes[1])
  end)

  it("reads the MIL's type and size whatever the record's code and size say (int8 data under code 1)", function()
    local data, notes = ane.milblob.lookup(bytes, 64, "int8", 100, "w.bin")
    assert.are.equal(a, data)
    assert.matches("record at offset 64 holds type code 1, the MIL's type is code 4: read as the MIL says", notes[1])
    data, notes = ane.milblob.lookup(bytes, 64, "fp16", 98, "w.bin")
    assert.are.equal(a:sub(1, 98), data)
    assert.matches("says 100 data bytes, the MIL's type needs 98", notes[1])
  end)

  it("notes a size field running past the end, and fails a lookup whose data would", function()
    local loose = bytes:sub(1, 64 + 8) .. u64(1e6) .. bytes:sub(64 + 17)
    local _, notes = notes_of(loose)
    assert.matches("record at offset 64 claims 1000000 data bytes; only 256 follow it", notes) -- 384 - 128
    assert.are.equal(a, (ane.milblob.lookup(loose, 64, "fp16", 100, "w.bin")))
    local data, err = ane.milblob.lookup(bytes:sub(1, 330), 256, "fp32", 64, "w.bin")
    assert.is_nil(data)
    assert.matches("record at offset 256: the MIL's type needs 64 data bytes at offset 320, past the end of the 330%-byte file", err)
  end)

  it("walks records packed without alignment (ANEForge's writer) and notes them", function()
    local c, d = string.rep("", 6), string.rep("", 10) -- 6 bytes: the next record lands at offset 134
    local packed = u32(2) .. u32(2) .. zeros(56) .. record(1, 6, 128) .. c .. record(4, 10, 198) .. d
    local records, notes = notes_of(packed)
    assert.are.same({ 64, 134 }, { records[1].offset, records[2].offset })
    assert.matches("record at offset 134 is not 64%-byte aligned", notes)
    assert.are.equal(d, (ane.milblob.lookup(packed, 134, "int8", 10, "w.bin")))
  end)

  it("fails a lookup of an offset that is no record (ANE-08: the data's offset, not the record's)", function()
    local _, err = ane.milblob.lookup(bytes, 128, "fp16", 100, "w.bin")
    assert.matches("record at offset 128: sentinel", err)
    _, err = ane.milblob.lookup(bytes, 100, "fp16", 100, "w.bin")
    assert.matches("record at offset 100: sentinel", err)
    _, err = ane.milblob.lookup(bytes, 10, "fp16", 100, "w.bin")
    assert.matches("no record at offset 10: a record is 64 bytes inside the 384%-byte file, after the 64%-byte header", err)
  end)
end)

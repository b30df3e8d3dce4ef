-- ane.io safetensors: the real gpt2-tiny checkpoint, round trips of every dtype, sharded
-- models, atomic writes, and one crafted file per kind of corruption.
local ane = require("ane")
local helpers = require("spec.helpers")

-- Builds a safetensors file from a header string and data bytes.
local function craft(header, data)
  return string.pack("<I8", #header) .. header .. (data or "")
end

local function write_crafted(dir, name, header, data)
  local path = dir .. "/" .. name
  helpers.write_file(path, craft(header, data))
  return path
end

for _, data in ipairs(helpers.data_sets()) do
describe("safetensors loading [" .. data.label .. "]", function()
  it("reads the gpt2-tiny checkpoint with the values the file holds", function()
    local path = data:reference("gpt2-tiny") .. "/model.safetensors"
    local tensors, metadata = ane.io.load_safetensors(path)
    assert.is_table(tensors, metadata)
    assert.are.equal("pt", metadata.format)
    local count = 0
    for _ in pairs(tensors) do count = count + 1 end
    assert.are.equal(28, count)
    local wte = tensors["wte.weight"]
    local V = wte:shape()[1]
    assert.are.same({ V, 64 }, wte:shape())
    assert.are.equal("fp32", wte:dtype())
    assert.are.same({ 64, 192 }, tensors["h.0.attn.c_attn.weight"]:shape())
    -- Independent check: decode bytes of the raw file with string.unpack.
    local raw = helpers.read_file(path)
    local header_len = string.unpack("<I8", raw)
    local data_start = 8 + header_len + 1 -- wte.weight starts at data offset 0
    for _, index in ipairs({ { 1, 1 }, { 2, 5 }, { V, 64 } }) do
      local flat = (index[1] - 1) * 64 + (index[2] - 1)
      local expected = string.unpack("<f", raw, data_start + 4 * flat)
      assert.are.equal(expected, wte:get(index[1], index[2]))
    end
  end)

  it("reads the PyTorch expectations file (int32 and fp32 tensors)", function()
    local path = data:reference("gpt2-tiny") .. "/expected.safetensors"
    local tensors = assert(ane.io.load_safetensors(path))
    assert.are.equal("int32", tensors.input_ids:dtype())
    local V = select(3, data:reference("gpt2-tiny"))
    assert.are.same({ 2, 16, V }, tensors.logits:shape())
    assert.are.same({ 6 }, tensors.adamw_losses:shape())
  end)

  it("loads a model directory", function()
    local dir = data:reference("gpt2-tiny")
    local tensors = assert(ane.io.load_safetensors(dir))
    assert.is_not_nil(tensors["ln_f.bias"])
  end)
end)
end

describe("safetensors files", function()
  it("returns read-only zero-copy views", function()
    local dir = helpers.tmpdir()
    local path = dir .. "/one.safetensors"
    assert(ane.io.save_safetensors(path, { x = ane.tensor.from({ 1, 2, 3 }) }))
    local tensors = assert(ane.io.load_safetensors(path))
    assert.error_matches(function() tensors.x:set(5, 1) end, "read%-only")
    local copy = tensors.x:copy()
    copy:set(5, 1)
    assert.are.same({ 5, 2, 3 }, copy:totable())
  end)
end)

describe("safetensors writing", function()
  it("round-trips every dtype, strided tensors and metadata", function()
    local dir = helpers.tmpdir()
    local path = dir .. "/all.safetensors"
    local source = ane.tensor.randn({ 3, 4 }, { seed = 5, std = 10 })
    local tensors = {}
    for _, dtype in ipairs({ "fp32", "fp16", "bf16", "int32", "int64", "int16", "uint16", "int8", "uint8", "bool" }) do
      tensors["t_" .. dtype] = source:to(dtype)
    end
    tensors.strided = source:transpose()
    tensors.empty = ane.tensor({ 0, 4 })
    tensors.scalar = ane.tensor.from({ 42 }):reshape({})
    assert.is_true(ane.io.save_safetensors(path, tensors, { note = "hello", ["quote\""] = "\"x\"" }))
    local back, metadata = assert(ane.io.load_safetensors(path))
    assert.are.same({ note = "hello", ["quote\""] = "\"x\"" }, metadata)
    for name, tensor in pairs(tensors) do
      assert.are.equal(tensor:dtype(), back[name]:dtype(), name)
      assert.are.same(tensor:shape(), back[name]:shape(), name)
      assert.are.equal(tensor:bytes(), back[name]:bytes(), name)
    end
    -- The data section starts 8-byte aligned (header padded with spaces).
    local header_len = string.unpack("<I8", helpers.read_file(path))
    assert.are.equal(0, header_len % 8)
  end)

  it("is deterministic", function()
    local dir = helpers.tmpdir()
    local tensors = { b = ane.tensor.from({ 1 }), a = ane.tensor.from({ 2 }), c = ane.tensor.from({ 3 }) }
    assert(ane.io.save_safetensors(dir .. "/1.safetensors", tensors))
    assert(ane.io.save_safetensors(dir .. "/2.safetensors", tensors))
    assert.are.equal(helpers.read_file(dir .. "/1.safetensors"), helpers.read_file(dir .. "/2.safetensors"))
  end)

  it("leaves the previous file intact when a write fails", function()
    local dir = helpers.tmpdir()
    local path = dir .. "/ckpt.safetensors"
    assert(ane.io.save_safetensors(path, { w = ane.tensor.from({ 1, 2 }) }))
    local before = helpers.read_file(path)
    -- A file-size limit makes write() fail with EFBIG half way, like a full disk.
    local script = string.format(
      "local ane = require('ane'); local ok, err = ane.io.save_safetensors(%q, { w = ane.tensor({ 100000 }) }); " ..
      "io.write(tostring(ok), '|', tostring(err))", path)
    local out = helpers.run(string.format("sh -c %s", helpers.quote(
      "trap '' XFSZ; ulimit -f 64; exec " .. helpers.quote(helpers.anelua) .. " -e " .. helpers.quote(script))))
    assert.matches("^nil|" .. path:gsub("%p", "%%%0") .. ": write failed after %d+ bytes: File too large", out)
    assert.are.equal(before, helpers.read_file(path))
    local leftovers = 0
    for entry in require("lfs").dir(dir) do
      if entry:match("%.tmp%-") then leftovers = leftovers + 1 end
    end
    assert.are.equal(0, leftovers)
    local ok, err = ane.io.save_safetensors(dir .. "/missing/dir/x.safetensors", { w = ane.tensor({ 1 }) })
    assert.is_nil(ok)
    assert.matches("cannot create temporary file", err)
  end)

  it("rejects bad arguments as errors", function()
    assert.error_matches(function() ane.io.save_safetensors("/tmp/x", { w = 5 }) end, "'w' is not a tensor")
    assert.error_matches(function() ane.io.save_safetensors("/tmp/x", {}, { k = 1 }) end, "metadata keys and values must be strings")
  end)
end)

describe("sharded safetensors", function()
  it("loads every tensor through the index", function()
    local dir = helpers.tmpdir()
    assert(ane.io.save_safetensors(dir .. "/model-00001-of-00002.safetensors", { a = ane.tensor.from({ 1, 2 }) }))
    assert(ane.io.save_safetensors(dir .. "/model-00002-of-00002.safetensors", { b = ane.tensor.from({ 3 }) }))
    helpers.write_file(dir .. "/model.safetensors.index.json",
      '{"metadata":{"total_size":12},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}')
    local tensors = assert(ane.io.load_safetensors(dir))
    assert.are.same({ 1, 2 }, tensors.a:totable())
    assert.are.same({ 3 }, tensors.b:totable())
    helpers.write_file(dir .. "/bad.index.json", '{"weight_map":{"zzz":"model-00002-of-00002.safetensors"}}')
    local ok, err = ane.io.load_safetensors(dir .. "/bad.index.json")
    assert.is_nil(ok)
    assert.matches("tensor 'zzz' is not in shard model%-00002%-of%-00002.safetensors", err)
  end)
end)

describe("malformed safetensors", function()
  local dir = helpers.tmpdir()
  local function expect_error(path, pattern)
    local tensors, err = ane.io.load_safetensors(path)
    assert.is_nil(tensors)
    assert.is_string(err)
    assert.are.equal(1, err:find(path, 1, true), "the message names the file: " .. err)
    assert.matches(pattern, err)
  end
  local good_entry = '"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}'
  local eight_bytes = string.pack("<ff", 1, 2)

  it("a missing file", function() expect_error(dir .. "/nope.safetensors", "cannot open") end)
  it("a file shorter than the length field", function()
    local path = dir .. "/short.safetensors"
    helpers.write_file(path, "abc")
    expect_error(path, "too short for the 8%-byte header length")
  end)
  it("a header length beyond the file", function()
    local path = dir .. "/long.safetensors"
    helpers.write_file(path, string.pack("<I8", 1000) .. "{}")
    expect_error(path, "header length 1000 at offset 0 runs past the end of the 10%-byte file")
  end)
  it("invalid JSON", function()
    expect_error(write_crafted(dir, "json.safetensors", '{"x": [1, 2'), "header is not valid JSON")
  end)
  it("a header that is not an object", function()
    expect_error(write_crafted(dir, "array.safetensors", "[1]"), "header is not a JSON object")
  end)
  it("offsets past the end of the data", function()
    expect_error(write_crafted(dir, "past.safetensors", "{" .. good_entry .. "}", "1234"),
      "tensor 'x' data_offsets end 8 %(file offset %d+%) is past the end of the file %(4 data bytes%)")
  end)
  it("truncated data", function()
    local path = dir .. "/full.safetensors"
    assert(ane.io.save_safetensors(path, { w = ane.tensor({ 16 }) }))
    local bytes = helpers.read_file(path)
    helpers.write_file(path, bytes:sub(1, #bytes - 3))
    expect_error(path, "tensor 'w' data_offsets end 64 .* truncated%?")
  end)
  it("overlapping tensors", function()
    local header = '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},' ..
        '"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}'
    expect_error(write_crafted(dir, "overlap.safetensors", header, eight_bytes .. "1234"),
      "tensors 'a' %[0, 8%) and 'b' %[4, 12%) overlap")
  end)
  it("a size that is not numel times the dtype size", function()
    expect_error(write_crafted(dir, "size.safetensors", '{"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}', eight_bytes),
      "tensor 'x' F32 %[3%] needs 12 bytes but data_offsets span 8")
  end)
  it("an unknown dtype", function()
    expect_error(write_crafted(dir, "dtype.safetensors", '{"x":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}', eight_bytes),
      "tensor 'x' has unsupported dtype 'F64'")
  end)
  it("begin after end", function()
    expect_error(write_crafted(dir, "order.safetensors", '{"x":{"dtype":"U8","shape":[0],"data_offsets":[8,0]}}', eight_bytes),
      "begin > end")
  end)
  it("bad shapes and offsets", function()
    expect_error(write_crafted(dir, "neg.safetensors", '{"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}', eight_bytes),
      "shape%[1%] is not a non%-negative integer")
    expect_error(write_crafted(dir, "frac.safetensors", '{"x":{"dtype":"F32","shape":[2],"data_offsets":[0.5,8]}}', eight_bytes),
      "data_offsets are not non%-negative integers")
    expect_error(write_crafted(dir, "noshape.safetensors", '{"x":{"dtype":"F32","data_offsets":[0,8]}}', eight_bytes),
      "tensor 'x' has no shape array")
  end)
  it("non-string metadata", function()
    expect_error(write_crafted(dir, "meta.safetensors", '{"__metadata__":{"n":1}}'), "__metadata__ value 'n' is not a string")
  end)
  it("a directory without a model", function()
    expect_error(helpers.tmpdir(), "no model.safetensors or model.safetensors.index.json")
  end)
end)

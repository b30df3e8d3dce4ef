-- Quantized weights in MIL: constexpr_affine_dequantize (int8/uint8/uint4, per tensor and
-- per channel, attribute and operand forms), constexpr_blockwise_shift_scale and
-- constexpr_lut_to_dense (iOS16 packed indices, iOS18 per-channel palettes of uint4/uint2),
-- with weight files written here byte by byte as other projects' writers do. Each program
-- is a 1x1 conv; its reference is the same conv with fp16 weights dequantized in this spec
-- by the ops' definitions, so outputs must agree bit for bit (both round the weights to
-- fp16 once and run the same conv).
local ane = require("ane")

local OC, IC, S = 8, 16, 32
local PATH = "@model_path/weights/weight.bin"

local function u32(v) return string.pack("<I4", v) end
local function u64(v) return string.pack("<I8", v) end

-- A MILBlob file of `blobs` ({code =, data = bytes}), records at 64-byte boundaries; the
-- record offsets (the BLOBFILE offsets) are returned too.
local function blob_file(blobs)
  local parts, offsets, cursor = { u32(#blobs) .. u32(2) .. string.rep("\0", 56) }, {}, 64
  for i, b in ipairs(blobs) do
    offsets[i] = cursor
    local padded = b.data .. string.rep("\0", (64 - #b.data % 64) % 64)
    parts[#parts + 1] = u32(0xDEADBEEF) .. u32(b.code) .. u64(#b.data) .. u64(cursor + 64) .. string.rep("\0", 40) .. padded
    cursor = cursor + 64 + #padded
  end
  return table.concat(parts), offsets
end

-- n-bit values packed low bits first
local function pack_bits(values, bits)
  local bytes, acc, used = {}, 0, 0
  for _, v in ipairs(values) do
    acc = acc | (v << used)
    used = used + bits
    while used >= 8 do
      bytes[#bytes + 1] = string.char(acc & 0xFF)
      acc, used = acc >> 8, used - 8
    end
  end
  if used > 0 then bytes[#bytes + 1] = string.char(acc & 0xFF) end
  return table.concat(bytes)
end

local function fp16_bytes(values) return ane.tensor.from(values, { #values }):to("fp16"):bytes() end

local HEADER = 'program(1.3)\n{\n    func main<ios18>(tensor<fp16, [1, %d, 1, %d]> x) {\n'
local CONV = [[
        string pt = const()[name = string("pt"), val = string("valid")];
        tensor<int32, [2]> st = const()[name = string("st"), val = tensor<int32, [2]>([1, 1])];
        tensor<int32, [4]> pd = const()[name = string("pd"), val = tensor<int32, [4]>([0, 0, 0, 0])];
        tensor<int32, [2]> dl = const()[name = string("dl"), val = tensor<int32, [2]>([1, 1])];
        int32 gr = const()[name = string("gr"), val = int32(1)];
        tensor<fp16, [1, %d, 1, %d]> y = conv(dilations = dl, groups = gr, pad = pd, pad_type = pt, strides = st, weight = W, x = x)[name = string("y")];
    } -> (y);
}
]]

-- MIL whose weight W is defined by `weight_lines`, conv'ed over x
local function program(weight_lines)
  return string.format(HEADER, IC, S) .. weight_lines .. string.format(CONV, OC, S)
end

local x = ane.tensor.randn({ 1, IC, 1, S }, { seed = 4, dtype = "fp16" })

-- Runs the MIL on sim in the ane profile and the reference conv with `weights` (OC*IC
-- numbers, row-major [OC, IC]); returns both outputs and the warnings.
local function run(text, files, weights)
  local program_, warnings = ane.compile_mil(text, files or {}, { backend = "sim", name = "quantized" })
  local got = program_:eval({ x = x }).y
  local g = ane.graph("reference")
  local gx = g:input("x", { 1, IC, 1, S })
  g:output("y", g:conv(gx, g:const("w", ane.tensor.from(weights, { OC, IC, 1, 1 }):to("fp16"))))
  local want = ane.compile(g, { backend = "sim" }):eval({ x = x }).y
  return got, want, warnings
end

local function ints(n, f) local t = {} for i = 1, n do t[i] = f(i) end return t end

describe("quantized weights", function()
  it("constexpr_affine_dequantize, per tensor, parameters in the attribute brackets (inline int8)", function()
    local q = ints(OC * IC, function(i) return (i * 37) % 255 - 127 end)
    local text = program(string.format("        tensor<fp16, [%d, %d, 1, 1]> W = constexpr_affine_dequantize()[axis = int32(0), "
      .. "name = string(\"W\"), quantized_data = tensor<int8, [%d, %d, 1, 1]>([%s]), scale = fp16(0x1p-7), "
      .. "zero_point = int8(3)];\n", OC, IC, OC, IC, table.concat(q, ", ")))
    local got, want = run(text, nil, ints(OC * IC, function(i) return (q[i] - 3) / 128 end))
    assert.are.equal(want:bytes(), got:bytes())
  end)

  it("constexpr_affine_dequantize, per channel, operands naming BLOBFILE consts (maderix's quant_probe layout)", function()
    local q = ints(OC * IC, function(i) return (i * 53) % 256 - 128 end)
    local scales = ints(OC, function(c) return c / 64 end)
    local zps = ints(OC, function(c) return c - 4 end)
    local qbytes = string.pack(string.rep("b", #q), table.unpack(q))
    -- quant_probe writes int8 data under type code 1 (fp16), one blob per file
    local wfile = blob_file({ { code = 1, data = qbytes } })
    local sfile = blob_file({ { code = 1, data = fp16_bytes(scales) } })
    local zfile = blob_file({ { code = 4, data = string.pack(string.rep("b", OC), table.unpack(zps)) } })
    local text = program(string.format([[
        tensor<int8, [%d, %d, 1, 1]> Wq = const()[name=string("Wq"), val=tensor<int8, [%d, %d, 1, 1]>(BLOBFILE(path=string("@model_path/weights/weight.bin"), offset=uint64(64)))];
        tensor<fp16, [%d]> sc = const()[name=string("sc"), val=tensor<fp16, [%d]>(BLOBFILE(path=string("@model_path/weights/scale.bin"), offset=uint64(64)))];
        tensor<int8, [%d]> zp = const()[name=string("zp"), val=tensor<int8, [%d]>(BLOBFILE(path=string("@model_path/weights/zp.bin"), offset=uint64(64)))];
        int32 ax = const()[name=string("ax"), val=int32(0)];
        tensor<fp16, [%d, %d, 1, 1]> W = constexpr_affine_dequantize(axis=ax, zero_point=zp, quantized_data=Wq, scale=sc)[name=string("dq")];
]], OC, IC, OC, IC, OC, OC, OC, OC, OC, IC))
    local files = { [PATH] = wfile, ["@model_path/weights/scale.bin"] = sfile, ["@model_path/weights/zp.bin"] = zfile }
    local got, want, warnings = run(text, files, ints(OC * IC, function(i)
      local c = (i - 1) // IC + 1
      return (q[i] - zps[c]) * scales[c]
    end))
    assert.are.equal(want:bytes(), got:bytes())
    assert.are.equal(1, #warnings) -- the type code: noted, read as the MIL says
    assert.matches("weight%.bin: record at offset 64 holds type code 1, the MIL's type is code 4", warnings[1].message)
  end)

  it("constexpr_affine_dequantize of uint4 weights and zero points (packed two per byte, low nibble first)", function()
    local q = ints(OC * IC, function(i) return (i * 7) % 16 end)
    local zps = ints(OC, function(c) return (c % 2 == 0) and 8 or 7 end)
    local files = { [PATH] = blob_file({ { code = 11, data = pack_bits(q, 4) }, { code = 11, data = pack_bits(zps, 4) } }) }
    local text = program(string.format([[
        tensor<uint4, [%d, %d, 1, 1]> Wq = const()[name=string("Wq"), val=tensor<uint4, [%d, %d, 1, 1]>(BLOBFILE(path=string("@model_path/weights/weight.bin"), offset=uint64(64)))];
        tensor<uint4, [%d]> zp = const()[name=string("zp"), val=tensor<uint4, [%d]>(BLOBFILE(path=string("@model_path/weights/weight.bin"), offset=uint64(192)))];
        tensor<fp16, [%d, %d, 1, 1]> W = constexpr_affine_dequantize(axis=int32(0), zero_point=zp, quantized_data=Wq, scale=fp16(0.125))[name=string("dq")];
]], OC, IC, OC, IC, OC, OC, OC, IC))
    local got, want = run(text, files, ints(OC * IC, function(i) return (q[i] - zps[(i - 1) // IC + 1]) * 0.125 end))
    assert.are.equal(want:bytes(), got:bytes())
  end)

  it("constexpr_blockwise_shift_scale: int8 data, a scale and offset per block of 4 inputs", function()
    local q = ints(OC * IC, function(i) return (i * 29) % 255 - 127 end)
    local blocks = IC // 4
    local scales = ints(OC * blocks, function(b) return b / 256 end)
    local offsets = ints(OC * blocks, function(b) return b % 5 - 2 end)
    local files = { [PATH] = blob_file({ { code = 4, data = string.pack(string.rep("b", #q), table.unpack(q)) },
      { code = 1, data = fp16_bytes(scales) }, { code = 4, data = string.pack(string.rep("b", #offsets), table.unpack(offsets)) } }) }
    local text = program(string.format([[
        tensor<int8, [%d, %d, 1, 1]> q = const()[name=string("q"), val=tensor<int8, [%d, %d, 1, 1]>(BLOBFILE(path=string("@model_path/weights/weight.bin"), offset=uint64(64)))];
        tensor<fp16, [%d, %d, 1, 1]> s = const()[name=string("s"), val=tensor<fp16, [%d, %d, 1, 1]>(BLOBFILE(path=string("@model_path/weights/weight.bin"), offset=uint64(256)))];
        tensor<int8, [%d, %d, 1, 1]> o = const()[name=string("o"), val=tensor<int8, [%d, %d, 1, 1]>(BLOBFILE(path=string("@model_path/weights/weight.bin"), offset=uint64(384)))];
        tensor<fp16, [%d, %d, 1, 1]> W = constexpr_blockwise_shift_scale(data = q, scale = s, offset = o)[name=string("W")];
]], OC, IC, OC, IC, OC, blocks, OC, blocks, OC, blocks, OC, blocks, OC, IC))
    local got, want = run(text, files, ints(OC * IC, function(i)
      local c, k = (i - 1) // IC, (i - 1) % IC
      local b = c * blocks + k // 4 + 1
      return (q[i] - offsets[b]) * scales[b]
    end))
    assert.are.equal(want:bytes(), got:bytes())
  end)

  it("constexpr_lut_to_dense, iOS16 form: packed uint8 indices, one 16-entry palette, the shape", function()
    local idx = ints(OC * IC, function(i) return (i * 5) % 16 end)
    local lut = ints(16, function(k) return (k - 8) / 16 end)
    local files = { [PATH] = blob_file({ { code = 3, data = pack_bits(idx, 4) }, { code = 1, data = fp16_bytes(lut) } }) }
    local text = program(string.format("        tensor<fp16, [%d, %d, 1, 1]> W = constexpr_lut_to_dense()[indices = "
      .. "tensor<uint8, [%d]>(BLOBFILE(path = string(\"@model_path/weights/weight.bin\"), offset = uint64(64))), lut = "
      .. "tensor<fp16, [16]>(BLOBFILE(path = string(\"@model_path/weights/weight.bin\"), offset = uint64(192))), name = "
      .. "string(\"W\"), shape = tensor<uint32, [4]>([%d, %d, 1, 1])];\n", OC, IC, OC * IC // 2, OC, IC))
    local got, want = run(text, files, ints(OC * IC, function(i) return lut[idx[i] + 1] end))
    assert.are.equal(want:bytes(), got:bytes())
  end)

  for _, case in ipairs({ { bits = 4, code = 11, name = "uint4" }, { bits = 2, code = 10, name = "uint2" } }) do
    it("constexpr_lut_to_dense, iOS18 form: " .. case.name .. " indices, a palette per output channel", function()
      local entries = 1 << case.bits
      local idx = ints(OC * IC, function(i) return (i * 3) % entries end)
      local lut = ints(OC * entries, function(k) return ((k * 7) % 31 - 15) / 32 end)
      local files = { [PATH] = blob_file({ { code = case.code, data = pack_bits(idx, case.bits) },
        { code = 1, data = fp16_bytes(lut) } }) }
      local text = program(string.format([[
        tensor<%s, [%d, %d, 1, 1]> W_idx = const()[name = string("W_idx"), val = tensor<%s, [%d, %d, 1, 1]>(BLOBFILE(path = string("@model_path/weights/weight.bin"), offset = uint64(64)))];
        tensor<fp16, [%d, 1, 1, 1, %d, 1]> W_lut = const()[name = string("W_lut"), val = tensor<fp16, [%d, 1, 1, 1, %d, 1]>(BLOBFILE(path = string("@model_path/weights/weight.bin"), offset = uint64(%d)))];
        tensor<fp16, [%d, %d, 1, 1]> W = constexpr_lut_to_dense(indices = W_idx, lut = W_lut)[name = string("W")];
]], case.name, OC, IC, case.name, OC, IC, OC, entries, OC, entries, 64 + 64 + 64 * math.ceil(OC * IC * case.bits / 8 / 64), OC, IC))
      local got, want = run(text, files, ints(OC * IC, function(i)
        local c = (i - 1) // IC
        return lut[c * entries + idx[i] + 1]
      end))
      assert.are.equal(want:bytes(), got:bytes())
    end)
  end

  it("names the parameter, shape or file at fault", function()
    local function fails(lines, files, pattern)
      local ok, err = pcall(ane.compile_mil, program(lines), files or {}, { backend = "sim" })
      assert.is_false(ok)
      assert.matches(pattern, err)
    end
    fails(string.format("        tensor<fp16, [%d, %d, 1, 1]> W = constexpr_affine_dequantize()[axis = int32(0), quantized_data = "
      .. "tensor<int8, [%d, %d, 1, 1]>(BLOBFILE(path = string(\"@model_path/weights/weight.bin\"), offset = uint64(64))), "
      .. "scale = tensor<fp16, [3]>([1, 2, 3])];\n", OC, IC, OC, IC),
      { [PATH] = blob_file({ { code = 4, data = string.rep("\1", OC * IC) } }) },
      "constexpr_affine_dequantize: scale has 3 values; it needs 1 %(per tensor%) or 8 %(one per channel along axis 0%)")
    fails(string.format("        tensor<fp16, [%d, %d, 1, 1]> W = constexpr_lut_to_dense()[indices = tensor<uint8, [4]>([1, 2, 3, 4]), "
      .. "lut = tensor<fp16, [16]>([%s]), shape = tensor<uint32, [4]>([%d, %d, 1, 1])];\n", OC, IC,
      table.concat(ints(16, function() return 0 end), ", "), OC, IC),
      nil, "constexpr_lut_to_dense: 128 indices of 4 bits need 64 bytes; indices has 4")
    fails(string.format("        tensor<uint4, [%d, %d, 1, 1]> Wq = const()[name = string(\"Wq\"), val = tensor<uint4, [%d, %d, 1, 1]>"
      .. "(BLOBFILE(path = string(\"@model_path/weights/weight.bin\"), offset = uint64(64)))];\n"
      .. "        tensor<fp16, [%d, %d, 1, 1]> W = constexpr_affine_dequantize(axis = int32(0), quantized_data = Wq, scale = fp16(1))[name = string(\"W\")];\n",
      OC, IC, OC, IC, OC, IC),
      { [PATH] = u32(1) .. u32(2) .. string.rep("\0", 56) .. u32(0xDEADBEEF) .. u32(11) .. u64(10) .. u64(128) .. string.rep("\0", 40) .. string.rep("\1", 10) },
      "weight%.bin: record at offset 64: the MIL's type needs 64 data bytes at offset 128, past the end of the 138%-byte file")
  end)
end)

-- The corpus of real programs: MIL that other projects' generators print and that their
-- authors ran on M-series devices, each instantiated with the dimensions below (the .mil
-- files beside this one are the generators' output, byte for byte), with weight files in
-- that project's own layout, inputs, a reference computed here on host tensors (matmul
-- through BLAS, elementwise math in Lua: neither the MIL parser nor sim's kernels), and
-- the verdict sim must give: "runs" (and matches), or a rejection naming a constraint ID.
-- Read by spec/real_mil_spec.lua and scripts/real_mil_table.lua.
local ane = require("ane")

local M = {}

---------------------------------------------------------------------------- host math

local function fp16(t) return t:to("fp16"):to("fp32") end
local function randn(shape, seed, std) return fp16(ane.tensor.randn(shape, { seed = seed, std = std or 1 })) end
local function flat(t) return t:to("fp32"):copy():reshape({ t:numel() }):totable() end
local function from(values, shape) return ane.tensor.from(values, shape) end

-- y[oc, s] = W[oc, ic] x[ic, s], x and y as [1, C, 1, S]
local function conv1x1(w2d, x4d)
  local c, s = x4d:shape()[2], x4d:shape()[4]
  return w2d:matmul(x4d:copy():reshape({ c, s })):reshape({ 1, w2d:shape()[1], 1, s })
end

local function map(t, f)
  local v = flat(t)
  for i = 1, #v do v[i] = f(v[i], i) end
  return from(v, t:shape())
end

local function zip(a, b, f)
  local x, y = flat(a), flat(b)
  for i = 1, #x do x[i] = f(x[i], y[i], i) end
  return from(x, a:shape())
end

-- per-column reductions of [1, C, 1, S] (over C): mean, or mean of squares
local function channel_stat(x, f)
  local c, s = x:shape()[2], x:shape()[4]
  local v, out = flat(x), {}
  for j = 1, s do
    local acc = 0
    for i = 1, c do acc = acc + f(v[(i - 1) * s + j]) end
    out[j] = acc / c
  end
  return out
end

local function per_column(x, f)
  local s = x:shape()[4]
  return map(x, function(v, i) return f(v, (i - 1) % s + 1, (i - 1) // s + 1) end)
end

local function tanh(v) return (math.exp(2 * v) - 1) / (math.exp(2 * v) + 1) end
local function sigmoid(v) return 1 / (1 + math.exp(-v)) end

---------------------------------------------------------------------------- writers

local function u32(v) return string.pack("<I4", v) end
local function u64(v) return string.pack("<I8", v) end
local function zeros(n) return string.rep("\0", n) end

-- maderix/ANE's writers (training/ane_mil_gen.h, quant_probe.m, inmem_peak.m): a header
-- whose count byte is 1 whatever follows, then per blob a record right after the previous
-- data: sentinel, type code 1 (also for int8 and uint4 data), u32 size and u32 data offset
-- (record + 64) -- or, in inmem_peak.m, byte 10 set (a size field of 0x80000) and no
-- data offset at all.
local function maderix_file(blobs, style)
  local parts, cursor = { u32(1) .. u32(2) .. zeros(56) }, 64
  for _, data in ipairs(blobs) do
    local record
    if style == "inmem_peak" then
      record = u32(0xDEADBEEF) .. u32(1) .. zeros(2) .. "\8" .. zeros(53)
    else
      record = u32(0xDEADBEEF) .. u32(1) .. u32(#data) .. u32(0) .. u32(cursor + 64) .. zeros(44)
    end
    parts[#parts + 1] = record .. data
    cursor = cursor + 64 + #data
  end
  return table.concat(parts)
end

-- Orion's orion_make_causal_mask_blob layout, one blob per file: count 1, record at 64,
-- code 1, u32 size, u32 data offset 128.
local function orion_file(data)
  return u32(1) .. u32(2) .. zeros(56) .. u32(0xDEADBEEF) .. u32(1) .. u32(#data) .. u32(0) .. u32(128) .. zeros(44) .. data
end

-- ane-bridge-rs's weights blob as its test describes it: "header + one record + 6 fp16",
-- no padding after the data.
local function bridge_file(data)
  return u32(1) .. u32(2) .. zeros(56) .. u32(0xDEADBEEF) .. u32(1) .. u64(#data) .. u64(128) .. zeros(40) .. data
end

local function bytes_of(t) return t:to("fp16"):bytes() end

local function packed(values, bits)
  local out, acc, used = {}, 0, 0
  for _, v in ipairs(values) do
    acc, used = acc | (v << used), used + bits
    while used >= 8 do
      out[#out + 1] = string.char(acc & 0xFF)
      acc, used = acc >> 8, used - 8
    end
  end
  if used > 0 then out[#out + 1] = string.char(acc) end
  return table.concat(out)
end

local function ints(n, f) local t = {} for i = 1, n do t[i] = f(i) end return t end

local W = "@model_path/weights/weight.bin"

---------------------------------------------------------------------------- the programs

local IC, OC, S = 64, 32, 32

M.programs = {
  {
    file = "maderix_conv.mil", project = "maderix/ANE",
    source = "training/ane_mil_gen.h, mil_gen_conv(in_ch = 64, out_ch = 32, spatial = 32), MIL 1.3 / ios18",
    setup = function(p)
      p.w = randn({ OC, IC }, 1, 0.1)
      p.weights = { [W] = maderix_file({ bytes_of(p.w) }) }
      p.inputs = { x = ane.tensor.randn({ 1, IC, 1, S }, { seed = 2 }) }
    end,
    reference = function(p) return { y = conv1x1(p.w, fp16(p.inputs.x)) } end,
    verdict = "runs",
  },
  {
    file = "maderix_matmul.mil", project = "maderix/ANE",
    source = "training/ane_mil_gen.h, mil_gen_matmul(64, 32, 32): rank-3 I/O",
    setup = function(p)
      p.inputs = { x = ane.tensor.randn({ 1, IC, S }, { seed = 3 }), W = ane.tensor.randn({ 1, OC, IC }, { seed = 4 }) }
    end,
    verdict = { rejected = "ANE-20", because = "rank-3 I/O: the device's I/O schema is rank 4" },
  },
  {
    file = "maderix_dynamic_matmul.mil", project = "maderix/ANE",
    source = "training/ane_mil_gen.h, mil_gen_dynamic_matmul(ic = 64, oc = 32, seq = 32): weights as an input, ios17",
    setup = function(p)
      p.inputs = { x = ane.tensor.randn({ 1, 1, S, IC }, { seed = 5 }), weights = ane.tensor.randn({ 1, 1, IC, OC }, { seed = 6, std = 0.1 }) }
    end,
    reference = function(p)
      local x, w = fp16(p.inputs.x):reshape({ S, IC }), fp16(p.inputs.weights):reshape({ IC, OC })
      return { y = x:matmul(w):reshape({ 1, 1, S, OC }) }
    end,
    verdict = "runs",
  },
  {
    file = "maderix_qkv.mil", project = "maderix/ANE",
    source = "training/ane_mil_gen.h, mil_gen_qkv(dim = 64, spatial = 32) with mil_build_qkv_weight_blob: 3 records, header count 1",
    setup = function(p)
      p.wq, p.wk, p.wv = randn({ 64, 64 }, 7, 0.1), randn({ 64, 64 }, 8, 0.1), randn({ 64, 64 }, 9, 0.1)
      p.weights = { [W] = maderix_file({ bytes_of(p.wq), bytes_of(p.wk), bytes_of(p.wv) }) }
      p.inputs = { x = ane.tensor.randn({ 1, 64, 1, S }, { seed = 10 }) }
    end,
    reference = function(p)
      local x = fp16(p.inputs.x)
      return { q = conv1x1(p.wq, x), k = conv1x1(p.wk, x), v = conv1x1(p.wv, x) }
    end,
    verdict = "runs", notes = { "the header declares 1 blob, the file holds 3" },
  },
  {
    file = "maderix_inmem_peak.mil", project = "maderix/ANE",
    source = "inmem_peak.m, genMIL(ch = 64, sp = 32, depth = 3), fp32 I/O path: program(1.0), tensor<string, []> spelling",
    setup = function(p)
      p.ws = {}
      local blobs = {}
      for i = 1, 3 do
        -- the writer's values: fp16 bit patterns (r & 0x03FF) | 0x2000, small positive numbers
        local bits = ints(64 * 64, function(k) return ((k * 2654435761 + i * 97) % 1024) | 0x2000 end)
        blobs[i] = string.pack(string.rep("<I2", #bits), table.unpack(bits))
        p.ws[i] = ane.tensor.from_bytes(blobs[i], { 64, 64 }, "fp16"):to("fp32")
      end
      p.weights = { [W] = maderix_file(blobs, "inmem_peak") }
      p.inputs = { x = ane.tensor.randn({ 1, 64, 1, S }, { seed = 11 }) }
    end,
    reference = function(p)
      local h = fp16(p.inputs.x)
      for i = 1, 3 do h = fp16(conv1x1(p.ws[i], h)) end
      return { c = h }
    end,
    verdict = "runs", notes = { "data offset field says 0", "claims 524288 data bytes" },
  },
}

-- quant_probe.m's five weight encodings of one conv (ic 64, oc 32, sp 32)
local function quant(file, generator, note, build)
  M.programs[#M.programs + 1] = {
    file = file, project = "maderix/ANE",
    source = "quant_probe.m, " .. generator .. "(ic = 64, oc = 32, sp = 32)" .. (note and (": " .. note) or ""),
    setup = function(p)
      p.inputs = { x = ane.tensor.randn({ 1, IC, 1, S }, { seed = 12 }) }
      build(p)
    end,
    reference = function(p) return { y = conv1x1(p.w, fp16(p.inputs.x)) } end,
    verdict = "runs",
  }
end

quant("maderix_quant_fp16.mil", "gen_fp16_conv", nil, function(p)
  p.w = randn({ OC, IC }, 13, 0.05)
  p.weights = { [W] = maderix_file({ bytes_of(p.w) }) }
end)
quant("maderix_quant_int8.mil", "gen_int8_dequant_conv", "int8 data written under type code 1", function(p)
  local q = ints(OC * IC, function(i) return (i * 71) % 256 - 128 end)
  local scales = ints(OC, function(c) return c / 2048 end)
  local zps = ints(OC, function(c) return c % 7 - 3 end)
  p.w = from(ints(OC * IC, function(i)
    local c = (i - 1) // IC + 1
    return (q[i] - zps[c]) * scales[c]
  end), { OC, IC })
  p.weights = {
    [W] = maderix_file({ string.pack(string.rep("b", #q), table.unpack(q)) }),
    ["@model_path/weights/scale.bin"] = maderix_file({ bytes_of(from(scales, { OC })) }),
    ["@model_path/weights/zp.bin"] = maderix_file({ string.pack(string.rep("b", OC), table.unpack(zps)) }),
  }
  p.w = fp16(p.w)
end)
quant("maderix_quant_uint4.mil", "gen_int4_dequant_conv", "uint4; its zero-point writer puts one byte per channel", function(p)
  local q = ints(OC * IC, function(i) return (i * 11) % 16 end)
  local scale = 0.01
  -- build_zp_int4_blob writes `oc` bytes of 8; read as the MIL's packed uint4 [oc], the
  -- channels' zero points come out 8, 0, 8, 0, ... (low nibble, then high)
  local zps = ints(OC, function(c) return c % 2 == 1 and 8 or 0 end)
  p.w = fp16(from(ints(OC * IC, function(i) return (q[i] - zps[(i - 1) // IC + 1]) * fp16(from({ scale }, { 1 })):get(1) end), { OC, IC }))
  p.weights = {
    [W] = maderix_file({ packed(q, 4) }),
    ["@model_path/weights/scale.bin"] = maderix_file({ bytes_of(from(ints(OC, function() return scale end), { OC })) }),
    ["@model_path/weights/zp.bin"] = maderix_file({ string.rep("\8", OC) }),
  }
end)
quant("maderix_quant_blockwise.mil", "gen_int4_blockwise_conv", "block_size 32", function(p)
  local q = ints(OC * IC, function(i) return (i * 5) % 16 end)
  local scales = ints(OC * 2, function(b) return b / 512 end)
  p.w = fp16(from(ints(OC * IC, function(i)
    local c, k = (i - 1) // IC, (i - 1) % IC
    return q[i] * fp16(from({ scales[c * 2 + k // 32 + 1] }, { 1 })):get(1)
  end), { OC, IC }))
  p.weights = { [W] = maderix_file({ packed(q, 4) }), ["@model_path/weights/scale.bin"] = maderix_file({ bytes_of(from(scales, { OC * 2 })) }) }
end)
quant("maderix_quant_lut4.mil", "gen_lut4_conv", "iOS16 constexpr_lut_to_dense, a [1, 1, 16] palette", function(p)
  local idx = ints(OC * IC, function(i) return (i * 13) % 16 end)
  local lut = ints(16, function(j) return (j - 9) * 0.01 end)
  local lut16 = flat(fp16(from(lut, { 16 })))
  p.w = from(ints(OC * IC, function(i) return lut16[idx[i] + 1] end), { OC, IC })
  p.weights = { [W] = maderix_file({ packed(idx, 4) }), ["@model_path/weights/lut.bin"] = maderix_file({ bytes_of(from(lut, { 16 })) }) }
end)

-- Orion's core/mil_builder.m layers, each wrapped by orion_mil_program (fp16 I/O, one
-- weight file per tensor)
local function orion(file, what, setup, reference, verdict)
  M.programs[#M.programs + 1] = { file = file, project = "mechramc/Orion", source = "core/mil_builder.m, " .. what,
    setup = setup, reference = reference, verdict = verdict or "runs" }
end

local function x16(seed, c) return ane.tensor.randn({ 1, c or 64, 1, S }, { seed = seed, dtype = "fp16" }) end

orion("orion_linear_bias.mil", "orion_mil_linear(\"fc\", \"x\", 64, 32, 32, W, b)", function(p)
  p.w, p.b = randn({ OC, IC }, 20, 0.1), randn({ 1, OC, 1, 1 }, 21, 0.1)
  p.weights = { ["@model_path/weights/fc_W.bin"] = orion_file(bytes_of(p.w)), ["@model_path/weights/fc_b.bin"] = orion_file(bytes_of(p.b)) }
  p.inputs = { x = x16(22) }
end, function(p)
  local b = flat(p.b)
  return { fc_out = per_column(fp16(conv1x1(p.w, p.inputs.x:to("fp32"))), function(v, _, c) return v + b[c] end) }
end)
orion("orion_linear.mil", "orion_mil_linear(\"fc\", \"x\", 64, 32, 32, W, NULL): the identity form", function(p)
  p.w = randn({ OC, IC }, 23, 0.1)
  p.weights = { ["@model_path/weights/fc_W.bin"] = orion_file(bytes_of(p.w)) }
  p.inputs = { x = x16(24) }
end, function(p) return { fc_out = conv1x1(p.w, p.inputs.x:to("fp32")) } end)
orion("orion_layernorm.mil", "orion_mil_layernorm(\"ln\", \"x\", 64, 32, g, b, 1e-5) (reduce_mean: ANE-29 warns)", function(p)
  p.g, p.b = randn({ 1, 64, 1, 1 }, 25, 0.5), randn({ 1, 64, 1, 1 }, 26, 0.5)
  p.weights = { ["@model_path/weights/ln_g.bin"] = orion_file(bytes_of(p.g)), ["@model_path/weights/ln_b.bin"] = orion_file(bytes_of(p.b)) }
  p.inputs = { x = x16(27) }
end, function(p)
  local x = p.inputs.x:to("fp32")
  local mean = channel_stat(x, function(v) return v end)
  local centered = per_column(x, function(v, j) return v - mean[j] end)
  local var = channel_stat(centered, function(v) return v * v end)
  local g, b = flat(p.g), flat(p.b)
  return { ln_out = per_column(centered, function(v, j, c) return v / math.sqrt(var[j] + 1e-5) * g[c] + b[c] end) }
end)
orion("orion_rmsnorm.mil", "orion_mil_rmsnorm(\"rms\", \"x\", 64, 32, w, 1e-5)", function(p)
  p.w = randn({ 1, 64, 1, 1 }, 28, 0.5)
  p.weights = { ["@model_path/weights/rms_w.bin"] = orion_file(bytes_of(p.w)) }
  p.inputs = { x = x16(29) }
end, function(p)
  local x = p.inputs.x:to("fp32")
  local ms = channel_stat(x, function(v) return v * v end)
  local w = flat(p.w)
  return { rms_out = per_column(x, function(v, j, c) return v / math.sqrt(ms[j] + 1e-5) * w[c] end) }
end)
orion("orion_gelu.mil", "orion_mil_gelu(\"g\", \"x\", 64, 32): the tanh form", function(p) p.inputs = { x = x16(30) } end,
  function(p)
    return { g_out = map(p.inputs.x:to("fp32"), function(v) return 0.5 * v * (1 + tanh(0.7979 * (v + 0.044715 * v ^ 3))) end) }
  end)
orion("orion_silu.mil", "orion_mil_silu(\"s\", \"x\", 64, 32)", function(p) p.inputs = { x = x16(31) } end,
  function(p) return { s_out = map(p.inputs.x:to("fp32"), function(v) return v * sigmoid(v) end) } end)
orion("orion_causal_attention.mil", "orion_mil_causal_attention(\"at\", q, k, v, 2 heads, head_dim 32, seq 32) with "
  .. "orion_make_causal_mask_blob(32)", function(p)
  local mask = {}
  for i = 1, S do for j = 1, S do mask[(i - 1) * S + j] = j <= i and 0 or -1e4 end end
  p.weights = { ["@model_path/masks/causal_32.bin"] = orion_file(bytes_of(from(mask, { S, S }))) }
  p.inputs = { q = x16(32), k = x16(33), v = x16(34) }
end, function(p)
  -- per head h: channels 32h+1 .. 32h+32 of [1, 64, 1, S] hold [head_dim, seq]
  local q, k, v = flat(p.inputs.q:to("fp32")), flat(p.inputs.k:to("fp32")), flat(p.inputs.v:to("fp32"))
  local out = {}
  for h = 0, 1 do
    for i = 1, S do
      local scores, peak = {}, -math.huge
      for j = 1, S do
        local dot = 0
        for d = 1, 32 do dot = dot + q[(h * 32 + d - 1) * S + i] * k[(h * 32 + d - 1) * S + j] end
        scores[j] = dot * 0.176777 + (j <= i and 0 or -1e4)
        peak = math.max(peak, scores[j])
      end
      local sum = 0
      for j = 1, S do scores[j] = math.exp(scores[j] - peak); sum = sum + scores[j] end
      for d = 1, 32 do
        local acc = 0
        for j = 1, S do acc = acc + scores[j] / sum * v[(h * 32 + d - 1) * S + j] end
        out[(h * 32 + d - 1) * S + i] = acc
      end
    end
  end
  return { at_out = from(out, { 1, 64, 1, S }) }
end)

-- ANEForge's aneforge/_compile.py: _emit_program_dir around the _Emitter's lines (values
-- named t0, t1, ... in graph order; inline fp16 literals in Python's float.hex spelling)
local function aneforge(file, what, reference, verdict)
  M.programs[#M.programs + 1] = { file = file, project = "sbryngelson/ANEForge", source = "aneforge/_compile.py, " .. what,
    setup = function(p) p.inputs = { t0 = ane.tensor.rand({ 1, 64, 1, 32 }, { seed = 40, low = 0.25, high = 3, dtype = "fp16" }) } end,
    reference = reference, verdict = verdict or "runs" }
end

local function hexf(v) return fp16(from({ v }, { 1 })):get(1) end

aneforge("aneforge_rsqrt.mil", "square (emitted as mul), rsqrt(epsilon), mul: x * rsqrt(x^2 + eps)", function(p)
  local eps = hexf(1.0009765625 * 2 ^ -10)
  return { t3 = map(p.inputs.t0:to("fp32"), function(v) return v / math.sqrt(hexf(v * v) + eps) end) }
end)
aneforge("aneforge_inverse_clip.mil", "inverse(epsilon), clip(alpha, beta), muls", function(p)
  local eps = hexf((1 + 0xc8 / 4096) * 2 ^ -14)
  return { t3 = map(p.inputs.t0:to("fp32"), function(v) return math.max(-4, math.min(4, 1 / (v + eps))) * 0.5 end) }
end)
aneforge("aneforge_log_softplus.mil", "softplus, log(epsilon), silu", function(p)
  local eps = hexf((1 + 0xc8 / 4096) * 2 ^ -14)
  return { t3 = map(p.inputs.t0:to("fp32"), function(v)
    local l = math.log(math.log(1 + math.exp(v)) + eps)
    return l * sigmoid(l)
  end) }
end)
aneforge("aneforge_gelu.mil", "gelu(mode = EXACT)",
  nil, { rejected = "ANE-10", because = "gelu is disputed on the device (Orion's compile failed; ANEForge runs it through "
    .. "e5rt): the ane profile refuses it for a target no probe report says accepts it; the cpu profile runs it "
    .. "(spec/real_mil_spec.lua)" })

-- ane-bridge-rs's Graph::finish (rust/ane-bridge-mil/src/program.rs), the programs of its
-- own tests
local function bridge(file, what, setup, reference)
  M.programs[#M.programs + 1] = { file = file, project = "electricapp/ane-bridge-rs",
    source = "rust/ane-bridge-mil/src/program.rs, test " .. what, setup = setup, reference = reference, verdict = "runs" }
end

bridge("bridge_relu.mil", "emits_well_formed_program (nonce test-1)", function(p) p.inputs = { x = x16(50, 2) } end,
  function(p) return { relu_0 = map(p.inputs.x:to("fp32"), function(v) return math.max(v, 0) end) } end)
bridge("bridge_depthwise_conv.mil", "weight_const_references_blob: a depthwise FIR, 2 groups, 3 taps, left pad 2",
  function(p)
    p.w = from({ 1, 2, 3, 4, 5, 6 }, { 2, 1, 1, 3 })
    p.weights = { [W] = bridge_file(bytes_of(p.w)) }
    p.inputs = { x = x16(51, 2) }
  end, function(p)
    local x, w = flat(p.inputs.x:to("fp32")), flat(p.w)
    local out = {}
    for c = 0, 1 do
      for t = 1, 32 do
        local acc = 0
        for k = 0, 2 do
          local src = t - 2 + k -- left pad 2
          if src >= 1 then acc = acc + w[c * 3 + k + 1] * x[c * 32 + src] end
        end
        out[c * 32 + t] = acc
      end
    end
    return { conv_6 = from(out, { 1, 2, 1, 32 }) }
  end)
bridge("bridge_matmul.mil", "matmul_shapes: [1, 1, 16, 32] x [1, 1, 32, 64]", function(p)
  p.inputs = { a = ane.tensor.randn({ 1, 1, 16, 32 }, { seed = 52, dtype = "fp16" }), b = ane.tensor.randn({ 1, 1, 32, 64 }, { seed = 53, dtype = "fp16" }) }
end, function(p)
  return { mm_2 = p.inputs.a:to("fp32"):reshape({ 16, 32 }):matmul(p.inputs.b:to("fp32"):reshape({ 32, 64 })):reshape({ 1, 1, 16, 64 }) }
end)
bridge("bridge_max_by_relu.mil", "minmax_lowers_to_relu: max(a, b) as b + relu(a - b)", function(p)
  p.inputs = { a = ane.tensor.randn({ 1, 1, 1, 32 }, { seed = 54, dtype = "fp16" }), b = ane.tensor.randn({ 1, 1, 1, 32 }, { seed = 55, dtype = "fp16" }) }
end, function(p) return { add_2 = zip(p.inputs.a:to("fp32"), p.inputs.b:to("fp32"), function(x, y) return math.max(x, y) end) } end)

return M

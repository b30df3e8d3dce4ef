-- Quantized weights (newer facts; disputed): does the device take int8 weights through
-- constexpr_affine_dequantize on the in-memory path? MIL text of an anchored program whose
-- weight const is replaced by an int8 constexpr_affine_dequantize of the same values; then
-- the two forms anelua's quantized models emit (ane.quantize: int8 per-row scales and int4
-- per-row palettes through constexpr_lut_to_dense, with weight files), each against the
-- program of its dequantized weights.
local ane = require("ane")
local programs = require("ane.probes.programs")

local C, SCALE = 16, 1 / 128

return {
  name = "quantized_weights",
  rules = { "ANE-26" },
  question = "Does the device run int8 weights through constexpr_affine_dequantize (one report: refused), and the int8 and int4-palette forms quantized models emit?",
  run = function(bench)
    local q, w = {}, ane.tensor({ C, C, 1, 1 }, "fp16")
    for i = 1, C * C do
      q[i] = (i * 37) % 255 - 127
      w:set(q[i] * SCALE, (i - 1) // C + 1, (i - 1) % C + 1, 1, 1)
    end
    local g = ane.graph("probe_int8")
    local x = g:input("x", { 1, C, 1, 32 })
    g:output("y", g:relu(g:conv(x, g:const("qw", w), { name = "mix" })))
    local text = g:mil()
    local pattern = "tensor<fp16, %[16, 16, 1, 1%]> qw = const%(%)%b[];"
    assert(text:find(pattern), "the probe's MIL has no const qw to replace")
    local quantized = string.format("tensor<fp16, [16, 16, 1, 1]> qw = constexpr_affine_dequantize()[axis = int32(0), "
      .. "name = string(\"qw\"), quantized_data = tensor<int8, [16, 16, 1, 1]>([%s]), scale = fp16(0x1p-7), "
      .. "zero_point = int8(0)];", table.concat(q, ", "))
    local ok, program = bench:compile_mil((text:gsub(pattern, function() return quantized end)), {},
      "MIL with int8 constexpr_affine_dequantize weights")
    if not ok then return { verdict = "does not hold", summary = "refused: " .. require("ane.probe").gist(program) } end
    local inputs = { x = programs.fp16({ 1, C, 1, 32 }, 3, 1) }
    local ran, outputs = bench:eval(program, inputs, nil, "evaluated")
    if not ran then return { verdict = "does not hold", summary = "compiled, but the eval failed" } end
    if not bench:matches(outputs.y, bench:reference(g, inputs).y, "y vs the fp16 weights") then
      return { verdict = "does not hold", summary = "ran, but not with the dequantized weights" }
    end
    for _, encoding in ipairs({ "int8", "int4" }) do -- what quantized models emit
      local weights = ane.quantize(w, encoding)
      local function graph(weight)
        local h = ane.graph("probe_" .. encoding)
        local input = h:input("x", { 1, C, 1, 32 })
        h:output("y", h:relu(h:conv(input, h:const("qw", weight), { name = "mix" })))
        return h
      end
      local emitted, files = graph(weights):mil()
      local compiled, quantized_program = bench:compile_mil(emitted, files, "anelua's " .. encoding .. " weights ("
        .. (encoding == "int8" and "per-row scales" or "per-row palettes, constexpr_lut_to_dense") .. ")")
      if not compiled then
        return { verdict = "does not hold", summary = "int8 through constexpr_affine_dequantize runs; anelua's " .. encoding
          .. " form is refused: " .. require("ane.probe").gist(quantized_program) }
      end
      local done, result = bench:eval(quantized_program, inputs, nil, "evaluated")
      if not done or not bench:matches(result.y, bench:reference(graph(weights:dequantize():to("fp16")), inputs).y,
          "y vs the dequantized " .. encoding .. " weights") then
        return { verdict = "does not hold", summary = "anelua's " .. encoding .. " form compiles but does not compute "
          .. "with its weights" }
      end
    end
    return { verdict = "holds", summary = "int8 (constexpr_affine_dequantize) and int4 palettes (constexpr_lut_to_dense) "
      .. "run and match their dequantized weights" }
  end,
}

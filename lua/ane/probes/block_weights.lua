-- Weights in llama.cpp's blocks (an open question: no report says): does the device run the
-- forms anelua emits for GGUF files' Q8_0, Q4_0 and Q4_K matrices, constexpr_blockwise_shift_scale
-- (iOS18; int8 or int4 data of the weight's shape, a scale per 32 of each row, no offset; Q4_K
-- uint4 data with a scale and a float offset per 32), each against the program of its
-- dequantized weights? Until a device says it does, the ane backend takes such weights
-- dequantized to fp16 (docs/compiler.md).
local ane = require("ane")
local programs = require("ane.probes.programs")

local C = 64 -- (rows of two blocks of 32)

-- A [C, 256] Q4_K matrix, one block of 256 a row (ggml-common.h's block_q4_K: fp16 d and dmin,
-- 12 bytes of 6-bit scales and mins, 128 bytes of codes), its values fixed patterns.
local function q4_k_weights()
  local rows = {}
  for r = 1, C do
    local d = ane.tensor.from({ 0.0005 + r / 65536 }, { 1 }, "fp16"):bytes()
    local dmin = ane.tensor.from({ 0.0003 }, { 1 }, "fp16"):bytes()
    local scales, codes = {}, {}
    for i = 1, 12 do scales[i] = ((r * 7 + i * 13) % 64) | 1 end -- (odd bytes: no 6-bit scale of 0)
    for i = 1, 128 do codes[i] = (r * 31 + i * 17) % 256 end
    rows[r] = d .. dmin .. string.char(table.unpack(scales)) .. string.char(table.unpack(codes))
  end
  local bytes = table.concat(rows)
  return assert(ane.blocks_quantized(ane.tensor.from_bytes(bytes, { #bytes }, "uint8"), "q4_k", { C, 256 }, "probe",
    "fp16"))
end

return {
  name = "block_weights",
  rules = {},
  question = "Does the device run weights in blocks of 32 with a scale each (GGUF's Q8_0 and Q4_0), or a scale and an "
    .. "offset (its Q4_K), through constexpr_blockwise_shift_scale?",
  run = function(bench)
    local w = ane.tensor({ C, C }, "fp32")
    for i = 1, C * C do w:set(((i * 37) % 255 - 127) / 1024, (i - 1) // C + 1, (i - 1) % C + 1) end
    local function graph(weight, cin)
      local g = ane.graph("probe_blocks")
      local x = g:input("x", { 1, cin, 1, 32 })
      g:output("y", g:relu(g:conv(x, g:const("qw", weight), { name = "mix" })))
      return g
    end
    local forms = {
      { "q8_0", ane.quantize(w, "q8_0"):reshape(C, C, 1, 1), C },
      { "q4_0", ane.quantize(w, "q4_0"):reshape(C, C, 1, 1), C },
      { "q4_k", q4_k_weights():reshape(C, 256, 1, 1), 256 },
    }
    for _, form in ipairs(forms) do
      local encoding, weights, cin = form[1], form[2], form[3]
      local inputs = { x = programs.fp16({ 1, cin, 1, 32 }, 3, 1) }
      local text, files = graph(weights, cin):mil()
      local compiled, program = bench:compile_mil(text, files, "anelua's " .. encoding .. " weights (constexpr_blockwise_shift_scale)")
      if not compiled then
        return { verdict = "does not hold", summary = encoding .. " through constexpr_blockwise_shift_scale is refused: "
          .. require("ane.probe").gist(program) }
      end
      local ran, outputs = bench:eval(program, inputs, nil, "evaluated")
      if not ran or not bench:matches(outputs.y, bench:reference(graph(weights:dequantize():to("fp16"), cin), inputs).y,
          "y vs the dequantized " .. encoding .. " weights") then
        return { verdict = "does not hold", summary = encoding .. " compiles but does not compute with its weights" }
      end
    end
    return { verdict = "holds", summary = "q8_0, q4_0 and q4_k weights (constexpr_blockwise_shift_scale) run and match "
      .. "their dequantized weights" }
  end,
}

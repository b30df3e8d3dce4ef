-- Weights in llama.cpp's blocks (an open question: no report says): does the device run the
-- form anelua emits for GGUF files' Q8_0 and Q4_0 matrices, constexpr_blockwise_shift_scale
-- (iOS18; int8 or int4 data of the weight's shape, a scale per 32 of each row, no offset), each
-- against the program of its dequantized weights? Until a device says it does, the ane backend
-- takes such weights dequantized to fp16 (docs/compiler.md).
local ane = require("ane")
local programs = require("ane.probes.programs")

local C = 64 -- (rows of two blocks of 32)

return {
  name = "block_weights",
  rules = {},
  question = "Does the device run weights in blocks of 32 with a scale each (GGUF's Q8_0 and Q4_0) through constexpr_blockwise_shift_scale?",
  run = function(bench)
    local w = ane.tensor({ C, C }, "fp32")
    for i = 1, C * C do w:set(((i * 37) % 255 - 127) / 1024, (i - 1) // C + 1, (i - 1) % C + 1) end
    local inputs = { x = programs.fp16({ 1, C, 1, 32 }, 3, 1) }
    local function graph(weight)
      local g = ane.graph("probe_blocks")
      local x = g:input("x", { 1, C, 1, 32 })
      g:output("y", g:relu(g:conv(x, g:const("qw", weight), { name = "mix" })))
      return g
    end
    for _, encoding in ipairs({ "q8_0", "q4_0" }) do
      local weights = ane.quantize(w, encoding):reshape(C, C, 1, 1)
      local text, files = graph(weights):mil()
      local compiled, program = bench:compile_mil(text, files, "anelua's " .. encoding .. " weights (constexpr_blockwise_shift_scale)")
      if not compiled then
        return { verdict = "does not hold", summary = encoding .. " through constexpr_blockwise_shift_scale is refused: "
          .. require("ane.probe").gist(program) }
      end
      local ran, outputs = bench:eval(program, inputs, nil, "evaluated")
      if not ran or not bench:matches(outputs.y, bench:reference(graph(weights:dequantize():to("fp16")), inputs).y,
          "y vs the dequantized " .. encoding .. " weights") then
        return { verdict = "does not hold", summary = encoding .. " compiles but does not compute with its weights" }
      end
    end
    return { verdict = "holds", summary = "q8_0 and q4_0 weights (constexpr_blockwise_shift_scale) run and match their "
      .. "dequantized weights" }
  end,
}

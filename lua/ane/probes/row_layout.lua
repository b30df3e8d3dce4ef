-- ANE-21 / ANE-20: how the rows of a [1, C, 1, S] I/O surface lie in memory. The reports
-- disagree: the catalogue has each row start at a multiple of 64 bytes, Orion on M4 saw rows
-- packed back to back, ane-bridge-rs on M5 saw them start at multiples of 32 elements (128
-- bytes in fp32). Width 48 (at least the catalogue's minimum of 32) tells them apart: in fp16
-- a row is 96 bytes packed and 128 padded either way; in fp32, 192 bytes at 64-byte steps
-- and 256 at 32-element steps. Each layout is tried as the target's (the device backend
-- lays surfaces out by it when the loaded model reports no stride); the first under which
-- both programs match the CPU path is the chip's.
local programs = require("ane.probes.programs")

local LAYOUTS = { "64-bytes", "packed", "32-elements" }

-- x [1, 64, 1, 48] of `dtype` -> (cast to fp16) -> anchored conv -> (cast back) -> y
local function narrow(dtype)
  local ane = require("ane")
  local g = ane.graph("probe_rows_" .. dtype)
  local x = g:input("x", { 1, 64, 1, 48 }, dtype)
  local h = dtype == "fp16" and x or g:cast(x, "fp16")
  h = g:relu(g:conv(h, g:const("probe_rows_w", programs.fp16({ 64, 64, 1, 1 }, 2)), { name = "probe_rows_anchor" }))
  g:output("y", dtype == "fp16" and h or g:cast(h, dtype))
  local input = programs.fp16({ 1, 64, 1, 48 }, 3, 1.0)
  return g, { x = dtype == "fp16" and input or input:to(dtype) }
end

return {
  name = "row_layout",
  rules = { "ANE-21", "ANE-20" },
  question = "Where does each row of a [1, C, 1, S] I/O surface start (64 bytes; packed on M4; 32 elements on M5)?",
  run = function(bench)
    local base = bench.target
    if type(base) ~= "string" or not ({ generic = 1, unchecked = 1 })[base] then base = "generic" end
    local fp16_program, fp16_inputs = narrow("fp16")
    local fp32_program, fp32_inputs = narrow("fp32")
    local outcomes = {}
    for _, layout in ipairs(LAYOUTS) do
      bench.target = { base = base, name = "row layout " .. layout, io_rows = layout }
      local half = programs.try(bench, fp16_program, fp16_inputs)
      local single = programs.try(bench, fp32_program, fp32_inputs)
      bench.target = base
      outcomes[layout] = half .. "/" .. single
      bench:note("rows at %s: fp16 width 48 %s, fp32 width 48 %s", layout, half, single)
      if half == "runs" and single == "runs" then
        bench.opts.io_rows = layout -- the probes after this one in the run use it
        return { verdict = "measured", value = layout, details = outcomes,
          summary = string.format("narrow fp16 and fp32 I/O run with rows at %s", layout) }
      end
    end
    return { verdict = "cannot tell", details = outcomes,
      summary = "no known row layout runs narrow fp16 and fp32 I/O correctly (see the evidence)" }
  end,
  values = LAYOUTS,
  target = function(v, t) if type(v.value) == "string" then t.io_rows = v.value end end,
}

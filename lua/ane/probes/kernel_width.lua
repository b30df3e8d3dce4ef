-- ANE-23: the widest conv kernel the device compiles (catalogue: 15, 13 on M1), by
-- bisection over widths 1 .. 31.
local ane = require("ane")
local programs = require("ane.probes.programs")

local function kernel_of(bench, width)
  local g = ane.graph("probe_kernel_" .. width)
  local x = g:input("x", { 1, 16, 1, 64 })
  local y = g:conv(x, g:const("w", programs.fp16({ 16, 16, 1, width }, 2)), { pads = { 0, 0, 0, width - 1 } })
  g:output("y", y)
  return (bench:compile(g, string.format("conv with a kernel %d wide", width)))
end

return {
  name = "kernel_width",
  rules = { "ANE-23" },
  question = "How wide can a conv kernel be (catalogue: 15; 13 on M1)?",
  run = function(bench)
    if not kernel_of(bench, 1) then return { verdict = "cannot tell", summary = "even a 1-wide kernel was refused" } end
    local widest, all = programs.largest(1, 31, 1, function(w) return kernel_of(bench, w) end)
    return { verdict = "measured", value = widest, unit = "elements",
      summary = all and "every width up to 31 compiled" or string.format("width %d compiles, %d does not", widest, widest + 1) }
  end,
  values = { from = 1, to = 31 }, -- what the bisection can measure (a report is checked against it)
  target = function(v, t) if type(v.value) == "number" then t.max_kernel_width = math.tointeger(v.value) end end,
}

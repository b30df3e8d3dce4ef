-- ANE-16: the widest conv (input channels) the device compiles, by bisection in steps of
-- 1,024 channels up to 65,536 (a [1, C, 1, 32] input into an 8-channel 1x1 conv).
local ane = require("ane")
local programs = require("ane.probes.programs")

local function conv_of(bench, channels)
  local g = ane.graph("probe_conv_" .. channels)
  local x = g:input("x", { 1, channels, 1, 32 })
  g:output("y", g:conv(x, g:const("w", programs.fp16({ 8, channels, 1, 1 }, 2, 0.01))))
  return (bench:compile(g, string.format("conv %d -> 8 channels", channels)))
end

return {
  name = "conv_channels",
  rules = { "ANE-16" },
  question = "How many input channels can a conv have (catalogue: 16,384)?",
  run = function(bench)
    if not conv_of(bench, 1024) then return { verdict = "cannot tell", summary = "even a 1,024-channel conv was refused" } end
    local widest, all = programs.largest(1024, 65536, 1024, function(c) return conv_of(bench, c) end)
    return { verdict = "measured", value = widest, unit = all and "channels (all tried compiled)" or "channels",
      summary = all and "every width up to 65,536 compiled" or string.format("%d compiles, %d does not", widest, widest + 1024) }
  end,
  values = { from = 1024, to = 65536, step = 1024 }, -- what the bisection can measure
  target = function(v, t) if type(v.value) == "number" then t.max_conv_channels = math.tointeger(v.value) end end,
}

-- ANE-17: how much faster a 1x1 conv runs than the same product written as a matmul
-- (catalogue: ~3x). y = W x over [1, 512, 1, 64], both ways, median of 9 evaluations each.
local ane = require("ane")
local programs = require("ane.probes.programs")

local C, S = 512, 64

return {
  name = "conv_vs_matmul",
  rules = { "ANE-17" },
  question = "How many times faster is a 1x1 conv than the same matmul (catalogue: ~3x)?",
  run = function(bench)
    local w = programs.fp16({ C, C, 1, 1 }, 2, 0.05)
    local conv = ane.graph("probe_as_conv")
    local x = conv:input("x", { 1, C, 1, S })
    conv:output("y", conv:conv(x, conv:const("w", w)))
    local mm = ane.graph("probe_as_matmul")
    local x2 = mm:input("x", { 1, C, 1, S })
    local product = mm:matmul(mm:const("w", w:reshape({ 1, 1, C, C })), mm:reshape(x2, { 1, 1, C, S }))
    mm:output("y", mm:reshape(product, { 1, C, 1, S }))
    local ok1, p_conv = bench:compile(conv)
    local ok2, p_mm = bench:compile(mm)
    if not (ok1 and ok2) then return { verdict = "cannot tell", summary = "one of the two programs did not compile" } end
    local inputs = { x = programs.fp16({ 1, C, 1, S }, 3, 1) }
    if not bench:matches(p_mm:eval(inputs).y, p_conv:eval(inputs).y, "y (matmul vs conv)") then
      return { verdict = "cannot tell", summary = "the two programs disagree" }
    end
    local t_conv = bench:time(function() p_conv:eval(inputs) end, 9)
    local t_mm = bench:time(function() p_mm:eval(inputs) end, 9)
    bench:note("median eval: conv %.3f ms, matmul %.3f ms", t_conv * 1e3, t_mm * 1e3)
    local ratio = t_mm / t_conv
    return { verdict = "measured", value = tonumber(string.format("%.2f", ratio)), unit = "x (matmul time / conv time)",
      summary = string.format("the conv runs %.2fx as fast as the matmul%s", ratio,
        bench.modelled and " on sim's CPU kernels, which say nothing about the device" or "") }
  end,
}

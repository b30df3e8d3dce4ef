-- The numeric cliffs of the newer facts: where a conv's fp16 output turns to inf (reports:
-- near 32,752, well below fp16's 65,504), and whether NaN propagates. A 64 -> 1 channel
-- conv of ones sums its inputs, so an input of v/64 everywhere gives v.
local ane = require("ane")
local programs = require("ane.probes.programs")

local function summing(bench)
  local g = ane.graph("probe_cliff")
  local x = g:input("x", { 1, 64, 1, 32 })
  g:output("y", g:conv(x, g:const("ones", programs.filled({ 64, 64, 1, 1 }, 1))))
  local ok, program = bench:compile(g)
  return ok and program
end

return {
  name = "numeric_cliffs",
  rules = { "ANE-26" },
  question = "Where does a conv's fp16 output overflow to inf (reports: ~32,752, not 65,504), and does NaN propagate?",
  run = function(bench)
    local program = summing(bench)
    if not program then return { verdict = "cannot tell", summary = "the probe's program did not compile" } end
    local function overflows(v)
      local y = program:eval({ x = programs.filled({ 1, 64, 1, 32 }, v / 64) }).y:get(1, 1, 1, 1)
      return y == math.huge
    end
    local first_inf = overflows(66000) and programs.smallest(16384, 66000, 16, overflows)
    if not first_inf then return { verdict = "cannot tell", summary = "no overflow even at 66,000" } end
    bench:note("sums of %d and above come out as inf", first_inf)
    local x = programs.filled({ 1, 64, 1, 32 }, 0.5)
    x:set(0 / 0, 1, 1, 1, 1)
    local nan_out = program:eval({ x = x }).y:get(1, 1, 1, 1)
    local propagates = nan_out ~= nan_out
    bench:note("a NaN input gives %s", tostring(nan_out))
    return { verdict = "measured", value = first_inf, unit = "(first sum that is inf)",
      summary = string.format("outputs overflow from %d (fp16's own limit rounds to inf from 65,520); NaN %s", first_inf,
        propagates and "propagates" or "does not propagate"),
      details = { overflow_at = first_inf, nan_propagates = propagates } }
  end,
}

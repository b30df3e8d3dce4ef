-- The numeric cliffs of the newer facts: where a matmul's fp16 output turns to inf (reports:
-- near 32,752, well below fp16's 65,504), whether values above 4,094 saturate in a slice
-- at a non-zero offset of the last axis (before A16), and whether NaN propagates. The matmul
-- of a [64, 64] block of ones with x sums x's 64 rows, so an input of v/64 everywhere gives v.
local ane = require("ane")
local programs = require("ane.probes.programs")

local function summing(bench)
  local g = ane.graph("probe_cliff")
  local x = g:input("x", { 1, 64, 1, 32 })
  local sums = g:matmul(g:const("ones", programs.filled({ 1, 1, 64, 64 }, 1)), g:reshape(x, { 1, 1, 64, 32 }))
  g:output("y", g:reshape(sums, { 1, 64, 1, 32 }))
  local ok, program = bench:compile(g)
  return ok and program
end

-- y = x[..., 1:33] of a [1, 64, 1, 64] input: a slice at offset 1 of the last axis
local function offset_slice(bench)
  local g = ane.graph("probe_slice_offset")
  local x = g:input("x", { 1, 64, 1, 64 })
  local h = g:conv(x, g:const("eye", programs.identity_weight(64)))
  g:output("y", g:slice_by_size(h, { 0, 0, 0, 1 }, { 1, 64, 1, 32 }))
  local ok, program = bench:compile(g)
  return ok and program
end

return {
  name = "numeric_cliffs",
  rules = { "ANE-26" },
  question = "Where does a matmul's fp16 output overflow to inf (reports: ~32,752, not 65,504), do slices at an offset "
    .. "saturate above 4,094, and does NaN propagate?",
  run = function(bench)
    local program = summing(bench)
    if not program then return { verdict = "cannot tell", summary = "the probe's matmul did not compile" } end
    local function overflows(v)
      local y = program:eval({ x = programs.filled({ 1, 64, 1, 32 }, v / 64) }).y:get(1, 1, 1, 1)
      return y == math.huge
    end
    local first_inf = overflows(66000) and programs.smallest(16384, 66000, 16, overflows)
    if not first_inf then return { verdict = "cannot tell", summary = "no overflow even at 66,000" } end
    bench:note("matmul sums of %d and above come out as inf", first_inf)
    local x = programs.filled({ 1, 64, 1, 32 }, 0.5)
    x:set(0 / 0, 1, 1, 1, 1)
    local nan_out = program:eval({ x = x }).y:get(1, 1, 1, 1)
    local propagates = nan_out ~= nan_out
    bench:note("a NaN input gives %s", tostring(nan_out))
    local sliced, saturates = offset_slice(bench), nil
    if sliced then
      local y = sliced:eval({ x = programs.filled({ 1, 64, 1, 64 }, 5000) }).y:get(1, 1, 1, 1)
      saturates = y < 4999
      bench:note("5,000 sliced at offset 1 of the last axis reads back as %g", y)
    end
    return { verdict = "measured", value = first_inf, unit = "(first matmul sum that is inf)",
      summary = string.format("matmul outputs overflow from %d (fp16 itself rounds to inf from 65,520); NaN %s; "
        .. "offset slices %s", first_inf, propagates and "propagates" or "does not propagate",
        saturates == nil and "not tested" or (saturates and "saturate" or "do not saturate")),
      details = { overflow_at = first_inf, nan_propagates = propagates, offset_slice_saturates = saturates } }
  end,
}

-- ANE-04: the smallest I/O surface allocation the device evaluates, found by bisection over
-- page-sized allocations of a program whose data needs 4 KB.
local ane = require("ane")
local programs = require("ane.probes.programs")

return {
  name = "min_surface",
  rules = { "ANE-04" },
  question = "What is the smallest I/O surface allocation the device evaluates (catalogue: ~49,152 bytes)?",
  run = function(bench)
    local g = ane.graph("probe_min_surface")
    local x = g:input("x", { 1, 64, 1, 32 })
    g:output("y", g:conv(x, g:const("w", programs.fp16({ 64, 64, 1, 1 }, 2))))
    local ok, program = bench:compile(g)
    if not ok then return { verdict = "cannot tell", summary = "the probe's program did not compile" } end
    local page = ane.surface { channels = 1, seq = 1, below_minimum = true }:info().alloc_size
    local input = programs.fp16({ 1, 64, 1, 32 }, 3, 1)
    local function runs(bytes)
      local s_in = ane.surface { channels = 64, seq = 32, alloc_size = bytes, below_minimum = true }
      local s_out = ane.surface { channels = 64, seq = 32, alloc_size = bytes, below_minimum = true }
      s_in:write(input)
      return (bench:eval(program, { x = s_in }, { y = s_out }, string.format("surfaces of %d bytes", bytes)))
    end
    local lo, hi = 4096, 32 * page
    lo = math.max(lo, page)
    if not runs(hi) then return { verdict = "cannot tell", summary = string.format("even %d-byte surfaces failed", hi) } end
    local smallest, at_low = programs.smallest(lo, hi, page, runs)
    local summary = at_low and string.format("surfaces of %d bytes (the data alone) run: no minimum above the data", smallest)
      or string.format("%d bytes is the smallest allocation that runs (%d fails)", smallest, smallest - page)
    return { verdict = "measured", value = smallest, unit = "bytes", summary = summary }
  end,
}

-- Dispatch cost (newer facts: ~60 us + bytes moved / ~110-136 GB/s on M5; floor ~0.22 ms on
-- M1): an identity-like program at 8 KB and at 8 MB of I/O, median of 15 evaluations each.
local ane = require("ane")
local programs = require("ane.probes.programs")

local function relu_program(bench, channels, width)
  local g = ane.graph(string.format("probe_dispatch_%dx%d", channels, width))
  local x = g:input("x", { 1, channels, 1, width })
  g:output("y", g:relu(g:add(x, g:const("b", programs.fp16({ 1, channels, 1, 1 }, 2)))))
  local ok, program = bench:compile(g)
  return ok and program, { x = programs.fp16({ 1, channels, 1, width }, 3, 1) }, channels * width * 2 * 2
end

return {
  name = "dispatch_cost",
  rules = { "ANE-15" },
  question = "What does one dispatch cost: the floor, and the time per byte moved?",
  run = function(bench)
    local small, small_in, small_bytes = relu_program(bench, 64, 64)
    local large, large_in, large_bytes = relu_program(bench, 1024, 2048)
    if not (small and large) then return { verdict = "cannot tell", summary = "a probe program did not compile" } end
    local t_small = bench:time(function() small:eval(small_in) end, 15)
    local t_large = bench:time(function() large:eval(large_in) end, 15)
    local per_gb = (t_large - t_small) / ((large_bytes - small_bytes) / 1e9)
    bench:note("%d bytes moved: %.1f us; %d bytes: %.1f us; so %.1f GB/s beyond the floor", small_bytes, t_small * 1e6,
      large_bytes, t_large * 1e6, 1 / per_gb)
    return { verdict = "measured", value = tonumber(string.format("%.1f", t_small * 1e6)), unit = "us per dispatch (floor)",
      summary = string.format("%.1f us floor, %.1f GB/s per byte moved%s", t_small * 1e6, 1 / per_gb,
        bench.modelled and " (sim on the CPU)" or ""),
      details = { floor_us = t_small * 1e6, gb_per_s = 1 / per_gb } }
  end,
}

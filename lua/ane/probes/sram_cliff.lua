-- ANE-27: does a working set beyond the ~32 MB of SRAM run slower per byte? 1x1 convs over
-- [1, C, 1, 32] with weights of 8 to 48 MB; time per weight byte below and above 32 MB.
local ane = require("ane")
local programs = require("ane.probes.programs")

local SIZES = { 2048, 2896, 4096, 5016 } -- C: C*C fp16 weights of 8, 16, 32 and 48 MB

return {
  name = "sram_cliff",
  rules = { "ANE-27" },
  question = "Do weights beyond ~32 MB run slower per byte (catalogue: ~30% slower)?",
  run = function(bench)
    local per_byte = {}
    for _, c in ipairs(SIZES) do
      local g = ane.graph("probe_sram_" .. c)
      local x = g:input("x", { 1, c, 1, 32 })
      g:output("y", g:conv(x, g:const("w", programs.fp16({ c, c, 1, 1 }, 2, 0.01))))
      local ok, program = bench:compile(g)
      if not ok then return { verdict = "cannot tell", summary = "a " .. c .. "-channel conv did not compile" } end
      local inputs = { x = programs.fp16({ 1, c, 1, 32 }, 3, 1) }
      local t = bench:time(function() program:eval(inputs) end, 3)
      local mb = c * c * 2 / 2 ^ 20
      per_byte[#per_byte + 1] = { mb = mb, ns = t * 1e9 / (c * c * 2) }
      bench:note("%.0f MB of weights: %.2f ms per eval, %.3f ns per weight byte", mb, t * 1e3, per_byte[#per_byte].ns)
      program:close()
    end
    local below, above = per_byte[2].ns, per_byte[#per_byte].ns
    local ratio = above / below
    return { verdict = "measured", value = tonumber(string.format("%.2f", ratio)), unit = "x (time per byte at 48 MB / at 16 MB)",
      summary = string.format("48 MB runs %.2fx the time per byte of 16 MB%s", ratio,
        bench.modelled and " on sim's CPU (its caches, not the device's SRAM)" or "") }
  end,
}

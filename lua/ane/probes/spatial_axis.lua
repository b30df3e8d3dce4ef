-- ANE-31: the longest width / contraction axis the device compiles (newer facts: 16,384 on
-- M1-M3, 65,536 on M4/M5): a [1, 1, 1, L] x [1, 1, L, 32] matmul for L up to 131,072.
local ane = require("ane")
local programs = require("ane.probes.programs")

local LENGTHS = { 4096, 16384, 32768, 65536, 131072 } -- tried in turn

local function matmul_of(bench, length)
  local g = ane.graph("probe_spatial_" .. length)
  local x = g:input("x", { 1, 1, 1, 32 })
  local a = g:const("a", programs.fp16({ 1, 1, 1, length }, 2, 0.01))
  local b = g:const("b", programs.fp16({ 1, 1, length, 32 }, 3, 0.01))
  g:output("y", g:add(x, g:matmul(a, b)))
  return (bench:compile(g, string.format("matmul contracting %d elements", length)))
end

return {
  name = "spatial_axis",
  rules = { "ANE-31" },
  question = "How long can the width or a matmul's contraction axis be (M1-M3: 16,384; M4/M5: 65,536)?",
  run = function(bench)
    local longest, tried = 0, LENGTHS
    for _, length in ipairs(tried) do
      if not matmul_of(bench, length) then break end
      longest = length
    end
    if longest == 0 then return { verdict = "cannot tell", summary = "even a 4,096-long contraction was refused" } end
    return { verdict = "measured", value = longest, unit = "elements",
      summary = longest == tried[#tried] and "every length tried compiled" or
        string.format("%d compiles, the next length tried (twice as long) does not", longest) }
  end,
  values = LENGTHS,
  target = function(v, t) if type(v.value) == "number" then t.max_spatial = math.tointeger(v.value) end end,
}

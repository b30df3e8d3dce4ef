-- ANE-28: is a purely elementwise program (no conv or matmul) refused?
local ane = require("ane")
local programs = require("ane.probes.programs")

return {
  name = "elementwise_only",
  rules = { "ANE-28" },
  question = "Is a purely elementwise program (no conv or matmul) refused?",
  run = function(bench)
    local g = ane.graph("probe_elementwise")
    local x = g:input("x", { 1, 64, 1, 32 })
    g:output("y", g:add(g:mul(x, x), x))
    local outcome, message = programs.try(bench, g, { x = programs.fp16({ 1, 64, 1, 32 }, 3, 1) })
    if outcome == "runs" then return { verdict = "does not hold", summary = "x*x + x alone runs and matches the CPU path" } end
    return { verdict = "holds", summary = "x*x + x alone is " .. outcome .. ": " .. require("ane.probe").gist(message) }
  end,
  target = function(v, t) if v.verdict == "holds" then t.rules["ANE-28"] = "error" end end,
}

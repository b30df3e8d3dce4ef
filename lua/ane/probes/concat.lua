-- ANE-01 (and open question 3): does the device compiler reject concat?
local programs = require("ane.probes.programs")

return {
  name = "concat",
  rules = { "ANE-01", "Q3" },
  question = "Does the device reject concat?",
  run = function(bench)
    local g, inputs = programs.anchored("probe_concat", function(g, h) return g:concat({ h, h }, 1, { name = "cat" }) end)
    local outcome, message = programs.try(bench, g, inputs)
    if outcome == "runs" then
      return { verdict = "does not hold", summary = "concat compiles and its output matches the CPU path" }
    elseif outcome == "wrong" then
      return { verdict = "holds", summary = "concat compiles but gives wrong data: " .. message }
    end
    return { verdict = "holds", summary = "concat is " .. outcome .. " (" .. require("ane.probe").gist(message) .. ")" }
  end,
  target = function(v, t)
    if v.verdict == "does not hold" then t.accepted_ops[#t.accepted_ops + 1] = "concat" end
  end,
}

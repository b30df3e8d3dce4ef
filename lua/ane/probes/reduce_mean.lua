-- ANE-29: does reduce_mean fail on this device (it compiles but fails at dispatch on some
-- chips)?
local programs = require("ane.probes.programs")

return {
  name = "reduce_mean",
  rules = { "ANE-29" },
  question = "Does reduce_mean fail (compile or dispatch) on this device?",
  run = function(bench)
    local g, inputs = programs.anchored("probe_reduce_mean", function(g, h)
      return g:add(h, g:reduce_mean(h, { 1 }, { keep_dims = true }))
    end)
    local outcome, message = programs.try(bench, g, inputs)
    if outcome == "runs" then return { verdict = "does not hold", summary = "reduce_mean runs and matches the CPU path" } end
    return { verdict = "holds", summary = "reduce_mean " .. outcome .. ": " .. require("ane.probe").gist(message) }
  end,
  target = function(v, t)
    if v.verdict == "holds" then t.refused_ops[#t.refused_ops + 1] = "reduce_mean"
    else t.rules["ANE-29"] = "off" end
  end,
}

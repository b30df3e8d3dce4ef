-- ANE-30: does softmax over an axis that is not a power of two (48) fail?
local programs = require("ane.probes.programs")

return {
  name = "softmax_axis",
  rules = { "ANE-30" },
  question = "Does softmax over 48 elements (not a power of two) fail?",
  run = function(bench)
    local g, inputs = programs.anchored("probe_softmax_48", function(g, h) return g:softmax(h, 3) end, 64, 48)
    local outcome, message = programs.try(bench, g, inputs)
    if outcome == "runs" then return { verdict = "does not hold", summary = "softmax over 48 runs and matches the CPU path" } end
    return { verdict = "holds", summary = "softmax over 48 " .. outcome .. ": " .. require("ane.probe").gist(message) }
  end,
  target = function(v, t) t.rules["ANE-30"] = v.verdict == "holds" and "error" or "off" end,
}

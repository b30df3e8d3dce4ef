-- ANE-10 and open question 3: which of exp, sqrt, softmax, ... the device compiles and runs,
-- and whether it runs gelu (refused for Orion, run by ANEForge: disputed). One anchored program
-- per op; a gelu the chip runs goes into the report's accepted ops, so a target made from the
-- report compiles gelu for the device.
local programs = require("ane.probes.programs")

local OPS = { "exp", "sqrt", "rsqrt", "log", "tanh", "sigmoid", "silu", "softplus", "softmax", "reduce_sum", "pow" }

local function build(op)
  return function(g, h)
    if op == "sqrt" or op == "rsqrt" or op == "log" then h = g:add(g:mul(h, h), g:const(op .. "_one", programs.filled({ 1 }, 1))) end
    if op == "softmax" then return g:softmax(h, 1) end
    if op == "reduce_sum" then return g:add(h, g:reduce_sum(h, { 1 }, { keep_dims = true })) end
    if op == "pow" then return g:pow(g:mul(h, h), g:const("pow_two", programs.filled({ 1 }, 2))) end
    return g[op](g, h)
  end
end

return {
  name = "op_acceptance",
  rules = { "ANE-10", "Q3" },
  question = "Which unary ops (exp, sqrt, softmax, ...) does the device run, and is gelu refused?",
  ops = OPS,
  run = function(bench)
    local refused, details = {}, {}
    for _, op in ipairs(OPS) do
      local g, inputs = programs.anchored("probe_" .. op, build(op))
      local outcome = programs.try(bench, g, inputs)
      details[op] = outcome
      if outcome ~= "runs" then refused[#refused + 1] = op .. " (" .. outcome .. ")" end
    end
    -- gelu: refused by the validator for targets that have not accepted it (sim's model of the
    -- generic chip); a device bench compiles unchecked, so the chip answers, and a gelu that
    -- runs but is off the CPU path by more than the bench's tolerance (ANEForge measured a
    -- lookup table ~8% off on M1) is "wrong", not accepted
    local g, inputs = programs.anchored("probe_gelu", function(g, h) return g:gelu(h, { mode = "TANH_APPROXIMATION" }) end)
    details.gelu = programs.try(bench, g, inputs)
    local summary = (#refused == 0 and "every op ran and matched the CPU path" or ("not run: " .. table.concat(refused, ", ")))
      .. "; gelu " .. details.gelu
    return { verdict = (#refused == 0 and details.gelu ~= "runs") and "holds" or "does not hold", summary = summary,
      details = details }
  end,
  target = function(v, t)
    for op, outcome in pairs(v.details or {}) do
      if op ~= "gelu" and outcome ~= "runs" then t.refused_ops[#t.refused_ops + 1] = op end
    end
    if (v.details or {}).gelu == "runs" then t.accepted_ops[#t.accepted_ops + 1] = "gelu" end
  end,
}

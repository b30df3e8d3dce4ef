-- ANE-10 and open question 3: which of exp, sqrt, softmax, ... the device compiles and runs,
-- and whether gelu (not an op on the device) is refused. One anchored program per op.
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
    -- gelu is not in anelua's op set: ask with MIL text, a relu program's with the op renamed
    local g = programs.anchored("probe_gelu", function(g, h) return g:relu(h) end)
    local text, weights = g:mil()
    local gelu_text = text:gsub('relu%(x = ([%w_]+)%)', 'gelu(mode = string("TANH_APPROXIMATION"), x = %1)')
    local gelu_ok = bench:compile_mil(gelu_text, weights, "MIL with gelu(mode = TANH_APPROXIMATION)")
    details.gelu = gelu_ok and "compiles" or "refused"
    local summary = (#refused == 0 and "every op ran and matched the CPU path" or ("not run: " .. table.concat(refused, ", ")))
      .. "; gelu " .. details.gelu
    return { verdict = (#refused == 0 and not gelu_ok) and "holds" or "does not hold", summary = summary, details = details }
  end,
  target = function(v, t)
    for op, outcome in pairs(v.details or {}) do
      if op ~= "gelu" and outcome ~= "runs" then t.refused_ops[#t.refused_ops + 1] = op end
    end
  end,
}

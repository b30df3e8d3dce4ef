-- ANE-05: how many compiles a process gets before compiles fail (or silently give programs
-- that compute nothing). Runs in a child process, so this one keeps its budget.
local ane = require("ane")

local TRIES = 300

-- The child: compile distinct programs (one weight value each) and evaluate each, until
-- one fails; prints {compiled = n, failure = message}.
local CHILD = [[
local ane = require("ane")
local cjson = require("cjson")
local compiled, failure = 0, nil
for i = 1, %d do
  local g = ane.graph("budget_" .. i)
  local x = g:input("x", { 1, 16, 1, 32 })
  local w = ane.tensor({ 16, 16, 1, 1 }, "fp16"):fill(i / 1024)
  g:output("y", g:conv(x, g:const("w", w)))
  local ok, err = pcall(function()
    local y = ane.compile(g, { target = "unchecked" }):eval({ x = ane.tensor({ 1, 16, 1, 32 }, "fp16"):fill(1) }).y
    assert(math.abs(y:get(1, 1, 1, 1) - 16 * i / 1024) < 0.05 * (16 * i / 1024) + 1e-3, "a compiled program computed nothing")
  end)
  if not ok then failure = tostring(err):match("[^\n]*"); break end
  compiled = i
end
print(cjson.encode({ compiled = compiled, failure = failure or cjson.null }))
]]

return {
  name = "compile_budget",
  rules = { "ANE-05" },
  question = "How many compiles does one process get before compiles fail (catalogue: ~119)?",
  run = function(bench)
    if bench.modelled then
      local budget = ane.stats().compile_budget
      bench:note("sim models the budget as a per-process counter set to %d (ANELUA_COMPILE_BUDGET)", budget)
      return { verdict = "measured", value = budget, unit = "compiles", summary = "the modelled budget" }
    end
    local result, why = bench:child(string.format(CHILD, TRIES), { ANELUA_COMPILE_BUDGET = 100000 })
    if not result then return { verdict = "cannot tell", summary = why } end
    for k, v in pairs(result) do result[k] = math.tointeger(v) or v end
    bench:note("child process: %d compiles succeeded%s", result.compiled,
      result.failure ~= require("cjson").null and ("; then: " .. tostring(result.failure)) or "")
    if result.compiled >= TRIES then
      return { verdict = "measured", value = TRIES, unit = "compiles (no failure: at least this many)",
        summary = string.format("%d compiles in one process, none failed", TRIES) }
    end
    return { verdict = "measured", value = result.compiled, unit = "compiles",
      summary = string.format("compile %d failed after %d succeeded", result.compiled + 1, result.compiled) }
  end,
}

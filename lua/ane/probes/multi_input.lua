-- Open question 2: does the device run programs with several inputs (error 0x1d in one
-- report, working in others)?
local ane = require("ane")
local programs = require("ane.probes.programs")

return {
  name = "multi_input",
  rules = { "Q2", "ANE-18" },
  question = "Does the device run a program with two inputs?",
  run = function(bench)
    local g = ane.graph("probe_two_inputs")
    local a, b = g:input("a", { 1, 64, 1, 32 }), g:input("b", { 1, 64, 1, 32 })
    g:output("y", g:add(g:conv(a, g:const("w", programs.fp16({ 64, 64, 1, 1 }, 2))), b))
    local outcome, message = programs.try(bench, g, { a = programs.fp16({ 1, 64, 1, 32 }, 3, 1), b = programs.fp16({ 1, 64, 1, 32 }, 4, 1) })
    if outcome == "runs" then return { verdict = "holds", summary = "two inputs run and match the CPU path" } end
    return { verdict = "does not hold", summary = "a program with two inputs " .. outcome .. ": " .. require("ane.probe").gist(message) }
  end,
}

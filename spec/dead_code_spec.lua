-- passes/dead_code.c on crafted graphs: nodes no output needs go, inputs stay.
local ane = require("ane")
local helpers = require("spec.helpers")

local ops_of = helpers.ops_of -- "name:op name:op ..." of the graph's nodes

describe("dead-code elimination", function()
  it("removes nodes no output needs, keeps inputs", function()
    local g = ane.graph("dce")
    local x = g:input("x", { 1, 64, 1, 32 })
    local unused = g:input("unused", { 1, 64, 1, 32 })
    g:exp(x, { name = "dead_exp" })
    g:mul(g:relu(x, { name = "dead_relu" }), 2, { name = "dead_mul" })
    g:output("y", g:tanh(x))
    local report = g:optimize()
    assert.is_true(report.changes >= 4) -- dead_exp, dead_relu, dead_mul and its scalar const
    assert.are.equal("x:input unused:input y:tanh", ops_of(g))
    assert.is_not_nil(unused)
  end)
end)

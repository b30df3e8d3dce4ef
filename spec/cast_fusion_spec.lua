-- passes/cast_fusion.c on crafted graphs: lossless round trips of casts go, lossy ones stay.
local ane = require("ane")
local helpers = require("spec.helpers")

local ops_of = helpers.ops_of -- "name:op name:op ..." of the graph's nodes

describe("cast fusion", function()
  it("removes a lossless fp16 -> fp32 -> fp16 round trip", function()
    local g = ane.graph("lossless")
    local x = g:input("x", { 1, 64, 1, 32 })
    g:output("y", g:relu(g:cast(g:cast(x, "fp32"), "fp16")))
    g:optimize()
    assert.are.equal("x:input y:relu", ops_of(g))
  end)

  it("keeps a lossy fp32 -> fp16 -> fp32 round trip: it rounds every value", function()
    local g = ane.graph("lossy")
    local x = g:input("x", { 1, 64, 1, 32 }, "fp32")
    g:output("y", g:cast(g:cast(x, "fp16"), "fp32"))
    g:optimize()
    assert.are.equal("x:input cast_0:cast y:cast", ops_of(g))
  end)

  it("shortens fp16 -> fp32 -> int32 to fp16 -> int32", function()
    local g = ane.graph("chain")
    local x = g:input("x", { 1, 64, 1, 32 })
    g:output("y", g:cast(g:cast(x, "fp32"), "int32"))
    g:optimize()
    assert.are.equal("x:input y:cast", ops_of(g))
    assert.matches("y = cast%(dtype = y_dtype, x = x%)", (g:mil()))
  end)
end)

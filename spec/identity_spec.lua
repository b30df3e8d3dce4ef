-- passes/identity.c on crafted graphs: identities, same-dtype casts, same-shape reshapes,
-- identity transposes and full slices go; real ones stay; output names move to producers.
local ane = require("ane")
local helpers = require("spec.helpers")

local ops_of = helpers.ops_of -- "name:op name:op ..." of the graph's nodes

describe("identity elimination", function()
  it("removes identities, same-dtype casts, same-shape reshapes, identity transposes, full slices", function()
    local g = ane.graph("ident")
    local x = g:input("x", { 1, 64, 1, 32 })
    local a = g:identity(x)
    local b = g:cast(a, "fp16")
    local c = g:reshape(b, { 1, 64, 1, 32 })
    local d = g:transpose(c, { 0, 1, 2, 3 })
    local e = g:slice_by_index(d, { 0, 0, 0, 0 }, { 1, 64, 1, 32 })
    g:output("y", g:relu(e))
    g:optimize()
    assert.are.equal("x:input y:relu", ops_of(g))
  end)

  it("keeps real reshapes and transposes", function()
    local g = ane.graph("real")
    local x = g:input("x", { 1, 64, 1, 32 })
    g:output("y", g:transpose(g:reshape(x, { 1, 4, 16, 32 }), { 0, 1, 3, 2 }))
    g:optimize()
    assert.are.equal("x:input reshape_0:reshape y:transpose", ops_of(g))
  end)

  it("moves an output name onto the producer when an output identity goes", function()
    local g = ane.graph("rename")
    local x = g:input("x", { 1, 64, 1, 32 })
    local h = g:exp(x, { name = "h" })
    g:output("y", h) -- h is user-named: output() adds identity y
    g:optimize()
    assert.are.equal("x:input y:exp", ops_of(g))
    local text = g:mil()
    assert.matches("%-> %(y%);", text)
  end)

  it("keeps an output identity of an input (the return must name a live node)", function()
    local g = ane.graph("passthrough")
    local x = g:input("x", { 1, 64, 1, 32 })
    g:output("y", x)
    g:optimize()
    assert.are.equal("x:input y:identity", ops_of(g))
  end)
end)

-- The graph IR through ane.graph: builders infer shapes and dtypes, reject mismatches with
-- errors naming the node and both shapes, name nodes validly, and declare outputs.
local ane = require("ane")

local function fp16(shape, seed) return ane.tensor.randn(shape, { seed = seed or 1, dtype = "fp16" }) end

describe("graph builders", function()
  it("names nodes with valid, unique MIL identifiers", function()
    local g = ane.graph("names")
    local x = g:input("x", { 1, 64, 1, 32 })
    local r = g:relu(x)
    assert.matches("^relu_%d+$", r:name())
    assert.are.equal("act", g:relu(x, { name = "act" }):name())
    assert.error_matches(function() g:relu(x, { name = "act" }) end, "node name 'act' is already used")
    -- a REPL line that made a const and then failed leaves it: the retry is told so
    local w = ane.tensor.randn({ 32, 64, 1, 1 })
    assert.has_error(function() g:conv(x, g:const("w", w)) end) -- fp32 weight, fp16 input
    assert.error_matches(function() g:const("w", w:to("fp16")) end,
      "node name 'w' is already used in graph 'names' by a const nothing uses yet %(left by an earlier line that failed")
    assert.error_matches(function() g:relu(x, { name = "9lives" }) end, "not a valid MIL identifier")
    assert.error_matches(function() g:relu(x, { name = "a-b" }) end, "not a valid MIL identifier")
    assert.error_matches(function() ane.graph("bad name") end, "not a valid MIL identifier")
    assert.are.equal(r, r) -- nodes are values
    assert.matches("^ane.node relu_%d+ = relu fp16%[1, 64, 1, 32%]$", tostring(r))
  end)

  it("declares outputs by renaming intermediates or adding identities", function()
    local g = ane.graph("outs")
    local x = g:input("x", { 1, 64, 1, 32 })
    local r = g:relu(x)
    g:output("y", r)
    assert.are.equal("y", r:name()) -- an unnamed intermediate takes the output name
    g:output("x_out", x)            -- an input cannot be renamed: an identity is added
    assert.are.equal("identity", g:node("x_out"):op())
    local named = g:exp(x, { name = "e" })
    g:output("z", named)            -- a user-named node keeps its name
    assert.are.equal("e", named:name())
    assert.are.equal("identity", g:node("z"):op())
    assert.error_matches(function() g:output("y", x) end, "output 'y' is declared twice")
  end)

  it("rejects nodes from another graph and closed graphs", function()
    local g1, g2 = ane.graph("one"), ane.graph("two")
    local x = g1:input("x", { 1, 64, 1, 32 })
    assert.error_matches(function() g2:relu(x) end, "node belongs to another graph")
    g1:close()
    assert.error_matches(function() g1:relu(x) end, "attempt to use a closed graph")
    assert.error_matches(function() x:shape() end, "closed graph")
  end)

  it("keeps a private copy of const values", function()
    local g = ane.graph("copy")
    local t = ane.tensor.from({ 1, 2, 3 }, { 3 }, "fp16")
    local c = g:const("c", t)
    t:set(9, 1)
    g:output("c_out", g:identity(c))
    local text = g:mil()
    assert.matches("tensor<fp16, %[3%]>%(%[1, 2, 3%]%)", text)
  end)

  it("reports statistics", function()
    local g = ane.graph("stats")
    local x = g:input("x", { 1, 64, 1, 32 })
    local y = g:conv(x, g:const("w", fp16({ 128, 64, 1, 1 })))
    g:output("y", y)
    local stats = g:stats()
    assert.are.equal(3, stats.nodes)
    assert.are.equal(2 * 128 * 64 * 32, stats.flops)
    assert.are.equal(128 * 64 * 2, stats.weight_bytes)
    assert.are.equal((64 * 32 + 128 * 64 + 128 * 32) * 2, stats.peak_working_set)
  end)
end)

-- runtime/compile.c: ane.compile runs the whole pipeline in C (passes, MIL, backend) on a
-- copy of the graph, so an unoptimized and an optimized graph give the same program, and the
-- caller's graph is left as it was.
local ane = require("ane")
local nn = require("ane.nn")

-- A layer with work for every pass: a dead branch, identities, a same-dtype cast.
local function messy_graph()
  local g = ane.graph("messy")
  local x = g:input("x", { 1, 8, 1, 32 })
  local w = g:const("w", ane.tensor.randn({ 16, 8, 1, 1 }, { seed = 4, std = 0.3, dtype = "fp16" }))
  local y = g:conv(g:identity(g:cast(x, "fp16")), w)
  g:exp(y) -- dead: no output uses it
  g:output("y", g:reshape(g:relu(y), { 1, 16, 1, 32 }))
  return g
end

describe("ane.compile", function()
  it("gives an unoptimized graph the same program as its optimized copy (a cache hit, same values)", function()
    ane.clear_cache()
    local raw = messy_graph()
    local optimized = messy_graph()
    assert.is_true(optimized:optimize().changes > 0)
    local before = ane.stats()
    local p1 = ane.compile(raw, { profile = "cpu" })
    local p2 = ane.compile(optimized, { profile = "cpu" })
    local after = ane.stats()
    assert.are.equal(1, after.compiles - before.compiles)
    assert.are.equal(1, after.cache_hits - before.cache_hits)
    local x = ane.tensor.randn({ 1, 8, 1, 32 }, { seed = 5, dtype = "fp16" })
    assert.are.equal(p1:eval({ x = x }).y:bytes(), p2:eval({ x = x }).y:bytes())
  end)

  it("leaves the caller's graph unchanged", function()
    local g = messy_graph()
    local listing = g:dump()
    local program = ane.compile(g, { profile = "cpu" })
    assert.are.equal(listing, g:dump())
    -- the graph can still grow and compile again
    local y = g:node("y")
    g:output("z", g:tanh(y))
    local again = ane.compile(g, { profile = "cpu" })
    assert.are.same({ "y", "z" }, (function()
      local names = {}
      for _, port in ipairs(again:outputs()) do names[#names + 1] = port.name end
      return names
    end)())
    program:close()
  end)

  it("names the program after the graph and validates the device profile after the passes", function()
    local g = ane.graph("gelu_block")
    local x = g:input("x", { 1, 64, 1, 32 })
    local w = g:const("w", ane.tensor.randn({ 64, 64, 1, 1 }, { seed = 6, std = 0.1, dtype = "fp16" }))
    g:output("y", nn.gelu(g, g:conv(x, w)))
    local program = ane.compile(g, { profile = "ane" })
    assert.matches("gelu_block", tostring(program))
  end)

  it("returns the device rules' warnings in the ane profile (and none in the cpu profile)", function()
    local g = ane.graph("elementwise")
    local x = g:input("x", { 1, 8, 1, 32 })
    g:output("y", g:exp(x))
    local _, warnings = ane.compile(g, { profile = "ane" })
    assert.are.equal(1, #warnings)
    assert.are.same({ "ANE-28", "warning" }, { warnings[1].id, warnings[1].severity })
    assert.matches("no conv or matmul", warnings[1].message)
    local _, none = ane.compile(g, { profile = "cpu" })
    assert.are.same({}, none)
  end)
end)

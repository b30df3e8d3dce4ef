-- backend/sim.c: instances of a compiled program borrow its weights until patched; a patch
-- gives bit-identical outputs to a fresh compile with the new weights and changes only its
-- own instance. Different programs with equal weights hold one copy (tensor/intern.h).
local ane = require("ane")
local helpers = require("spec.helpers")
local fp16, mlp_graph = helpers.fp16_randn, helpers.two_layer_graph

describe("the sim backend's instances", function()
  local w1, b1, w2 = fp16({ 64, 64, 1, 1 }, 31), fp16({ 64 }, 32), fp16({ 64, 64, 1, 1 }, 33)
  local x = ane.tensor.randn({ 1, 64, 1, 32 }, { seed = 34 })

  it("gives bit-identical outputs to a fresh compile with the new weights", function()
    for _, precision in ipairs({ "fp16", "fp32" }) do
      local program = ane.compile(mlp_graph(w1, b1, w2), { precision = precision })
      local before = program:eval({ x = x }).y
      local new_w1 = ane.tensor.randn({ 64, 64 }, { seed = 35, std = 0.1 }) -- fp32 [out, in]: converted on patch
      local new_b1 = fp16({ 64 }, 36)
      local compiles = ane.stats().compiles
      program:patch({ fc1_weight = new_w1, fc1_bias = new_b1 })
      assert.are.equal(compiles, ane.stats().compiles)
      local patched = program:eval({ x = x }).y
      local fresh = ane.compile(mlp_graph(new_w1:reshape(64, 64, 1, 1):to("fp16"), new_b1, w2), { precision = precision })
      assert.are.equal(fresh:eval({ x = x }).y:bytes(), patched:bytes())
      assert.are_not.equal(before:bytes(), patched:bytes())
    end
  end)

  it("only changes its own instance", function()
    local a = ane.compile(mlp_graph(w1, b1, w2))
    local b = ane.compile(mlp_graph(w1, b1, w2)) -- a cache hit: same compiled program
    local before = b:eval({ x = x }).y:bytes()
    a:patch({ fc2_weight = fp16({ 64, 64, 1, 1 }, 40) })
    assert.are.equal(before, b:eval({ x = x }).y:bytes())
    assert.are_not.equal(before, a:eval({ x = x }).y:bytes())
    -- instances read fp16 weights where the compiled program holds them until their first
    -- patch: a patch copies first, so a later instance still starts from the compiled weights
    assert.are.equal(before, ane.compile(mlp_graph(w1, b1, w2)):eval({ x = x }).y:bytes())
  end)

  it("shares equal weights between different programs, one copy, and a patch still changes only its own", function()
    for _, case in ipairs({ { "fp16", 51 }, { "fp32", 61 } }) do
      local precision, seed = case[1], case[2]
      local profile = precision == "fp32" and "cpu" or "ane" -- fp32 weights: the cpu profile (ANE-26)
      local function weight(k) -- fp16 or fp32 [64, 64, 1, 1]: 8 or 16 KB, above the sharing threshold
        local t = ane.tensor.randn({ 64, 64, 1, 1 }, { seed = seed + k, std = 0.1 })
        return precision == "fp16" and t:to("fp16") or t
      end
      local shared, second, third = weight(1), weight(2), weight(3)
      local bias = ane.tensor.randn({ 64 }, { seed = seed }):to(precision)
      local function mlp(w1_, b1_, w2_) -- the two-layer graph with inputs in this precision
        local nn = require("ane.nn")
        local g = ane.graph("mlp")
        local h = g:relu(nn.linear(g, g:input("x", { 1, 64, 1, 32 }, precision), w1_, b1_, { name = "fc1" }))
        g:output("y", g:relu(nn.linear(g, h, w2_, nil, { name = "fc2" })))
        return g
      end
      local input = x:to(precision)
      local bytes = shared:numel() * shared:element_size()
      collectgarbage()
      collectgarbage("stop") -- no graph freed (and no sweep) while counting
      local start = ane.memory().interned_bytes
      local a = ane.compile(mlp(shared, bias, second), { precision = precision, profile = profile })
      local after_a = ane.memory().interned_bytes
      local b = ane.compile(mlp(shared, bias, third), { precision = precision, profile = profile }) -- another program
      local after_b = ane.memory().interned_bytes
      collectgarbage("restart")
      assert.are.equal(2 * bytes, after_a - start) -- fc1 and fc2 of a
      assert.are.equal(bytes, after_b - after_a)   -- only b's own fc2: its fc1 is a's
      local before = b:eval({ x = input }).y:bytes()
      a:patch({ fc1_weight = weight(4) })
      assert.are.equal(before, b:eval({ x = input }).y:bytes())
      assert.are_not.equal(a:eval({ x = input }).y:bytes(), ane.compile(mlp(shared, bias, second),
        { precision = precision, profile = profile, name = "fresh" }):eval({ x = input }).y:bytes())
    end
  end)

  it("refuses writes to an interned tensor, naming why", function()
    local t = ane.tensor.randn({ 64, 64 }, { seed = 70 }):intern()
    assert.is_true(t:is_readonly())
    local ok, err = pcall(t.set, t, 1, 1, 1)
    assert.is_false(ok)
    assert.matches("programs share it as a weight", tostring(err), 1, true)
  end)
end)

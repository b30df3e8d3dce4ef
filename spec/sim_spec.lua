-- backend/sim.c: instances of a compiled program borrow its weights until patched; a patch
-- gives bit-identical outputs to a fresh compile with the new weights and changes only its
-- own instance.
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
end)

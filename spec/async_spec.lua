-- runtime/async.c: prog:submit runs evals on the helper threads in FIFO order while the
-- caller works; each ticket's wait returns that eval's own outputs.
local ane = require("ane")
local nn = require("ane.nn")
local helpers = require("spec.helpers")
local fp16, mlp_graph = helpers.fp16_randn, helpers.two_layer_graph

describe("asynchronous evaluation", function()
  it("evaluate asynchronously: submit, other work, wait; each ticket its own outputs", function()
    local g = mlp_graph(fp16({ 64, 64, 1, 1 }, 1), fp16({ 64 }, 2), fp16({ 64, 64, 1, 1 }, 3))
    local program = ane.compile(g)
    local x1, x2 = ane.tensor.randn({ 1, 64, 1, 32 }, { seed = 4 }), ane.tensor.randn({ 1, 64, 1, 32 }, { seed = 5 })
    local want1, want2 = program:eval({ x = x1 }).y:bytes(), program:eval({ x = x2 }).y:bytes()
    assert.are_not.equal(want1, want2)
    -- two submissions of one program: the second waits for the first, neither overwrites the other
    local t1 = program:submit({ x = x1 })
    local t2 = program:submit({ x = x2 })
    local y2 = t2:wait().y
    local y1 = t1:wait().y
    assert.are.equal(want1, y1:bytes())
    assert.are.equal(want2, y2:bytes())
    -- into a destination, like eval
    local out = ane.tensor({ 1, 64, 1, 32 }, "fp16")
    assert.are.equal(out, program:submit({ x = x1 }, { y = out }):wait().y)
    assert.are.equal(want1, out:bytes())
    -- a patch waits for the eval in flight, and the next submission sees the patch
    local in_flight = program:submit({ x = x1 })
    program:patch({ fc2_weight = fp16({ 64, 64, 1, 1 }, 7) })
    assert.are.equal(want1, in_flight:wait().y:bytes())
    local reference = ane.compile(mlp_graph(fp16({ 64, 64, 1, 1 }, 1), fp16({ 64 }, 2), fp16({ 64, 64, 1, 1 }, 7)))
    assert.are.equal(reference:eval({ x = x1 }).y:bytes(), program:submit({ x = x1 }):wait().y:bytes())
    -- two programs in flight at once (the helpers and sim's thread pool shared)
    local wide = ane.graph("wide")
    local xw = wide:input("x", { 1, 512, 1, 64 })
    wide:output("y", wide:relu(nn.linear(wide, xw, fp16({ 512, 512, 1, 1 }, 8), fp16({ 512 }, 9), { name = "fc" })))
    local other = ane.compile(wide)
    local xo = ane.tensor.randn({ 1, 512, 1, 64 }, { seed = 10 })
    local want_other = other:eval({ x = xo }).y:bytes()
    for _ = 1, 4 do
      local a, b = other:submit({ x = xo }), program:submit({ x = x2 })
      assert.are.equal(want_other, a:wait().y:bytes())
      assert.are.equal(reference:eval({ x = x2 }).y:bytes(), b:wait().y:bytes())
    end
    -- a program closed before the wait: the close waits for the eval, the wait says so
    local closed = ane.compile(wide)
    local orphan = closed:submit({ x = xo })
    closed:close()
    assert.error_matches(function() orphan:wait() end, "the program was closed before ticket:wait%(%)")
    -- errors arrive at the wait, once
    local bad = program:submit({ y = x1 })
    assert.error_matches(function() bad:wait() end, "program 'mlp' has no input 'y' %(inputs: x%)")
    assert.error_matches(function() bad:wait() end, "already waited for")
  end)
end)

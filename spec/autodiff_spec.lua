-- Reverse-mode autodiff (ane.grad): every op with a rule, checked against central finite
-- differences of the forward program, all on sim in fp32 (cpu profile).
--
-- Each case computes loss = sum(f(inputs) * R) with a fixed random R, so every output
-- element matters. Central differences with step h = 1e-2 in fp32: the truncation error is
-- h^2/6 |f'''| ~ 2e-5 for these smooth functions of O(1) inputs, the rounding error about
-- 2 u |loss| / (2h) ~ 6e-6 * |loss| (u = 6e-8, |loss| < 20): so |analytic - numeric| stays
-- below 1e-3 + 1e-3 |analytic|, the tolerance used.
local ane = require("ane")
local nn = require("ane.nn")

local check = require("spec.helpers").check_gradient

describe("autodiff matches finite differences", function()
  it("for elementwise binary ops with broadcasting", function()
    check("add", { { 2, 3 }, { 3 } }, function(g, a, b) return g:add(a, b) end)
    check("sub", { { 2, 3 }, { 2, 1 } }, function(g, a, b) return g:sub(a, b) end)
    check("mul", { { 2, 3 }, { 1, 3 } }, function(g, a, b) return g:mul(a, b) end)
    check("real_div", { { 2, 3 }, { 3 } }, function(g, a, b) return g:real_div(a, b) end, { low = 0.5, high = 2 })
    check("pow", { { 2, 3 }, { 2, 3 } }, function(g, a, b) return g:pow(a, b) end, { low = 0.5, high = 2 })
  end)

  it("for elementwise unary ops", function()
    for _, op in ipairs({ "neg", "exp", "tanh", "sigmoid", "identity" }) do
      check(op, { { 2, 4 } }, function(g, a) return g[op](g, a) end)
    end
    for _, op in ipairs({ "log", "sqrt", "rsqrt" }) do
      check(op, { { 2, 4 } }, function(g, a) return g[op](g, a) end, { low = 0.5, high = 2 })
    end
    check("cast", { { 2, 4 } }, function(g, a) return g:cast(a, "fp32") end)
    for _, mode in ipairs({ "TANH_APPROXIMATION", "SIGMOID_APPROXIMATION" }) do
      check("gelu " .. mode, { { 2, 4 } }, function(g, a) return g:gelu(a, { mode = mode }) end, { low = -3, high = 3 })
    end
  end)

  it("says gelu's EXACT mode has no gradient rule, and which modes do", function()
    local g = ane.graph("gelu_exact")
    local x = g:input("x", { 2, 4 }, "fp32")
    g:output("y", g:reduce_sum(g:gelu(x), { 0, 1 }))
    assert.error_matches(function() ane.grad(g, { wrt = { "x" } }) end,
      "gelu_0 %(gelu%) with mode EXACT has no gradient rule %(its slope needs erf.*use mode TANH_APPROXIMATION or SIGMOID_APPROXIMATION")
  end)

  it("for layout ops", function()
    check("reshape", { { 2, 6 } }, function(g, a) return g:exp(g:reshape(a, { 3, 4 })) end)
    check("transpose", { { 2, 3, 4 } }, function(g, a) return g:tanh(g:transpose(a, { 2, 0, 1 })) end)
    check("slice_by_index", { { 3, 5 } }, function(g, a) return g:slice_by_index(a, { 1, 1 }, { 3, 4 }) end)
    check("slice_by_size", { { 3, 5 } }, function(g, a) return g:slice_by_size(a, { 0, 2 }, { 2, 3 }) end)
  end)

  it("for reductions and softmax", function()
    check("reduce_sum", { { 2, 3, 4 } }, function(g, a) return g:reduce_sum(g:mul(a, a), { 1 }) end)
    check("reduce_mean", { { 2, 3, 4 } }, function(g, a) return g:reduce_mean(g:mul(a, a), { 0, 2 }, { keep_dims = true }) end)
    check("softmax", { { 2, 5 } }, function(g, a) return g:softmax(a, -1) end)
    check("softmax axis 0", { { 4, 3 } }, function(g, a) return g:softmax(a, 0) end)
  end)

  it("for matmul in all four transpose cases and batch broadcasting", function()
    for _, flags in ipairs({ { false, false }, { false, true }, { true, false }, { true, true } }) do
      local xs = flags[1] and { 4, 3 } or { 3, 4 }
      local ys = flags[2] and { 2, 4 } or { 4, 2 }
      check("matmul", { xs, ys }, function(g, a, b) return g:matmul(a, b, { transpose_x = flags[1], transpose_y = flags[2] }) end)
    end
    check("batched matmul", { { 2, 3, 4 }, { 4, 2 } }, function(g, a, b) return g:matmul(a, b) end)
  end)

  it("for 1x1 conv (input and weight) and composite layers", function()
    check("conv", { { 1, 4, 1, 6 }, { 3, 4, 1, 1 } }, function(g, x, w) return g:conv(x, w) end)
    check("layer_norm", { { 1, 6, 1, 4 }, { 6 }, { 6 } }, function(g, x, gamma, beta)
      return nn.layer_norm(g, x, g:reshape(gamma, { 1, 6, 1, 1 }), g:reshape(beta, { 1, 6, 1, 1 }))
    end)
    check("gelu", { { 1, 4, 1, 5 } }, function(g, x) return nn.gelu(g, x) end)
    check("attention", { { 1, 2, 4, 3 }, { 1, 2, 4, 3 }, { 1, 2, 4, 3 } }, function(g, q, k, v)
      return nn.causal_attention(g, q, k, v, { mask_value = -1e4 })
    end)
  end)

  it("takes saved activations as inputs instead of recomputing them, with the same gradients", function()
    -- an FFN-like graph: the two projections' outputs are saved by the forward program
    local function build()
      local g = ane.graph("ffn")
      local x = g:input("x", { 1, 8, 1, 6 }, "fp32")
      local w_gate = ane.tensor.randn({ 12, 8, 1, 1 }, { seed = 3, std = 0.3 })
      local w_up = ane.tensor.randn({ 12, 8, 1, 1 }, { seed = 4, std = 0.3 })
      local w_down = ane.tensor.randn({ 8, 12, 1, 1 }, { seed = 5, std = 0.3 })
      g:output("y", g:add(x, nn.swiglu(g, x, w_gate, w_up, w_down, { name = "ffn" })))
      return g
    end
    local wrt = { "x", "ffn_gate_weight", "ffn_up_weight", "ffn_down_weight" }
    local saved = { "ffn_gate", "ffn_up" }
    local forward = build()
    for _, name in ipairs(saved) do forward:output(name, forward:node(name)) end
    local outputs = forward:outputs() -- output name -> node name
    assert.are.same({ "ffn_gate", "ffn_up" }, { outputs.ffn_gate, outputs.ffn_up })
    assert.is_string(outputs.y)
    local plain, with_saved = ane.grad(build(), { wrt = wrt }), ane.grad(build(), { wrt = wrt, saved = saved })
    plain:optimize()
    with_saved:optimize()
    -- the replayed projections are gone: 3 convs forward, 2 replayed in plain's backward
    local function convs(g)
      local count = 0
      for line in g:mil():gmatch("[^\n]+") do if line:match("= conv%(") then count = count + 1 end end
      return count
    end
    assert.are.equal(convs(plain) - 2, convs(with_saved))
    local x = ane.tensor.randn({ 1, 8, 1, 6 }, { seed = 1 })
    local dy = ane.tensor.randn({ 1, 8, 1, 6 }, { seed = 2 })
    local outputs = ane.compile(forward, { profile = "cpu", precision = "fp32" }):eval({ x = x })
    local a = ane.compile(plain, { profile = "cpu", precision = "fp32" }):eval({ x = x, grad_y = dy })
    local b = ane.compile(with_saved, { profile = "cpu", precision = "fp32" }):eval({ x = x, grad_y = dy,
      ffn_gate = outputs.ffn_gate, ffn_up = outputs.ffn_up })
    for _, name in ipairs(wrt) do
      -- the saved values are what the replay computes, with the same kernels: equal bits
      assert.are.equal(0, a["grad_" .. name]:max_abs_diff(b["grad_" .. name]), name)
    end
    assert.error_matches(function() ane.grad(build(), { wrt = wrt, saved = { "x" } }) end,
      "saved activation 'x' is not a computed node of graph 'ffn'")
    assert.error_matches(function() ane.grad(build(), { wrt = wrt, saved = { "nope" } }) end,
      "saved activation 'nope' is not a computed node")
  end)

  it("outputs weight gradients in the device's I/O layout on request", function()
    local g = ane.graph("layer")
    local x = g:input("x", { 1, 8, 1, 32 }, "fp32")
    local w = g:const("w", ane.tensor.randn({ 16, 8, 1, 1 }, { seed = 1 }))
    local gamma = g:const("gamma", ane.tensor.randn({ 1, 16, 1, 1 }, { seed = 2 }))
    g:output("y", g:mul(g:conv(x, w), gamma))
    local plain = ane.grad(g, { wrt = { "w", "gamma" } })
    local device = ane.grad(g, { wrt = { "w", "gamma" }, device_layout = true })
    local feed = { x = ane.tensor.randn({ 1, 8, 1, 32 }, { seed = 3 }), grad_y = ane.tensor.randn({ 1, 16, 1, 32 }, { seed = 4 }) }
    local a = ane.compile(plain, { profile = "cpu", precision = "fp32" }):eval(feed)
    local b = ane.compile(device, { profile = "cpu", precision = "fp32" }):eval(feed)
    assert.are.same({ 16, 8, 1, 1 }, a.grad_w:shape())
    assert.are.same({ 1, 16, 1, 8 }, b.grad_w:shape())    -- [out, in, 1, 1] -> [1, out, 1, in]
    assert.are.same({ 1, 1, 1, 16 }, b.grad_gamma:shape()) -- [1, C, 1, 1] -> [1, 1, 1, C]
    assert.are.equal(0, a.grad_w:reshape(1, 16, 1, 8):max_abs_diff(b.grad_w))
    assert.are.equal(0, a.grad_gamma:reshape(1, 1, 1, 16):max_abs_diff(b.grad_gamma))
  end)

  it("for clip as a saturation at the fp16 range (and only that)", function()
    check("saturating clip", { { 2, 5 } }, function(g, x) return g:clip(x, -65504, 65504) end)
    local g = ane.graph("f")
    local x = g:input("x", { 2, 3 }, "fp32")
    g:output("y", g:clip(x, -1, 1, { name = "c" }))
    assert.error_matches(function() ane.grad(g, { wrt = { "x" } }) end, "autodiff: c %(clip%) has a gradient rule only as a saturation")
  end)

  it("names what it cannot differentiate", function()
    local g = ane.graph("f")
    local x = g:input("x", { 2, 3 }, "fp32")
    g:output("y", g:relu(g:maximum(x, x, { name = "m" })))
    assert.error_matches(function() ane.grad(g, { wrt = { "x" } }) end, "autodiff: y %(relu%) has no gradient rule yet")
    assert.error_matches(function() ane.grad(g, { wrt = { "nope" } }) end, "'nope' is not an input or const of graph 'f'")
  end)
end)

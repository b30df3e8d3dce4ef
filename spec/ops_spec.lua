-- The op table is complete: every row has a sample here, and for each sample the graph
-- builds (shape rule), its MIL parses back to a program that gives the same values as the
-- graph compiled directly (emitter and parser), sim runs it (kernel), and a row flagged
-- differentiable has a gradient rule that agrees with finite differences (VJP). A new row
-- without any of these fails here. (Values against independent references: sim_kernels_spec;
-- gradients in more configurations: autodiff_spec.)
local ane = require("ane")
local helpers = require("spec.helpers")

-- op -> { input shapes, builder, [opts for the inputs' range] }
local samples = {
  conv = { { { 1, 4, 1, 6 } }, function(g, x) return g:conv(x, g:const(ane.tensor.randn({ 3, 4, 1, 1 }, { seed = 1 }))) end },
  matmul = { { { 2, 3 }, { 3, 4 } }, function(g, a, b) return g:matmul(a, b) end },
  add = { { { 2, 3 }, { 3 } }, function(g, a, b) return g:add(a, b) end },
  sub = { { { 2, 3 }, { 2, 3 } }, function(g, a, b) return g:sub(a, b) end },
  mul = { { { 2, 3 }, { 2, 3 } }, function(g, a, b) return g:mul(a, b) end },
  real_div = { { { 2, 3 }, { 2, 3 } }, function(g, a, b) return g:real_div(a, b) end, { low = 0.5, high = 2 } },
  maximum = { { { 2, 3 }, { 2, 3 } }, function(g, a, b) return g:maximum(a, b) end },
  minimum = { { { 2, 3 }, { 2, 3 } }, function(g, a, b) return g:minimum(a, b) end },
  pow = { { { 2, 3 }, { 2, 3 } }, function(g, a, b) return g:pow(a, b) end, { low = 0.5, high = 2 } },
  neg = { { { 2, 3 } }, function(g, a) return g:neg(a) end },
  abs = { { { 2, 3 } }, function(g, a) return g:abs(a) end },
  exp = { { { 2, 3 } }, function(g, a) return g:exp(a) end },
  log = { { { 2, 3 } }, function(g, a) return g:log(a, { epsilon = 0.25 }) end, { low = 0.5, high = 2 } },
  sqrt = { { { 2, 3 } }, function(g, a) return g:sqrt(a) end, { low = 0.5, high = 2 } },
  rsqrt = { { { 2, 3 } }, function(g, a) return g:rsqrt(a, { epsilon = 0.25 }) end, { low = 0.5, high = 2 } },
  inverse = { { { 2, 3 } }, function(g, a) return g:inverse(a, { epsilon = 0.25 }) end, { low = 0.5, high = 2 } },
  tanh = { { { 2, 3 } }, function(g, a) return g:tanh(a) end },
  sigmoid = { { { 2, 3 } }, function(g, a) return g:sigmoid(a) end },
  silu = { { { 2, 3 } }, function(g, a) return g:silu(a) end },
  softplus = { { { 2, 3 } }, function(g, a) return g:softplus(a) end },
  gelu = { { { 2, 3 } }, function(g, a) return g:gelu(a, { mode = "TANH_APPROXIMATION" }) end },
  relu = { { { 2, 3 } }, function(g, a) return g:relu(a) end },
  softmax = { { { 2, 5 } }, function(g, a) return g:softmax(a, -1) end },
  reduce_sum = { { { 2, 3, 4 } }, function(g, a) return g:reduce_sum(a, { 1 }) end },
  reduce_mean = { { { 2, 3, 4 } }, function(g, a) return g:reduce_mean(a, { 0, 2 }, { keep_dims = true }) end },
  reduce_l2_norm = { { { 2, 3, 4 } }, function(g, a) return g:reduce_l2_norm(a, { 2 }, { keep_dims = true }) end },
  reduce_max = { { { 2, 3, 4 } }, function(g, a) return g:reduce_max(a, { 1 }) end },
  reshape = { { { 2, 6 } }, function(g, a) return g:reshape(a, { 3, 4 }) end },
  transpose = { { { 2, 3, 4 } }, function(g, a) return g:transpose(a, { 2, 0, 1 }) end },
  slice_by_index = { { { 3, 5 } }, function(g, a) return g:slice_by_index(a, { 1, 1 }, { 3, 4 }) end },
  slice_by_size = { { { 3, 5 } }, function(g, a) return g:slice_by_size(a, { 0, 2 }, { 2, 3 }) end },
  cast = { { { 2, 3 } }, function(g, a) return g:cast(g:cast(a, "fp16"), "fp32") end },
  clip = { { { 2, 3 } }, function(g, a) return g:clip(a, -65504, 65504) end },
  select = { { { 2, 3 }, { 2, 3 } }, function(g, a, b)
    return g:select(g:const(ane.tensor.from({ 1, 0, 1, 0, 0, 1 }, { 2, 3 }, "bool")), a, b)
  end },
  identity = { { { 2, 3 } }, function(g, a) return g:identity(a) end },
  quantize = { { { 2, 3 } }, function(g, a)
    local scale, zero = g:const(ane.tensor.from({ 0.01, 0.02 }, { 2 })), g:const(ane.tensor.from({ 3, -5 }, { 2 }))
    return g:dequantize(g:quantize(a, scale, zero, { output_dtype = "int8" }), scale, zero)
  end },
  dequantize = { { { 2, 3 } }, function(g, a)
    local scale = g:const(ane.tensor.from({ 0.05, 0.1, 0.2 }, { 3 })) -- one per column (axis 1)
    return g:dequantize(g:quantize(a, scale, nil, { axis = 1, output_dtype = "uint8" }), scale, nil, { axis = 1 })
  end },
  concat = { { { 2, 3 }, { 2, 2 } }, function(g, a, b) return g:concat({ a, b }, 1) end },
  split = { { { 2, 5 } }, function(g, a) return select(2, g:split(a, { 2, 3 }, 1)) end },
  pad = { { { 2, 3 } }, function(g, a) return g:pad(a, { 1, 2 }, { value = 0.5 }) end },
  gather = { { { 5, 3 } }, function(g, a)
    return g:gather(a, g:const(ane.tensor.from({ 4, 0, 2 }, { 3 }, "int32")), 0)
  end },
  scaled_dot_product_attention = { { { 1, 2, 4, 8 }, { 1, 2, 4, 8 }, { 1, 2, 4, 8 } }, function(g, q, k, v)
    return g:scaled_dot_product_attention(q, k, v)
  end },
}

local function build(name, sample)
  local g = ane.graph("sample")
  local nodes, feed = {}, {}
  for i, shape in ipairs(sample[1]) do
    nodes[i] = g:input("in" .. i, shape, "fp32")
    local range = sample[3] or {}
    feed["in" .. i] = ane.tensor.rand(shape, { seed = 10 + i, low = range.low or -1.5, high = range.high or 1.5 })
  end
  g:output("y", sample[2](g, table.unpack(nodes)))
  return g, feed
end

describe("the op table", function()
  local ops = ane.graph.ops()

  it("lists every op with its schema, and only flags what has a rule", function()
    assert.is_true(#ops >= 40)
    for _, op in ipairs(ops) do
      assert.are.equal(op.differentiable, op.has_gradient_rule, op.name .. ": differentiable flag vs gradient rule")
      for _, attribute in ipairs(op.attributes) do
        assert.is_truthy(attribute.mil or attribute.lua, op.name .. ": an attribute without a name")
      end
    end
  end)

  for _, op in ipairs(ops) do
    if op.name ~= "input" and op.name ~= "const" then
      it("has a working row for " .. op.name, function()
        local sample = samples[op.name]
        assert.is_truthy(sample, "op '" .. op.name .. "' has no sample in spec/ops_spec.lua")
        local g, feed = build(op.name, sample)
        local options = { precision = "fp32", profile = "cpu" }
        local direct = ane.compile(g, options):eval(feed).y
        local mil, weights = g:mil()
        assert.matches(op.name .. "%(", mil)
        local parsed = assert(ane.compile_mil(mil, weights, options)):eval(feed).y
        assert.are.same(direct:shape(), parsed:shape())
        assert.are.equal(0, direct:max_abs_diff(parsed), op.name .. ": MIL round trip")
        if op.differentiable then
          helpers.check_gradient(op.name, sample[1], sample[2], sample[3])
        end
      end)
    end
  end

  it("reads the new ops as other projects' generators write them (inline epsilon, silu, reduce_l2_norm)", function()
    local mil = [[
program(1.3)
{
    func main<ios18>(tensor<fp32, [1, 4, 1, 8]> x) {
        tensor<fp32, [1, 4, 1, 8]> s = silu(x = x)[name = string("s")];
        tensor<fp32, [1, 1, 1, 8]> n = reduce_l2_norm(x = s, axes = tensor<int32, [1]>([1]), keep_dims = bool(true))[name = string("n")];
        tensor<fp32, [1, 1, 1, 8]> y = rsqrt(x = n, epsilon = fp32(0.5))[name = string("y")];
    } -> (y);
}
]]
    local program = assert(ane.compile_mil(mil, {}, { precision = "fp32", profile = "cpu" }))
    local x = ane.tensor.rand({ 1, 4, 1, 8 }, { seed = 3, low = -2, high = 2 })
    local y = program:eval({ x = x }).y
    local xs = x:totable()[1]
    for s = 1, 8 do
      local sum = 0
      for c = 1, 4 do
        local v = xs[c][1][s]
        local silu = v / (1 + math.exp(-v))
        sum = sum + silu * silu
      end
      -- fp32 throughout on values of O(1): within a few ulps of the fp64 formula
      local want = 1 / math.sqrt(math.sqrt(sum) + 0.5)
      assert.is_true(math.abs(y:get(1, 1, 1, s) - want) < 1e-6, "position " .. s)
    end
  end)

  it("spells attributes once: the MIL parameter and the Lua name of each are in the schema", function()
    local by_name = {}
    for _, op in ipairs(ops) do by_name[op.name] = op end
    local function attribute(op, mil)
      for _, a in ipairs(by_name[op].attributes) do if a.mil == mil then return a end end
    end
    assert.are.equal("pads", attribute("conv", "pad").lua)
    assert.are.equal("sizes", attribute("split", "split_sizes").lua)
    assert.are.equal("amounts", attribute("pad", "pad").lua)
    assert.are.equal("value", attribute("pad", "constant_val").lua)
    assert.are.equal("1e-12", attribute("rsqrt", "epsilon").default)
  end)
end)

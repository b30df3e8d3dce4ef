-- Every op of the op table run by the sim backend, against naive loops written here in
-- plain Lua (fp64), on random shapes; and fp16 precision against fp32 precision.
--
-- Tolerances: sim fp32 computes in fp32 while the reference uses fp64. Elementwise ops are
-- within a few ulps of fp32 (unit roundoff u = 6e-8) of values below ~1e3; sums of K <= 64
-- products of values below ~4 are off by at most K * u * sum|a||b| ~ 64 * 6e-8 * 64 * 16
-- = 4e-3 in the very worst case and ~1e-5 typically; we use atol 1e-4 + rtol 1e-4, which
-- the worst case of these inputs (|x| < 3, K <= 48) stays below by a factor ~10.
local ane = require("ane")

local ATOL, RTOL = 1e-4, 1e-4

-- ------------------------------------------------------------------ reference helpers
local function numel(shape)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  return n
end

local function unravel(i, shape) -- 0-based flat index -> 0-based index table
  local idx = {}
  for d = #shape, 1, -1 do
    idx[d] = i % shape[d]
    i = i // shape[d]
  end
  return idx
end

local function ravel(idx, shape)
  local i = 0
  for d = 1, #shape do i = i * shape[d] + idx[d] end
  return i
end

-- Value of a broadcast operand at an output index.
local function at(value, shape, idx)
  local shift = #idx - #shape
  local mine = {}
  for d = 1, #shape do mine[d] = shape[d] == 1 and 0 or idx[d + shift] end
  return value[ravel(mine, shape) + 1]
end

local function broadcast_shape(a, b)
  local n = math.max(#a, #b)
  local out = {}
  for i = 1, n do
    local da = a[i - (n - #a)] or 1
    local db = b[i - (n - #b)] or 1
    out[i] = da == 1 and db or da
  end
  return out
end

local function map(shape, f)
  local out = {}
  for i = 0, numel(shape) - 1 do out[i + 1] = f(unravel(i, shape)) end
  return out
end

local function random_values(shape, seed, low, high)
  return ane.tensor.rand(shape, { seed = seed, low = low or -3, high = high or 3 })
end

-- Runs a one-op graph on sim (cpu profile: every op and shape allowed) and returns the
-- output as a flat Lua table.
local function run(build, inputs, opts)
  opts = opts or {}
  local g = ane.graph("op")
  local nodes = {}
  for i, input in ipairs(inputs) do
    nodes[i] = g:input("in" .. i, input:shape(), opts.dtype or "fp32")
  end
  g:output("out", build(g, table.unpack(nodes)))
  local program = ane.compile(g, { profile = "cpu", precision = opts.precision or "fp32" })
  local feed = {}
  for i, input in ipairs(inputs) do feed["in" .. i] = input end
  local result = program:eval(feed).out
  program:close()
  return result
end

local function flat(tensor) return tensor:reshape(-1):to("fp32"):totable() end

local function assert_close(expected, got_tensor, expected_shape, label)
  assert.are.same(expected_shape, got_tensor:shape(), label)
  local got = flat(got_tensor)
  assert.are.equal(#expected, #got, label)
  for i = 1, #expected do
    local e, g = expected[i], got[i]
    local ok = (e ~= e and g ~= g) or e == g or math.abs(e - g) <= ATOL + RTOL * math.abs(e)
    if not ok then
      error(string.format("%s: element %d: expected %.9g, got %.9g", label or "", i, e, g), 2)
    end
  end
end

-- ------------------------------------------------------------------ elementwise
describe("sim elementwise ops match plain Lua", function()
  local binary = {
    add = function(x, y) return x + y end,
    sub = function(x, y) return x - y end,
    mul = function(x, y) return x * y end,
    real_div = function(x, y) return x / y end,
    maximum = math.max,
    minimum = math.min,
  }
  local shapes = { { { 2, 3, 4 }, { 2, 3, 4 } }, { { 2, 3, 4 }, { 4 } }, { { 3, 1, 5 }, { 2, 1 } }, { { 1, 6, 1, 8 }, { 1, 6, 1, 1 } }, { {}, { 3 } },
    -- trailing axes of 1 (a decoded position's [1, heads, head_dim, 1]) with broadcasting inside
    { { 1, 3, 4, 1 }, { 1, 1, 4, 1 } }, { { 2, 3, 1, 1 }, { 2, 1, 1, 1 } }, { { 1, 1, 4, 1 }, { 1, 3, 1, 1 } } }
  for op, f in pairs(binary) do
    it(op .. " with broadcasting", function()
      for k, pair in ipairs(shapes) do
        local a, b = random_values(pair[1], k), random_values(pair[2], k + 10, 0.5, 3)
        local out_shape = broadcast_shape(pair[1], pair[2])
        local av, bv = flat(a), flat(b)
        local expected = map(out_shape, function(idx) return f(at(av, pair[1], idx), at(bv, pair[2], idx)) end)
        assert_close(expected, run(function(g, x, y) return g[op](g, x, y) end, { a, b }), out_shape, op)
      end
    end)
  end

  it("pow", function()
    local a, b = random_values({ 3, 5 }, 1, 0.1, 3), random_values({ 5 }, 2, -2, 2)
    local av, bv = flat(a), flat(b)
    assert_close(map({ 3, 5 }, function(idx) return at(av, { 3, 5 }, idx) ^ at(bv, { 5 }, idx) end),
      run(function(g, x, y) return g:pow(x, y) end, { a, b }), { 3, 5 }, "pow")
  end)

  local unary = {
    neg = function(x) return -x end,
    abs = math.abs,
    exp = math.exp,
    log = math.log,
    sqrt = math.sqrt,
    rsqrt = function(x) return 1 / math.sqrt(x) end,
    tanh = function(x) return (math.exp(x) - math.exp(-x)) / (math.exp(x) + math.exp(-x)) end,
    sigmoid = function(x) return 1 / (1 + math.exp(-x)) end,
    silu = function(x) return x / (1 + math.exp(-x)) end,
    softplus = function(x) return math.log(1 + math.exp(x)) end,
    relu = function(x) return x > 0 and x or 0 end,
    identity = function(x) return x end,
  }
  for op, f in pairs(unary) do
    -- (8,193 elements: the ops that call libm per element share that many with the helper
    -- threads, in chunks that end mid-row)
    it(op, function()
      local positive = op == "log" or op == "sqrt" or op == "rsqrt"
      for k, shape in ipairs({ { 2, 3, 7 }, { 3, 1, 2731 } }) do
        local a = random_values(shape, 4 + k, positive and 0.05 or -3, 3)
        local expected = {}
        for i, v in ipairs(flat(a)) do expected[i] = f(v) end
        assert_close(expected, run(function(g, x) return g[op](g, x) end, { a }), shape, op)
      end
    end)
  end

  -- erf by Abramowitz and Stegun 7.1.26 (absolute error at most 1.5e-7, below fp32's rounding
  -- of gelu's values here): an independent reference for gelu's EXACT mode
  local function erf(x)
    local t = 1 / (1 + 0.3275911 * math.abs(x))
    local y = 1 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t
      * math.exp(-x * x)
    return x >= 0 and y or -y
  end
  local gelu = {
    EXACT = function(x) return 0.5 * x * (1 + erf(x / math.sqrt(2))) end,
    TANH_APPROXIMATION = function(x) return 0.5 * x * (1 + unary.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ^ 3))) end,
    SIGMOID_APPROXIMATION = function(x) return x * unary.sigmoid(1.702 * x) end,
  }
  for mode, f in pairs(gelu) do
    it("gelu, mode " .. mode, function()
      for k, shape in ipairs({ { 2, 3, 7 }, { 3, 1, 2731 } }) do
        local a = random_values(shape, 14 + k, -6, 6)
        local expected = {}
        for i, v in ipairs(flat(a)) do expected[i] = f(v) end
        assert_close(expected, run(function(g, x) return g:gelu(x, { mode = mode }) end, { a }), shape, "gelu " .. mode)
      end
    end)
  end

  it("inverse with its default epsilon (1 / (x + 1e-4)) and a given one", function()
    local a = random_values({ 3, 4 }, 7, 0.1, 2)
    local default, given = {}, {}
    for i, v in ipairs(flat(a)) do default[i], given[i] = 1 / (v + 1e-4), 1 / (v + 0.5) end
    assert_close(default, run(function(g, x) return g:inverse(x) end, { a }), { 3, 4 }, "inverse")
    assert_close(given, run(function(g, x) return g:inverse(x, { epsilon = 0.5 }) end, { a }), { 3, 4 }, "inverse eps")
  end)

  -- numpy's rounding of x / scale + zero_point: half to even, then clamped to the type
  local function round_half_even(v)
    local f = math.floor(v)
    if v - f ~= 0.5 then return math.floor(v + 0.5) end
    return f % 2 == 0 and f or f + 1
  end

  it("quantize per tensor to int8: half to even, clamped to [-128, 127]", function()
    local a = ane.tensor.from({ 0.25, 0.75, -0.25, -0.75, 1.25, 100, -100, 0.1 }, { 2, 4 })
    local expected = {}
    for i, v in ipairs(flat(a)) do expected[i] = math.max(-128, math.min(127, round_half_even(v / 0.5 + 1))) end
    local got = run(function(g, x)
      return g:quantize(x, g:const(ane.tensor.from({ 0.5 })), g:const(ane.tensor.from({ 1 })), { output_dtype = "int8" })
    end, { a })
    assert.are.equal("int8", got:dtype())
    assert_close(expected, got, { 2, 4 }, "quantize")
  end)

  it("quantize and dequantize per channel (uint8 along axis 1)", function()
    local a = random_values({ 3, 4 }, 8, -2, 2)
    local scales, zeros = { 0.01, 0.02, 0.04, 0.08 }, { 128, 100, 10, 0 }
    local q, dq = {}, {}
    for i, v in ipairs(flat(a)) do
      local c = (i - 1) % 4 + 1
      q[i] = math.max(0, math.min(255, round_half_even(v / scales[c] + zeros[c])))
      dq[i] = (q[i] - zeros[c]) * scales[c]
    end
    local function params(g) return g:const(ane.tensor.from(scales, { 4 })), g:const(ane.tensor.from(zeros, { 4 })) end
    assert_close(q, run(function(g, x)
      local s, z = params(g)
      return g:quantize(x, s, z, { axis = 1, output_dtype = "uint8" })
    end, { a }), { 3, 4 }, "quantize")
    assert_close(dq, run(function(g, x)
      local s, z = params(g)
      return g:dequantize(g:quantize(x, s, z, { axis = -1, output_dtype = "uint8" }), s, z, { axis = -1 })
    end, { a }), { 3, 4 }, "dequantize")
  end)

  -- The numeric cliffs of docs/reference/constraints.md's newer facts, modelled behind the chip targets
  -- (generic keeps IEEE fp16). One program: a matmul summing 64 inputs, a last-axis slice
  -- at offset 1, and a NaN passed through.
  it("models the chips' numeric cliffs behind their targets", function()
    local function cliffs(target, fill, nan)
      local g = ane.graph("cliffs")
      local x = g:input("x", { 1, 64, 1, 64 })
      local sums = g:matmul(g:const(ane.tensor({ 1, 1, 64, 64 }, "fp16"):fill(1)), g:reshape(x, { 1, 1, 64, 64 }))
      g:output("sum", g:reshape(sums, { 1, 64, 1, 64 }))
      g:output("slice", g:slice_by_size(g:add(x, g:const(ane.tensor({ 1 }, "fp16"):fill(0))), { 0, 0, 0, 1 }, { 1, 64, 1, 32 }))
      local input = ane.tensor({ 1, 64, 1, 64 }, "fp16"):fill(fill)
      if nan then input:set(0 / 0, 1, 1, 1, 1) end
      local out = ane.compile(g, { backend = "sim", target = target }):eval({ x = input })
      return out.sum:get(1, 2, 1, 2), out.slice:get(1, 2, 1, 2), out.sum:get(1, 1, 1, 1)
    end
    -- 64 * 625 = 40,000: representable in fp16, past the matmul cliff at 32,752
    assert.are.equal(40000, (cliffs("generic", 625)))
    assert.are.equal(math.huge, (cliffs("m4", 625)))
    assert.are.equal(32704, (cliffs("m4", 511))) -- 64 * 511 = 32,704: below it
    -- 5,000 sliced at offset 1 of the last axis: saturates to +-inf beyond 4,094 before A16 (M1, M2)
    assert.are.equal(5000, select(2, cliffs("m4", 5000)))
    assert.are.equal(math.huge, select(2, cliffs("m1", 5000)))
    assert.are.equal(-math.huge, select(2, cliffs("m2", -5000)))
    assert.are.equal(4000, select(2, cliffs("m1", 4000)))
    -- NaN: IEEE in generic, read as 0 on the chips (which do not propagate it)
    local nan_generic = select(3, cliffs("generic", 0.5, true))
    assert.is_true(nan_generic ~= nan_generic)
    assert.are.equal(0, select(3, cliffs("m3", 0.5, true)))
    local t = ane.target("m1")
    assert.are.same({ 32752, 4094, true, true }, { t.matmul_inf_at, t.offset_slice_limit, t.nan_to_zero, t.cast_refused })
  end)

  it("rsqrt with an epsilon (1 / sqrt(x + epsilon)) and softplus far from 0 (no overflow)", function()
    local a = random_values({ 3, 4 }, 6, 0, 2)
    local expected = {}
    for i, v in ipairs(flat(a)) do expected[i] = 1 / math.sqrt(v + 0.5) end
    assert_close(expected, run(function(g, x) return g:rsqrt(x, { epsilon = 0.5 }) end, { a }), { 3, 4 }, "rsqrt")
    local far = ane.tensor.from({ -200, -30, 30, 200 })
    -- log(1 + e^x) is x + log(1 + e^-x): for |x| >= 30 within 1e-13 of max(x, 0)
    assert_close({ 0, math.log(1 + math.exp(-30)), 30, 200 }, run(function(g, x) return g:softplus(x) end, { far }), { 4 },
      "softplus")
  end)

  it("clip, cast and select", function()
    local a = random_values({ 4, 6 }, 7)
    local av = flat(a)
    local clipped, truncated, positive, chosen = {}, {}, {}, {}
    for i, v in ipairs(av) do
      clipped[i] = math.min(math.max(v, -1), 0.5)
      truncated[i] = v >= 0 and math.floor(v) or math.ceil(v)
      positive[i] = v ~= 0 and 1 or 0
      chosen[i] = v > 0 and v or -2 * v
    end
    assert_close(clipped, run(function(g, x) return g:clip(x, -1, 0.5) end, { a }), { 4, 6 }, "clip")
    assert_close(truncated, run(function(g, x) return g:cast(x, "int32") end, { a }), { 4, 6 }, "cast int32")
    assert_close(positive, run(function(g, x) return g:cast(x, "bool") end, { a }), { 4, 6 }, "cast bool")
    assert_close(chosen, run(function(g, x)
      return g:select(g:cast(g:relu(x), "bool"), x, g:mul(x, -2))
    end, { a }), { 4, 6 }, "select")
  end)
end)

-- ------------------------------------------------------------------ reductions
describe("sim reductions match plain Lua", function()
  local shape = { 2, 3, 4, 5 }
  local a = random_values(shape, 11)
  local av = flat(a)

  local function reduce(axes, keep, combine, start, finish)
    local reduced = {}
    for _, axis in ipairs(axes) do reduced[(axis % #shape) + 1] = true end
    local out_shape, kept = {}, {}
    for d = 1, #shape do
      if not reduced[d] then out_shape[#out_shape + 1] = shape[d]; kept[#kept + 1] = shape[d]
      elseif keep then out_shape[#out_shape + 1] = 1 end
    end
    local acc, count = {}, 0
    for i = 0, numel(shape) - 1 do
      local idx = unravel(i, shape)
      local key = {}
      for d = 1, #shape do if not reduced[d] then key[#key + 1] = idx[d] end end
      local k = ravel(key, kept) + 1
      acc[k] = acc[k] == nil and combine(start, av[i + 1]) or combine(acc[k], av[i + 1])
    end
    for d = 1, #shape do if reduced[d] then count = (count == 0 and 1 or count) * shape[d] end end
    if finish then for k = 1, #acc do acc[k] = finish(acc[k], count) end end
    return acc, out_shape
  end

  for _, case in ipairs({ { { 1 }, false }, { { -1 }, true }, { { 0, 2 }, false }, { { 1, 3 }, true } }) do
    local axes, keep = case[1], case[2]
    local label = table.concat(axes, ",") .. (keep and " keep" or "")
    it("reduce_sum over " .. label, function()
      local expected, out_shape = reduce(axes, keep, function(s, v) return s + v end, 0)
      assert_close(expected, run(function(g, x) return g:reduce_sum(x, axes, { keep_dims = keep }) end, { a }), out_shape)
    end)
    it("reduce_mean over " .. label, function()
      local expected, out_shape = reduce(axes, keep, function(s, v) return s + v end, 0, function(s, n) return s / n end)
      assert_close(expected, run(function(g, x) return g:reduce_mean(x, axes, { keep_dims = keep }) end, { a }), out_shape)
    end)
    it("reduce_l2_norm over " .. label, function()
      local expected, out_shape = reduce(axes, keep, function(s, v) return s + v * v end, 0, function(s) return math.sqrt(s) end)
      assert_close(expected, run(function(g, x) return g:reduce_l2_norm(x, axes, { keep_dims = keep }) end, { a }), out_shape)
    end)
    it("reduce_max over " .. label, function()
      local expected, out_shape = reduce(axes, keep, math.max, -math.huge)
      assert_close(expected, run(function(g, x) return g:reduce_max(x, axes, { keep_dims = keep }) end, { a }), out_shape)
    end)
  end

  -- A long innermost axis (37 = four runs of the kernel's 8 partials and a tail of 5), and a
  -- NaN in one row, which reduce_max must pass on (not ignore).
  it("reduce_sum and reduce_max over a long innermost axis, NaN passed on", function()
    local rows, count = 3, 37
    local values = flat(random_values({ rows, count }, 12))
    values[count + 30] = 0 / 0 -- row 2, inside the partials' span
    local x = ane.tensor.from(values):reshape({ rows, count })
    local sums, peaks = {}, {}
    for r = 1, rows do
      local sum, peak = 0, -math.huge
      for c = 1, count do
        local v = values[(r - 1) * count + c]
        sum = sum + v
        peak = (v ~= v or peak ~= peak) and 0 / 0 or math.max(peak, v)
      end
      sums[r], peaks[r] = sum, peak
    end
    assert_close(sums, run(function(g, a) return g:reduce_sum(a, { -1 }) end, { x }), { rows })
    assert_close(peaks, run(function(g, a) return g:reduce_max(a, { -1 }) end, { x }), { rows })
  end)

  it("softmax over each axis", function()
    for axis = 0, 3 do
      local expected = map(shape, function(idx)
        local peak, sum = -math.huge, 0
        local probe = { table.unpack(idx) }
        for j = 0, shape[axis + 1] - 1 do probe[axis + 1] = j; peak = math.max(peak, av[ravel(probe, shape) + 1]) end
        for j = 0, shape[axis + 1] - 1 do probe[axis + 1] = j; sum = sum + math.exp(av[ravel(probe, shape) + 1] - peak) end
        return math.exp(av[ravel(idx, shape) + 1] - peak) / sum
      end)
      assert_close(expected, run(function(g, x) return g:softmax(x, axis) end, { a }), shape, "softmax axis " .. axis)
    end
  end)
end)

-- ------------------------------------------------------------------ linear algebra
describe("sim conv and matmul match plain Lua", function()
  local function conv_reference(x, xs, w, ws, opts)
    local strides, pads, dil, groups = opts.strides or { 1, 1 }, opts.pads or { 0, 0, 0, 0 }, opts.dilations or { 1, 1 }, opts.groups or 1
    local n, cin, h, wd = table.unpack(xs)
    local cout, cg, kh, kw = table.unpack(ws)
    local ho = (h + pads[1] + pads[2] - dil[1] * (kh - 1) - 1) // strides[1] + 1
    local wo = (wd + pads[3] + pads[4] - dil[2] * (kw - 1) - 1) // strides[2] + 1
    local out_shape = { n, cout, ho, wo }
    return map(out_shape, function(idx)
      local b, co, y, xx = idx[1], idx[2], idx[3], idx[4]
      local group = co // (cout // groups)
      local sum = 0
      for c = 0, cg - 1 do
        for i = 0, kh - 1 do
          for j = 0, kw - 1 do
            local sy, sx = y * strides[1] - pads[1] + i * dil[1], xx * strides[2] - pads[3] + j * dil[2]
            if sy >= 0 and sy < h and sx >= 0 and sx < wd then
              sum = sum + x[ravel({ b, group * cg + c, sy, sx }, xs) + 1] * w[ravel({ co, c, i, j }, ws) + 1]
            end
          end
        end
      end
      return sum
    end), out_shape
  end

  local cases = {
    { "1x1", { 1, 16, 1, 32 }, { 24, 16, 1, 1 }, {} },
    { "3x3 padded", { 1, 4, 6, 7 }, { 5, 4, 3, 3 }, { pads = { 1, 1, 1, 1 } } },
    { "strided dilated", { 2, 4, 9, 9 }, { 3, 4, 3, 2 }, { strides = { 2, 1 }, dilations = { 2, 1 }, pads = { 0, 1, 2, 0 } } },
    { "grouped", { 1, 6, 5, 5 }, { 9, 2, 3, 3 }, { groups = 3 } },
    { "depthwise 1xk", { 1, 8, 1, 20 }, { 8, 1, 1, 5 }, { groups = 8, pads = { 0, 0, 2, 2 } } },
    -- one position (decoding): a matrix-vector product, split over the helper threads
    { "1x1 one position", { 1, 64, 1, 1 }, { 4500, 64, 1, 1 }, {} },
  }
  for k, case in ipairs(cases) do
    it("conv " .. case[1], function()
      local x, w = random_values(case[2], k), random_values(case[3], k + 20, -1, 1)
      local expected, out_shape = conv_reference(flat(x), case[2], flat(w), case[3], case[4])
      local got = run(function(g, xn) return g:conv(xn, g:const("w", w), case[4]) end, { x })
      assert_close(expected, got, out_shape, "conv " .. case[1])
    end)
  end

  local matmuls = {
    { { 5, 7 }, { 7, 3 }, {} },
    { { 7, 5 }, { 7, 3 }, { transpose_x = true } },
    { { 5, 7 }, { 3, 7 }, { transpose_y = true } },
    { { 2, 3, 4, 6 }, { 6, 5 }, {} },
    { { 2, 1, 4, 6 }, { 3, 5, 6 }, { transpose_y = true } },
    { { 2, 1, 3, 1 }, { 3, 5, 1 }, { transpose_y = true } }, -- k = 1, a few rows: outer products
    { { 3, 2, 1 }, { 3, 1, 70 }, {} },
  }
  for k, case in ipairs(matmuls) do
    it("matmul " .. k, function()
      local xs, ys, flags = case[1], case[2], case[3]
      local x, y = random_values(xs, k + 30), random_values(ys, k + 40)
      local xv, yv = flat(x), flat(y)
      local m = flags.transpose_x and xs[#xs] or xs[#xs - 1]
      local inner = flags.transpose_x and xs[#xs - 1] or xs[#xs]
      local n = flags.transpose_y and ys[#ys - 1] or ys[#ys]
      local xb, yb = { table.unpack(xs, 1, #xs - 2) }, { table.unpack(ys, 1, #ys - 2) }
      local out_shape = broadcast_shape(xb, yb)
      out_shape[#out_shape + 1], out_shape[#out_shape + 2] = m, n
      local expected = map(out_shape, function(idx)
        local r = #idx
        local batch = { table.unpack(idx, 1, r - 2) }
        local sum = 0
        for p = 0, inner - 1 do
          local xi = { table.unpack(batch) }
          local yi = { table.unpack(batch) }
          xi[#xi + 1], xi[#xi + 2] = flags.transpose_x and p or idx[r - 1], flags.transpose_x and idx[r - 1] or p
          yi[#yi + 1], yi[#yi + 2] = flags.transpose_y and idx[r] or p, flags.transpose_y and p or idx[r]
          sum = sum + at(xv, xs, xi) * at(yv, ys, yi)
        end
        return sum
      end)
      assert_close(expected, run(function(g, a, b) return g:matmul(a, b, flags) end, { x, y }), out_shape, "matmul " .. k)
    end)
  end

  it("scaled_dot_product_attention, mask applied in the cpu profile", function()
    local q, kk, v = random_values({ 2, 4, 3 }, 51), random_values({ 2, 5, 3 }, 52), random_values({ 2, 5, 6 }, 53)
    local mask = random_values({ 4, 5 }, 54)
    local qv, kv, vv, mv = flat(q), flat(kk), flat(v), flat(mask)
    local expected = map({ 2, 4, 6 }, function(idx)
      local b, i, c = idx[1], idx[2], idx[3]
      local scores, peak = {}, -math.huge
      for j = 0, 4 do
        local s = 0
        for e = 0, 2 do s = s + qv[ravel({ b, i, e }, { 2, 4, 3 }) + 1] * kv[ravel({ b, j, e }, { 2, 5, 3 }) + 1] end
        scores[j] = s / math.sqrt(3) + mv[i * 5 + j + 1]
        peak = math.max(peak, scores[j])
      end
      local sum, out = 0, 0
      for j = 0, 4 do sum = sum + math.exp(scores[j] - peak) end
      for j = 0, 4 do out = out + math.exp(scores[j] - peak) / sum * vv[ravel({ b, j, c }, { 2, 5, 6 }) + 1] end
      return out
    end)
    assert_close(expected, run(function(g, a, b, c, m) return g:scaled_dot_product_attention(a, b, c, m) end,
      { q, kk, v, mask }), { 2, 4, 6 }, "sdpa")
  end)
end)

-- A cache kept resident (write_input) and written to `filled` of its positions holds zeros
-- after them, and a decode step's vector products leave those out: the scores there are +0
-- (a sum of products of zeros), and the weighted sum over them is cut at whole chunks of the
-- row kernels, whose sums are then the whole rows' (a skipped chunk would add only zeros).
-- So the resident eval must give the very bits of the same cache bound whole (every position
-- computed), under every CPU level (this file runs per ANELUA_CPU); where an operand is
-- infinite, products with the zeros are NaN, and the products must not be left out.
describe("sim attention over a cache's written positions", function()
  local HEADS, D, POSITIONS = 4, 16, 160
  local function program(precision)
    local g = ane.graph("filled_cache")
    local q = g:input("q", { 1, HEADS, 2, D })
    local e = g:input("e", { 1, HEADS, 2, POSITIONS })
    local k = g:input("k_cache", { 1, HEADS * D, 1, POSITIONS }) -- the decode programs' layout
    local v = g:input("v_cache", { 1, HEADS * D, 1, POSITIONS })
    local kh = g:reshape(k, { 1, HEADS, D, POSITIONS })
    local vh = g:reshape(v, { 1, HEADS, D, POSITIONS })
    g:output("scores", g:matmul(q, kh))                          -- [1, heads, 2, positions]
    g:output("y", g:matmul(e, vh, { transpose_y = true }))      -- [1, heads, 2, D]
    return ane.compile(g, { precision = precision, profile = "cpu" })
  end
  local function padded(t, filled) -- t's first `filled` positions, zeros after
    local out = ane.tensor(t:shape()):fill(0)
    out:slice(4, 1, filled):copy_from(t:slice(4, 1, filled))
    return out
  end
  for _, precision in ipairs({ "fp16", "fp32" }) do
    it(precision .. ": the same bits as the whole cache bound, at every filled count", function()
      local p = program(precision)
      local k = ane.tensor.randn({ 1, HEADS * D, 1, POSITIONS }, { seed = 61 })
      local v = ane.tensor.randn({ 1, HEADS * D, 1, POSITIONS }, { seed = 62 })
      local q = ane.tensor.randn({ 1, HEADS, 2, D }, { seed = 63 })
      local e = ane.tensor.rand({ 1, HEADS, 2, POSITIONS }, { seed = 64 }) -- softmax weights are in [0, 1]
      for _, filled in ipairs({ 1, 31, 32, 40, 97, 159, 160 }) do
        p:reset_input("k_cache"):reset_input("v_cache")
        p:write_input("k_cache", k:slice(4, 1, filled)):write_input("v_cache", v:slice(4, 1, filled))
        local resident = p:eval({ q = q, e = e })
        local bound = p:eval({ q = q, e = e, k_cache = padded(k, filled), v_cache = padded(v, filled) })
        assert.are.equal(bound.scores:bytes(), resident.scores:bytes(), "scores, filled " .. filled)
        assert.are.equal(bound.y:bytes(), resident.y:bytes(), "weighted sum, filled " .. filled)
      end
      -- infinite operands: inf x 0 is NaN where the cache is empty, as in the whole product
      local q_inf, e_inf = q:copy(), e:copy()
      q_inf:slice(4, 3, 3):fill(math.huge)
      e_inf:slice(4, 150, 150):fill(math.huge)
      p:reset_input("k_cache"):reset_input("v_cache")
      p:write_input("k_cache", k:slice(4, 1, 40)):write_input("v_cache", v:slice(4, 1, 40))
      local resident = p:eval({ q = q_inf, e = e_inf })
      local bound = p:eval({ q = q_inf, e = e_inf, k_cache = padded(k, 40), v_cache = padded(v, 40) })
      local scores, y = flat(resident.scores), flat(resident.y)
      assert.is_true(scores[#scores] ~= scores[#scores], "a score past the filled positions is NaN")
      assert.is_true(y[1] ~= y[1], "the weighted sum with an infinite weight on an empty position is NaN")
      assert.are.equal(bound.scores:bytes(), resident.scores:bytes())
      assert.are.equal(bound.y:bytes(), resident.y:bytes())
      p:close()
    end)
  end

  it("reset_input clears what another writer left: later writes start from zeros", function()
    local p = program("fp32")
    local k = ane.tensor.randn({ 1, HEADS * D, 1, POSITIONS }, { seed = 65 })
    local q = ane.tensor.randn({ 1, HEADS, 2, D }, { seed = 66 })
    local e = ane.tensor.rand({ 1, HEADS, 2, POSITIONS }, { seed = 67 })
    p:write_input("k_cache", k):write_input("v_cache", k)
    p:reset_input("k_cache")
    assert.error_matches(function() p:eval({ q = q, e = e }) end, "needs input 'k_cache'")
    assert.error_matches(function() p:read_input("k_cache") end, "was never written")
    p:write_input("k_cache", k:slice(4, 1, 10))
    assert.are.equal(padded(k, 10):bytes(), p:read_input("k_cache"):bytes())
    assert.are.equal(p:eval({ q = q, e = e, k_cache = padded(k, 10), v_cache = k }).scores:bytes(),
      p:eval({ q = q, e = e }).scores:bytes())
    assert.error_matches(function() p:reset_input("k_cahce") end, "has no input 'k_cahce'")
    p:close()
  end)
end)

-- ------------------------------------------------------------------ data movement
describe("sim data movement matches plain Lua", function()
  local shape = { 2, 3, 4, 5 }
  local a = random_values(shape, 61)
  local av = flat(a)

  it("reshape and transpose", function()
    assert_close(av, run(function(g, x) return g:reshape(x, { 6, 20 }) end, { a }), { 6, 20 }, "reshape")
    local perm = { 2, 0, 3, 1 }
    local out_shape = { shape[3], shape[1], shape[4], shape[2] }
    local expected = map(out_shape, function(idx)
      local src = {}
      for i, p in ipairs(perm) do src[p + 1] = idx[i] end
      return av[ravel(src, shape) + 1]
    end)
    assert_close(expected, run(function(g, x) return g:transpose(x, perm) end, { a }), out_shape, "transpose")
  end)

  it("transposes that move only axes of size 1 (read in place) and ones that do not", function()
    -- (sim reads a transpose that keeps its operand's other axes in order as a view of the
    -- operand's values: a decode step's [1, heads, depth, 1] -> [1, heads, 1, depth])
    local function transposed(values, from, perm)
      local out_shape = {}
      for i, p in ipairs(perm) do out_shape[i] = from[p + 1] end
      return map(out_shape, function(idx)
        local src = {}
        for i, p in ipairs(perm) do src[p + 1] = idx[i] end
        return values[ravel(src, from) + 1]
      end), out_shape
    end
    local cases = {
      { { 1, 3, 4, 1 }, { 0, 1, 3, 2 } }, { { 4, 1 }, { 1, 0 } }, { { 2, 1, 3 }, { 1, 0, 2 } },
      { { 1, 3, 1, 4 }, { 2, 0, 1, 3 } }, { { 2, 3, 1 }, { 1, 0, 2 } }, { { 1, 3, 4, 1 }, { 0, 2, 1, 3 } },
    }
    for n, case in ipairs(cases) do
      local from, perm = case[1], case[2]
      local x = random_values(from, 70 + n)
      local expected, out_shape = transposed(flat(x), from, perm)
      local label = "transpose of [" .. table.concat(from, ",") .. "] by " .. table.concat(perm, ",")
      assert_close(expected, run(function(g, a) return g:transpose(a, perm) end, { x }), out_shape, label)
      -- read by a step that computes (the view's values, not its operand's shape), then as a chain
      local doubled = {}
      for i, v in ipairs(expected) do doubled[i] = 2 * v end
      assert_close(doubled, run(function(g, a) local t = g:transpose(a, perm) return g:add(t, t) end, { x }), out_shape,
        label .. ", added to itself")
      local back = {}
      for i, p in ipairs(perm) do back[p + 1] = i - 1 end
      assert_close(flat(x), run(function(g, a) return g:transpose(g:transpose(a, perm), back) end, { x }), from,
        label .. " and back")
      -- an fp16 input read as its bits through the view, in fp16 precision
      local x16 = x:to("fp16")
      local expected16 = transposed(flat(x16), from, perm)
      for i, v in ipairs(expected16) do expected16[i] = 2 * v end -- (2x of an fp16 value is exact)
      assert_close(expected16, run(function(g, a) local t = g:transpose(a, perm) return g:add(t, t) end, { x16 },
        { dtype = "fp16", precision = "fp16" }), out_shape, label .. " of fp16 bits")
    end
  end)

  it("slice_by_index and slice_by_size", function()
    local begin, stop = { 1, 0, 1, 2 }, { 2, 3, 3, 5 }
    local out_shape = { 1, 3, 2, 3 }
    local expected = map(out_shape, function(idx)
      local src = {}
      for d = 1, 4 do src[d] = idx[d] + begin[d] end
      return av[ravel(src, shape) + 1]
    end)
    assert_close(expected, run(function(g, x) return g:slice_by_index(x, begin, stop) end, { a }), out_shape, "by index")
    assert_close(expected, run(function(g, x) return g:slice_by_size(x, begin, { 1, 3, 2, 3 }) end, { a }), out_shape, "by size")
  end)

  it("concat and split", function()
    local b = random_values({ 2, 1, 4, 5 }, 62)
    local bv = flat(b)
    local out_shape = { 2, 4, 4, 5 }
    local expected = map(out_shape, function(idx)
      if idx[2] < 3 then return av[ravel(idx, shape) + 1] end
      return bv[ravel({ idx[1], 0, idx[3], idx[4] }, { 2, 1, 4, 5 }) + 1]
    end)
    assert_close(expected, run(function(g, x, y) return g:concat({ x, y }, 1) end, { a, b }), out_shape, "concat")
    local pieces = { { 0, 1 }, { 1, 3 } } -- sizes {1, 2} along axis 1
    for index, range in ipairs(pieces) do
      local piece_shape = { 2, range[2] - range[1], 4, 5 }
      local want = map(piece_shape, function(idx)
        return av[ravel({ idx[1], idx[2] + range[1], idx[3], idx[4] }, shape) + 1]
      end)
      assert_close(want, run(function(g, x) return select(index, g:split(x, { 1, 2 }, 1)) end, { a }), piece_shape, "split")
    end
  end)

  it("pad in constant, reflect and replicate modes", function()
    local x = random_values({ 2, 4 }, 63)
    local xv = flat(x)
    local amounts = { 1, 1, 3, 1 } -- reflect needs each amount below the dimension's size
    local out_shape = { 4, 8 }
    local function source(c, size, mode)
      if c >= 0 and c < size then return c end
      if mode == "constant" then return nil end
      if mode == "replicate" then return c < 0 and 0 or size - 1 end
      return c < 0 and -c or 2 * (size - 1) - c
    end
    for _, mode in ipairs({ "constant", "reflect", "replicate" }) do
      local expected = map(out_shape, function(idx)
        local r, c = source(idx[1] - 1, 2, mode), source(idx[2] - 3, 4, mode)
        if r == nil or c == nil then return 7.5 end
        return xv[r * 4 + c + 1]
      end)
      assert_close(expected, run(function(g, n) return g:pad(n, amounts, { mode = mode, value = 7.5 }) end, { x }), out_shape, mode)
    end
    -- a decode output widened to the device's 32-wide rows: [1, 3, 1, 1] -> [1, 3, 1, 32], and a
    -- middle axis padded too: [1, 3, 2, 1] -> [1, 3, 4, 32] (rows outside the input are all value)
    local column = random_values({ 1, 3, 2, 1 }, 65)
    local cv = flat(column)
    local widened = map({ 1, 3, 4, 32 }, function(idx) -- 0-based index
      local h, w = idx[3] - 1, idx[4] -- axis 3: one row before and one after; axis 4: 31 after
      if h < 0 or h >= 2 or w ~= 0 then return -1 end
      return cv[idx[2] * 2 + h + 1]
    end)
    assert_close(widened, run(function(g, n) return g:pad(n, { 1, 1, 0, 31 }, { mode = "constant", value = -1 }) end,
      { column }), { 1, 3, 4, 32 }, "constant, rank 4")
  end)

  it("gather", function()
    local table_ = random_values({ 10, 4 }, 64)
    local tv = flat(table_)
    local ids = ane.tensor.from({ 3, 0, 9, 3, -1 }, { 5 }, "int32")
    local expected = map({ 5, 4 }, function(idx)
      local id = ({ 3, 0, 9, 3, 9 })[idx[1] + 1]
      return tv[id * 4 + idx[2] + 1]
    end)
    local g = ane.graph("gather")
    local t = g:input("table", { 10, 4 }, "fp32")
    g:output("out", g:gather(t, g:const("ids", ids), 0))
    local got = ane.compile(g, { profile = "cpu", precision = "fp32" }):eval({ table = table_ }).out
    assert_close(expected, got, { 5, 4 }, "gather")
    local bad = ane.graph("gather_bad")
    local t2 = bad:input("table", { 10, 4 }, "fp32")
    bad:output("out", bad:gather(t2, bad:const("ids", ane.tensor.from({ 10 }, { 1 }, "int32")), 0, { name = "lookup" }))
    local program = ane.compile(bad, { profile = "cpu", precision = "fp32" })
    -- ane.compile optimizes: the output identity is folded, so the gather node carries the
    -- output's name 'out' in the program (its MIL names it so)
    assert.error_matches(function() program:eval({ table = table_ }) end, "node 'out' %(gather%): index 10 is outside 0..9")
  end)
end)

-- ------------------------------------------------------------------ fp16 vs fp32
describe("sim's data-parallel kernels on prefill-sized shapes", function()
  -- Binary ops, softmax, transposes and fp16 rounding share their elements with the helper
  -- threads from 32,768 elements a thread (sim_kernels.c, base/fp16.c): shapes here are past
  -- twice that, with the same references as above, so each split part must land in place.
  local shape = { 1, 12, 64, 100 } -- 76,800 elements
  local a, b = random_values(shape, 81), random_values(shape, 82, 0.5, 3)
  local av, bv = flat(a), flat(b)

  it("mul of the same shapes, add of a row broadcast and of a scalar", function()
    local row_shape = { 1, 1, 64, 100 }
    local r = random_values(row_shape, 83)
    local rv = flat(r)
    local s = random_values({ 1 }, 84)
    local sv = flat(s)[1]
    assert_close(map(shape, function(idx) return at(av, shape, idx) * at(bv, shape, idx) end),
      run(function(g, x, y) return g:mul(x, y) end, { a, b }), shape, "mul")
    assert_close(map(shape, function(idx) return at(av, shape, idx) + at(rv, row_shape, idx) end),
      run(function(g, x, y) return g:add(x, y) end, { a, r }), shape, "add of rows")
    assert_close(map(shape, function(idx) return at(av, shape, idx) + sv end),
      run(function(g, x, y) return g:add(x, y) end, { a, s }), shape, "add of a scalar")
  end)

  it("softmax over the last axis and over a middle one", function()
    for _, axis in ipairs({ 3, 2 }) do
      -- each line along the axis: elements first + j * stride, j < count (the loops above,
      -- once a line instead of once an element)
      local count, stride = shape[axis + 1], 1
      for d = axis + 2, #shape do stride = stride * shape[d] end
      local expected = {}
      for first = 0, #av - 1 do
        if first // stride % count == 0 then
          local peak, sum = -math.huge, 0
          for j = 0, count - 1 do peak = math.max(peak, av[first + j * stride + 1]) end
          for j = 0, count - 1 do sum = sum + math.exp(av[first + j * stride + 1] - peak) end
          for j = 0, count - 1 do expected[first + j * stride + 1] = math.exp(av[first + j * stride + 1] - peak) / sum end
        end
      end
      assert_close(expected, run(function(g, x) return g:softmax(x, axis) end, { a }), shape, "softmax axis " .. axis)
    end
  end)

  it("transposes that move whole rows and ones that tile planes", function()
    for _, perm in ipairs({ { 0, 2, 1, 3 }, { 0, 1, 3, 2 }, { 3, 1, 2, 0 } }) do
      local out_shape = {}
      for i, p in ipairs(perm) do out_shape[i] = shape[p + 1] end
      local expected = map(out_shape, function(idx)
        local src = {}
        for i, p in ipairs(perm) do src[p + 1] = idx[i] end
        return av[ravel(src, shape) + 1]
      end)
      assert_close(expected, run(function(g, x) return g:transpose(x, perm) end, { a }), out_shape,
        "transpose " .. table.concat(perm, ","))
    end
  end)

  it("fp16 precision rounds every element of a large intermediate", function()
    -- (x * y) + z in fp16 precision is round(round(x * y) + z): the same two ops run one at a
    -- time in fp32 precision, each result rounded to fp16 here, give the expected bits
    local a16, b16, c16 = a:to("fp16"), b:to("fp16"), random_values(shape, 85):to("fp16")
    local fp16 = { dtype = "fp16", precision = "fp16" }
    local fp32 = { dtype = "fp16", precision = "fp32" }
    local got = run(function(g, x, y, z) return g:add(g:mul(x, y), z) end, { a16, b16, c16 }, fp16)
    local product = run(function(g, x, y) return g:mul(x, y) end, { a16, b16 }, fp32):to("fp16")
    local expected = flat(run(function(g, x, y) return g:add(x, y) end, { product, c16 }, fp32):to("fp16"))
    local values = flat(got)
    for i = 1, #expected do -- (fp16 values widened to fp32 exactly: equal values, equal bits; no NaN here)
      if values[i] ~= expected[i] then
        error(string.format("element %d: expected %.9g, got %.9g", i, expected[i], values[i]))
      end
    end
  end)
end)

describe("sim fp16 precision", function()
  -- The device model: each op computes in fp32 from fp16 inputs and rounds its output to
  -- fp16 (RNE). So for a single op on fp16 inputs, fp16 precision must equal the fp32
  -- result rounded to fp16, bit for bit.
  local cases = {
    { "conv", { { 1, 32, 1, 32 } }, function(g, x)
      return g:conv(x, g:const("w", ane.tensor.randn({ 48, 32, 1, 1 }, { seed = 1, std = 0.2, dtype = "fp16" })))
    end },
    { "conv at one position", { { 1, 256, 1, 1 } }, function(g, x) -- the decode kernels, over the helper threads
      return g:conv(x, g:const("w", ane.tensor.randn({ 2000, 256, 1, 1 }, { seed = 2, std = 0.05, dtype = "fp16" })))
    end },
    { "matmul", { { 1, 2, 32, 16 }, { 1, 2, 16, 32 } }, function(g, x, y) return g:matmul(x, y) end },
    { "softmax", { { 1, 4, 1, 32 } }, function(g, x) return g:softmax(x, 3) end },
    { "reduce_sum", { { 1, 64, 1, 32 } }, function(g, x) return g:reduce_sum(x, { 1 }, { keep_dims = true }) end },
    { "exp", { { 1, 8, 1, 32 } }, function(g, x) return g:exp(x) end },
    { "mul", { { 1, 8, 1, 32 }, { 1, 8, 1, 32 } }, function(g, x, y) return g:mul(x, y) end },
    { "tanh", { { 1, 8, 1, 32 } }, function(g, x) return g:tanh(x) end },
    { "silu", { { 1, 8, 1, 32 } }, function(g, x) return g:silu(x) end },
    { "softplus", { { 1, 8, 1, 32 } }, function(g, x) return g:softplus(x) end },
    { "reduce_l2_norm", { { 1, 64, 1, 32 } }, function(g, x) return g:reduce_l2_norm(x, { 1 }, { keep_dims = true }) end },
    { "real_div", { { 1, 8, 1, 32 }, { 1, 8, 1, 32 } }, function(g, x, y) return g:real_div(x, g:add(g:abs(y), 1)) end },
  }
  for _, case in ipairs(cases) do
    it(case[1] .. ": fp16 result = fp32 result rounded to fp16", function()
      local inputs = {}
      for i, shape in ipairs(case[2]) do inputs[i] = ane.tensor.randn(shape, { seed = 70 + i, dtype = "fp16" }) end
      local y16 = run(case[3], inputs, { dtype = "fp16", precision = "fp16" })
      local y32 = run(case[3], inputs, { dtype = "fp16", precision = "fp32" })
      assert.are.equal("fp16", y16:dtype())
      assert.are.equal("fp32", y32:dtype()) -- the reference is never rounded
      if case[1] ~= "real_div" then -- real_div's operand chain has three ops; see below
        assert.are.equal(y32:to("fp16"):bytes(), y16:bytes())
      else
        -- abs and add round too: the fp16 result differs from round(fp32) by at most the
        -- rounding of the divisor (relative 2^-11) plus the final rounding (2^-11): 2^-10.
        local x = flat(y16)
        local r = flat(y32)
        for i = 1, #x do assert.is_true(math.abs(x[i] - r[i]) <= 2 ^ -10 * math.abs(r[i]) + 2 ^ -24) end
      end
    end)
  end

  it("overflows to inf like the device", function()
    local x = ane.tensor.from({ 300, -300, 1 }, { 1, 3, 1, 1 }, "fp16")
    local y = run(function(g, n) return g:mul(n, n) end, { x }, { dtype = "fp16", precision = "fp16" })
    assert.are.same({ math.huge, math.huge, 1 }, flat(y)) -- 90000 > 65504
    local y32 = run(function(g, n) return g:mul(n, n) end, { x }, { dtype = "fp16", precision = "fp32" })
    assert.are.same({ 90000, 90000, 1 }, flat(y32))
  end)
end)

-- A decode attention over an fp16 cache (nn.cached_attention: scores, scale, mask, clip,
-- maximum, exp) runs in sim as two fused steps over each row's written positions
-- (sim_attention.c); the same graph with one link of that chain also an output runs op by
-- op over the cache's whole width. The reference is that op-by-op evaluation: each op its own
-- kernel, each result rounded to fp16, which the fused steps claim to reproduce bit for bit
-- (what they leave out are positions whose weights round to +0). Cases: caches filled to
-- every kind of boundary (tiles of 64, whole rows), two query rows a head (grouped-query
-- attention), with and without the clip, a query with an infinite element (its row computed
-- whole), and masks whose unwritten positions are open (their weights are not zero: rows
-- computed whole) or hold moderate values.
describe("sim's fused decode attention", function()
  local nn = require("ane.nn")
  local HEADS, ROWS, D, POSITIONS = 3, 2, 16, 256
  local function program(opts, reference)
    local g = ane.graph("cached_attention")
    local q = g:input("q", { 1, HEADS, ROWS, D })
    local k = g:input("k_cache", { 1, HEADS * D, 1, POSITIONS })
    local v = g:input("v_cache", { 1, HEADS * D, 1, POSITIONS })
    local mask = g:input("mask", { 1, 1, 1, POSITIONS })
    local own_k = g:input("own_k", { 1, HEADS, ROWS, D })
    local own_v = g:input("own_v", { 1, HEADS, ROWS, D })
    local y = nn.cached_attention(g, q, g:reshape(k, { 1, HEADS, D, POSITIONS }), g:reshape(v, { 1, HEADS, D, POSITIONS }),
      mask, own_k, own_v, { name = "attn", clip = opts.clip })
    g:output("y", y)
    if reference then g:output("masked", assert(g:node("attn_cached_masked"))) end -- (a link of the chain read outside it)
    return ane.compile(g, { precision = "fp16", profile = "cpu", fusions = opts.fusions })
  end
  local function mask_of(filled, closed)
    local m = ane.tensor({ 1, 1, 1, POSITIONS }):fill(closed)
    m:slice(4, 1, filled):fill(0)
    return m
  end
  for _, clip in ipairs({ false, 65504 }) do
    it((clip and "with" or "without") .. " the clip: the op-by-op evaluation's bits", function()
      local fused, reference = program({ clip = clip or nil }), program({ clip = clip or nil }, true)
      local k = ane.tensor.randn({ 1, HEADS * D, 1, POSITIONS }, { seed = 71 }):scale(2)
      local v = ane.tensor.randn({ 1, HEADS * D, 1, POSITIONS }, { seed = 72 })
      local q = ane.tensor.randn({ 1, HEADS, ROWS, D }, { seed = 73 }):scale(2)
      local own = { own_k = ane.tensor.randn({ 1, HEADS, ROWS, D }, { seed = 74 }),
        own_v = ane.tensor.randn({ 1, HEADS, ROWS, D }, { seed = 75 }) }
      local q_inf = q:copy()
      q_inf:slice(4, 5, 5):slice(3, 2, 2):fill(math.huge)
      local cases = {}
      for _, filled in ipairs({ 1, 31, 63, 64, 65, 130, 192, 200, 255, 256 }) do
        cases[#cases + 1] = { filled = filled, q = q, mask = mask_of(filled, -65504) }
      end
      cases[#cases + 1] = { filled = 40, q = q_inf, mask = mask_of(40, -65504) }
      cases[#cases + 1] = { filled = 40, q = q, mask = mask_of(40, 0) }    -- open unwritten positions
      cases[#cases + 1] = { filled = 100, q = q, mask = mask_of(100, -12) } -- weights there small, not zero
      cases[#cases + 1] = { filled = 100, q = q, mask = mask_of(100, -30) } -- zero in fp16
      for _, case in ipairs(cases) do
        local outputs = {}
        for name, p in pairs({ fused = fused, reference = reference }) do
          p:reset_input("k_cache"):reset_input("v_cache")
          p:write_input("k_cache", k:slice(4, 1, case.filled)):write_input("v_cache", v:slice(4, 1, case.filled))
          outputs[name] = p:eval({ q = case.q, mask = case.mask, own_k = own.own_k, own_v = own.own_v }).y
        end
        assert.are.equal(outputs.reference:bytes(), outputs.fused:bytes(),
          string.format("filled %d, mask %g, q finite %s", case.filled, flat(case.mask)[POSITIONS],
            tostring(case.q == q)))
      end
      fused:close()
      reference:close()
    end)
  end

  it("fusions = false: every node its own step, a program of its own (not the fused one from the cache)", function()
    local fused = program({ clip = 65504 })
    local before = ane.stats()
    local step_by_step = program({ clip = 65504, fusions = false })
    local after = ane.stats()
    assert.are.equal(before.compiles + 1, after.compiles)
    assert.are.equal(before.cache_hits, after.cache_hits)
    local q = ane.tensor.randn({ 1, HEADS, ROWS, D }, { seed = 76 })
    local inputs = { q = q, mask = mask_of(50, -65504), own_k = q, own_v = q }
    for _, p in ipairs({ fused, step_by_step }) do
      p:write_input("k_cache", ane.tensor.randn({ 1, HEADS * D, 1, 50 }, { seed = 77 }))
      p:write_input("v_cache", ane.tensor.randn({ 1, HEADS * D, 1, 50 }, { seed = 78 }))
    end
    assert.are.equal(step_by_step:eval(inputs).y:bytes(), fused:eval(inputs).y:bytes())
    fused:close()
    step_by_step:close()
  end)
end)

-- RMSNorm (nn.rms_norm: x scaled, squared, summed over the axis, eps added, to the power -0.5,
-- times x, times the weight) runs in sim as one fused step (sim_norm.c); the same graph with
-- its inverse norm also an output runs op by op. The reference is that op-by-op evaluation,
-- each result rounded to fp16, which the fused step claims to reproduce bit for bit: over the
-- channels of one and of eight positions, over the last axis (per-head norms), for values
-- large enough that the squares round coarsely, all zeros (eps alone), and an inf and a NaN.
-- Each feed through a program with the fusions and its reference gives the same bytes of y;
-- closes both.
local function same_bits(fused, reference, feeds)
  for i, feed in ipairs(feeds) do
    assert.are.equal(reference:eval(feed).y:bytes(), fused:eval(feed).y:bytes(), "input " .. i)
  end
  fused:close()
  reference:close()
end

describe("sim's fused RMSNorm", function()
  local nn = require("ane.nn")
  local function program(shape, axis, reference)
    local g = ane.graph("rms_norm")
    local x = g:input("x", shape, "fp16")
    local weight = ane.tensor.randn({ shape[axis + 1] }, { seed = 81 }):to("fp16")
    g:output("y", nn.rms_norm(g, x, weight, { name = "norm", axis = axis, eps = 1e-5 }))
    if reference then g:output("inverse", assert(g:node("norm_inv_rms"))) end -- (a link read outside the chain)
    return ane.compile(g, { precision = "fp16", profile = "cpu" })
  end
  for _, case in ipairs({ { { 1, 96, 1, 1 }, 1 }, { { 1, 96, 1, 8 }, 1 }, { { 1, 4, 2, 16 }, 3 } }) do
    local shape, axis = case[1], case[2]
    it(string.format("over axis %d of [%s]: the op-by-op evaluation's bits", axis, table.concat(shape, ", ")), function()
      local fused, reference = program(shape, axis), program(shape, axis, true)
      local inputs = { ane.tensor.randn(shape, { seed = 82 }), ane.tensor.randn(shape, { seed = 83 }):scale(300),
        ane.tensor(shape):fill(0) }
      local special = ane.tensor.randn(shape, { seed = 84 })
      special:reshape(-1):slice(1, 1, 1):fill(math.huge)
      special:reshape(-1):slice(1, 2, 2):fill(0 / 0)
      inputs[#inputs + 1] = special
      local feeds = {}
      for i, x in ipairs(inputs) do feeds[i] = { x = x } end
      same_bits(fused, reference, feeds)
    end)
  end
end)

describe("sim's fused RoPE", function()
  local nn = require("ane.nn")
  -- x [1, heads, S, D] rotated by cos and sin [S, D], inputs (as a model's rotary angles) or consts
  local function program(shape, convention, as_inputs, fusions)
    local g = ane.graph("rope")
    local x = g:input("x", shape, "fp16")
    local table_shape = { shape[3], shape[4] }
    local cos, sin
    if as_inputs then
      cos, sin = g:input("cos", table_shape, "fp16"), g:input("sin", table_shape, "fp16")
    else
      cos = ane.tensor.rand(table_shape, { seed = 91, low = -1, high = 1 }):to("fp16")
      sin = ane.tensor.rand(table_shape, { seed = 92, low = -1, high = 1 }):to("fp16")
    end
    -- (read by a step, which sees y's rounding, not an output's conversion)
    g:output("y", g:add(nn.rope(g, x, cos, sin, { name = "rope", convention = convention }), x))
    return ane.compile(g, { precision = "fp16", profile = "cpu", fusions = fusions })
  end
  for _, case in ipairs({ { { 1, 12, 1, 64 }, "half" }, { { 1, 12, 1, 64 }, "interleaved" },
    { { 1, 4, 6, 16 }, "half" }, { { 1, 3, 5, 8 }, "interleaved" } }) do
    local shape, convention = case[1], case[2]
    for _, as_inputs in ipairs({ true, false }) do
      it(string.format("of [%s], %s, cos and sin %s: every node its own step's bits", table.concat(shape, ", "),
        convention, as_inputs and "inputs" or "consts"), function()
        local fused, reference = program(shape, convention, as_inputs), program(shape, convention, as_inputs, false)
        local feed = {}
        if as_inputs then
          feed.cos = ane.tensor.rand({ shape[3], shape[4] }, { seed = 93, low = -1, high = 1 })
          feed.sin = ane.tensor.rand({ shape[3], shape[4] }, { seed = 94, low = -1, high = 1 })
        end
        local special = ane.tensor.randn(shape, { seed = 95 })
        special:reshape(-1):slice(1, 3, 3):fill(math.huge) -- (the rotation's products then take the whole sum)
        special:reshape(-1):slice(1, 8, 8):fill(0 / 0)
        local feeds = {}
        for i, x in ipairs({ ane.tensor.randn(shape, { seed = 96 }), ane.tensor.randn(shape, { seed = 97 }):scale(4e4),
          special, ane.tensor(shape):fill(0) }) do
          feeds[i] = { x = x, cos = feed.cos, sin = feed.sin }
        end
        same_bits(fused, reference, feeds)
      end)
    end
  end
end)

describe("sim's fused scores of keys besides a cache", function()
  -- q x keys, scaled, masked by [rows, keys] and clipped, as nn.cached_attention scores a decode
  -- step's own key (and any small q x k); against every node its own step
  local function program(q_shape, k_shape, clip, fusions)
    local g = ane.graph("scores")
    local q, k = g:input("q", q_shape, "fp16"), g:input("k", k_shape, "fp16")
    local rows, keys = q_shape[3], k_shape[3]
    local mask = g:input("mask", { rows, keys }, "fp16")
    local logits = g:add(g:mul(g:matmul(q, k, { transpose_y = true }), 1 / math.sqrt(128)), mask)
    if clip then logits = g:clip(logits, -clip, clip) end
    -- (read by a step, which sees the logits' rounding, not an output's conversion)
    g:output("y", g:sub(logits, g:reduce_max(logits, { 3 }, { keep_dims = true })))
    return ane.compile(g, { precision = "fp16", profile = "cpu", fusions = fusions })
  end
  for _, case in ipairs({ { { 1, 12, 1, 64 }, { 1, 12, 1, 64 }, 65504 }, { { 1, 12, 1, 64 }, { 1, 12, 1, 64 } },
    { { 1, 4, 3, 16 }, { 1, 4, 5, 16 }, 30 }, { { 2, 2, 6, 8 }, { 2, 2, 6, 8 } } }) do
    local q_shape, k_shape, clip = case[1], case[2], case[3]
    it(string.format("q [%s], keys [%s], %s: every node its own step's bits", table.concat(q_shape, ", "),
      table.concat(k_shape, ", "), clip and "clipped at " .. clip or "no clip"), function()
      local fused, reference = program(q_shape, k_shape, clip), program(q_shape, k_shape, clip, false)
      local rows, keys = q_shape[3], k_shape[3]
      local mask = ane.tensor.rand({ rows, keys }, { seed = 101, low = -3, high = 0 })
      mask:reshape(-1):slice(1, 1, 1):fill(-65504)
      local special = ane.tensor.randn(q_shape, { seed = 102 })
      special:reshape(-1):slice(1, 2, 2):fill(math.huge)
      special:reshape(-1):slice(1, 20, 20):fill(0 / 0)
      local k = ane.tensor.randn(k_shape, { seed = 103 })
      local qs = { ane.tensor.randn(q_shape, { seed = 104 }), ane.tensor.randn(q_shape, { seed = 105 }):scale(300),
        special, ane.tensor(q_shape):fill(0) }
      local feeds = {}
      for i, q in ipairs(qs) do feeds[i] = { q = q, k = k, mask = mask } end
      same_bits(fused, reference, feeds)
    end)
  end
end)

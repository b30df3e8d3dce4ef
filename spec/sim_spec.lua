-- backend/sim.c: instances of a compiled program borrow its weights until patched; a patch
-- gives bit-identical outputs to a fresh compile with the new weights and changes only its
-- own instance. Different programs with equal weights hold one copy (tensor/intern.h).
local ane = require("ane")
local nn = require("ane.nn")
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

-- A matmul by a constant with one nonzero a column (RoPE's rotation, nn.rope_rotation, a
-- signed permutation) computes one product an output element instead of the whole sum
-- (backend/sim.c, find_column_copies). The same graph with the matrix as an input runs the
-- full product: every case is compared with it and with the sums written out here.
describe("sim's matmuls by a constant with one nonzero a column", function()
  local D = 8

  local function graph(x_shape, matrix, flags, as_input)
    local g = ane.graph("rotate")
    local x = g:input("x", x_shape, matrix:dtype())
    local r = as_input and g:input("r", matrix:shape(), matrix:dtype()) or g:const("rotation", matrix)
    g:output("y", g:matmul(x, r, flags))
    return g
  end

  -- y from the matrix's entries in double: y[row][j] = sum_i x[row][i] R(i, j), where R is
  -- read transposed when flags say; every column of a permutation has one nonzero
  local function reference(x, matrix, transposed)
    local xv, rv, rows = x:reshape(-1):to("fp32"):totable(), matrix:reshape(-1):to("fp32"):totable(), x:numel() // D
    local out = {}
    for row = 0, rows - 1 do
      for j = 0, D - 1 do
        local sum = 0
        for i = 0, D - 1 do
          sum = sum + xv[row * D + i + 1] * rv[(transposed and j * D + i or i * D + j) + 1]
        end
        out[#out + 1] = sum
      end
    end
    return out
  end

  local function same_values(expected, got, what) -- NaN where NaN, else equal (+0 == -0)
    assert.are.equal(#expected, #got, what)
    for i = 1, #expected do
      local e, g = expected[i], got[i]
      if e ~= e or g ~= g then
        assert(e ~= e and g ~= g, string.format("%s: element %d is %s, the product's %s", what, i, g, e))
      else
        assert(e == g, string.format("%s: element %d is %.9g, the product's %.9g", what, i, g, e))
      end
    end
  end

  -- a scaled permutation with a column of zeros: still one product (or none) a column
  local function scaled(precision)
    local m = nn.rope_rotation(D, "half", "fp32")
    m:set(0.375, 7, 3) -- column 3 (its nonzero is in row 7): -1 -> 0.375
    for i = 1, D do m:set(0, i, 5) end
    return m:to(precision)
  end

  it("gives the product's values in both precisions, conventions and orientations, few rows and many", function()
    for _, precision in ipairs({ "fp32", "fp16" }) do
      for _, convention in ipairs({ "half", "interleaved", "scaled" }) do
        for _, transposed in ipairs({ false, true }) do
          for _, x_shape in ipairs({ { 1, 3, 1, D }, { 1, 3, 6, D } }) do -- 1 row a head (vector products), 6 (BLAS)
            local what = string.format("%s %s %s %s", precision, convention, transposed and "R^T" or "R",
              table.concat(x_shape, "x"))
            local matrix = convention == "scaled" and scaled(precision) or nn.rope_rotation(D, convention, precision)
            local x = ane.tensor.randn(x_shape, { seed = #what })
            x:set(0, 1, 1, 1, 2)
            x:set(-0.0, 1, 2, 1, 5) -- zeros of both signs: their copies are +0, as the product's sums
            local flags = { transpose_y = transposed }
            local options = { precision = precision, profile = "cpu" }
            local got = ane.compile(graph(x_shape, matrix, flags), options):eval({ x = x }).y
            local dense = ane.compile(graph(x_shape, matrix, flags, true), options):eval({ x = x, r = matrix }).y
            local input = precision == "fp16" and x:to("fp16") or x -- the values the program reads
            -- the one product of a column is exact in double: rounded to fp32 as the kernel
            -- rounds it, then to the output's fp16 in that precision, as sim rounds every op
            local expected = ane.tensor.from(reference(input, matrix, transposed), { got:numel() }, "fp32")
            same_values(expected:to(precision):to("fp32"):totable(), got:reshape(-1):to("fp32"):totable(), what)
            same_values(dense:reshape(-1):to("fp32"):totable(), got:reshape(-1):to("fp32"):totable(), what .. " vs the product")
            if x_shape[3] == 1 then -- the vector products' sums start from +0: the same bits, zeros too
              assert.are.equal(dense:bytes(), got:bytes(), what)
            end
          end
        end
      end
    end
  end)

  it("gives NaN and inf where the product does (inf times the zeros)", function()
    local matrix = nn.rope_rotation(D, "half", "fp32")
    local x = ane.tensor.randn({ 1, 3, 1, D }, { seed = 5 })
    x:set(math.huge, 1, 2, 1, 3)  -- row 2: an inf
    x:set(0 / 0, 1, 3, 1, 8)      -- row 3: a NaN
    local cpu = { profile = "cpu", precision = "fp32" }
    local got = ane.compile(graph({ 1, 3, 1, D }, matrix, {}), cpu):eval({ x = x }).y:reshape(-1):totable()
    local dense = ane.compile(graph({ 1, 3, 1, D }, matrix, {}, true), cpu):eval({ x = x, r = matrix }).y:reshape(-1):totable()
    same_values(dense, got, "non-finite rows")
    assert.are.equal(math.huge, got[D + 7]) -- row 2: column 7 copies its 3rd element, the inf; the others NaN
    assert.is_true(got[D + 1] ~= got[D + 1])
  end)

  it("follows patches of the matrix: to a dense one and back", function()
    local matrix = nn.rope_rotation(D, "interleaved", "fp32")
    local dense_matrix = ane.tensor.randn({ D, D }, { seed = 9 })
    local near = matrix:copy()
    near:set(0.5, 1, 1) -- column 1: a second nonzero
    local x = ane.tensor.randn({ 1, 2, 1, D }, { seed = 10 })
    local cpu = { profile = "cpu", precision = "fp32" }
    local program = ane.compile(graph({ 1, 2, 1, D }, matrix, {}), cpu)
    local rotated = program:eval({ x = x }).y:bytes()
    for _, other in ipairs({ dense_matrix, near }) do
      program:patch({ rotation = other })
      local fresh = ane.compile(graph({ 1, 2, 1, D }, other, {}), { profile = "cpu", precision = "fp32", name = "fresh" })
        :eval({ x = x }).y
      local product = ane.compile(graph({ 1, 2, 1, D }, other, {}, true), cpu):eval({ x = x, r = other }).y
      assert.are.equal(product:bytes(), fresh:bytes())
      assert.are.equal(fresh:bytes(), program:eval({ x = x }).y:bytes())
      assert.are_not.equal(rotated, fresh:bytes())
    end
    program:patch({ rotation = matrix })
    assert.are.equal(rotated, program:eval({ x = x }).y:bytes())
  end)
end)

describe("sim's products of one decoded position", function()
  -- q, k and v (or gate and up) read the same x: sim runs such convs as one loop over their
  -- rows (ane_gemv_parts); each output must be, bit for bit, the conv's own in a program of
  -- its own. Row counts 96, 37 and 64 split into shares that cross from one conv into the
  -- next; a conv of another x between them (relu(x)) is not one of them.
  local K = 256
  local cpu = { backend = "sim", profile = "cpu", precision = "fp16" }
  local function weight(mode, rows, seed)
    local w = ane.tensor.randn({ rows, K }, { seed = seed }):scale(0.05)
    if mode == "fp16" then return w:to("fp16"):reshape(rows, K, 1, 1) end
    return ane.quantize(w, mode, { dtype = "fp16" }):reshape(rows, K, 1, 1)
  end
  local function alone(w, x, relu)
    local g = ane.graph("alone")
    local gx = g:input("x", { 1, K, 1, 1 }, "fp16")
    g:output("y", g:conv(relu and g:relu(gx) or gx, g:const("w", w)))
    return ane.compile(g, cpu):eval({ x = x }).y:bytes()
  end

  it("gives each conv's output as its program alone does, fp16, int8 and 4-bit weights", function()
    local x = ane.tensor.randn({ 1, K, 1, 1 }, { seed = 5, dtype = "fp16" })
    for _, mode in ipairs({ "fp16", "int8", "int4" }) do
      local ws = { weight(mode, 96, 21), weight(mode, 37, 22), weight(mode, 64, 23), weight(mode, 40, 24) }
      local g = ane.graph("together")
      local gx = g:input("x", { 1, K, 1, 1 }, "fp16")
      local rx = g:relu(gx)
      g:output("y1", g:conv(gx, g:const("w1", ws[1])))
      g:output("other", g:conv(rx, g:const("w4", ws[4])))
      g:output("y2", g:conv(gx, g:const("w2", ws[2])))
      g:output("y3", g:conv(gx, g:const("w3", ws[3])))
      local together = ane.compile(g, cpu):eval({ x = x })
      for i = 1, 3 do assert.are.equal(alone(ws[i], x), together["y" .. i]:bytes(), mode .. " conv " .. i) end
      assert.are.equal(alone(ws[4], x, true), together.other:bytes(), mode .. " conv of relu(x)")
    end
  end)
end)

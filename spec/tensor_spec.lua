-- ane.tensor: construction, dtypes, element access, views, conversion, arithmetic,
-- matmul and comparisons, each checked against values computed here in plain Lua.
local ane = require("ane")

local dtypes = { "fp32", "fp16", "bf16", "int32", "int64", "int16", "uint16", "int8", "uint8", "bool" }

-- Plain-Lua matrix product, the reference for BLAS.
local function naive_matmul(a, b)
  local m, k, n = #a, #b, #b[1]
  local c = {}
  for i = 1, m do
    c[i] = {}
    for j = 1, n do
      local sum = 0
      for p = 1, k do sum = sum + a[i][p] * b[p][j] end
      c[i][j] = sum
    end
  end
  return c
end

describe("ane.tensor construction", function()
  it("makes zeros of every dtype with the right shape and size", function()
    for _, dtype in ipairs(dtypes) do
      local t = ane.tensor({ 2, 3, 4 }, dtype)
      assert.are.same({ 2, 3, 4 }, t:shape())
      assert.are.equal(dtype, t:dtype())
      assert.are.equal(24, t:numel())
      assert.are.equal(2, #t)
      local expected_zero = 0
      if dtype == "bool" then expected_zero = false end
      assert.are.equal(expected_zero, t:get(2, 3, 4))
    end
  end)

  -- Blocks of 32 MB and more are reused after they are freed (storage.c's pool): a new zero
  -- tensor that gets a used block must still read as zeros, however the block was left.

  it("builds from flat values with a shape and from nested tables", function()
    local flat = ane.tensor.from({ 1, 2, 3, 4, 5, 6 }, { 2, 3 })
    local nested = ane.tensor.from({ { 1, 2, 3 }, { 4, 5, 6 } })
    assert.are.same({ 2, 3 }, nested:shape())
    assert.are.same({ { 1, 2, 3 }, { 4, 5, 6 } }, flat:totable())
    assert.are.equal(0, flat:max_abs_diff(nested))
    assert.are.equal(6, ane.tensor.from({ 1, 2, 3, 4, 5, 6 }, { 2, 3 }, "int32"):get(2, 3))
    assert.are.equal("int64", ane.tensor.from({ 1, 2 }, "int64"):dtype())
  end)

  it("keeps 64-bit integers exact", function()
    local big = math.maxinteger - 5
    local t = ane.tensor.from({ big, -big }, { 2 }, "int64")
    assert.are.equal(big, t:get(1))
    assert.are.equal(-big, t:get(2))
  end)

  it("saturates integer conversions and keeps floats for float dtypes", function()
    local t = ane.tensor.from({ 300, -300, 1.9, -1.9 }, { 4 }, "fp32")
    assert.are.same({ 127, -128, 1, -1 }, t:to("int8"):totable())
    assert.are.same({ 255, 0, 1, 0 }, t:to("uint8"):totable())
  end)

  it("round-trips bytes", function()
    local t = ane.tensor.from({ 1.5, -2.25, 3 }, { 3 })
    local copy = ane.tensor.from_bytes(t:bytes(), { 3 }, "fp32")
    assert.are.equal(0, copy:max_abs_diff(t))
    assert.are.equal(string.pack("<fff", 1.5, -2.25, 3), t:bytes())
    assert.are.equal(string.pack("<i2i2", 7, -7), ane.tensor.from({ 7, -7 }, { 2 }, "int16"):bytes())
  end)

  it("rejects bad input with errors naming the problem", function()
    assert.has_error(function() ane.tensor.from({ 1, 2, 3 }, { 2, 2 }) end, "values has 3 elements but shape [2, 2] needs 4")
    assert.has_error(function() ane.tensor.from({ 1, "x" }, { 2 }) end, "values element 2 is a string, expected a number")
    assert.has_error(function() ane.tensor.from({ { 1, 2 }, { 3 } }) end)
    assert.error_matches(function() ane.tensor({ 2, 3 }, "float7") end, "unknown dtype 'float7'")
    assert.error_matches(function() ane.tensor({ 2, -1 }) end, "shape%[2%] must be a non%-negative integer")
    assert.error_matches(function() ane.tensor({ 2, 1.5 }) end, "shape%[2%] must be a non%-negative integer")
    assert.error_matches(function() ane.tensor.from_bytes("abc", { 1 }) end, "3 bytes given, but 1 fp32 elements need 4")
    local t = ane.tensor({ 2, 3 })
    assert.error_matches(function() t:get(3, 1) end, "index 3 is out of range for dimension 1 of size 2")
    assert.error_matches(function() t:get(1, 0) end, "out of range for dimension 2")
    assert.error_matches(function() t:get(1) end, "a 2%-D tensor needs 2 indices, got 1")
    assert.error_matches(function() t:set("x", 1, 1) end, "number expected")
    assert.error_matches(function() t:reshape(4, 2) end, "cannot reshape %[2, 3%] %(6 elements%) to %[4, 2%]")
  end)
end)

describe("ane.tensor views", function()
  local t = ane.tensor.from({ { 1, 2, 3, 4 }, { 5, 6, 7, 8 }, { 9, 10, 11, 12 } })

  it("slices share storage with the original", function()
    local s = t:copy():slice(2, 2, 3)
    assert.are.same({ { 2, 3 }, { 6, 7 }, { 10, 11 } }, s:totable())
    local base = ane.tensor.from({ 1, 2, 3, 4 })
    local view = base:slice(1, 2, 3)
    view:set(20, 1)
    assert.are.equal(20, base:get(2))
    assert.are.same({ 3, 4 }, base:slice(1, -2):totable())
  end)

  it("transposes as a view and copies to contiguous", function()
    local tt = t:transpose()
    assert.are.same({ 4, 3 }, tt:shape())
    assert.is_false(tt:is_contiguous())
    assert.are.equal(7, tt:get(3, 2))
    assert.are.same({ { 1, 5, 9 }, { 2, 6, 10 }, { 3, 7, 11 }, { 4, 8, 12 } }, tt:copy():totable())
    assert.is_true(tt:copy():is_contiguous())
  end)

  -- Transposed copies go in 32 x 32 tiles, 8 x 8 register blocks inside whole tiles and bands
  -- of tiles over threads past 256 KB: shapes with whole tiles, ragged edges on either side,
  -- and one large enough to be split; every element checked against its source position.
  -- A column of a [rows, cols] tensor is a strided row (a decode step writes each new key
  -- and value so into its cache); each dtype pair must convert as the contiguous path does.
  it("copies strided columns between dtypes as contiguous copies convert", function()
    local values = { 1 / 3, -2.5, 65519, 70000, 1e-7, -0.0, 12345.678, 2 ^ -20, 0.1 }
    local pairs_to_check = { { "fp16", "fp16" }, { "fp32", "fp32" }, { "fp16", "fp32" }, { "fp32", "fp16" },
      { "int32", "int32" }, { "fp32", "bf16" } }
    for _, pair in ipairs(pairs_to_check) do
      local from, to = pair[1], pair[2]
      local column = ane.tensor.from(values):to(from):reshape(#values, 1)
      local expected = column:to(to):reshape(-1):totable() -- the contiguous conversion
      local wide = ane.tensor({ #values, 5 }, to):fill(0)
      wide:slice(2, 4, 4):copy_from(column) -- into a strided column
      assert.are.same(expected, wide:slice(2, 4, 4):copy():reshape(-1):totable(), from .. " -> " .. to .. " (into)")
      local source = ane.tensor({ #values, 3 }, from):fill(0)
      source:slice(2, 2, 2):copy_from(column) -- out of a strided column
      local back = ane.tensor({ #values, 1 }, to)
      back:copy_from(source:slice(2, 2, 2))
      assert.are.same(expected, back:reshape(-1):totable(), from .. " -> " .. to .. " (out of)")
    end
  end)

  it("copies transposed views exactly at tile edges and across threads", function()
    for _, shape in ipairs({ { 64, 96 }, { 37, 70 }, { 33, 8 }, { 300, 1000 } }) do
      local rows, cols = shape[1], shape[2]
      local values = {}
      for i = 1, rows * cols do values[i] = i end -- distinct, exact in fp32
      local source = ane.tensor.from(values):reshape(rows, cols)
      local copied = source:transpose():copy()
      assert.are.same({ cols, rows }, copied:shape())
      local flat_copy = copied:reshape(-1):totable()
      local wrong = 0
      for c = 1, cols do
        for r = 1, rows do
          if flat_copy[(c - 1) * rows + r] ~= values[(r - 1) * cols + c] then wrong = wrong + 1 end
        end
      end
      assert.are.equal(0, wrong, string.format("[%d, %d] transposed", rows, cols))
    end
  end)

  it("reshapes contiguous data as a view and other data by copying", function()
    local r = t:reshape(2, -1)
    assert.are.same({ 2, 6 }, r:shape())
    assert.are.same({ 1, 5, 9, 2, 6, 10, 3, 7, 11, 4, 8, 12 }, t:transpose():reshape({ 12 }):totable())
    local base = ane.tensor({ 4 })
    base:reshape(2, 2):set(5, 2, 2)
    assert.are.equal(5, base:get(4))
  end)

  it("rejects out-of-range slices and dimensions", function()
    assert.error_matches(function() t:slice(1, 2, 5) end, "slice 2..5 is outside dimension 1 of size 3")
    assert.error_matches(function() t:slice(3, 1, 1) end, "dimension 3 does not exist in a 2%-D tensor")
  end)
end)

describe("ane.tensor arithmetic", function()
  local a = ane.tensor.from({ { 1, 2, 3 }, { 4, 5, 6 } })
  local b = ane.tensor.from({ { 6, 5, 4 }, { 3, 2, 1 } })

  it("adds, subtracts, multiplies and divides elementwise", function()
    assert.are.same({ { 7, 7, 7 }, { 7, 7, 7 } }, a:add(b):totable())
    assert.are.same({ { -5, -3, -1 }, { 1, 3, 5 } }, (a - b):totable())
    assert.are.same({ { 6, 10, 12 }, { 12, 10, 6 } }, (a * b):totable())
    assert.are.same({ { 0.5, 1, 1.5 }, { 2, 2.5, 3 } }, (a / 2):totable())
    assert.are.same({ { -2, -4, -6 }, { -8, -10, -12 } }, (-a):scale(2):totable())
    assert.are.same({ { 9, 8, 7 }, { 6, 5, 4 } }, (10 - a):totable())
  end)

  it("adds into a tensor in place, through views, and refuses what it cannot write", function()
    local sum = ane.tensor.from({ { 1, 2, 3 }, { 4, 5, 6 } })
    assert.are.equal(sum, sum:add_from(ane.tensor.from({ { 10, 20, 30 }, { 40, 50, 60 } })))
    assert.are.same({ { 11, 22, 33 }, { 44, 55, 66 } }, sum:totable())
    sum:add_from(ane.tensor.from({ { 1, 2 }, { 3, 4 }, { 5, 6 } }):transpose()) -- a strided source
    assert.are.same({ { 12, 25, 38 }, { 46, 59, 72 } }, sum:totable())
    local half = ane.tensor.from({ 1, 2 }):to("fp16")
    half:add_from(ane.tensor.from({ 0.25, 2048 })) -- stored in fp16: 2050 rounds to 2048 + 2
    assert.are.same({ 1.25, 2050 }, half:totable())
    assert.error_matches(function() sum:add_from(ane.tensor.from({ 1, 2, 3 })) end, "cannot add a %[3%] tensor into a %[2, 3%] tensor")
    local shared = ane.tensor.randn({ 64, 64 }, { seed = 71 }):intern() -- shared with programs: read-only
    assert.error_matches(function() shared:add_from(ane.tensor.randn({ 64, 64 })) end, "read%-only")
  end)

  it("broadcasts like numpy", function()
    local row = ane.tensor.from({ 10, 20, 30 })
    local column = ane.tensor.from({ { 100 }, { 200 } })
    assert.are.same({ { 11, 22, 33 }, { 14, 25, 36 } }, a:add(row):totable())
    assert.are.same({ { 110, 120, 130 }, { 210, 220, 230 } }, row:add(column):totable())
    assert.error_matches(function() a:add(ane.tensor({ 2 })) end, "shapes %[2, 3%] and %[2%] do not broadcast")
  end)

  it("keeps fp16 results in fp16 and promotes mixed dtypes to fp32", function()
    local h = a:to("fp16")
    assert.are.equal("fp16", h:add(h):dtype())
    assert.are.equal("fp16", h:scale(0.5):dtype())
    assert.are.equal("fp32", h:add(a):dtype())
    assert.are.equal("int64", ane.tensor.from({ 1 }, "int32"):add(ane.tensor.from({ 1 }, "int16")):dtype())
  end)

  it("multiplies matrices through BLAS like the plain-Lua reference", function()
    local x = ane.tensor.randn({ 17, 31 }, { seed = 1 })
    local y = ane.tensor.randn({ 31, 9 }, { seed = 2 })
    local expected = ane.tensor.from(naive_matmul(x:totable(), y:totable()))
    -- fp32 sums of 31 products of N(0,1) values: rounding error is a few ulps of the
    -- partial sums (|sum| < ~30), far below 1e-4.
    assert.is_true(x:matmul(y):max_abs_diff(expected) < 1e-4)
    local xt = x:transpose():copy():transpose() -- a strided operand
    assert.is_true(xt:matmul(y):max_abs_diff(expected) < 1e-4)
    -- transposed views on either side and both (read in place through BLAS's Trans flags),
    -- a row-sliced view (leading dimension wider than the row), a vector and an fp16 operand
    local yt = y:transpose():copy():transpose()
    assert.is_true(x:matmul(yt):max_abs_diff(expected) < 1e-4)
    assert.is_true(xt:matmul(yt):max_abs_diff(expected) < 1e-4)
    local wide = ane.tensor.randn({ 17, 40 }, { seed = 5 })
    wide:slice(2, 1, 31):copy_from(x)
    assert.is_true(wide:slice(2, 1, 31):matmul(y):max_abs_diff(expected) < 1e-4)
    local column = y:slice(2, 4, 4)                                    -- [31, 1], strided
    local expected_column = ane.tensor.from(naive_matmul(x:totable(), column:totable()))
    assert.is_true(xt:matmul(column):max_abs_diff(expected_column) < 1e-4)
    local row = x:slice(1, 5, 5)                                       -- [1, 31]
    assert.is_true(row:matmul(yt):max_abs_diff(expected:slice(1, 5, 5)) < 1e-4)
    -- a matrix-vector product large enough to be split over the helper threads (rows by
    -- share, each row one fp32 dot product of 64 terms: a few ulps of |sum| < ~25)
    local tall, vector = ane.tensor.randn({ 5000, 64 }, { seed = 7 }), ane.tensor.randn({ 64, 1 }, { seed = 8 })
    local expected_tall = ane.tensor.from(naive_matmul(tall:totable(), vector:totable()))
    assert.is_true(tall:matmul(vector):max_abs_diff(expected_tall) < 1e-4)
    -- an fp16 operand is converted exactly to fp32 first: the reference uses the rounded x
    local x16 = x:to("fp16")
    local expected16 = ane.tensor.from(naive_matmul(x16:to("fp32"):totable(), y:totable()))
    assert.is_true(x16:matmul(yt):max_abs_diff(expected16) < 1e-4)
    -- an fp16 matrix times a vector is read as stored (the decode classifier's path): the
    -- same reference, the rounded values, 64 terms of |w x| < ~10 in fp32
    local tall16 = tall:to("fp16")
    local expected_tall16 = ane.tensor.from(naive_matmul(tall16:to("fp32"):totable(), vector:totable()))
    assert.is_true(tall16:matmul(vector):max_abs_diff(expected_tall16) < 1e-4)
    -- a few rows times the transpose of an fp16 matrix (a batched step's logits, X W^T) read
    -- as stored too: each row of the result is, bit for bit, W times that row alone (the
    -- matrix-vector product above), and near the reference (64 terms, as there)
    local tall16_t = ane.tensor.from(tall16:to("fp32"):transpose():totable())  -- [64, 5000]
    for _, count in ipairs({ 3, 8 }) do
      local rows = ane.tensor.randn({ count, 64 }, { seed = 9 + count })
      local product = rows:matmul(tall16:transpose())
      assert.are.same({ count, 5000 }, product:shape())
      local expected_rows = ane.tensor.from(naive_matmul(rows:totable(), tall16_t:totable()))
      assert.is_true(product:max_abs_diff(expected_rows) < 1e-4)
      for i = 1, count do
        local alone = tall16:matmul(rows:slice(1, i, i):transpose():copy())      -- [5000, 1]
        assert.are.equal(alone:bytes(), product:slice(1, i, i):copy():bytes())
      end
    end
    local batched = ane.tensor.randn({ 3, 4, 5 }, { seed = 3 }):matmul(ane.tensor.randn({ 3, 5, 2 }, { seed = 4 }))
    assert.are.same({ 3, 4, 2 }, batched:shape())
    assert.error_matches(function() x:matmul(x) end, "matmul needs %[m, k%] x %[k, n%]")
    assert.error_matches(function() ane.tensor({ 2, 2 }, "int32"):matmul(ane.tensor({ 2, 2 }, "int32")) end,
      "matmul needs float tensors")
  end)
end)

describe("ane.tensor comparisons", function()
  it("measures the largest difference and closeness", function()
    local a = ane.tensor.from({ 1, 2, 3 })
    local b = ane.tensor.from({ 1, 2.5, 2 })
    assert.are.equal(1, a:max_abs_diff(b))
    assert.is_false(a:allclose(b))
    assert.is_true(a:allclose(b, 0, 1))
    assert.is_true(a:allclose(a:add(1e-7)))
  end)

  it("treats NaN as a difference and equal infinities as equal", function()
    local with_nan = ane.tensor.from({ 0 / 0, 1 })
    local plain = ane.tensor.from({ 0, 1 })
    assert.is_true(with_nan:max_abs_diff(plain) ~= with_nan:max_abs_diff(plain)) -- NaN
    assert.is_false(with_nan:allclose(with_nan))
    local inf = ane.tensor.from({ math.huge })
    assert.are.equal(0, inf:max_abs_diff(inf))
    assert.is_true(inf:allclose(inf))
  end)

  it("prints usefully", function()
    assert.are.equal("ane.tensor fp32 [2] { 1.5, -2 }", tostring(ane.tensor.from({ 1.5, -2 })))
    assert.are.equal("ane.tensor int32 [10] { 0, 0, 0, 0, 0, 0, 0, 0, ... }", tostring(ane.tensor({ 10 }, "int32")))
  end)
end)

describe("ane.tensor topk", function()
  it("returns the k largest in order, ties by the lower index, NaN last, as a full sort does", function()
    -- 5,000 values on a coarse grid (many ties), a few NaNs and infinities; the reference sorts
    -- every (value, index) pair in Lua. k below and above n / 8 takes both of topk's paths; k = 1
    -- (argmax) its own, with and without NaNs (and the largest value tied: -0 and +0 too).
    local random, values = require("ane.models.generation").rng(11), {}
    for i = 1, 5000 do values[i] = math.floor(random() * 200) / 4 - 25 end
    values[7], values[4000], values[123] = 0 / 0, math.huge, -math.huge
    values[2500] = 0 / 0
    local without_nans = {}
    for i, v in ipairs(values) do without_nans[i] = (v ~= v or v == math.huge) and 3.5 or v end
    without_nans[4321] = 25
    local zeros = {}
    for i = 1, 300 do zeros[i] = -1 - i end
    zeros[17], zeros[40], zeros[200] = -0.0, 0.0, 0.0
    for _, row in ipairs({ without_nans, zeros }) do
      local got_values, got_indices = ane.tensor.from(row, { #row }):topk(1)
      local best = 1 -- (the first of the largest)
      for i, v in ipairs(row) do if v > row[best] then best = i end end
      assert.are.equal(best, got_indices[1])
      assert.are.equal(row[best], got_values[1])
      assert.are.equal(best, ane.tensor.from(row, { #row }):argmax())
    end
    local t = ane.tensor.from(values, { 5000 })
    local reference = {}
    for i, v in ipairs(values) do reference[i] = { value = v == v and v or -math.huge, index = i } end
    table.sort(reference, function(a, b)
      if a.value ~= b.value then return a.value > b.value end
      return a.index < b.index
    end)
    for _, k in ipairs({ 1, 2, 5, 40, 624, 626, 5000 }) do
      local got_values, got_indices = t:topk(k)
      for i = 1, k do
        assert.are.equal(reference[i].index, got_indices[i], "k = " .. k .. ", rank " .. i)
        assert.are.equal(reference[i].value, got_values[i], "k = " .. k .. ", rank " .. i)
      end
    end
  end)
end)

describe("ane.tensor sample", function()
  -- The sampler written out over a full sort in Lua (the rule row:sample follows): weights
  -- exp((value - best) / T) of the top_k largest in topk's order, the shortest prefix whose
  -- share reaches top_p, the first whose running sum passes u times the prefix's total (of
  -- those that weigh anything).
  local function reference(values, temperature, top_k, top_p, u, order)
    local ranked = {}
    for i, v in ipairs(values) do ranked[i] = { value = v == v and v or -math.huge, index = i } end
    if order ~= "index" then
      table.sort(ranked, function(a, b)
        if a.value ~= b.value then return a.value > b.value end
        return a.index < b.index
      end)
    end
    local best = -math.huge
    for _, r in ipairs(ranked) do best = math.max(best, r.value) end
    local k = top_k and math.min(top_k, #ranked) or #ranked
    local weights, total = {}, 0
    for i = 1, k do
      weights[i] = math.exp((ranked[i].value - best) / temperature)
      total = total + weights[i]
    end
    local keep = k
    if top_p and top_p < 1 then
      local mass = 0
      for i = 1, k do
        mass = mass + weights[i] / total
        if mass >= top_p then keep = i break end
      end
      total = 0
      for i = 1, keep do total = total + weights[i] end
    end
    local left, last = u * total, ranked[1].index
    for i = 1, keep do
      if weights[i] > 0 then -- values of no weight (NaN, -inf) are never drawn
        last = ranked[i].index
        left = left - weights[i]
        if left <= 0 then return last end
      end
    end
    return last
  end

  it("draws what the rule written out in Lua draws, top-k, top-p, both and neither", function()
    local random = require("ane.models.generation").rng(21)
    for trial = 1, 6 do
      local n = trial % 2 == 0 and 3000 or 500
      local values = {}
      for i = 1, n do values[i] = math.floor(random() * 400) / 40 end -- ties on a grid
      values[5] = 0 / 0
      local row = ane.tensor.from(values, { n })
      for _, setting in ipairs({ { 0.7, 20, nil }, { 1.3, 40, 0.9 }, { 0.6, nil, 0.95 }, { 1.0, n // 2, 0.8 } }) do
        local temperature, top_k, top_p = setting[1], setting[2], setting[3]
        for _ = 1, 25 do
          local u = random()
          assert.are.equal(reference(values, temperature, top_k, top_p, u), row:sample(temperature, top_k, top_p, u),
            string.format("n %d, T %g, top_k %s, top_p %s, u %.17g", n, temperature, top_k, top_p, u))
        end
      end
      -- no cut at all: the same weights, walked in index order (nothing to sort)
      for _ = 1, 25 do
        local u = random()
        assert.are.equal(reference(values, 0.9, nil, nil, u, "index"), row:sample(0.9, nil, nil, u))
      end
    end
  end)

  it("a nucleus of the best alone in short and nearly flat rows", function()
    -- there the weight every nucleus member needs is above the best's own: the best is drawn
    local rows = { { 0.9, 1.0 }, { 1.0, 0.95, 0.9 }, { 0.1, 0.3, 0.2, 0.25 }, { 2, 2, 1.99 } }
    for _, values in ipairs(rows) do
      local row = ane.tensor.from(values, { #values })
      for _, top_p in ipairs({ 0.05, 0.3, 0.6 }) do
        for _, u in ipairs({ 0, 0.4, 0.999 }) do
          assert.are.equal(reference(values, 1.0, nil, top_p, u), row:sample(1.0, nil, top_p, u),
            string.format("%s, top_p %g, u %g", table.concat(values, " "), top_p, u))
        end
      end
    end
  end)

  it("never draws NaN while a number is there, and refuses a bad temperature or u", function()
    local row = ane.tensor.from({ 0 / 0, -math.huge, 0 / 0, 2 }, { 4 })
    for _, u in ipairs({ 0, 0.3, 0.999 }) do
      assert.are.equal(4, row:sample(1.0, nil, nil, u))
      assert.are.equal(4, row:sample(1.0, 3, nil, u)) -- top 3: 2, then two of no weight
      assert.are.equal(4, row:sample(1.0, nil, 0.5, u))
    end
    assert.error_matches(function() row:sample(0, nil, nil, 0.5) end, "temperature 0 must be > 0")
    assert.error_matches(function() row:sample(1, nil, nil, 1) end, "u 1 in %[0, 1%)")
  end)
end)

describe("ane.tensor xor_words", function()
  -- The reference folds t:bytes() in Lua, 8 bytes at a time, the last word zero-padded.
  local function reference(t)
    local bytes, fold = t:bytes(), 0
    for i = 1, #bytes, 8 do
      local word = bytes:sub(i, i + 7)
      fold = fold ~ string.unpack("<i8", word .. string.rep("\0", 8 - #word))
    end
    return fold
  end

  it("is the XOR of the bytes' 8-byte words, tails and blocks on every thread included", function()
    -- 6 and 10 bytes (ragged last words), 200,000 bytes (4 blocks of 64 KB, one thread), 1.2 MB
    -- of fp32 (19 blocks, over both threads) and 1,155 bytes of int8 (whole 128-byte steps, then 3)
    for _, case in ipairs({ { { 3 }, "fp16" }, { { 5 }, "fp16" }, { { 100000 }, "fp16" }, { { 300001 }, "fp32" },
      { { 1155 }, "int8" } }) do
      local t = ane.tensor.rand(case[1], { seed = 7 }):scale(100):to(case[2])
      assert.are.equal(reference(t), t:xor_words(), case[2] .. " " .. case[1][1])
    end
    assert.are.equal(0, ane.tensor({ 0 }):xor_words())
  end)

  it("refuses a strided view", function()
    local t = ane.tensor.rand({ 4, 6 }, { seed = 1 })
    assert.error_matches(function() t:transpose(1, 2):xor_words() end, "xor_words: the tensor is a strided view")
  end)
end)

describe("ane.tensor first_outside (the loaders' weight check)", function()
  -- the reference: a scan of t:totable() in Lua, row-major, NaN or |x| >= limit
  local function scan(rows, limit)
    local flat = 0
    for _, row in ipairs(rows) do
      for _, x in ipairs(row) do
        if not (math.abs(x) < limit) then return flat, x end
        flat = flat + 1
      end
    end
  end

  it("finds the first NaN or infinity in every float dtype, past a block boundary and in a strided view", function()
    for _, dtype in ipairs({ "fp32", "fp16", "bf16" }) do
      local t = ane.tensor.randn({ 3, 5000 }, { seed = 2 }):to(dtype)
      assert.is_nil(t:first_outside())
      t:set(-math.huge, 2, 4200) -- element 9199: the third 4096-element block
      t:set(0 / 0, 3, 1)
      assert.are.equal(9199, (t:first_outside()))
      local index, value = t:transpose():first_outside()
      local reference_index, reference_value = scan(t:transpose():totable(), math.huge)
      assert.are.equal(reference_index, index)
      assert.are.equal(tostring(reference_value), tostring(value))
    end
  end)

  it("takes a limit: 65520, the least magnitude fp16 rounds to infinity", function()
    local t = ane.tensor.from({ 1, -65519, 65504, 7 })
    assert.is_nil(t:first_outside(65520))
    assert.is_truthy(t:to("fp16"):first_outside() == nil) -- 65519 rounds to 65504 in fp16
    t:set(-65520, 4)
    assert.are.same({ 3, -65520 }, { t:first_outside(65520) })
    assert.are.equal(3, (t:to("fp16"):first_outside())) -- and fp16 holds it as -inf
    assert.is_nil(ane.tensor.from({ 1, 2 }):to("int32"):first_outside(0.5)) -- integers: always finite
  end)
end)

describe("ane.tensor elementwise maps", function()
  it("tanh: a new fp32 tensor within 4.5 ulp of (e^2x - 1) / (e^2x + 1) in double", function()
    local values = { 0, 1e-6, -0.25, 0.5, 1, -2, 4.5, 9, -20, 88 }
    local t = ane.tensor.from(values, { 2, 5 }, "fp16"):to("fp32")
    local out = t:tanh()
    assert.are.same({ 2, 5 }, out:shape())
    assert.are.equal("fp32", out:dtype())
    for i, x in ipairs(t:reshape(-1):totable()) do
      local want = x > 20 and 1 or x < -20 and -1 or (math.exp(2 * x) - 1) / (math.exp(2 * x) + 1)
      -- the CPU kernels' tanh is within 4.5 ulp of the true value (vector_math.h, derived and
      -- checked in spec/c/test_vector_math.c); the binding adds nothing to it
      assert.is_true(math.abs(out:reshape(-1):get(i) - want) <= 4.5 * 2 ^ -23 * math.max(math.abs(want), 2 ^ -126),
        string.format("tanh(%g) = %.9g, want %.9g", x, out:reshape(-1):get(i), want))
    end
    assert.are.same(t:reshape(-1):totable(), ane.tensor.from(values, { 10 }, "fp16"):to("fp32"):totable()) -- input untouched
  end)
end)

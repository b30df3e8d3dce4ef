-- The composite layers of ane.nn, run on sim in fp32 precision (cpu profile, fp32 graphs)
-- against the textbook formulas written here in plain Lua: layer_norm, rms_norm (also with
-- activations whose plain sum of squares overflows fp16), gelu, silu, swiglu, rotary
-- embeddings in both pair conventions, causal attention with its mask, head split/merge.
-- Tolerance: fp32 evaluation of short formulas over <= 64 terms: 1e-5 relative to the
-- values' scale (~1).
local ane = require("ane")
local nn = require("ane.nn")

local TOL = 1e-5

local function run(build, inputs, dtype)
  local g = ane.graph("nn")
  local nodes = {}
  for i, t in ipairs(inputs) do nodes[i] = g:input("in" .. i, t:shape(), dtype or "fp32") end
  g:output("out", build(g, table.unpack(nodes)))
  local precision = dtype == "fp16" and "fp16" or "fp32"
  local feed = {}
  for i, t in ipairs(inputs) do feed["in" .. i] = t end
  return ane.compile(g, { profile = "cpu", precision = precision }):eval(feed).out
end

-- x as a Lua matrix x[c][s] from a [1, C, 1, S] tensor.
local function columns(t)
  local shape = t:shape()
  local flat = t:reshape(-1):to("fp32"):totable()
  local m = {}
  for c = 1, shape[2] do
    m[c] = {}
    for s = 1, shape[4] do m[c][s] = flat[(c - 1) * shape[4] + s] end
  end
  return m
end

local function assert_matrix(expected, got, tol)
  local m = columns(got)
  for c = 1, #expected do
    for s = 1, #expected[c] do
      local e, g = expected[c][s], m[c][s]
      if math.abs(e - g) > (tol or TOL) * math.max(1, math.abs(e)) then
        error(string.format("[%d][%d]: expected %.8g, got %.8g", c, s, e, g), 2)
      end
    end
  end
end

local C, S = 16, 8

describe("nn composites", function()
  local x = ane.tensor.randn({ 1, C, 1, S }, { seed = 1, std = 2 })
  local xm = columns(x)
  local gamma = ane.tensor.randn({ C }, { seed = 2 })
  local beta = ane.tensor.randn({ C }, { seed = 3 })
  local gv, bv = gamma:totable(), beta:totable()

  it("layer_norm", function()
    local expected = {}
    for c = 1, C do expected[c] = {} end
    for s = 1, S do
      local mean, var = 0, 0
      for c = 1, C do mean = mean + xm[c][s] / C end
      for c = 1, C do var = var + (xm[c][s] - mean) ^ 2 / C end
      for c = 1, C do expected[c][s] = (xm[c][s] - mean) / math.sqrt(var + 1e-5) * gv[c] + bv[c] end
    end
    assert_matrix(expected, run(function(g, n) return nn.layer_norm(g, n, gamma, beta) end, { x }))
  end)

  it("rms_norm", function()
    local expected = {}
    for c = 1, C do expected[c] = {} end
    for s = 1, S do
      local ms = 0
      for c = 1, C do ms = ms + xm[c][s] ^ 2 / C end
      for c = 1, C do expected[c][s] = xm[c][s] / math.sqrt(ms + 1e-5) * gv[c] end
    end
    assert_matrix(expected, run(function(g, n) return nn.rms_norm(g, n, gamma) end, { x }))
  end)

  it("rms_norm stays finite in fp16 where the plain sum of squares overflows", function()
    -- 768 channels with rms 40: sum(x^2) = 768 * 1600 = 1.2e6 > 65504, but sum((x/sqrt(N))^2) = 1600.
    local wide = ane.tensor.randn({ 1, 768, 1, 32 }, { seed = 4, std = 40, dtype = "fp16" })
    local ones = ane.tensor({ 768 }, "fp16"):fill(1)
    local y16 = run(function(g, n) return nn.rms_norm(g, n, ones) end, { wide }, "fp16")
    local y32 = run(function(g, n) return nn.rms_norm(g, n, ones:to("fp32")) end, { wide:to("fp32") })
    -- normalized values are O(1); each of the ~6 fp16 roundings adds 2^-11 relative
    assert.is_true(y16:to("fp32"):max_abs_diff(y32) < 8 * 2 ^ -11 * 4)
  end)

  it("gelu (tanh form) and silu", function()
    local gelu, silu = {}, {}
    for c = 1, C do
      gelu[c], silu[c] = {}, {}
      for s = 1, S do
        local v = xm[c][s]
        local inner = math.sqrt(2 / math.pi) * (v + 0.044715 * v ^ 3)
        local t = (math.exp(inner) - math.exp(-inner)) / (math.exp(inner) + math.exp(-inner))
        gelu[c][s] = 0.5 * v * (1 + t)
        silu[c][s] = v / (1 + math.exp(-v))
      end
    end
    assert_matrix(gelu, run(function(g, n) return nn.gelu(g, n) end, { x }))
    assert_matrix(silu, run(function(g, n) return nn.silu(g, n) end, { x }))
  end)

  it("swiglu: down(silu(gate(x)) * up(x))", function()
    local hidden = 24
    local wg = ane.tensor.randn({ hidden, C }, { seed = 5, std = 0.3 })
    local wu = ane.tensor.randn({ hidden, C }, { seed = 6, std = 0.3 })
    local wd = ane.tensor.randn({ C, hidden }, { seed = 7, std = 0.3 })
    local G, U, D = wg:totable(), wu:totable(), wd:totable()
    local expected = {}
    for c = 1, C do expected[c] = {} end
    for s = 1, S do
      local h = {}
      for j = 1, hidden do
        local gate, up = 0, 0
        for c = 1, C do gate, up = gate + G[j][c] * xm[c][s], up + U[j][c] * xm[c][s] end
        h[j] = gate / (1 + math.exp(-gate)) * up
      end
      for c = 1, C do
        local sum = 0
        for j = 1, hidden do sum = sum + D[c][j] * h[j] end
        expected[c][s] = sum
      end
    end
    assert_matrix(expected, run(function(g, n) return nn.swiglu(g, n, wg, wu, wd) end, { x }), 1e-4)
  end)

  for _, convention in ipairs({ "interleaved", "half" }) do
    it("rope, " .. convention .. " pairs", function()
      local H, T, Dh = 2, 6, 8
      local q = ane.tensor.randn({ 1, H, T, Dh }, { seed = 8 })
      local qv = q:reshape(-1):totable()
      local offset = 3
      local cos, sin = nn.rope_tables(T, Dh, { convention = convention, offset = offset, dtype = "fp32" })
      local got = run(function(g, n) return nn.rope(g, n, cos, sin, { convention = convention }) end, { q })
      local gv2 = got:reshape(-1):totable()
      for h = 0, H - 1 do
        for t = 0, T - 1 do
          local base = (h * T + t) * Dh
          for i = 0, Dh // 2 - 1 do
            -- the pair (a, b) and its angle, as llama2.c (interleaved) or HF (rotate-half) do it
            local ia, ib = 2 * i, 2 * i + 1
            if convention == "half" then ia, ib = i, i + Dh // 2 end
            local angle = (t + offset) / 10000 ^ (2 * i / Dh)
            local a, b = qv[base + ia + 1], qv[base + ib + 1]
            local ra = a * math.cos(angle) - b * math.sin(angle)
            local rb = a * math.sin(angle) + b * math.cos(angle)
            assert.is_true(math.abs(gv2[base + ia + 1] - ra) < TOL * 4 and math.abs(gv2[base + ib + 1] - rb) < TOL * 4,
              string.format("%s head %d pos %d pair %d", convention, h, t, i))
          end
        end
      end
    end)
  end

  it("split and merge heads are inverse; causal attention masks the future", function()
    local H = 4
    local y = run(function(g, n) return nn.merge_heads(g, nn.split_heads(g, n, H)) end, { x })
    assert.are.equal(0, y:max_abs_diff(x))
    -- attention with q = k = v = x's heads: position s sees only positions <= s
    local out = run(function(g, n)
      local h = nn.split_heads(g, n, H)
      return nn.merge_heads(g, nn.causal_attention(g, h, h, h))
    end, { x })
    local om = columns(out)
    local D = C // H
    for head = 0, H - 1 do
      for s = 1, S do
        local scores, peak = {}, -math.huge
        for j = 1, s do
          local dot = 0
          for d = 1, D do dot = dot + xm[head * D + d][s] * xm[head * D + d][j] end
          scores[j] = dot / math.sqrt(D)
          peak = math.max(peak, scores[j])
        end
        local total = 0
        for j = 1, s do total = total + math.exp(scores[j] - peak) end
        for d = 1, D do
          local want = 0
          for j = 1, s do want = want + math.exp(scores[j] - peak) / total * xm[head * D + d][j] end
          assert.is_true(math.abs(om[head * D + d][s] - want) < 1e-4, "head " .. head .. " pos " .. s)
        end
      end
    end
  end)

  it("grouped-query attention equals attention over kv heads repeated per query head", function()
    -- 4 query heads on 2 kv heads: the reference repeats kv head j for query heads 2j, 2j + 1
    -- (Hugging Face's repeat_kv) and attends head by head; grouped, one product per kv head.
    -- The same sums in the same order: 1e-6 covers fp32 evaluation order differences.
    local q = ane.tensor.randn({ 1, 4, 8, 16 }, { seed = 11 })
    local k = ane.tensor.randn({ 1, 2, 8, 16 }, { seed = 12 })
    local v = ane.tensor.randn({ 1, 2, 8, 16 }, { seed = 13 })
    local function repeated(t) -- [1, 2, a, b] -> [1, 4, a, b]: kv head j for query heads 2j - 1, 2j
      local shape = t:shape()
      shape[2] = 4
      local out = ane.tensor(shape)
      for h = 1, 4 do out:slice(2, h, h):copy_from(t:slice(2, (h + 1) // 2, (h + 1) // 2)) end
      return out
    end
    local reference = run(function(g, qn, kn, vn) return nn.causal_attention(g, qn, kn, vn) end, { q, repeated(k), repeated(v) })
    local grouped = run(function(g, qn, kn, vn)
      return nn.ungroup_heads(g, nn.causal_attention(g, nn.group_heads(g, qn, 2), kn, vn), 4)
    end, { q, k, v })
    assert.are.same({ 1, 4, 8, 16 }, grouped:shape())
    assert.is_true(grouped:max_abs_diff(reference) < 1e-6)
    -- the decode form: 3 of 8 cache positions filled, a block of 2 own positions
    local kc, vc = ane.tensor.randn({ 1, 2, 16, 8 }, { seed = 14 }), ane.tensor.randn({ 1, 2, 16, 8 }, { seed = 15 })
    local mask = ane.tensor({ 1, 1, 1, 8 }):fill(-65504)
    mask:slice(4, 1, 3):fill(0)
    local qd, kd, vd = q:slice(3, 1, 2):copy(), k:slice(3, 1, 2):copy(), v:slice(3, 1, 2):copy()
    local decode_reference = run(function(g, qn, kcn, vcn, mn, kn, vn)
      return nn.cached_attention(g, qn, kcn, vcn, mn, kn, vn)
    end, { qd, repeated(kc), repeated(vc), mask, repeated(kd), repeated(vd) })
    local decode_grouped = run(function(g, qn, kcn, vcn, mn, kn, vn)
      return nn.ungroup_heads(g, nn.cached_attention(g, nn.group_heads(g, qn, 2), kcn, vcn, mn, kn, vn), 4)
    end, { qd, kc, vc, mask, kd, vd })
    assert.is_true(decode_grouped:max_abs_diff(decode_reference) < 1e-6)
  end)

  it("causal attention with clip saturates overflowing fp16 scores instead of making NaN", function()
    -- q . k / sqrt(8) = 300 * 300 * 8 / 2.83 ~ 2.5e5: beyond fp16 (+-inf). Key 1 points with
    -- q, key 2 against it; every row sees key 1, so every output is v's first row.
    local q = ane.tensor({ 1, 1, 2, 8 }, "fp16"):fill(300)
    local k = ane.tensor({ 1, 1, 2, 8 }, "fp16"):fill(300)
    k:slice(3, 2, 2):fill(-300)
    local v = ane.tensor.randn({ 1, 1, 2, 8 }, { seed = 3, dtype = "fp16" })
    local function attend(clip)
      return run(function(g, qn, kn, vn) return nn.causal_attention(g, qn, kn, vn, { clip = clip }) end, { q, k, v }, "fp16")
    end
    local unclipped = attend(nil):to("fp32"):totable()[1][1]
    assert.is_true(unclipped[1][1] ~= unclipped[1][1], "without the clip the first row is NaN (inf - inf)")
    local clipped = attend(65504):to("fp32")
    local first_value = v:slice(3, 1, 1):to("fp32")
    for row = 1, 2 do assert.are.equal(0, clipped:slice(3, row, row):max_abs_diff(first_value), "row " .. row) end
  end)
end)

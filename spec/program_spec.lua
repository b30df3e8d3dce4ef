-- runtime/program.c over the sim backend: program lifecycle, binding by name, resident
-- inputs, the cache and the compile budget, surfaces and the device's allocation rules,
-- delta patching and weights as inputs (LoRA). (Asynchronous evals: async_spec; the MIL
-- parser: parse_spec.)
local ane = require("ane")
local nn = require("ane.nn")
local helpers = require("spec.helpers")
local fp16, mlp_graph = helpers.fp16_randn, helpers.two_layer_graph

describe("programs", function()
  it("compile, eval by name, report ports in binding order, close", function()
    local g = ane.graph("order")
    local b = g:input("beta", { 1, 64, 1, 32 })
    local a = g:input("alpha", { 1, 64, 1, 32 })
    local w = g:const("w", fp16({ 64, 64, 1, 1 }, 1))
    g:output("sum", g:add(g:conv(a, w), b))
    g:output("diff", g:sub(g:conv(a, w), b))
    local program = ane.compile(g)
    local inputs = program:inputs()
    assert.are.same({ "alpha", "beta" }, { inputs[1].name, inputs[2].name }) -- alphabetical (ANE-19)
    assert.are.equal(1, inputs[1].binding)
    assert.are.same({ 1, 64, 1, 32 }, inputs[1].shape)
    local outputs = program:outputs()
    assert.are.same({ "diff", "sum" }, { outputs[1].name, outputs[2].name }) -- alphabetical (ANE-03)
    local xa, xb = ane.tensor.randn({ 1, 64, 1, 32 }, { seed = 2 }), ane.tensor.randn({ 1, 64, 1, 32 }, { seed = 3 })
    local result = program:eval({ beta = xb, alpha = xa })
    local conv = program:eval({ alpha = xa, beta = ane.tensor({ 1, 64, 1, 32 }) }).sum
    -- sum and diff are the same conv plus/minus beta, each rounded once to fp16
    assert.are.equal(conv:to("fp32"):add(xb:to("fp16"):to("fp32")):to("fp16"):bytes(), result.sum:bytes())
    assert.are.equal(conv:to("fp32"):sub(xb:to("fp16"):to("fp32")):to("fp16"):bytes(), result.diff:bytes())
    assert.matches("^ane.program order %(backend " .. ane.default_backend() .. ", fp16, profile ane, 2 inputs, 2 outputs%)$",
      tostring(program))
    program:close()
    program:close()
    assert.error_matches(function() program:eval({}) end, "attempt to use a closed program")
    do
      local scoped <close> = ane.compile(g)
      assert.is_table(scoped:inputs())
    end
  end)

  it("rejects unknown and missing inputs by name", function()
    local program = ane.compile(mlp_graph(fp16({ 64, 64, 1, 1 }, 1), fp16({ 64 }, 2), fp16({ 64, 64, 1, 1 }, 3)))
    local x = ane.tensor({ 1, 64, 1, 32 })
    assert.error_matches(function() program:eval({ x = x, z = x }) end, "program 'mlp' has no input 'z' %(inputs: x%)")
    assert.error_matches(function() program:eval({}) end, "program 'mlp' needs input 'x'")
    assert.error_matches(function() program:eval({ x = ane.tensor({ 1, 32, 1, 32 }) }) end,
      "cannot write a %[1, 32, 1, 32%] tensor to a %[1, 64, 1, 32%] surface")
    assert.error_matches(function() program:eval({ x = 5 }) end, "input 'x' must be a tensor or a surface")
  end)

  it("takes surfaces in and out, and enforces shared allocation sizes (ANE-02, ANE-18)", function()
    local g = ane.graph("two_in")
    local a = g:input("a", { 1, 64, 1, 32 })
    local b = g:input("b", { 1, 64, 1, 32 })
    local w = g:const("w", fp16({ 64, 64, 1, 1 }, 4))
    g:output("y", g:add(g:conv(a, w), b))
    g:output("z", g:conv(b, w))
    local program = ane.compile(g)
    local sa = ane.surface { channels = 64, seq = 32, alloc_size = 65536 }
    local sb = ane.surface { channels = 64, seq = 32, alloc_size = 65536 }
    sa:write(ane.tensor.randn({ 64, 32 }, { seed = 5 }))
    sb:write(ane.tensor.randn({ 64, 32 }, { seed = 6 }))
    local out = ane.surface { channels = 64, seq = 32, alloc_size = 65536 }
    local result = program:eval({ a = sa, b = sb }, { y = out })
    assert.are.equal(out, result.y) -- written in place
    local plain = program:eval({ a = sa:read(), b = sb:read() })
    assert.are.equal(plain.y:bytes(), out:read():bytes())
    assert.are.equal(plain.z:bytes(), result.z:bytes())
    -- sim names the rule itself; a device answers status 0x1d in its error's text (Code=8, no
    -- underlying error), which the ane backend turns into the rules' hint
    local device = ane.default_backend() == "ane"
    local odd = ane.surface { channels = 64, seq = 32 } -- 49,152 bytes, not 65,536
    assert.error_matches(function() program:eval({ a = sa, b = odd }) end, device
      and "evaluateWithQoS:options:request:error:%] failed, code 8, status 0x1d: .*ANE%-02/ANE%-04/ANE%-18"
      or "input surfaces must share one allocation size %(ANE%-18%)")
    local small_out = ane.surface { channels = 64, seq = 32 }
    assert.error_matches(function() program:eval({ a = sa, b = sb }, { y = out, z = small_out }) end, device
      and "evaluateWithQoS:options:request:error:%] failed, code 8, status 0x1d: .*ANE%-02/ANE%-04/ANE%-18"
      or "output surfaces must share one allocation size %(ANE%-02%)")
  end)

  it("runs rank-4 I/O other than [1, C, 1, S] packed, as the device reads it (ANE-20)", function()
    local g = ane.graph("heads")
    local q, k = g:input("q", { 1, 12, 8, 64 }), g:input("k", { 1, 12, 8, 64 })
    g:output("y", g:scaled_dot_product_attention(q, k, k))
    local inputs = { q = fp16({ 1, 12, 8, 64 }, 1), k = fp16({ 1, 12, 8, 64 }, 2) }
    local device_profile, warnings = ane.compile(g)
    assert.are.same({}, warnings)
    local want = ane.compile(g, { profile = "cpu" }):eval(inputs).y
    assert.are.equal(want:to("fp16"):bytes(), device_profile:eval(inputs).y:bytes())
  end)

  it("rejects device-breaking programs in the ane profile and runs them in the cpu profile", function()
    local g = ane.graph("narrow")
    local x = g:input("x", { 1, 64, 1, 16 })
    g:output("y", g:conv(x, g:const("w", fp16({ 64, 64, 1, 1 }, 7))))
    assert.error_matches(function() ane.compile(g, { target = { min_io_width = 32 } }) end,
      "ANE%-21: input 'x' %[1, 64, 1, 16%] has width 16 < 32")
    local program = ane.compile(g, { profile = "cpu" })
    assert.are.same({ 1, 64, 1, 16 }, program:eval({ x = ane.tensor({ 1, 64, 1, 16 }) }).y:shape())
    -- narrow I/O is disputed (ANE-21): the ane profile runs it, rows at a 64-byte stride, as the cpu profile does
    local narrow, warnings = ane.compile(g)
    assert.matches("width 16 < 32: disputed", warnings[1].message)
    local input = fp16({ 1, 64, 1, 16 }, 9)
    assert.are.equal(program:eval({ x = input }).y:to("fp16"):bytes(), narrow:eval({ x = input }).y:bytes())
    local c = ane.graph("cat")
    local cx = c:input("x", { 1, 64, 1, 32 })
    c:output("y", c:concat({ c:conv(cx, c:const("w", fp16({ 64, 64, 1, 1 }, 8))), cx }, 1))
    assert.error_matches(function() ane.compile(c) end, "ANE%-01: concat is rejected")
  end)

  -- A KV cache kept in the program: written a few positions at a time, read by every eval that
  -- binds nothing for it. Exact equality: the bound eval and the resident one convert the same
  -- values the same way (fp32 data to fp16 once, RNE), so any difference is a bug.
  it("keeps an input resident: writes by position equal binding the whole tensor, bit for bit", function()
    local g = ane.graph("cache_reader")
    local cache = g:input("cache", { 1, 64, 1, 32 })
    local x = g:input("x", { 1, 64, 1, 32 })
    g:output("y", g:mul(g:add(cache, x), x))
    for _, options in ipairs({ { precision = "fp16" }, { precision = "fp32" }, { profile = "cpu" } }) do
      local program = ane.compile(g, options)
      local full = ane.tensor.randn({ 1, 64, 1, 32 }, { seed = 11 })
      local xs = ane.tensor.randn({ 1, 64, 1, 32 }, { seed = 12 })
      -- positions 1-10 only: the rest of the buffer reads as zeros
      program:write_input("cache", full:slice(4, 1, 10))
      local partial = ane.tensor({ 1, 64, 1, 32 }):fill(0)
      partial:slice(4, 1, 10):copy_from(full:slice(4, 1, 10))
      assert.are.equal(program:eval({ x = xs, cache = partial }).y:bytes(), program:eval({ x = xs }).y:bytes())
      -- then one position, then the rest, an fp16 tensor among them
      program:write_input("cache", full:slice(4, 11, 11), 11)
      program:write_input("cache", full:slice(4, 12, 32):to("fp16"), 12)
      -- the buffer holds what write_input wrote, positions 12-32 fp16 values in every precision
      -- (an eval that binds the input may leave the buffer as it was: sim reads the tensor in place)
      local mixed = full:copy()
      mixed:slice(4, 12, 32):copy_from(full:slice(4, 12, 32):to("fp16"))
      local want = program:eval({ x = xs, cache = mixed }).y:bytes()
      assert.are.equal(want, program:eval({ x = xs }).y:bytes())
      assert.are.equal(want, program:submit({ x = xs }):wait().y:bytes())
      -- read back in the interface's dtype
      local back = program:read_input("cache")
      assert.are.same({ 1, 64, 1, 32 }, back:shape())
      assert.are.equal(options.precision == "fp32" and "fp32" or "fp16", back:dtype())
      assert.are.equal(full:slice(4, 1, 11):to(back:dtype()):bytes(), back:slice(4, 1, 11):copy():bytes())
      -- a binding still wins over the resident buffer
      local zeros = ane.tensor({ 1, 64, 1, 32 }):fill(0)
      assert.are.equal(program:eval({ x = xs, cache = zeros }).y:bytes(),
        program:eval({ x = xs, cache = zeros:copy() }).y:bytes())
      -- mistakes, each named
      assert.error_matches(function() program:write_input("cache", full:slice(4, 1, 2), 32) end,
        "input 'cache' of program 'cache_reader' is %[1, 64, 1, 32%]; a write at position 31 must match it but in the last axis and fit in its 32 positions, not be %[1, 64, 1, 2%]")
      assert.error_matches(function() program:write_input("cache", ane.tensor({ 1, 32, 1, 1 })) end,
        "not be %[1, 32, 1, 1%]")
      assert.error_matches(function() program:write_input("cahce", full) end, "has no input 'cahce' %(inputs: cache, x%)")
      assert.error_matches(function() program:write_input("cache", full, 0) end, "positions count from 1")
      assert.error_matches(function() program:write_input("cache", 3) end, "the value must be a tensor, not a number")
      assert.error_matches(function() program:read_input("x") end, "input 'x' of program 'cache_reader' was never written")
      assert.error_matches(function() program:eval({}) end, "program 'cache_reader' needs input 'x'")
      program:close()
    end
  end)

  -- In fp16 precision a cache that only matmuls read (attention's keys and values) is held as
  -- fp16 bits, half the bytes a decode step reads; its values are fp16 values either way. The
  -- same products from caches that an extra output also reads (so they stay fp32 values) are
  -- the reference: scores by x^T M (the same order of fused multiply-adds over converted
  -- values: bit for bit), the weighted sum by row dot products (fp16 and fp32 rows are summed
  -- in different lane orders: the fp32 sums differ by rounding, a few fp32 ulps, so an fp16
  -- output may round to the neighbouring value: at most one fp16 ulp of the largest output).
  it("holds a cache read only by matmuls as fp16 and computes what an fp32-held cache does", function()
    local function program(rows, kept_fp32)
      local g = ane.graph("cache_products")
      local q = g:input("q", { 1, 4, rows, 16 })
      local k = g:input("k_cache", { 1, 4, 16, 40 }) -- [1, heads, head dim, positions]
      local v = g:input("v_cache", { 1, 4, 16, 40 })
      local scores = g:matmul(q, k)                                       -- [1, 4, rows, 40]
      g:output("scores", scores)
      g:output("y", g:matmul(scores, v, { transpose_y = true }))          -- [1, 4, rows, 16]
      if kept_fp32 then g:output("both", g:add(k, v)) end
      return ane.compile(g, { precision = "fp16", profile = "cpu" })
    end
    for _, rows in ipairs({ 2, 8 }) do -- vector products (<= 4 rows) and BLAS on a converted copy
      local half, fp32 = program(rows, false), program(rows, true)
      local k = ane.tensor.randn({ 1, 4, 16, 40 }, { seed = 21 })
      local v = ane.tensor.randn({ 1, 4, 16, 40 }, { seed = 22 })
      local q = ane.tensor.randn({ 1, 4, rows, 16 }, { seed = 23 })
      for _, p in ipairs({ half, fp32 }) do -- positions 1-25 from fp32 data, the rest as fp16
        p:write_input("k_cache", k:slice(4, 1, 25))
        p:write_input("k_cache", k:slice(4, 26, 40):to("fp16"), 26)
        p:write_input("v_cache", v:slice(4, 1, 25))
        p:write_input("v_cache", v:slice(4, 26, 40):to("fp16"), 26)
      end
      local a, b = half:eval({ q = q }), fp32:eval({ q = q })
      assert.are.equal(b.scores:bytes(), a.scores:bytes())
      local y_a, y_b = a.y:to("fp32"), b.y:to("fp32")
      local largest = y_b:max_abs_diff(ane.tensor(y_b:shape()):fill(0))
      local fp16_ulp = 2 ^ (math.floor(math.log(largest, 2)) - 10) -- of the largest output
      assert.is_true(y_a:max_abs_diff(y_b) <= fp16_ulp,
        string.format("rows %d: outputs differ by %.3g (one fp16 ulp: %.3g)", rows, y_a:max_abs_diff(y_b), fp16_ulp))
      -- read back and bound: the values written, rounded to fp16 once
      assert.are.equal(k:to("fp16"):bytes(), half:read_input("k_cache"):bytes())
      assert.are.equal(v:to("fp16"):bytes(), half:read_input("v_cache"):bytes())
      local bound = half:eval({ q = q, k_cache = k, v_cache = v })
      assert.are.equal(a.scores:bytes(), bound.scores:bytes())
      assert.are.equal(a.y:bytes(), bound.y:bytes())
      half:close()
      fp32:close()
    end
  end)

  -- A cache the caller owns, appended to by the runtime after each eval (a decoding session's
  -- keys). The witness is the same program evaluated without the append on a copy of the
  -- cache as it was: equal bit for bit (sim leaves the zeros after `at` out of its product,
  -- which must not change a value), and the cache's new position equals the output's first,
  -- converted to the cache's dtype.
  -- The appended output computed before the cache's last read too ("k first"): sim writes an
  -- append itself after both (sim_appends.c), never before the read.
  it("appends an output's first position to a caller's cache after the eval", function()
    local function appender(k_first)
      local g = ane.graph("appender")
      local x = g:input("x", { 1, 8, 1, 32 })
      local cache = g:input("k_cache", { 1, 8, 1, 32 })
      local mask = g:input("mask", { 1, 1, 1, 32 })
      if k_first then g:output("k", g:mul(x, x)) end
      local q = g:reshape(g:slice_by_size(x, { 0, 0, 0, 0 }, { 1, 8, 1, 1 }), { 1, 1, 1, 8 })
      g:output("scores", g:add(g:matmul(q, g:reshape(cache, { 1, 1, 8, 32 })), mask))
      if not k_first then g:output("k", g:mul(x, x)) end
      return g
    end
    for _, case in ipairs({ { "cpu", false }, { "ane", false }, { "cpu", true } }) do
      local profile = case[1]
      local program = ane.compile(appender(case[2]), { profile = profile })
      local function buffer(channels, fill) -- what a session holds in this profile
        if profile == "cpu" then return ane.tensor({ 1, channels, 1, 32 }, "fp16"):fill(fill) end
        local surface = ane.surface { channels = channels, seq = 32, dtype = "fp16", alloc_size = 65536 }
        surface:tensor():fill(fill)
        return surface
      end
      local function values(b) return profile == "cpu" and b or b:tensor() end
      local keys, open = buffer(8, 0), buffer(1, -100)
      for step = 1, 5 do
        local xs = ane.tensor.randn({ 1, 8, 1, 32 }, { seed = 30 + step })
        local before_keys, before_mask = values(keys):copy(), values(open):copy()
        local want = program:eval({ x = xs, k_cache = before_keys, mask = before_mask })
        local got = program:eval({ x = xs, k_cache = keys, mask = open }, nil,
          { append = { k_cache = "k", mask = 0 }, at = step })
        assert.are.equal(want.scores:bytes(), got.scores:bytes(), profile .. " step " .. step)
        assert.is_nil(got.k) -- consumed by the append
        assert.are.equal(want.k:slice(4, 1, 1):to("fp16"):bytes(), values(keys):slice(4, step, step):copy():bytes())
        assert.are.same({ 0 }, values(open):slice(4, step, step):totable()[1][1][1])
        if step < 32 then -- the rest untouched
          assert.are.equal(before_keys:slice(4, step + 1, 32):bytes(), values(keys):slice(4, step + 1, 32):copy():bytes())
        end
      end
      -- an output also given as a destination is written there and returned as well
      local into = ane.tensor({ 1, 8, 1, 32 }, profile == "cpu" and "fp16" or "fp16")
      local r = program:eval({ x = ane.tensor.randn({ 1, 8, 1, 32 }, { seed = 40 }), k_cache = keys, mask = open }, { k = into },
        { append = { k_cache = "k" }, at = 6 })
      assert.are.equal(into, r.k)
      assert.are.equal(into:slice(4, 1, 1):bytes(), values(keys):slice(4, 6, 6):copy():bytes())
      -- `clamp`: the appended values clamped as written and counted; the output as computed
      local clamped_r, clamped, nans = program:eval({ x = ane.tensor.randn({ 1, 8, 1, 32 }, { seed = 42 }), k_cache = keys,
        mask = open }, { k = into }, { append = { k_cache = "k" }, at = 7, clamp = 0.5 })
      local computed = into:slice(4, 1, 1):to("fp32") -- [1, 8, 1, 1] of x * x: at least 0
      local beyond, limited = 0, {}
      for i, v in ipairs(computed:reshape(-1):totable()) do beyond, limited[i] = beyond + (v > 0.5 and 1 or 0), math.min(v, 0.5) end
      assert.is_true(beyond > 0 and beyond < 8, profile) -- (the seed gives some of each)
      assert.are.same({ beyond, 0 }, { clamped, nans }, profile)
      assert.are.equal(ane.tensor.from(limited, { 1, 8, 1, 1 }, "fp16"):bytes(), values(keys):slice(4, 7, 7):copy():bytes(), profile)
      assert.are.equal(into, clamped_r.k)
      assert.is_true(into:slice(4, 1, 1):to("fp32"):max_abs_diff(computed:scale(0)) > 0.5) -- (itself unclamped)
      -- mistakes, named
      local xs = ane.tensor.randn({ 1, 8, 1, 32 }, { seed = 41 })
      local inputs = { x = xs, k_cache = keys, mask = open }
      assert.error_matches(function() program:eval(inputs, nil, { append = { k_cache = "k" }, at = 33 }) end,
        "an append at position 32 does not fit input 'k_cache' of 32 positions")
      assert.error_matches(function() program:eval(inputs, nil, { append = { k_cache = "k" } }) end,
        "option 'at' must be the position")
      assert.error_matches(function() program:eval(inputs, nil, { append = { k_cache = "k" }, at = 1, clamp = 0 }) end,
        "option 'clamp' must be the positive limit the appended values are clamped at, got 0")
      assert.error_matches(function() program:eval(inputs, nil, { append = { k_cache = "nope" }, at = 1 }) end,
        "has no output 'nope' %(outputs: k, scores%)")
      assert.error_matches(function() program:eval(inputs, nil, { append = { mask = "k" }, at = 1 }) end,
        "output 'k' is %[1, 8, 1, 32%], which cannot be appended to input 'mask' %[1, 1, 1, 32%]")
      assert.error_matches(function() program:eval(inputs, nil, { append = { k_cache = true }, at = 1 }) end,
        "append 'k_cache' must name an output or give a number, not a boolean")
      if profile == "cpu" then
        assert.error_matches(function() program:eval({ x = xs, mask = open }, nil, { append = { k_cache = "k" }, at = 1 }) end,
          "input 'k_cache' takes an append, so it must be bound")
      end
    end
  end)

  -- A one-position program's outputs are its value padded with zeros to the device's 32 (ANE-21),
  -- which sim writes with the output instead of computing the pad. The witness is the value
  -- computed by tensor arithmetic here, placed at position 1, zeros after; with the `positions`
  -- option the caller says it reads position 1 alone, and what was after it may stay.
  it("writes a zero-padded output with the output; leaves the padding with `positions`", function()
    local g = ane.graph("one_position")
    local x = g:input("x", { 1, 16, 1, 32 })
    local first = g:slice_by_size(x, { 0, 0, 0, 0 }, { 1, 16, 1, 1 })
    g:output("y", g:pad(g:mul(first, first), { 0, 0, 0, 0, 0, 0, 0, 31 }))
    local xs = ane.tensor.randn({ 1, 16, 1, 32 }, { seed = 50 }):to("fp16")
    local squared = xs:slice(4, 1, 1):to("fp32")
    squared = squared:mul(squared):to("fp16"):to("fp32") -- one fp16 rounding, as sim's mul output
    for _, profile in ipairs({ "cpu", "ane" }) do
      local program = ane.compile(g, { profile = profile })
      local into = ane.tensor({ 1, 16, 1, 32 }, "fp16"):fill(7)
      local y = program:eval({ x = xs }, { y = into }).y:to("fp32")
      assert.are.equal(squared:bytes(), y:slice(4, 1, 1):copy():bytes(), profile)
      assert.are.equal(ane.tensor({ 1, 16, 1, 31 }):fill(0):bytes(), y:slice(4, 2, 32):copy():bytes(), profile)
      -- written in place (a tensor in the cpu profile, a surface in the ane profile; a tensor
      -- there is written whole from a staged surface)
      local direct = profile == "cpu" and into or ane.surface { channels = 16, seq = 32, dtype = "fp16" }
      local values = profile == "cpu" and into or direct:tensor()
      values:fill(7)
      program:eval({ x = xs }, { y = direct }, { positions = 1 })
      y = values:to("fp32")
      assert.are.equal(squared:bytes(), y:slice(4, 1, 1):copy():bytes(), profile)
      local padding = y:slice(4, 2, 32):copy():bytes()
      if tostring(program):match("%(backend sim,") then -- sim leaves it; the device writes every position
        assert.are.equal(ane.tensor({ 1, 16, 1, 31 }):fill(7):bytes(), padding, profile)
      else
        assert.is_true(padding == ane.tensor({ 1, 16, 1, 31 }):fill(7):bytes() or
          padding == ane.tensor({ 1, 16, 1, 31 }):fill(0):bytes(), profile .. ": the padding is what it was, or zeros")
      end
      assert.error_matches(function() program:eval({ x = xs }, nil, { positions = 0 }) end, "option 'positions' must be")
    end
  end)

  it("refuses an unavailable backend instead of falling back", function()
    local g = mlp_graph(fp16({ 64, 64, 1, 1 }, 1), fp16({ 64 }, 2), fp16({ 64, 64, 1, 1 }, 3))
    if ane.backends().ane == true then -- the ane matrix row (the test double): it runs there
      assert.matches("%(backend ane, ", tostring(ane.compile(g, { backend = "ane" })))
    else
      assert.error_matches(function() ane.compile(g, { backend = "ane" }) end, "backend 'ane'")
    end
    assert.error_matches(function() ane.compile(g, { backend = "gpu" }) end, "unknown backend 'gpu'")
    assert.error_matches(function() ane.compile(g, { precision = "fp8" }) end, "precision must be 'fp16' or 'fp32'")
  end)
end)

describe("the program cache and the compile budget", function()
  it("never compiles identical programs twice, and finds programs by key", function()
    local w1, b1, w2 = fp16({ 64, 64, 1, 1 }, 11), fp16({ 64 }, 12), fp16({ 64, 64, 1, 1 }, 13)
    ane.reset_stats()
    local first = ane.compile(mlp_graph(w1, b1, w2), { key = "mlp:layer0:s32:v1" })
    local second = ane.compile(mlp_graph(w1, b1, w2)) -- same MIL and weights
    local stats = ane.stats()
    assert.are.equal(1, stats.compiles)
    assert.are.equal(1, stats.cache_hits)
    assert.are.equal(2, stats.loads)
    local third = ane.cached("mlp:layer0:s32:v1")
    assert.is_not_nil(third)
    assert.is_nil(ane.cached("mlp:layer0:s32:v2"))
    assert.are.equal(1, ane.stats().compiles)
    local x = ane.tensor.randn({ 1, 64, 1, 32 }, { seed = 14 })
    assert.are.equal(first:eval({ x = x }).y:bytes(), third:eval({ x = x }).y:bytes())
    ane.compile(mlp_graph(w1, b1, w2), { precision = "fp32" }) -- other options: another program
    assert.are.equal(2, ane.stats().compiles)
    second:close()
  end)

  -- every load of a model names its programs afresh ("llama#7/decode"), so names of one cached
  -- program pile up: the runtime keeps the 1,024 most recent (a forgotten one costs an emit and
  -- a hash hit), where it had kept every name ever given (a fuzz run of config loads reached
  -- ~450 MB and spent ~45% of its time comparing names)
  it("keeps the 1,024 most recent names of cached programs", function()
    local g = mlp_graph(fp16({ 64, 64, 1, 1 }, 91), fp16({ 64 }, 92), fp16({ 64, 64, 1, 1 }, 93))
    ane.reset_stats()
    local options = { backend = "sim", profile = "cpu" } -- (outside the compile budget)
    for i = 1, 1100 do
      options.key = "pile:" .. i
      ane.compile(g, options):close()
    end
    assert.are.equal(1, ane.stats().compiles)
    assert.is_nil(ane.cached("pile:76")) -- (the 76 oldest went)
    local kept = ane.cached("pile:77")
    assert.is_not_nil(kept)
    kept:close()
    assert.is_not_nil(ane.cached("pile:1100"))
    options.key = "pile:77"
    ane.compile(g, options):close() -- a name given again stays one name
    assert.is_not_nil(ane.cached("pile:78"))
  end)

  it("errors with ANE-05 once the budget is spent", function()
    local used = ane.stats().compile_budget - ane.stats().budget_left
    ane.set_compile_budget(used + 1)
    local ok = pcall(ane.compile, mlp_graph(fp16({ 64, 64, 1, 1 }, 21), fp16({ 64 }, 22), fp16({ 64, 64, 1, 1 }, 23)))
    assert.is_true(ok)
    assert.are.equal(0, ane.stats().budget_left)
    assert.error_matches(function()
      ane.compile(mlp_graph(fp16({ 64, 64, 1, 1 }, 24), fp16({ 64 }, 25), fp16({ 64, 64, 1, 1 }, 26)))
    end, "compile budget exhausted: this process has compiled %d+ programs, the budget is %d+ %(ANE%-05")
    ane.set_compile_budget() -- back to the default
    assert.are.equal(119, ane.stats().compile_budget)
  end)

  it("counts sim's cpu-profile programs outside the budget (no device runs them)", function()
    local used = ane.stats().compile_budget - ane.stats().budget_left
    ane.set_compile_budget(used + 1)
    local compiles = ane.stats().compiles
    for seed = 41, 43 do -- three new cpu-profile programs with one compile left
      ane.compile(mlp_graph(fp16({ 64, 64, 1, 1 }, seed), fp16({ 64 }, seed + 10), fp16({ 64, 64, 1, 1 }, seed + 20)),
        { profile = "cpu" })
    end
    assert.are.equal(compiles + 3, ane.stats().compiles)
    assert.are.equal(1, ane.stats().budget_left)
    ane.compile(mlp_graph(fp16({ 64, 64, 1, 1 }, 51), fp16({ 64 }, 52), fp16({ 64, 64, 1, 1 }, 53))) -- the ane profile
    assert.are.equal(0, ane.stats().budget_left)
    assert.error_matches(function()
      ane.compile(mlp_graph(fp16({ 64, 64, 1, 1 }, 54), fp16({ 64 }, 55), fp16({ 64, 64, 1, 1 }, 56)))
    end, "compile budget exhausted")
    ane.set_compile_budget()
  end)
end)

describe("delta patching", function()
  local w1, b1, w2 = fp16({ 64, 64, 1, 1 }, 31), fp16({ 64 }, 32), fp16({ 64, 64, 1, 1 }, 33)
  local x = ane.tensor.randn({ 1, 64, 1, 32 }, { seed = 34 })

  it("does not move the compile count over 100 patches, and each patch takes effect", function()
    local program = ane.compile(mlp_graph(w1, b1, w2))
    local compiles, patches = ane.stats().compiles, ane.stats().patches
    local previous
    for step = 1, 100 do
      program:patch({ fc2_weight = fp16({ 64, 64, 1, 1 }, 100 + step) })
      local y = program:eval({ x = x }).y:bytes()
      assert.are_not.equal(previous, y)
      previous = y
    end
    assert.are.equal(compiles, ane.stats().compiles)
    assert.are.equal(patches + 100, ane.stats().patches)
  end)

  it("sanitizes NaN and infinities, counting them", function()
    local program = ane.compile(mlp_graph(w1, b1, w2))
    local bias = ane.tensor.from({ 0 / 0, math.huge, -math.huge, 1e6 }):reshape(4)
    local full = ane.tensor({ 64 }, "fp32")
    full:slice(1, 1, 4):copy_from(bias)
    local sanitized = ane.stats().sanitized_values
    program:patch({ fc1_bias = full })
    assert.are.equal(sanitized + 4, ane.stats().sanitized_values)
    local expected_bias = ane.tensor({ 64 }, "fp32")
    expected_bias:slice(1, 1, 4):copy_from(ane.tensor.from({ 0, 65504, -65504, 65504 }))
    local fresh = ane.compile(mlp_graph(w1, expected_bias:to("fp16"), w2))
    assert.are.equal(fresh:eval({ x = x }).y:bytes(), program:eval({ x = x }).y:bytes())
  end)

  it("patches programs together: each gets the weight, one patched alone later keeps the others' as they were", function()
    -- two instances of one compiled program and one of another (fp32: weights of another form)
    local a, b = ane.compile(mlp_graph(w1, b1, w2)), ane.compile(mlp_graph(w1, b1, w2))
    local other = ane.compile(mlp_graph(w1, b1, w2), { precision = "fp32" })
    local function expect(program, bias, weight, precision) -- against a fresh compile of those weights
      local fresh = ane.compile(mlp_graph(w1, bias, weight), { precision = precision })
      assert.are.equal(fresh:eval({ x = x }).y:bytes(), program:eval({ x = x }).y:bytes())
      fresh:close()
    end
    local v = {}
    for i = 1, 5 do v[i] = fp16({ 64, 64, 1, 1 }, 70 + i) end
    local bias = fp16({ 64 }, 80)
    local patches = ane.stats().patches
    ane.patch_together({ a, b, other }, { fc2_weight = v[1], fc1_bias = bias })
    assert.are.equal(patches + 6, ane.stats().patches)
    for _, program in ipairs({ a, b }) do expect(program, bias, v[1]) end
    expect(other, bias, v[1], "fp32")
    a:patch({ fc2_weight = v[2] }) -- alone: b and other keep v[1]
    expect(a, bias, v[2])
    expect(b, bias, v[1])
    expect(other, bias, v[1], "fp32")
    ane.patch_together({ a, b }, { fc2_weight = v[3] })
    ane.patch_together({ a, b }, { fc2_weight = v[4] }) -- (the bytes they share already)
    expect(a, bias, v[4])
    expect(b, bias, v[4])
    ane.patch_together({ a, other }, { fc2_weight = v[5] }) -- a shared with b: b keeps v[4]
    expect(a, bias, v[5])
    expect(b, bias, v[4])
    expect(other, bias, v[5], "fp32")
    b:patch({ fc2_weight = v[2] })
    expect(a, bias, v[5])
    expect(b, bias, v[2])
    a:close()
    expect(b, bias, v[2])
    ane.patch_together({ b, other }, { fc2_weight = v[1] })
    expect(b, bias, v[1])
    expect(other, bias, v[1], "fp32")
    assert.error_matches(function() ane.patch_together({ b, b }, { fc2_weight = v[1] }) end,
      "patch together: program 'mlp' is listed twice")
    assert.error_matches(function() ane.patch_together({ b, a }, { fc2_weight = v[1] }) end,
      "entry 2 of the list is a closed program")
    assert.error_matches(function() ane.patch_together({ b, 7 }, { fc2_weight = v[1] }) end,
      "entry 2 of the list is not a program")
    assert.error_matches(function() ane.patch_together({ b, other }, { nope = v[1] }) end,
      "program 'mlp' has no weight 'nope'")
  end)

  it("patches an fp32 weight from a transposed view as from its copy, sanitizing it", function()
    local function fp32_graph(weight) -- y = conv(x, w), all fp32
      local g = ane.graph("fp32_conv")
      g:output("y", g:conv(g:input("x", { 1, 64, 1, 32 }, "fp32"), g:const("w", weight)))
      return g
    end
    local t = ane.tensor.randn({ 64, 64 }, { seed = 90 })
    t:slice(1, 3, 3):slice(2, 5, 5):copy_from(ane.tensor.from({ 0 / 0 }):reshape(1, 1))
    local view, packed = t:transpose(), t:transpose():copy() -- [64, 64]: w[o][i] = t[i][o]
    assert.is_false(view:is_contiguous())
    local start = ane.tensor.randn({ 64, 64, 1, 1 }, { seed = 91 })
    local from_view = ane.compile(fp32_graph(start), { precision = "fp32", profile = "cpu" })
    local from_copy = ane.compile(fp32_graph(start), { precision = "fp32", profile = "cpu" })
    local x32 = ane.tensor.randn({ 1, 64, 1, 32 }, { seed = 92 })
    local sanitized = ane.stats().sanitized_values
    from_view:patch({ w = view })
    assert.are.equal(sanitized + 1, ane.stats().sanitized_values) -- the NaN, written as 0
    local zeroed = packed:copy()
    zeroed:slice(1, 5, 5):slice(2, 3, 3):copy_from(ane.tensor({ 1, 1 }, "fp32"))
    from_copy:patch({ w = zeroed })
    assert.are.equal(from_copy:eval({ x = x32 }).y:bytes(), from_view:eval({ x = x32 }).y:bytes())
    local fresh = ane.compile(fp32_graph(zeroed:reshape(64, 64, 1, 1)), { precision = "fp32", profile = "cpu" })
    assert.are.equal(fresh:eval({ x = x32 }).y:bytes(), from_view:eval({ x = x32 }).y:bytes())
    assert.are_not.equal(fresh:eval({ x = x32 }).y:bytes(),
      ane.compile(fp32_graph(start), { precision = "fp32", profile = "cpu" }):eval({ x = x32 }).y:bytes())
  end)

  it("checks names and shapes", function()
    local program = ane.compile(mlp_graph(w1, b1, w2))
    local names = {}
    for _, w in ipairs(program:weights()) do names[#names + 1] = w.name end
    table.sort(names)
    assert.are.same({ "fc1_bias", "fc1_weight", "fc2_weight" }, names)
    assert.error_matches(function() program:patch({ nope = fp16({ 4 }, 1) }) end, "program 'mlp' has no weight 'nope'")
    assert.error_matches(function() program:patch({ fc1_weight = fp16({ 64, 32, 1, 1 }, 1) }) end,
      "weight 'fc1_weight' of program 'mlp' is %[64, 64, 1, 1%], the patch is %[64, 32, 1, 1%]")
  end)
end)

describe("weights as inputs", function()
  it("hot-swaps LoRA adapters with zero recompiles, exact against a CPU reference", function()
    local C, S, R = 64, 32, 8
    local g = ane.graph("lora")
    local x = g:input("x", { 1, C, 1, S }, "fp32")
    local a = g:input("lora_a", { 1, R, 1, C }, "fp32")
    local b = g:input("lora_b", { 1, R, 1, C }, "fp32")
    local w = ane.tensor.randn({ C, C, 1, 1 }, { seed = 41, std = 0.1 })
    g:output("y", nn.lora_linear(g, x, w, a, b, { name = "q", alpha = 16 }))
    local program = ane.compile(g, { profile = "cpu", precision = "fp32" })
    local input = ane.tensor.randn({ 1, C, 1, S }, { seed = 42 })
    local compiles = ane.stats().compiles
    for swap = 1, 3 do
      local adapter_a = ane.tensor.randn({ 1, R, 1, C }, { seed = 50 + swap, std = 0.1 })
      local adapter_b = ane.tensor.randn({ 1, R, 1, C }, { seed = 60 + swap, std = 0.1 })
      local y = program:eval({ x = input, lora_a = adapter_a, lora_b = adapter_b }).y
      -- CPU reference with the same operation order: W x + (alpha / r) * B^T^T (A x)
      local x2 = input:reshape(C, S)
      local base = w:reshape(C, C):matmul(x2)
      local down = adapter_a:reshape(R, C):matmul(x2)
      local up = adapter_b:reshape(R, C):transpose():matmul(down)
      local expected = base:add(up:scale(16 / R)):reshape(1, C, 1, S)
      -- Both are fp32 sums of <= 64 products; orders inside BLAS may differ, so allow a few
      -- ulps of the largest partial sums (|y| < 10): 1e-5.
      assert.is_true(y:max_abs_diff(expected) < 1e-5)
    end
    assert.are.equal(compiles, ane.stats().compiles)
  end)
end)

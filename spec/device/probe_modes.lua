-- (Not named *_spec.lua: it runs only through the probe/* ctest rows, which set the double
-- and its mode; `busted spec/` skips it.)
-- The probes against every behaviour of the test double they must tell apart: the default
-- double (the catalogue's `generic` chip) gives one verdict, the mode that emulates the other
-- report gives the other. Every row runs every deterministic probe, so a mode changes exactly
-- the verdicts it should; then the row's report, loaded as a compile target, must change what
-- validation accepts.
local ane = require("ane")
local probe = require("ane.probe")
local helpers = require("spec.helpers")

local mode = os.getenv("ANE_DOUBLE_MODE") or ""

-- The default double's answers.
local DEFAULT = {
  concat = { verdict = "holds" },
  op_acceptance = { verdict = "holds" },
  uniform_allocations = { verdict = "holds" },
  binding_order = { verdict = "holds" },
  min_surface = { value = 49152 },
  compile_budget = { value = 300 },
  sdpa_mask = { verdict = "holds" },
  weight_update = { value = "donor" },
  conv_channels = { value = 16384 },
  multi_input = { verdict = "holds" },
  io_width = { value = 1 },
  row_layout = { value = "64-bytes" },
  kernel_width = { value = 13 },
  elementwise_only = { verdict = "does not hold" },
  reduce_mean = { verdict = "does not hold" },
  softmax_axis = { verdict = "does not hold" },
  spatial_axis = { value = 16384 },
  loaded_limit = { value = 128 },
  numeric_cliffs = { value = 65520 },
  quantized_weights = { verdict = "holds" },
  block_weights = { verdict = "holds" },
}

-- What each mode changes; `only` rows run just their probes (the mode would starve the rest:
-- a budget of 40 compiles, a limit of 64 loaded programs).
local FLIPS = {
  [""] = {},
  ["accept=concat"] = { concat = { verdict = "does not hold" }, target = { accepted_ops = { "concat" } } },
  ["refuse=exp"] = { op_acceptance = { verdict = "does not hold", details = { exp = "refused", sqrt = "runs" } },
    target = { refused_ops = { "exp" } } },
  ["uneven-allocs"] = { uniform_allocations = { verdict = "does not hold" } },
  ["ports-declared"] = { binding_order = { verdict = "does not hold" } },
  ["min-surface=16384"] = { min_surface = { value = 16384 } },
  ["budget-nil=40"] = { only = true, compile_budget = { value = 40 } },
  ["budget-silent=40"] = { only = true, compile_budget = { value = 40 } },
  ["sdpa-mask"] = { sdpa_mask = { verdict = "does not hold", details = { per_head_mask = "per head" } },
    target = { sdpa_mask_honoured = true, sdpa_mask_one_plane = false } },
  ["sdpa-mask=one-plane"] = { sdpa_mask = { verdict = "does not hold", details = { per_head_mask = "first plane for all heads" } },
    target = { sdpa_mask_honoured = true, sdpa_mask_one_plane = true } },
  ["reload-effect"] = { weight_update = { value = "reload" } },
  ["donor-fails"] = { weight_update = { value = "recompile" } },
  ["conv-channels=32768"] = { conv_channels = { value = 32768 }, target = { max_conv_channels = 32768 } },
  ["multi-input-0x1d"] = { multi_input = { verdict = "does not hold" }, binding_order = { verdict = "cannot tell" } },
  ["min-width=32"] = { io_width = { value = 32 }, target = { min_io_width = 32 } },
  ["kernel-width=15"] = { kernel_width = { value = 15 }, target = { max_kernel_width = 15 } },
  ["spatial=65536"] = { spatial_axis = { value = 65536 }, target = { max_spatial = 65536 } },
  ["load-limit=64"] = { only = true, loaded_limit = { value = 64 } },
  ["strict=ANE-28+ANE-29+ANE-30"] = { elementwise_only = { verdict = "holds" }, reduce_mean = { verdict = "holds" },
    softmax_axis = { verdict = "holds" }, target = { refused_ops = { "reduce_mean" } } },
  ["no-constexpr"] = { quantized_weights = { verdict = "does not hold" }, block_weights = { verdict = "does not hold" } },
  ["rows=packed"] = { row_layout = { value = "packed" }, target = { io_rows = "packed" } },
  ["rows=32-elements"] = { row_layout = { value = "32-elements" }, target = { io_rows = "32-elements" } },
}

local flips = assert(FLIPS[mode], "spec/device/probe_modes.lua has no expectations for ANE_DOUBLE_MODE=" .. mode)

local function expected(name) return flips[name] or DEFAULT[name] end

describe("probes against the double (mode '" .. mode .. "')", function()
  local names = {}
  for _, name in ipairs(probe.names) do
    if DEFAULT[name] and (not flips.only or flips[name]) then names[#names + 1] = name end
  end
  local report

  it("give the verdicts this mode's device gives", function()
    local dir = helpers.tmpdir()
    report = probe.run(names, { backend = "ane", report = dir .. "/report" })
    assert.is_true(report.test_double)
    for _, v in ipairs(report.probes) do
      local want = expected(v.probe)
      assert.is_false(v.modelled, v.probe)
      if want.verdict then assert.are.equal(want.verdict, v.verdict, v.probe .. ": " .. v.summary) end
      if want.value then assert.are.equal(want.value, v.value, v.probe .. ": " .. v.summary) end
      for key, value in pairs(want.details or {}) do assert.are.equal(value, v.details[key], v.probe .. " " .. key) end
      assert.is_true(#v.evidence > 0, v.probe .. " gives no evidence")
    end
    assert.are.equal(#names, #report.probes)
    -- the report loads as a compile target, and what was measured is in it
    local target = ane.target(dir .. "/report.json")
    for key, value in pairs(flips.target or {}) do
      assert.are.same(value, target[key], "target field " .. key)
    end
    if mode == "" then
      assert.are.same({ 16384, 13, 1, 16384, false }, { target.max_conv_channels, target.max_kernel_width,
        target.min_io_width, target.max_spatial, target.sdpa_mask_honoured })
      assert.are.same({}, target.accepted_ops)
    end
  end)

  it("drive validation through the report", function()
    assert.is_table(report, "the verdicts of the test above")
    local dir = helpers.tmpdir()
    probe.write(report, dir .. "/chip")
    local g = ane.graph("uses_concat")
    local x = g:input("x", { 1, 64, 1, 32 })
    local h = g:conv(x, g:const("w", ane.tensor.randn({ 64, 64, 1, 1 }, { seed = 1, dtype = "fp16", std = 0.1 })))
    g:output("y", g:concat({ h, h }, 1))
    local ok, err = pcall(ane.compile, g, { backend = "sim", target = dir .. "/chip.json" })
    if mode == "accept=concat" then
      assert.is_true(ok, tostring(err))
    else
      assert.is_false(ok)
      assert.matches("ANE%-01", err)
    end
  end)
end)

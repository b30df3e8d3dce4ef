-- ane.probe on sim: the list and its rule IDs, what sim's model answers (the generic
-- target's numbers, found by the probes' own bisections), reports in Markdown and JSON,
-- reports as compile targets, and the messages for mistakes. (Against the device's double
-- and its modes: spec/device/probe_modes.lua.)
local ane = require("ane")
local probe = require("ane.probe")
local rules = require("ane.rules")
local helpers = require("spec.helpers")
local cjson = require("cjson")

local function by_name(report)
  local out = {}
  for _, v in ipairs(report.probes) do out[v.probe] = v end
  return out
end

describe("ane.probe", function()
  local report, dir, budget

  setup(function()
    dir = helpers.tmpdir()
    budget = ane.stats().compile_budget
    report = probe.run("all", { backend = "sim", report = dir .. "/sim" })
  end)

  it("lists one probe per testable rule and open question, each a file of its own", function()
    local list = probe.list()
    assert.are.equal(#probe.names, #list)
    local covered = {}
    for _, p in ipairs(list) do
      assert.is_true(#p.question > 10 and p.question:sub(-1) == "?", p.name)
      for _, id in ipairs(p.rules) do
        assert.is_truthy(rules.get(id) or id:match("^Q[123]$"), p.name .. " names an unknown rule " .. id)
        covered[id] = true
      end
      local f = io.open("lua/ane/probes/" .. p.name .. ".lua")
      assert.is_not_nil(f, p.name)
      f:close()
    end
    -- every rule of the catalogue a program can test, and the three open questions
    for _, id in ipairs({ "ANE-01", "ANE-02", "ANE-03", "ANE-04", "ANE-05", "ANE-06", "ANE-07", "ANE-10", "ANE-15",
      "ANE-16", "ANE-17", "ANE-18", "ANE-19", "ANE-21", "ANE-23", "ANE-26", "ANE-27", "ANE-28", "ANE-29", "ANE-30",
      "ANE-31", "Q1", "Q2", "Q3" }) do
      assert.is_true(covered[id], id .. " has no probe")
    end
    assert.matches("concat%s+ANE%-01 Q3%s+Does the device reject concat%?", tostring(list))
  end)

  it("answers on sim with the model's verdicts, marked as modelled", function()
    local v = by_name(report)
    assert.are.equal(#probe.names, #report.probes)
    for _, verdict in ipairs(report.probes) do
      assert.is_true(verdict.modelled, verdict.probe)
      assert.matches("modelled by sim, not measured", verdict.summary)
      assert.is_truthy(({ holds = 1, ["does not hold"] = 1, measured = 1, ["cannot tell"] = 1 })[verdict.verdict])
      assert.are_not.equal("cannot tell", verdict.verdict, verdict.probe .. ": " .. verdict.summary)
    end
    -- the generic target's limits, as the probes' bisections find them in sim's model
    assert.are.same({ 16384, 13, 1, 16384, 49152 }, { v.conv_channels.value, v.kernel_width.value, v.io_width.value,
      v.spatial_axis.value, v.min_surface.value })
    assert.are.same({ "holds", "holds", "holds", "holds", "holds" }, { v.concat.verdict, v.sdpa_mask.verdict,
      v.uniform_allocations.verdict, v.binding_order.verdict, v.multi_input.verdict })
    assert.are.equal(budget, v.compile_budget.value)
    -- fp16 rounds sums of 65,520 and above to inf; sim propagates NaN
    assert.are.same({ 65520, true }, { v.numeric_cliffs.details.overflow_at, v.numeric_cliffs.details.nan_propagates })
    assert.is_true(v.dispatch_cost.value > 0 and v.conv_vs_matmul.value > 0 and v.sram_cliff.value > 0)
  end)

  it("prints a verdict readably", function()
    local text = tostring(probe.run("kernel_width", { backend = "sim" }))
    assert.matches("^kernel_width %(ANE%-23%): measured 13 elements  %[modelled, not measured%]", text)
    assert.matches("conv with a kernel 14 wide 'probe_kernel_14': refused: .*ANE%-23", text)
  end)

  it("writes the report as Markdown and JSON", function()
    local md = assert(io.open(dir .. "/sim.md")):read("a")
    local json = cjson.decode(assert(io.open(dir .. "/sim.json")):read("a"))
    assert.matches("^# anelua probe report", md)
    assert.matches("| concat | ANE%-01 Q3 | holds |", md)
    assert.are.equal("sim", json.backend)
    assert.are.equal("anelua " .. ane.version, json.toolkit)
    assert.are.equal(#probe.names, #json.probes)
    assert.are.equal("kernel_width", json.probes[14].probe)
    assert.are.equal(13, json.probes[14].value)
    assert.are.equal("row_layout", json.probes[12].probe)
    assert.are.equal("64-bytes", json.probes[12].value) -- sim models the catalogue's chip
  end)

  it("turns a measured report into a compile target; modelled verdicts change nothing", function()
    local modelled = ane.target(dir .. "/sim.json")
    assert.are.same({ 16384, 13, 1, 16384 }, { modelled.max_conv_channels, modelled.max_kernel_width,
      modelled.min_io_width, modelled.max_spatial })
    -- a device's report (as a Mac writes it): concat accepted, 15-wide kernels, width 32 at least
    local device = cjson.decode(assert(io.open(dir .. "/sim.json")):read("a"))
    for _, v in ipairs(device.probes) do
      v.modelled = false
      if v.probe == "concat" then v.verdict = "does not hold" end
      if v.probe == "kernel_width" then v.value = 15 end
      if v.probe == "io_width" then v.value = 32 end
    end
    local path = dir .. "/mac.json"
    local f = assert(io.open(path, "w"))
    f:write(cjson.encode(device))
    f:close()
    -- a 15-wide conv into a concat, over I/O `width` wide
    local function program(width)
      local g = ane.graph("for_the_mac")
      local x = g:input("x", { 1, 16, 1, width })
      local wide = g:conv(x, g:const("w", ane.tensor.randn({ 16, 16, 1, 15 }, { dtype = "fp16", seed = 1 })),
        { pads = { 0, 0, 7, 7 } })
      g:output("y", g:concat({ wide, wide }, 1))
      return g
    end
    local function errors(g, target)
      local ids = {}
      for _, d in ipairs(g:validate({ target = target })) do if d.severity == "error" then ids[#ids + 1] = d.id end end
      table.sort(ids)
      return ids
    end
    assert.are.same({ "ANE-01", "ANE-23" }, errors(program(16), nil)) -- width 16 is a warning in generic (disputed)
    assert.are.same({ "ANE-21", "ANE-21" }, errors(program(16), path)) -- this chip measured 32: now an error
    assert.are.same({}, errors(program(32), path)) -- and concat and 15-wide kernels pass
    assert.error_matches(function() ane.compile(program(16), { backend = "sim", target = path }) end, "ANE%-21")
    assert.is_not_nil(ane.compile(program(32), { backend = "sim", target = path }))
  end)

  it("says what is wrong with a name or a report", function()
    assert.error_matches(function() probe.run("concatt") end, "no probe 'concatt'; did you mean 'concat'%?")
    local bad = dir .. "/bad.json"
    local f = assert(io.open(bad, "w"))
    f:write("{ not json")
    f:close()
    assert.error_matches(function() ane.target(bad) end, "bad%.json is not a probe report")
    assert.error_matches(function() ane.target(dir .. "/missing.json") end, "probe report .*missing%.json: ")
  end)

  -- a fuzzer's reports: an entry that was not an object was a traceback (probe.lua:348), and
  -- absurd measured values were dropped or taken in silence, the generic target used instead
  it("refuses a damaged report as a target, naming the file, the entry and the value", function()
    local path = dir .. "/damaged.json"
    local function as_target(entries)
      local f = assert(io.open(path, "w"))
      f:write(cjson.encode({ probes = entries }))
      f:close()
      local ok, err = pcall(ane.target, path)
      return ok, err
    end
    local function measured(name, value) return { probe = name, verdict = "measured", value = value, rules = {} } end
    local ok, err = as_target({ measured("kernel_width", 13), "kernel_width" })
    assert.is_false(ok)
    assert.matches("damaged%.json: probes%[2%] is not an object", err)
    for _, case in ipairs({
      { measured("kernel_width", 1e308), "probes%[1%] %(kernel_width%): the measured value 1e%+308 is not an integer from 1 to 31" },
      { measured("kernel_width", "15"), "the measured value \"15\" is not an integer from 1 to 31" },
      { measured("kernel_width", 15.5), "the measured value 15%.5 is not an integer from 1 to 31" },
      { measured("kernel_width", cjson.null), "the measured value null is not an integer from 1 to 31" },
      { measured("io_width", 2 ^ 53), "%(io_width%): the measured value 9%.007199254741e%+15 is not one of 32, 16, 8, 4, 2, 1" },
      { measured("conv_channels", 5000), "is not an integer from 1024 to 65536 in steps of 1024" },
      { measured("row_layout", "diagonal"), "the measured value \"diagonal\" is not one of 64%-bytes, packed, 32%-elements" },
    }) do
      ok, err = as_target({ case[1] })
      assert.is_false(ok, case[2])
      assert.matches("damaged%.json: .*" .. case[2], err)
    end
    assert.is_true((as_target({ measured("kernel_width", 13.0), measured("io_width", 16) }))) -- whole numbers as JSON gives them
  end)

  it("runs from the command line: anelua --probe LIST --report BASE", function()
    local base = dir .. "/cli"
    local pipe = io.popen(string.format("'%s' --backend sim --probe concat,kernel_width --report '%s' 2>&1",
      ane.executable(), base))
    local out = pipe:read("a")
    local ok = pipe:close()
    assert.is_true(ok, out)
    assert.matches("concat%s+ANE%-01 Q3%s+holds: ", out)
    assert.matches("kernel_width%s+ANE%-23%s+measured 13 elements", out)
    assert.matches("2 probes on sim in [%d.]+ s; report: .*cli%.md, .*cli%.json", out)
    assert.are.equal(2, #cjson.decode(assert(io.open(base .. ".json")):read("a")).probes)
    pipe = io.popen(string.format("'%s' --probe concatt 2>&1", ane.executable()))
    out = pipe:read("a")
    local _, _, status = pipe:close()
    assert.are.equal(2, status) -- a misspelled name: a usage error
    assert.matches("no probe 'concatt'; did you mean 'concat'%?", out)
    assert.is_nil(out:find("traceback", 1, true))
    -- a report that cannot be written: said, exit 1 (it used to say it wrote it, exit 0)
    pipe = io.popen(string.format("'%s' --backend sim --probe concat --report /nonexistent-dir/x 2>&1", ane.executable()))
    out = pipe:read("a")
    assert.is_nil(pipe:close())
    assert.matches("the probe report was not written: /nonexistent%-dir/x%.json: cannot create temporary file", out)
    assert.is_nil(out:find("report: ", 1, true))
  end)
end)

describe("probe reports as text", function()
  it("count a measured value in the singular and the plural", function()
    local probe = require("ane.probe")
    local function verdict(value)
      return { probe = "kernel_width", rules = { "ANE-23" }, question = "How wide?", verdict = "measured", value = value,
        unit = "elements", summary = "s", evidence = {}, seconds = 0 }
    end
    local text = probe.markdown({ toolkit = "t", backend = "sim", chip = "c", os = "o", date = "d", seconds = 0,
      probes = { verdict(1), verdict(13) } })
    assert.matches("| measured 1 element |", text, 1, true)
    assert.matches("| measured 13 elements |", text, 1, true)
  end)
end)

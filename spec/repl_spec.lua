-- ane.repl and the REPL: help on ops, graphs and rules from the op table and the
-- catalogue, builder names checked with suggestions, completion of names and methods, and
-- values printed readably (the terminal session is in docs/repl.md).
local ane = require("ane")
local repl = require("ane.repl")
local helpers = require("spec.helpers")

describe("help", function()
  it("describes ops with their attributes as the op table declares them", function()
    local text = ane.help("conv")
    assert.matches("^g:conv%(x, weight, { strides = 1, pads = 0, dilations = 1, groups = 1, name = }%)", text)
    assert.matches("MIL pad%s+quad%s+Lua pads", text)
    assert.matches("MIL bias%s+rejected", text)
    assert.matches("g:softmax%(x, %[axis = %-1%], { name = }%)", ane.help(ane.graph("h")))
    assert.matches("g:split%(x, sizes, axis, { name = }%)", ane.help(ane.graph("h")))
    assert.matches("^g:gelu%(x, { mode = EXACT, name = }%)", ane.help("gelu"))
    assert.matches("composite: ane%.nn%.rms_norm", ane.help("rms_norm"))
    assert.matches("^anelua: program Apple's Neural Engine", ane.help())
    assert.matches("no op, composite or rule named 'conv3d'", ane.help("conv3d"))
  end)

  it("points from a rule, an op or an open question to the probe that asks the device", function()
    assert.matches("\nprobe io_width %(ANE%-21%): What is the narrowest I/O width.*ane%.probe%.run%(\"io_width\"%)$",
      ane.help("ANE-21"))
    assert.matches("^g:concat%(.*\nprobe concat %(ANE%-01 Q3%): Does the device reject concat%?", ane.help("concat"))
    assert.matches("^probe multi_input %(Q2 ANE%-18%)", ane.help("Q2"))
    assert.matches("^probes %(ane%.probe%.run.*\nconcat ", ane.help("probes"))
    assert.is_nil(ane.help("ANE-09"):find("probe", 1, true)) -- a rule of the API, no program tests it
  end)

  it("names every rule of the catalogue, disputed ones as such", function()
    local rule = ane.rule("ANE-21")
    assert.are.equal("disputed", rule.status)
    assert.matches("^ANE%-21 %(disputed%): the I/O width", tostring(rule))
    assert.are.equal(33, #ane.rules.list()) -- docs/reference/constraints.md's 30 and ANE-31..33 from its newer facts
    for i, r in ipairs(ane.rules.list()) do assert.are.equal(string.format("ANE-%02d", i), r.id) end
    assert.are.equal(ane.rule(5), ane.rule("ANE-05"))
    assert.error_matches(function() ane.rule("ANE-99") end, "no rule ANE%-99 %(the catalogue has ANE%-01 %.%. ANE%-33%)")
  end)
end)

describe("graph builders", function()
  it("answer a missing builder with the nearest names and the composite it may mean", function()
    local g = ane.graph("b")
    local x = g:input("x", { 1, 4, 1, 32 })
    assert.error_matches(function() return g:rms_norm(x) end,
      "a graph has no builder 'rms_norm'; it is a composite: ane%.nn%.rms_norm%(g, x, weight%)")
    assert.error_matches(function() return g:conv2(x) end, "did you mean g:conv")
    assert.is_function(g.conv) -- real builders still resolve
  end)
end)

describe("completion", function()
  it("completes globals, module fields, lazily loaded submodules and methods", function()
    local env = { ane = ane, print = print, pairs = pairs, g = ane.graph("c") }
    assert.are.same({ "print" }, repl.complete("pri", env))
    assert.are.same({ "ane.tensor" }, repl.complete("ane.te", env))
    assert.are.same({ "ane.rule(", "ane.rules" }, repl.complete("x = ane.rul", env))
    assert.are.same({ "ane.probe" }, repl.complete("ane.prob", env))
    assert.are.same({ "g:concat(", "g:const(", "g:conv(" }, repl.complete("g:co", env))
    assert.are.same({}, repl.complete("nothing.here", env))
  end)
end)

describe("printing", function()
  it("shows tables as aligned key/value lines and short arrays inline", function()
    assert.are.equal("  a    1\n  bbb  \"x\"", repl.format({ a = 1, bbb = "x" }))
    assert.are.equal("{ 1, 2, 3 }", repl.format({ 1, 2, 3 }))
    assert.matches("ane%.tensor fp32 %[2%]", repl.format(ane.tensor.from({ 1, 2 })))
    assert.are.equal("{}", repl.format({}))
    local g = ane.graph("shown")
    g:output("y", g:relu(g:input("x", { 1, 64, 1, 32 }, "fp32")))
    local text = repl.format(ane.compile(g, { profile = "cpu", precision = "fp32" }))
    assert.matches("^ane%.program shown %(backend sim, fp32, profile cpu, 1 inputs, 1 outputs%)\n", text)
    assert.matches("\n  in  x fp32 %[1, 64, 1, 32%]\n  out y fp32 %[1, 64, 1, 32%]$", text)
  end)

  it("is the REPL's printer, with help() a global there", function()
    local out = helpers.run_anelua("-i", "ane.stats().compile_budget\n{ x = 1, longer = 2 }\nhelp('ANE-13')\n")
    assert.matches("> 119\n", out)
    assert.matches("  longer  2\n  x       1\n", out)
    assert.matches("ANE%-13 %(agreed%): conv takes no bias", out)
  end)

  it("prints ane.compile's warnings once per session in the REPL and in scripts, models' kept", function()
    local compile = 'g = ane.graph("w"); x = g:input("x", {1, 8, 1, 32}); g:output("y", g:exp(x)); ' ..
        'p = ane.compile(g, {profile = "ane"})\n'
    local _, err = helpers.run_anelua("-i", compile .. compile)
    local _, count = err:gsub("warning ANE%-28: graph 'w' has no conv or matmul", "")
    assert.are.equal(1, count)
    local script = helpers.tmpdir() .. "/narrow.lua"
    helpers.write_file(script, 'local ane = require("ane")\n' .. compile .. compile)
    _, err = helpers.run_anelua(helpers.quote(script))
    _, count = err:gsub("warning ANE%-28: graph 'w' has no conv or matmul", "")
    assert.are.equal(1, count) -- (a width-8 input compiled silently in scripts)
    local model = require("ane.models.llama").from_weights(require("ane.models.llama").random_weights(
      { dim = 32, hidden = 64, n_layer = 1, n_head = 2, vocab_size = 40, seq_len = 32 }, 1), { precision = "fp16", profile = "ane" })
    model:logits({ 1, 2, 3 })
    local kept = 0
    for _, warnings in pairs(model.compile_warnings) do kept = kept + #warnings end
    assert.is_true(kept > 0, "a model's programs keep their warnings")
  end)

  it("shows diagnostics one per line, caps long tables, and lists a module's fields", function()
    local g = ane.graph("narrow")
    g:output("y", g:relu(g:input("x", { 1, 4, 1, 8 })))
    local text = repl.format(g:validate())
    assert.matches('^  1  { id = "ANE%-21", message = "input \'x\' %[1, 4, 1, 8%] has width 8 < 32', text)
    assert.matches('\n  3  { id = "ANE%-28", ', text)
    local big = {}
    for i = 1, 10000 do big[i] = i end
    local lines = {}
    for line in repl.format(big):gmatch("[^\n]+") do lines[#lines + 1] = line end
    assert.are.equal(41, #lines)
    assert.are.equal("  ... 9960 more (10000 in all)", lines[41])
    local module = repl.format(ane)
    assert.matches("\n  compile +function\n", module)
    assert.is_nil(module:find("table: 0x", 1, true))
  end)

  it("runs help()'s example as written", function()
    local code = {}
    for line in repl.help():gmatch("[^\n]+") do
      local statement = line:match("^  ([gxwp] = .-)%s%s%s") or line:match("^  (g:output%b())")
        or line:match("^  (p:eval%b{}%.y)")
      if statement then code[#code + 1] = statement end
    end
    assert.are.equal(6, #code, table.concat(code, "\n"))
    local out, err, exit = helpers.run_anelua("-i", table.concat(code, "\n") .. "\n")
    assert.are.equal(0, exit, err)
    assert.is_nil(err:find("stdin:", 1, true), err)
    assert.matches("ane%.tensor fp16 %[1, 32, 1, 32%]", out)
  end)
end)

-- The corpus of real programs (spec/real_mil/corpus.lua): MIL printed by other projects'
-- generators, with weight files in their layouts. Each program compiles through the
-- default backend (sim here; the device path through the double in the ane/* row) with
-- the verdict the corpus gives: it runs and matches a reference computed on host tensors,
-- or it is rejected naming its constraint ID.
local ane = require("ane")
local corpus = require("spec.real_mil.corpus")
local helpers = require("spec.helpers")

local relative_error = require("ane.probe").relative_error

-- The device and sim round every op's output to fp16 (a relative 2^-11 each); the longest
-- chains here (layer norm, attention: ~12 ops, sums over 64 terms) stay within a few times
-- 1e-3 of the largest output. 1e-2 leaves room for that and still catches a wrong weight,
-- layout or op (those give errors of order 1).
local TOLERANCE = 1e-2

local function load(entry)
  local text = helpers.read_file(helpers.root .. "/spec/real_mil/" .. entry.file)
  local p = {}
  entry.setup(p)
  return text, p
end

describe("the corpus of real programs", function()
  it("holds at least 20 programs from at least four projects", function()
    local projects = {}
    for _, entry in ipairs(corpus.programs) do projects[entry.project] = (projects[entry.project] or 0) + 1 end
    local count = 0
    for _ in pairs(projects) do count = count + 1 end
    assert.is_true(#corpus.programs >= 20, #corpus.programs .. " programs")
    assert.is_true(count >= 4, count .. " projects")
  end)

  for _, entry in ipairs(corpus.programs) do
    local verdict = entry.verdict == "runs" and "runs and matches" or ("is rejected with " .. entry.verdict.rejected)
    it(entry.file .. " (" .. entry.project .. ") " .. verdict, function()
      local text, p = load(entry)
      local ok, program, warnings = pcall(ane.compile_mil, text, p.weights or {}, { name = entry.file:gsub("%.mil$", "") })
      if entry.verdict ~= "runs" then
        assert.is_false(ok, entry.file .. " compiled, but the corpus expects " .. entry.verdict.rejected)
        assert.matches(entry.verdict.rejected:gsub("%-", "%%-"), program)
        return
      end
      assert.is_true(ok, tostring(program))
      local messages = {}
      for _, w in ipairs(warnings) do messages[#messages + 1] = w.message end
      for _, note in ipairs(entry.notes or {}) do
        assert.is_truthy(table.concat(messages, "\n"):find(note, 1, true), "no note '" .. note .. "' in:\n" .. table.concat(messages, "\n"))
      end
      local outputs = program:eval(p.inputs)
      local want = entry.reference(p)
      for name, value in pairs(want) do
        assert.is_not_nil(outputs[name], "no output " .. name)
        local err = relative_error(outputs[name], value)
        assert.is_true(err <= TOLERANCE, string.format("%s: output %s is off by %.3g of its largest value", entry.file, name, err))
      end
      program:close()
    end)
  end

  -- ANE-10 is disputed: the ane profile refuses gelu for a target that has not accepted it,
  -- naming the rule and the probe; the cpu profile runs ANEForge's program, against erf from
  -- Abramowitz and Stegun 7.1.26 (absolute error <= 1.5e-7; the tolerance is the corpus's)
  it("aneforge_gelu.mil runs in the cpu profile and matches x Phi(x); the ane profile names ANE-10 and the probe", function()
    local entry
    for _, e in ipairs(corpus.programs) do if e.file == "aneforge_gelu.mil" then entry = e end end
    local text, p = load(entry)
    local ok, message = pcall(ane.compile_mil, text, {}, { profile = "ane" })
    assert.is_false(ok)
    assert.matches("ANE%-10.*probe op_acceptance", message)
    local program = ane.compile_mil(text, {}, { profile = "cpu" })
    local function erf(x)
      local t = 1 / (1 + 0.3275911 * math.abs(x))
      local y = 1 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t
        * math.exp(-x * x)
      return x >= 0 and y or -y
    end
    local x = p.inputs.t0:to("fp32")
    local want = ane.tensor(x:shape())
    for c = 1, 64 do
      for s = 1, 32 do
        local v = x:get(1, c, 1, s)
        want:set(0.5 * v * (1 + erf(v / math.sqrt(2))), 1, c, 1, s)
      end
    end
    local got = program:eval(p.inputs).t1
    assert.is_true(relative_error(got, want) <= TOLERANCE, tostring(relative_error(got, want)))
  end)
end)

-- ane.probe: questions to the Neural Engine, one per rule of the constraint catalogue that a
-- program can test and per open question (docs/reference/constraints.md), each in lua/ane/probes/<name>.lua.
--
--   ane.probe.list()                       -- every probe: name, rule IDs, question
--   ane.probe.run("concat")                -- one verdict (prints readably in the REPL)
--   ane.probe.run("all", { report = "m4" }) -- every probe; writes m4.md and m4.json
--   ane.compile(g, { target = "m4.json" })  -- the measured chip drives validation
--
-- A probe asks the backend it runs on (`ane`: the device, or the test double here; `sim`:
-- the catalogue's model, so its verdicts say "modelled, not measured"). On the device its
-- programs are compiled against the `unchecked` target, so the device, not anelua's
-- catalogue, answers; on sim against the target the model stands for (`generic`, or
-- opts.target), so the verdicts are what that model answers.
-- A verdict is one of
--   holds          the rule as the catalogue states it is what the device did
--   does not hold  the device did otherwise (the evidence says what)
--   measured       a number (value, unit): a limit, a cost, a threshold
--   cannot tell    and why (e.g. the backend is not available)
-- with its evidence (the programs compiled and the numbers seen) and the seconds it took.
local ane = require("ane")
local cjson = require("cjson")

local M = {}

-- The probes in the order a report lists them (catalogue order, open questions after).
M.names = {
  "concat", "op_acceptance", "uniform_allocations", "binding_order", "min_surface", "compile_budget",
  "sdpa_mask", "weight_update", "conv_channels", "conv_vs_matmul", "multi_input", "row_layout", "io_width",
  "kernel_width", "sram_cliff", "elementwise_only", "reduce_mean", "softmax_axis", "spatial_axis",
  "loaded_limit", "dispatch_cost", "numeric_cliffs", "quantized_weights", "block_weights",
}

local function load_probe(name)
  if type(name) ~= "string" or not name:match("^[%w_]+$") then return nil end
  local ok, probe = pcall(require, "ane.probes." .. name)
  if ok then return probe end
  if not tostring(probe):find("module 'ane.probes." .. name .. "' not found", 1, true) then error(probe, 0) end
  return nil
end

local function nearest(name)
  local best, best_distance
  for _, candidate in ipairs(M.names) do
    local distance = require("ane.repl").edit_distance(name, candidate)
    if not best_distance or distance < best_distance then best, best_distance = candidate, distance end
  end
  return best
end

--- The probe called `name`, or an error naming the nearest one.
function M.get(name)
  local probe = load_probe(name)
  if not probe then
    error(string.format("no probe '%s'; did you mean '%s'? (ane.probe.list() lists them)", tostring(name), nearest(tostring(name))), 0)
  end
  return probe
end

local Listing = { __tostring = function(list)
  local lines = {}
  for _, p in ipairs(list) do
    lines[#lines + 1] = string.format("%-20s %-22s %s", p.name, table.concat(p.rules, " "), p.question)
  end
  return table.concat(lines, "\n")
end }

--- Every probe: { name, rules, question }.
function M.list()
  local list = {}
  for _, name in ipairs(M.names) do
    local p = M.get(name)
    list[#list + 1] = { name = p.name, rules = p.rules, question = p.question }
  end
  return setmetatable(list, Listing)
end

---------------------------------------------------------------------------- verdicts

-- "holds", or "measured 13 elements"
local function verdict_text(v)
  if v.verdict ~= "measured" then return v.verdict end
  local unit = v.unit or ""
  if v.value == 1 then unit = unit:gsub("s$", "") end -- "1 element", "13 elements"
  return "measured " .. tostring(v.value) .. (unit ~= "" and (" " .. unit) or "")
end

local Verdict = { __tostring = function(v)
  local head = string.format("%s (%s): %s", v.probe, table.concat(v.rules, " "), verdict_text(v))
  local lines = { head .. (v.modelled and "  [modelled, not measured]" or ""), "  " .. v.question, "  " .. v.summary }
  for _, e in ipairs(v.evidence) do lines[#lines + 1] = "    - " .. e end
  lines[#lines + 1] = string.format("  (%.2f s on %s)", v.seconds, v.backend)
  return table.concat(lines, "\n")
end }

-- The bench a probe's run(bench) gets: the backend, the programs it compiles, the evidence.
local Bench = {}
Bench.__index = Bench

local function new_bench(backend, opts)
  opts = opts or {}
  local target = backend == "sim" and (opts.target or "generic") or "unchecked"
  return setmetatable({ backend = backend, modelled = backend == "sim", target = target, evidence = {}, opts = opts,
    io_rows = opts.io_rows }, Bench)
end

--- Adds a line of evidence (string.format arguments).
function Bench:note(fmt, ...) self.evidence[#self.evidence + 1] = string.format(fmt, ...) end

-- The gist of an error: its first line, and the first rule it names when that comes later.
local function first_line(message)
  local text = tostring(message):gsub("^[^:\n]*lua:%d+: ", "")
  local head, rule = text:match("[^\n]*"), text:match("\n%s*(ANE%-%d+: [^\n]*)")
  return rule and (head .. " " .. rule) or head
end
M.gist = first_line

--- Compiles a graph for the device as it is (or for sim's model): ok, program or message.
--- Once row_layout measured the chip's I/O rows, later probes lay their surfaces out so.
function Bench:compile(g, what)
  local target = self.target
  if self.io_rows and not self.modelled and type(target) == "string" then target = { base = target, io_rows = self.io_rows } end
  local ok, program = pcall(ane.compile, g, { backend = self.backend, target = target, quiet = true })
  self:note("%s '%s': %s", what or "compiled", g:name(), ok and "compiled" or ("refused: " .. first_line(program)))
  return ok, program
end

--- Compiles MIL text as it is (ane.compile_mil): ok, program or message.
function Bench:compile_mil(text, weights, what)
  local ok, program = pcall(ane.compile_mil, text, weights or {}, { backend = self.backend, target = self.target })
  self:note("%s: %s", what or "MIL program", ok and "compiled" or ("refused: " .. first_line(program)))
  return ok, program
end

--- Evaluates: ok, outputs or message.
function Bench:eval(program, inputs, outputs, what)
  local ok, result = pcall(program.eval, program, inputs, outputs)
  if not ok or what then self:note("%s: %s", what or "evaluated", ok and "ran" or ("failed: " .. first_line(result))) end
  return ok, result
end

--- The outputs of the same graph on the CPU path (sim, profile cpu, fp16 rounding): the
--- reference a device's outputs are compared with.
function Bench.reference(_, g, inputs)
  return ane.compile(g, { backend = "sim", profile = "cpu" }):eval(inputs)
end

--- Largest |got - want| relative to want's largest magnitude (any float dtypes; NaN or a
--- size mismatch is infinite). Also what the corpus of real programs is judged by.
function M.relative_error(got, want)
  local a, b = got:to("fp32"):copy():reshape({ got:numel() }):totable(), want:to("fp32"):copy():reshape({ want:numel() }):totable()
  if #a ~= #b then return math.huge end
  local worst, scale = 0, 1e-6
  for i = 1, #b do
    local x, y = a[i], b[i]
    if x ~= x or y ~= y then return math.huge end
    worst, scale = math.max(worst, math.abs(x - y)), math.max(scale, math.abs(y))
  end
  return worst / scale
end

function Bench.relative_error(_, got, want) return M.relative_error(got, want) end

-- fp16 outputs of the device and of the CPU path differ by at most a few ulps of fp16
-- (2^-10 relative each) where the ops round in a different order; 1e-2 leaves room for
-- that and for a device's own exp/rsqrt approximations while catching wrong data.
Bench.tolerance = 1e-2

--- Whether outputs[name] matches the reference (noted as evidence).
function Bench:matches(got, want, name)
  local err = self:relative_error(got, want)
  self:note("output %s: max relative error %.3g vs the CPU path", name or "y", err)
  return err <= self.tolerance
end

--- Median wall time of fn() over `reps` runs after one warm-up, in seconds.
function Bench.time(_, fn, reps)
  fn()
  local times = {}
  for i = 1, reps or 7 do
    local t0 = ane.clock()
    fn()
    times[i] = ane.clock() - t0
  end
  table.sort(times)
  return times[(#times + 1) // 2]
end

--- Runs Lua code in a child anelua on the same backend (and the same environment plus
--- `env`), so a probe that exhausts the process (compile budget, loaded programs) leaves
--- this one intact. The code prints one JSON object as its last line; returns it decoded.
function Bench:child(code, env)
  local exe = ane.executable() or arg and arg[-1]
  local script = os.tmpname()
  local f = assert(io.open(script, "w"))
  f:write(code)
  f:close()
  local words = {}
  for k, v in pairs(env or {}) do words[#words + 1] = string.format("%s='%s'", k, tostring(v)) end
  local command = string.format("%s '%s' --backend %s '%s' 2>&1", #words > 0 and ("env " .. table.concat(words, " ")) or "",
    exe, self.backend, script)
  local pipe = io.popen(command)
  local output = pipe:read("a")
  pipe:close()
  os.remove(script)
  local last = output:match("([^\n]*)\n?$")
  local ok, decoded = pcall(cjson.decode, last or "")
  if not ok or type(decoded) ~= "table" then
    return nil, "the child process printed no result: " .. output:sub(-300)
  end
  return decoded
end

---------------------------------------------------------------------------- running

local function finish(probe, bench, verdict, seconds)
  verdict.probe, verdict.rules, verdict.question = probe.name, probe.rules, probe.question
  verdict.evidence, verdict.seconds, verdict.backend, verdict.modelled = bench.evidence, seconds, bench.backend, bench.modelled
  if bench.modelled then verdict.summary = verdict.summary .. " (modelled by sim, not measured)" end
  return setmetatable(verdict, Verdict)
end

local function backend_of(opts)
  return opts.backend or ane.default_backend()
end

--- Runs one probe; returns its verdict.
function M.run_one(name, opts)
  opts = opts or {}
  local probe = M.get(name)
  local backend = backend_of(opts)
  local bench = new_bench(backend, opts)
  local usable = ane.backends()[backend]
  local t0 = ane.clock()
  if usable ~= true then
    return finish(probe, bench, { verdict = "cannot tell", summary = "backend '" .. backend .. "' is not available here: "
      .. tostring(usable) }, 0)
  end
  local ok, verdict = pcall(probe.run, bench)
  if not ok then
    if tostring(verdict):find("interrupted", 1, true) then error(verdict, 0) end
    verdict = { verdict = "cannot tell", summary = "the probe itself failed: " .. first_line(verdict) }
  end
  return finish(probe, bench, verdict, ane.clock() - t0)
end

local Report = { __tostring = function(r) return M.markdown(r) end }

--- ane.probe.run(name | "all" | {names}, {backend =, report = "path without extension"})
--- -> a verdict (one probe) or a report (several); with `report`, writes .md and .json.
--- The probes `which` names ("all", "a,b", or a list of names), each checked: a misspelled
--- name is an error naming the nearest one, before anything runs.
function M.select(which)
  local names = which == "all" and M.names or type(which) == "table" and which or {}
  if type(which) == "string" and which ~= "all" then
    names = {}
    for name in which:gmatch("[^,%s]+") do names[#names + 1] = name end
  end
  if #names == 0 then error(string.format("no probe names in '%s' (ane.probe.list() lists them)", tostring(which)), 0) end
  for _, name in ipairs(names) do M.get(name) end
  return names
end

function M.run(which, opts)
  opts = opts or {}
  if type(which) == "string" and which ~= "all" and not which:find(",", 1, true) and not opts.report and not opts.progress then
    return M.run_one(which, opts)
  end
  local names = M.select(which)
  local caps = ane.capabilities()
  local report = {
    toolkit = "anelua " .. ane.version, backend = backend_of(opts), chip = caps.chip or "unknown",
    os = M.os_name(), test_double = caps.test_double or false, date = os.date("!%Y-%m-%dT%H:%M:%SZ"), probes = {},
  }
  local t0 = ane.clock()
  for _, name in ipairs(names) do
    local v = M.run_one(name, opts)
    if opts.progress then opts.progress(v) end
    report.probes[#report.probes + 1] = v
  end
  report.seconds = ane.clock() - t0
  report.chip = ane.capabilities().chip or report.chip
  setmetatable(report, Report)
  if opts.report then
    local written, why = M.write(report, opts.report)
    if not written then error(why, 2) end
  end
  return report
end

function M.os_name()
  local pipe = io.popen("uname -sr 2>/dev/null")
  local text = pipe and pipe:read("l")
  if pipe then pipe:close() end
  return text or "unknown"
end

---------------------------------------------------------------------------- reports

local function plain(v)
  return { probe = v.probe, rules = v.rules, question = v.question, verdict = v.verdict, value = v.value, unit = v.unit,
    summary = v.summary, evidence = v.evidence, seconds = v.seconds, backend = v.backend, modelled = v.modelled,
    details = v.details }
end

--- The report as Markdown.
function M.markdown(report)
  local out = {
    "# anelua probe report", "",
    string.format("- toolkit: %s", report.toolkit),
    string.format("- backend: %s%s", report.backend, report.test_double and " (the test double, not a device)" or ""),
    string.format("- chip: %s", report.chip), string.format("- OS: %s", report.os),
    string.format("- date: %s; %d probes in %.1f s", report.date, #report.probes, report.seconds or 0), "",
    "| probe | rules | verdict | summary |", "|---|---|---|---|",
  }
  for _, v in ipairs(report.probes) do
    local verdict = verdict_text(v)
    out[#out + 1] = string.format("| %s | %s | %s | %s |", v.probe, table.concat(v.rules, " "), verdict,
      (v.summary:gsub("|", "/")))
  end
  out[#out + 1] = ""
  for _, v in ipairs(report.probes) do
    out[#out + 1] = string.format("## %s (%s)", v.probe, table.concat(v.rules, ", "))
    out[#out + 1] = ""
    out[#out + 1] = v.question .. " **" .. v.verdict .. "**: " .. v.summary .. string.format(" (%.2f s)", v.seconds)
    out[#out + 1] = ""
    for _, e in ipairs(v.evidence) do out[#out + 1] = "- " .. e end
    out[#out + 1] = ""
  end
  return table.concat(out, "\n")
end

--- Writes <base>.md and <base>.json; returns both paths, or nil and why a file could not be written.
function M.write(report, base)
  base = base:gsub("%.json$", ""):gsub("%.md$", "")
  local plain_report = {}
  for k, v in pairs(report) do plain_report[k] = v end
  plain_report.probes = {}
  for i, v in ipairs(report.probes) do plain_report.probes[i] = plain(v) end
  local io_lib = require("ane.io")
  for _, file in ipairs({ { base .. ".json", cjson.encode(plain_report) .. "\n" }, { base .. ".md", M.markdown(report) .. "\n" } }) do
    local written, why = io_lib.write_file_atomic(file[1], file[2])
    if not written then return nil, why end
  end
  return base .. ".md", base .. ".json"
end

--- Reads a report written by M.write: the table, or an error naming the file.
function M.read(path)
  local f, why = io.open(path, "rb")
  if not f then error(string.format("probe report %s: %s", path, why), 0) end
  local text = f:read("a")
  f:close()
  local ok, report = pcall(cjson.decode, text)
  if not ok or type(report) ~= "table" or type(report.probes) ~= "table" then
    error(string.format("%s is not a probe report (JSON with a 'probes' list): %s", path,
      ok and "no probes list" or tostring(report)), 0)
  end
  return report
end

-- Whether a report's measured value is one its probe can measure: `values` is a list of the
-- values it tries, or { from =, to =, step = } integers.
local function measurable(values, value)
  if values.from then
    local integer = type(value) == "number" and math.tointeger(value)
    return integer and integer >= values.from and integer <= values.to
      and (integer - values.from) % (values.step or 1) == 0 or false
  end
  for _, candidate in ipairs(values) do if value == candidate then return true end end
  return false
end

local function describe_values(values)
  if values.from then
    return string.format("an integer from %d to %d%s", values.from, values.to,
      values.step and string.format(" in steps of %d", values.step) or "")
  end
  local shown = {}
  for i, candidate in ipairs(values) do shown[i] = tostring(candidate) end
  return "one of " .. table.concat(shown, ", ")
end

--- The compile target a report describes (ane.target's table form): the generic target,
--- changed by every verdict that was measured on a device (modelled verdicts change nothing).
--- A damaged report (an entry that is not an object, a measured value its probe cannot have
--- measured) is an error naming the file, the entry and the value, never a target made
--- silently of what was left.
function M.target_of(report_or_path)
  local report = type(report_or_path) == "string" and M.read(report_or_path) or report_or_path
  local name = type(report_or_path) == "string" and report_or_path or "probe report"
  local target = { base = "generic", name = name, rules = {}, refused_ops = {}, accepted_ops = {} }
  for i, v in ipairs(report.probes) do
    if type(v) ~= "table" then error(string.format("%s: probes[%d] is not an object", name, i), 0) end
    local probe = type(v.probe) == "string" and load_probe(v.probe)
    if probe and probe.target and not v.modelled and v.verdict ~= "cannot tell" then
      local has_value = v.value ~= nil and v.value ~= cjson.null
      if probe.values and (v.verdict == "measured" or has_value) and not measurable(probe.values, v.value) then
        error(string.format("%s: probes[%d] (%s): the measured value %s is not %s", name, i, v.probe,
          type(v.value) == "string" and string.format("%q", v.value) or (v.value == nil or v.value == cjson.null) and "null"
            or tostring(v.value), describe_values(probe.values)), 0)
      end
      probe.target(v, target)
    end
  end
  return target
end

--- `anelua --probe LIST [--report BASE]`: runs, prints one line per verdict, writes the report.
function M.main(which, base)
  local report = M.run(which, { progress = function(v)
    local verdict = verdict_text(v)
    io.stdout:write(string.format("%-20s %-14s %s\n", v.probe, table.concat(v.rules, " "), verdict .. ": " .. v.summary))
    io.stdout:flush()
  end })
  local md, json = M.write(report, base or "ane-probe-report")
  if not md then error("the probe report was not written: " .. json, 0) end -- (the verdicts above stand)
  io.stdout:write(string.format("%d probes on %s in %.2f s; report: %s, %s\n", #report.probes, report.backend, report.seconds,
    md, json))
  return true
end

return M

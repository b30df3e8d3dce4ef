-- ane.repl: what the anelua REPL adds to a plain Lua prompt: values printed readably
-- (tables as aligned key/value lines, tensors and programs by their own __tostring), help()
-- on the module, graphs, ops and constraint IDs (from the op table and ane.rules), the
-- completion of names, table fields and methods, and builder names checked with a
-- suggestion. The host loads it for interactive sessions; scripts may use it too.
local ane = require("ane")
local rules = require("ane.rules")

local M = {}

-- ------------------------------------------------------------------ printing

local function is_array(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n == #t
end

local function short(value)
  if type(value) == "string" then return string.format("%q", value) end
  if type(value) == "function" then return "function" end
  if type(value) == "table" and next(value) == nil and getmetatable(value) == nil then return "{}" end
  if type(value) == "table" and getmetatable(value) ~= nil and not (getmetatable(value) or {}).__tostring then
    return "{...}" -- a module or an object without a printed form: its fields on their own lines at top level
  end
  if type(value) == "table" and getmetatable(value) == nil then
    if is_array(value) and #value <= 8 then
      local parts = {}
      for i, v in ipairs(value) do parts[i] = type(v) == "table" and "{...}" or short(v) end
      return "{ " .. table.concat(parts, ", ") .. " }"
    end
    return "{...}"
  end
  return tostring(value)
end

--- A table as aligned "key  value" lines (sorted keys); other values as tostring shows them.
local function is_program(value)
  local mt = getmetatable(value)
  return type(value) == "userdata" and type(mt) == "table" and mt.__name == "ane.Program"
end

-- A program with its ports: "ane.program ...", then "  in  x fp16 [1, 64, 1, 32]" lines.
local function format_program(program)
  local lines = { tostring(program) }
  local ok = pcall(function()
    for _, side in ipairs({ { "in ", program:inputs() }, { "out", program:outputs() } }) do
      for _, port in ipairs(side[2]) do
        lines[#lines + 1] = string.format("  %s %s %s [%s]", side[1], port.name, port.dtype, table.concat(port.shape, ", "))
      end
    end
  end)
  return ok and table.concat(lines, "\n") or lines[1]
end

-- A table's fields on one line, "{ key = value, ... }" in key order (a diagnostic, a port).
local function inline(t)
  local keys = {}
  for key in pairs(t) do keys[#keys + 1] = key end
  if #keys > 6 then return string.format("{...} (%d fields)", #keys) end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  local parts = {}
  for _, key in ipairs(keys) do
    parts[#parts + 1] = (type(key) == "string" and key or "[" .. tostring(key) .. "]") .. " = " .. short(t[key])
  end
  return "{ " .. table.concat(parts, ", ") .. " }"
end

-- Lines a table prints as at most; the rest is counted.
local MAX_LINES = 40

-- Whether a table prints through its own __tostring (tensors' tables, probe lists).
local function has_tostring(value)
  local mt = getmetatable(value)
  return type(mt) == "table" and mt.__tostring ~= nil
end

function M.format(value)
  if type(value) == "string" then return value end -- as print shows it (quoted inside tables)
  if is_program(value) then return format_program(value) end
  if type(value) ~= "table" or has_tostring(value) then return short(value) end
  if is_array(value) and #value <= 8 and getmetatable(value) == nil then
    local records = #value > 0
    for _, v in ipairs(value) do records = records and type(v) == "table" and getmetatable(v) == nil end
    if not records then return short(value) end
  end
  local keys, width = {}, 0
  for key in pairs(value) do keys[#keys + 1] = key end
  table.sort(keys, function(a, b)
    if type(a) == type(b) and (type(a) == "number" or type(a) == "string") then return a < b end
    return type(a) < type(b)
  end)
  for i = 1, math.min(#keys, MAX_LINES) do width = math.max(width, #tostring(keys[i])) end
  local lines = {}
  for i = 1, math.min(#keys, MAX_LINES) do
    local key, item = keys[i], value[keys[i]]
    local shown = type(item) == "table" and getmetatable(item) == nil and next(item) ~= nil and inline(item) or short(item)
    lines[#lines + 1] = string.format("  %-" .. width .. "s  %s", tostring(key), shown)
  end
  if #keys > MAX_LINES then
    lines[#lines + 1] = string.format("  ... %d more (%d in all)", #keys - MAX_LINES, #keys)
  end
  return table.concat(lines, "\n")
end

--- Prints the values (the REPL's printer): on one line, tab-separated as print does, unless
--- one of them is a table shown as key/value lines.
function M.show(...)
  local texts, multiline = {}, false
  for i = 1, select("#", ...) do
    texts[i] = M.format((select(i, ...)))
    multiline = multiline or texts[i]:find("\n", 1, true) ~= nil
  end
  print(table.concat(texts, multiline and "\n" or "\t"))
end

-- ------------------------------------------------------------------ the op table for people

local function op_rows()
  local rows = {}
  for _, op in ipairs(ane.graph.ops()) do rows[op.name] = op end
  return rows
end

--- "g:conv(x, weight, { strides = 1, pads = 0, dilations = 1, groups = 1, name = })"
function M.signature(op)
  local args = {}
  if op.name == "concat" then args[1] = "{ values... }"
  elseif op.operands ~= "" then
    for i, operand in ipairs((function()
      local list = {}
      for name in op.operands:gmatch("[^,]+") do list[#list + 1] = name end
      return list
    end)()) do
      args[#args + 1] = i > op.min_operands and ("[" .. operand .. "]") or operand
    end
  end
  local options = {}
  for _, a in ipairs(op.attributes) do
    if a.lua and a.kind ~= "piece" then
      if a.positional then -- (only an integer with a default may be left out: softmax's and gather's axis)
        args[#args + 1] = (a.default and a.kind == "int") and ("[" .. a.lua .. " = " .. a.default .. "]") or a.lua
      else options[#options + 1] = a.lua .. " = " .. (a.default or "?") end
    end
  end
  options[#options + 1] = "name ="
  args[#args + 1] = "{ " .. table.concat(options, ", ") .. " }"
  return "g:" .. op.name .. "(" .. table.concat(args, ", ") .. ")"
end

-- Composites in ane.nn that people reach for as if they were ops.
local COMPOSITES = { layer_norm = "ane.nn.layer_norm(g, x, gamma, beta)", rms_norm = "ane.nn.rms_norm(g, x, weight)",
  linear = "ane.nn.linear(g, x, weight, bias)", swiglu = "ane.nn.swiglu(g, x, w_gate, w_up, w_down)",
  rope = "ane.nn.rope(g, x, cos, sin)", causal_attention = "ane.nn.causal_attention(g, q, k, v)",
  attention = "ane.nn.causal_attention(g, q, k, v)", lora_linear = "ane.nn.lora_linear(g, x, weight, a, b_t)" }

local function distance(a, b) -- Levenshtein, for suggestions (also ane.probe's)
  local previous = {}
  for j = 0, #b do previous[j] = j end
  for i = 1, #a do
    local current = { [0] = i }
    for j = 1, #b do
      current[j] = math.min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a:sub(i, i) == b:sub(j, j) and 0 or 1))
    end
    previous = current
  end
  return previous[#b]
end

M.edit_distance = distance

--- Why a graph has no builder `name`, with the nearest names and the composite it may mean.
function M.unknown_builder(name)
  local hint = COMPOSITES[name]
  local candidates = {}
  for op in pairs(op_rows()) do
    if op ~= "input" and op ~= "const" then candidates[#candidates + 1] = op end
  end
  for _, method in ipairs({ "input", "const", "output", "optimize", "validate", "mil", "dump", "stats", "node",
    "outputs", "name", "close" }) do
    candidates[#candidates + 1] = method
  end
  table.sort(candidates, function(a, b) return distance(name, a) < distance(name, b) or
    (distance(name, a) == distance(name, b) and a < b) end)
  local near = {}
  for i = 1, math.min(3, #candidates) do
    if distance(name, candidates[i]) <= math.max(2, #name // 3) then near[#near + 1] = "g:" .. candidates[i] end
  end
  local message = "a graph has no builder '" .. name .. "'"
  if hint then message = message .. "; it is a composite: " .. hint end
  if #near > 0 then message = message .. (hint and "; or did you mean " or "; did you mean ") .. table.concat(near, ", ") .. "?" end
  return message .. " (help(g) lists the builders)"
end

-- ------------------------------------------------------------------ help

local OVERVIEW = [[
anelua: program Apple's Neural Engine from Lua (backend ]] .. ane.default_backend() .. [[ here).
  g = ane.graph("name")               a graph; help(g) lists its builders with their options
  x = g:input("x", {1, 64, 1, 32})    inputs are [1, C, 1, S] (channels, sequence), fp16 by default
  w = ane.tensor.randn({32, 64, 1, 1}):to("fp16")   a conv weight [out, in, 1, 1] in the graph's dtype
  g:output("y", g:conv(x, g:const("w", w)))
  p = ane.compile(g, {profile = "ane"})   or "cpu"; precision = "fp16" | "fp32"
  p:eval{x = ane.tensor.randn({1, 64, 1, 32}):to("fp16")}.y   outputs by name; p:patch{w = w2} keeps the program
  ane.tensor.randn({2, 3}), ane.stats(), ane.backends(), ane.graph.ops()
  help("conv")                         one op;  ane.rule("ANE-21"): one constraint
  ane.probe.list(), ane.probe.run("concat"), help("probes")   ask the device (docs/probes.md)
  ane.compile(g, {target = "m4" | "report.json"})           validate for a chip, or a measured one
  require("ane.models.gpt2"), require("ane.models.llama"), require("ane.nn"), require("ane.train")
Docs: docs/api.md, docs/compiler.md, docs/repl.md, docs/probes.md.]]

-- The probe of a rule or name, as a help line (probes answer rules on the user's chip).
local function probe_lines(topic)
  local probe = require("ane.probe")
  local lines = {}
  for _, name in ipairs(probe.names) do
    local p = probe.get(name)
    local match = name == topic
    for _, id in ipairs(p.rules) do match = match or id == topic end
    if match then
      lines[#lines + 1] = string.format("probe %s (%s): %s  -> ane.probe.run(%q)", name, table.concat(p.rules, " "),
        p.question, name)
    end
  end
  return lines
end

local function with_probes(text, topic)
  local lines = probe_lines(topic)
  return #lines > 0 and (text .. "\n" .. table.concat(lines, "\n")) or text
end

local function describe_rule(rule) return with_probes(tostring(rule), rule.id) end

local function describe_op(op)
  local flags = {}
  if op.differentiable then flags[#flags + 1] = "differentiable" end
  if op.elementwise then flags[#flags + 1] = "elementwise" end
  local lines = { M.signature(op) .. (#flags > 0 and ("    -- " .. table.concat(flags, ", ")) or "") }
  for _, a in ipairs(op.attributes) do
    if a.mil then
      lines[#lines + 1] = string.format("  MIL %-14s %-8s %s", a.mil, a.kind, a.lua and ("Lua " .. a.lua) or "(MIL only)")
    end
  end
  return table.concat(lines, "\n")
end

local function methods_of(value)
  local mt = getmetatable(value)
  local index = mt and (mt.__methods or mt.__index)
  local names = {}
  if type(index) == "table" then for name in pairs(index) do names[#names + 1] = name end end
  table.sort(names)
  return names
end

--- help() overview; help(graph) its builders; help("conv") an op; help("ANE-21") a rule;
--- help(value) its methods or fields. Returns the text (the REPL prints it).
function M.help(topic)
  if topic == nil then return OVERVIEW end
  if type(topic) == "string" then
    local rule = rules.get(topic)
    if rule then return describe_rule(rule) end
    local op = op_rows()[topic]
    if op then return with_probes(describe_op(op), topic) end
    if topic == "probe" or topic == "probes" then
      return "probes (ane.probe.run(name or \"all\", {report = \"base\"}); anelua --probe all):\n"
        .. tostring(require("ane.probe").list())
    end
    local probe_help = probe_lines(topic)
    if #probe_help > 0 then return table.concat(probe_help, "\n") end
    if COMPOSITES[topic] then return topic .. " is a composite: " .. COMPOSITES[topic] end
    return "no op, composite or rule named '" .. topic .. "' (help() for an overview)"
  end
  local name = tostring(topic)
  if name:match("^ane%.graph") or (getmetatable(topic) and getmetatable(topic).__name == "ane.Graph") then
    local lines = { "graph builders (operands, then positional attributes, then an options table):" }
    local ops = ane.graph.ops()
    table.sort(ops, function(a, b) return a.name < b.name end)
    for _, op in ipairs(ops) do
      if op.name ~= "input" and op.name ~= "const" then lines[#lines + 1] = "  " .. M.signature(op) end
    end
    lines[#lines + 1] = "  g:input(name, shape, [dtype]), g:const([name], tensor), g:output(name, node)"
    lines[#lines + 1] = "composites: ane.nn.linear, layer_norm, rms_norm, gelu, swiglu, rope, causal_attention, lora_linear"
    return table.concat(lines, "\n")
  end
  local methods = methods_of(topic)
  if #methods > 0 then return name .. " methods: " .. table.concat(methods, ", ") end
  if type(topic) == "table" then
    local keys = {}
    for key in pairs(topic) do keys[#keys + 1] = tostring(key) end
    table.sort(keys)
    return "fields: " .. table.concat(keys, ", ")
  end
  return name
end

-- ------------------------------------------------------------------ completion

--- Completions of the word before the cursor: `prefix` is the text of the line up to it.
--- "ane.te" -> { "ane.tensor" }; "g:co" -> { "g:conv(", "g:concat(", "g:const(" }; "pri" -> { "print" }.
--- After each statement: a line to tell the user once, or nil (today: the weight-update
--- strategy the `ane` backend's first patch check found, docs/device.md).
local told_strategy = false
function M.notes()
  local device = ane.stats().device
  if told_strategy or not device or device.patch_strategy == "unknown" then return nil end
  told_strategy = true
  return string.format("ane: weight patches take effect on this device by '%s' (%s)", device.patch_strategy,
    device.patch_check)
end

function M.complete(prefix, env)
  env = env or _G
  local path, sep, partial = prefix:match("([%w_%.:]-)([%.:])([%w_]*)$")
  local results = {}
  if not path or path == "" then
    partial = prefix:match("([%w_]*)$") or ""
    for name in pairs(env) do
      if type(name) == "string" and name:sub(1, #partial) == partial then results[#results + 1] = name end
    end
    table.sort(results)
    return results
  end
  local value = env
  for part in path:gmatch("[^%.:]+") do
    if type(value) ~= "table" and type(value) ~= "userdata" then return results end
    local ok, next_value = pcall(function() return value[part] end)
    if not ok then return results end
    value = next_value
  end
  local names = {}
  if type(value) == "table" then for name in pairs(value) do names[#names + 1] = name end end
  if value == ane then -- the submodules loaded on first use
    for _, name in ipairs({ "io", "nn", "rules", "rule", "help", "probe" }) do names[#names + 1] = name end
  end
  for _, name in ipairs(methods_of(value)) do names[#names + 1] = name end
  local mt = getmetatable(value)
  if type(value) == "table" and mt and type(mt.__index) == "table" and not mt.__methods then
    for name in pairs(mt.__index) do names[#names + 1] = name end
  end
  local seen = {}
  for _, name in ipairs(names) do
    if type(name) == "string" and not seen[name] and name:sub(1, #partial) == partial and not name:match("^_") then
      seen[name] = true
      local member = value[name]
      results[#results + 1] = path .. sep .. name .. ((sep == ":" or type(member) == "function") and "(" or "")
    end
  end
  table.sort(results)
  return results
end

return M

-- ane.jinja: the subset of Jinja2 that models' chat templates use (tokenizer_config.json's
-- chat_template), rendered as transformers renders them (trim_blocks and lstrip_blocks on):
-- text, {{ expressions }}, {% for / if / elif / else / set %}, {# comments #}, whitespace
-- control ({%- -%}), Python-like values (strings, numbers, lists, dicts, none, undefined),
-- operators (and or not in is ~ + - * / // % comparisons, a if c else b), attribute, index and
-- slice access, filters (trim, length, tojson, string, upper, lower, list, first, last, join,
-- replace, default, items, reverse, selectattr, rejectattr, map, capitalize, safe, int, float,
-- abs), tests (defined, none, string, number, mapping, iterable, sequence, boolean, equalto, odd,
-- even, true, false), string and dict methods (strip, split, startswith, items, get, ...), and
-- the globals range, namespace, raise_exception and strftime_now. No Lua or C library renders
-- Jinja, so this is written here; golden renders by @huggingface/jinja (spec/jinja_spec.lua)
-- hold it to the reference implementation.
--
--   local jinja = require("ane.jinja")
--   local template = assert(jinja.compile(config.chat_template))
--   local text = template:render({ messages = { { role = "user", content = "Hi" } }, add_generation_prompt = true })
local M = {}

local UNDEFINED = setmetatable({}, { __name = "undefined", __tostring = function() return "" end })
local NONE = setmetatable({}, { __name = "none", __tostring = function() return "None" end })
M.UNDEFINED, M.NONE = UNDEFINED, NONE
local LIST_MT = { __name = "list" } -- marks tables made here as lists (an empty one too)
local function list(t) return setmetatable(t or {}, LIST_MT) end
M.list = list

-- ------------------------------------------------------------------ values

local function is_list(v)
  if type(v) ~= "table" or v == NONE or v == UNDEFINED then return false end
  if getmetatable(v) == LIST_MT then return true end
  if getmetatable(v) ~= nil then return false end
  local n = 0
  for _ in pairs(v) do n = n + 1 end
  return n == #v and (n > 0 or next(v) == nil)
end

local function is_dict(v) return type(v) == "table" and v ~= NONE and v ~= UNDEFINED and not is_list(v)
  and (getmetatable(v) == nil or rawget(getmetatable(v), "__namespace")) end

local function truthy(v)
  if v == nil or v == NONE or v == UNDEFINED or v == false or v == "" or v == 0 then return false end
  if type(v) == "table" then return next(v) ~= nil end
  return true
end

local function str(v) -- Python's str()
  if v == nil or v == NONE then return "None" end
  if v == UNDEFINED then return "" end
  if v == true then return "True" end
  if v == false then return "False" end
  if math.type(v) == "float" then
    if v == math.floor(v) and math.abs(v) < 1e16 then return string.format("%.1f", v) end
    return string.format("%.17g", v):gsub("e%+?(%-?)0*(%d+)$", "e%1%2")
  end
  if type(v) == "table" then
    local parts = {}
    if is_list(v) then
      for i, x in ipairs(v) do parts[i] = type(x) == "string" and ("'" .. x .. "'") or str(x) end
      return "[" .. table.concat(parts, ", ") .. "]"
    end
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    for _, k in ipairs(keys) do
      local x = v[k]
      parts[#parts + 1] = "'" .. tostring(k) .. "': " .. (type(x) == "string" and ("'" .. x .. "'") or str(x))
    end
    return "{" .. table.concat(parts, ", ") .. "}"
  end
  return tostring(v)
end

-- JSON as Python's json.dumps(ensure_ascii=False) writes it: ", " and ": " separators, or indented.
local function tojson(v, indent, depth)
  depth = depth or 0
  if v == nil or v == NONE or v == UNDEFINED then return "null" end
  if v == true then return "true" end
  if v == false then return "false" end
  if type(v) == "number" then return math.type(v) == "float" and str(v) or tostring(v) end
  if type(v) == "string" then
    return '"' .. v:gsub('[%c"\\]', function(c)
      local named = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t", ["\b"] = "\\b", ["\f"] = "\\f" }
      return named[c] or string.format("\\u%04x", c:byte())
    end) .. '"'
  end
  local items, open, close = {}, "[", "]"
  if is_list(v) then
    for i, x in ipairs(v) do items[i] = tojson(x, indent, depth + 1) end
  else
    open, close = "{", "}"
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    for _, k in ipairs(keys) do items[#items + 1] = tojson(tostring(k)) .. ": " .. tojson(v[k], indent, depth + 1) end
  end
  if #items == 0 then return open .. close end
  if not indent then return open .. table.concat(items, ", ") .. close end
  local pad, inner = string.rep(" ", indent * depth), string.rep(" ", indent * (depth + 1))
  return open .. "\n" .. inner .. table.concat(items, ",\n" .. inner) .. "\n" .. pad .. close
end

local function length(v)
  if type(v) == "string" then return utf8.len(v) or #v end
  if type(v) == "table" and v ~= NONE and v ~= UNDEFINED then
    local n = 0
    for _ in pairs(v) do n = n + 1 end
    return n
  end
  error("object of type '" .. (v == UNDEFINED and "Undefined" or type(v)) .. "' has no len()", 0)
end

local function equal(a, b)
  if a == b then return true end
  if (a == nil or a == NONE) and (b == nil or b == NONE) then return true end
  if type(a) == "table" and type(b) == "table" and a ~= NONE and b ~= NONE then
    if length(a) ~= length(b) then return false end
    for k, v in pairs(a) do if not equal(v, b[k]) then return false end end
    return true
  end
  return false
end

local function iterate(v) -- the items of a for loop, as a list
  if v == nil or v == NONE or v == UNDEFINED then return list() end
  if type(v) == "string" then
    local chars = list()
    for _, c in utf8.codes(v) do chars[#chars + 1] = utf8.char(c) end
    return chars
  end
  if is_list(v) then return v end
  if type(v) == "table" then -- a dict: its keys
    local keys = list()
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    return keys
  end
  error("'" .. type(v) .. "' object is not iterable", 0)
end

local function slice(v, start, stop, step)
  step = step or 1
  local items = type(v) == "string" and iterate(v) or v
  local n = #items
  local function clamp(i, default)
    if i == nil or i == NONE then return default end
    if i < 0 then i = i + n end
    return math.max(step > 0 and 0 or -1, math.min(i, step > 0 and n or n - 1))
  end
  local first, last = clamp(start, step > 0 and 0 or n - 1), clamp(stop, step > 0 and n or -1)
  local out = list()
  local i = first
  while (step > 0 and i < last) or (step < 0 and i > last) do
    out[#out + 1] = items[i + 1]
    i = i + step
  end
  if type(v) == "string" then return table.concat(out) end
  return out
end

local function index(v, key)
  if v == nil or v == NONE or v == UNDEFINED then return UNDEFINED end
  if type(v) == "string" or is_list(v) then
    if math.type(key) ~= "integer" then return UNDEFINED end
    local items = type(v) == "string" and iterate(v) or v
    if key < 0 then key = key + #items end
    local x = items[key + 1]
    if x == nil then return UNDEFINED end
    return x
  end
  if type(v) == "table" then
    local x = v[key]
    if x == nil then return UNDEFINED end
    return x
  end
  return UNDEFINED
end

-- ------------------------------------------------------------------ lexing

-- Where a tag that opened at `from` closes: the first `mark` outside quoted strings (a tag may
-- print "}}"), or nil. Comments hold no strings.
local function tag_close(source, from, mark, in_comment)
  local i = from
  while i <= #source do
    local c = source:sub(i, i)
    if not in_comment and (c == "'" or c == '"') then
      i = i + 1
      while i <= #source and source:sub(i, i) ~= c do
        i = i + (source:sub(i, i) == "\\" and 2 or 1)
      end
      i = i + 1
    elseif source:sub(i, i + 1) == mark then
      return i
    else
      i = i + 1
    end
  end
  return nil
end

-- The template as a list of pieces: { kind = "text", text } or { kind = "expr" | "stmt", code }.
local function split(source)
  local pieces, position = {}, 1
  local function text(t) if #t > 0 then pieces[#pieces + 1] = { kind = "text", text = t } end end
  local strip_next = false
  while true do
    local open = source:find("{[{%%#]", position)
    local chunk = source:sub(position, (open or #source + 1) - 1)
    if strip_next then chunk = chunk:gsub("^%s+", "") end
    strip_next = false
    if not open then text(chunk) break end
    local kind = source:sub(open + 1, open + 1)
    local close_mark = kind == "{" and "}}" or kind == "%" and "%}" or "#}"
    local left_strip = source:sub(open + 2, open + 2) == "-"
    if left_strip then chunk = chunk:gsub("%s+$", "")
    elseif kind ~= "{" then -- lstrip_blocks: the spaces and tabs from a line's start to a block tag go
      local at_line_start = position == 1 or source:sub(position - 1, position - 1) == "\n"
      chunk = chunk:gsub("\n[ \t]*$", "\n")
      if at_line_start then chunk = chunk:gsub("^[ \t]*$", "") end
    end
    text(chunk)
    local close = tag_close(source, open + 2, close_mark, kind == "#")
    if not close then error(string.format("template: '%s' at offset %d is never closed", source:sub(open, open + 1), open - 1), 0) end
    local body_end = close - 1
    local right_strip = source:sub(close - 1, close - 1) == "-" and close - 1 > open + 2
    if right_strip then body_end = close - 2 end
    local code = source:sub(open + 2 + (left_strip and 1 or 0), body_end)
    position = close + 2
    if right_strip then strip_next = true
    elseif kind ~= "{" and source:sub(position, position) == "\n" then position = position + 1 end -- trim_blocks
    if kind == "{" then pieces[#pieces + 1] = { kind = "expr", code = code, at = open - 1 }
    elseif kind == "%" then pieces[#pieces + 1] = { kind = "stmt", code = code, at = open - 1 } end
  end
  return pieces
end

local KEYWORDS = { ["and"] = true, ["or"] = true, ["not"] = true, ["in"] = true, ["is"] = true, ["if"] = true,
  ["else"] = true }

local function tokens(code, at)
  local list_, position = {}, 1
  while position <= #code do
    local s, e = code:find("^%s+", position)
    if s then position = e + 1 end
    if position > #code then break end
    local c = code:sub(position, position)
    if c == "'" or c == '"' then
      local out, i = {}, position + 1
      while true do
        local ch = code:sub(i, i)
        if ch == "" then error(string.format("template: a string at offset %d is never closed", at + position), 0) end
        if ch == c then break end
        if ch == "\\" then
          local n = code:sub(i + 1, i + 1)
          out[#out + 1] = ({ n = "\n", t = "\t", r = "\r", ["\\"] = "\\", ["'"] = "'", ['"'] = '"' })[n] or ("\\" .. n)
          i = i + 2
        else
          out[#out + 1] = ch
          i = i + 1
        end
      end
      list_[#list_ + 1] = { kind = "string", value = table.concat(out) }
      position = i + 1
    elseif c:match("%d") then
      local number = code:match("^%d+%.?%d*", position)
      list_[#list_ + 1] = { kind = "number", value = number:find("%.") and tonumber(number) or math.tointeger(tonumber(number)) }
      position = position + #number
    elseif c:match("[%a_]") then
      local name = code:match("^[%w_]+", position)
      list_[#list_ + 1] = { kind = KEYWORDS[name] and name or "name", value = name }
      position = position + #name
    else
      local op = code:match("^//", position) or code:match("^%*%*", position) or code:match("^[=!<>]=", position)
        or code:match("^[%+%-%*/%%~|%.,:%(%)%[%]{}<>=]", position)
      if not op then error(string.format("template: unexpected '%s' at offset %d", c, at + position - 1), 0) end
      list_[#list_ + 1] = { kind = op }
      position = position + #op
    end
  end
  list_[#list_ + 1] = { kind = "end" }
  return list_
end

-- ------------------------------------------------------------------ parsing expressions

local Parser = {}
Parser.__index = Parser

function Parser:peek(k) return self.t[self.i + (k or 0)] end
function Parser:next() local tok = self.t[self.i]; self.i = self.i + 1; return tok end
function Parser:accept(kind, value)
  local tok = self.t[self.i]
  if tok.kind == kind and (value == nil or tok.value == value) then self.i = self.i + 1 return tok end
end
-- A token as a message names it: the tag's end, or the token quoted.
local function shown(tok)
  if tok.kind == "end" then return "the end of the tag" end
  return "'" .. tostring(tok.value or tok.kind) .. "'"
end

function Parser:expect(kind, what)
  local tok = self:accept(kind)
  if not tok then error(string.format("template: expected %s in the tag at offset %d, found %s", what or kind, self.at,
    shown(self.t[self.i])), 0) end
  return tok
end

function Parser:expression()
  local value = self:or_()
  if self:accept("if") then
    local cond = self:or_()
    if self:accept("else") then return { op = "ternary", cond = cond, yes = value, no = self:expression() } end
    -- (no else: undefined; `for x in xs if cond` reads its filter from this form)
    return { op = "ternary", cond = cond, yes = value, no = { op = "const", value = UNDEFINED }, implicit = true }
  end
  return value
end

function Parser:or_()
  local left = self:and_()
  while self:accept("or") do left = { op = "or", left, self:and_() } end
  return left
end

function Parser:and_()
  local left = self:not_()
  while self:accept("and") do left = { op = "and", left, self:not_() } end
  return left
end

function Parser:not_()
  if self:accept("not") then return { op = "not", self:not_() } end
  return self:compare()
end

local COMPARE = { ["=="] = true, ["!="] = true, ["<"] = true, [">"] = true, ["<="] = true, [">="] = true }

function Parser:compare()
  local left = self:sum()
  while true do
    local tok = self:peek()
    if COMPARE[tok.kind] then
      self:next()
      left = { op = tok.kind, left, self:sum() }
    elseif tok.kind == "in" then
      self:next()
      left = { op = "in", left, self:sum() }
    elseif tok.kind == "not" and self:peek(1).kind == "in" then
      self:next(); self:next()
      left = { op = "not", { op = "in", left, self:sum() } }
    elseif tok.kind == "is" then
      self:next()
      local negated = self:accept("not") ~= nil
      local name = self:expect("name", "a test name").value
      local args = {}
      if self:accept("(") then
        args = self:arguments()
      elseif self:peek().kind == "string" or self:peek().kind == "number" or (self:peek().kind == "name" and not KEYWORDS[self:peek().value]) then
        args = { self:primary() } -- `is equalto "user"`
      end
      left = { op = "test", name = name, value = left, args = args }
      if negated then left = { op = "not", left } end
    else
      return left
    end
  end
end

function Parser:sum()
  local left = self:concat()
  while true do
    local tok = self:peek()
    if tok.kind == "+" or tok.kind == "-" then
      self:next()
      left = { op = tok.kind, left, self:concat() }
    else
      return left
    end
  end
end

function Parser:concat()
  local left = self:product()
  while self:accept("~") do left = { op = "~", left, self:product() } end
  return left
end

function Parser:product()
  local left = self:unary()
  while true do
    local tok = self:peek()
    if tok.kind == "*" or tok.kind == "/" or tok.kind == "//" or tok.kind == "%" then
      self:next()
      left = { op = tok.kind, left, self:unary() }
    else
      return left
    end
  end
end

function Parser:unary()
  if self:accept("-") then return { op = "neg", self:unary() } end
  if self:accept("+") then return self:unary() end
  return self:filtered(self:postfix(self:primary()))
end

function Parser:filtered(value)
  while self:accept("|") do
    local name = self:expect("name", "a filter name").value
    local args = self:accept("(") and self:arguments() or {}
    value = { op = "filter", name = name, value = value, args = args }
  end
  return value
end

-- Call arguments after "(": positional expressions, then name=value ones (in args.named).
function Parser:arguments()
  local args = { named = {} }
  if self:accept(")") then return args end
  repeat
    if self:peek().kind == "name" and self:peek(1).kind == "=" then
      local name = self:next().value
      self:next()
      args.named[name] = self:expression()
    else
      args[#args + 1] = self:expression()
    end
  until not self:accept(",")
  self:expect(")", "')'")
  return args
end

function Parser:postfix(value)
  while true do
    if self:accept(".") then
      value = { op = "attr", value = value, key = self:expect("name", "an attribute name").value }
    elseif self:accept("[") then
      local parts, is_slice = {}, false
      for part = 1, 3 do
        if self:peek().kind ~= ":" and self:peek().kind ~= "]" then parts[part] = self:expression() end
        if part < 3 and self:accept(":") then is_slice = true else break end
      end
      self:expect("]", "']'")
      value = is_slice and { op = "slice", value = value, parts[1], parts[2], parts[3] } or { op = "index", value = value, key = parts[1] }
    elseif self:accept("(") then
      value = { op = "call", fn = value, args = self:arguments() }
    else
      return value
    end
  end
end

function Parser:primary()
  local tok = self:next()
  if tok.kind == "string" then
    local text = tok.value
    while self:peek().kind == "string" do text = text .. self:next().value end -- adjacent literals join
    return { op = "const", value = text }
  end
  if tok.kind == "number" then return { op = "const", value = tok.value } end
  if tok.kind == "name" then
    local constants = { ["true"] = true, ["True"] = true, ["false"] = false, ["False"] = false, none = NONE, None = NONE }
    if constants[tok.value] ~= nil then return { op = "const", value = constants[tok.value] } end
    return { op = "var", name = tok.value }
  end
  if tok.kind == "(" then
    local value = self:expression()
    if self:accept(",") then -- a tuple: a list here
      local items = { value }
      repeat
        if self:peek().kind == ")" then break end
        items[#items + 1] = self:expression()
      until not self:accept(",")
      value = { op = "list", items = items }
    end
    self:expect(")", "')'")
    return value
  end
  if tok.kind == "[" then
    local items = {}
    if not self:accept("]") then
      repeat
        if self:peek().kind == "]" then break end
        items[#items + 1] = self:expression()
      until not self:accept(",")
      self:expect("]", "']'")
    end
    return { op = "list", items = items }
  end
  if tok.kind == "{" then
    local pairs_ = {}
    if not self:accept("}") then
      repeat
        if self:peek().kind == "}" then break end
        local key = self:expression()
        self:expect(":", "':'")
        pairs_[#pairs_ + 1] = { key, self:expression() }
      until not self:accept(",")
      self:expect("}", "'}'")
    end
    return { op = "dict", pairs = pairs_ }
  end
  if tok.kind == "end" then error(string.format("template: the tag at offset %d ends before its expression", self.at), 0) end
  error(string.format("template: unexpected %s in the tag at offset %d", shown(tok), self.at), 0)
end

local function parse_expression(code, at)
  local p = setmetatable({ t = tokens(code, at), i = 1, at = at }, Parser)
  local e = p:expression()
  return e, p
end

-- ------------------------------------------------------------------ evaluating

local evaluate

local STRING_METHODS = {
  strip = function(s, chars) return chars and s:gsub("^[" .. chars:gsub("%p", "%%%0") .. "]+", ""):gsub("[" .. chars:gsub("%p", "%%%0") .. "]+$", "") or (s:gsub("^%s+", ""):gsub("%s+$", "")) end,
  lstrip = function(s, chars) return chars and (s:gsub("^[" .. chars:gsub("%p", "%%%0") .. "]+", "")) or (s:gsub("^%s+", "")) end,
  rstrip = function(s, chars) return chars and (s:gsub("[" .. chars:gsub("%p", "%%%0") .. "]+$", "")) or (s:gsub("%s+$", "")) end,
  upper = function(s) return s:upper() end,
  lower = function(s) return s:lower() end,
  title = function(s) return (s:gsub("(%a)([%w]*)", function(a, b) return a:upper() .. b:lower() end)) end,
  capitalize = function(s) return s:sub(1, 1):upper() .. s:sub(2):lower() end,
  startswith = function(s, prefix) return s:sub(1, #prefix) == prefix end,
  endswith = function(s, suffix) return suffix == "" or s:sub(-#suffix) == suffix end,
  replace = function(s, old, new) return (s:gsub(old:gsub("%p", "%%%0"), (new:gsub("%%", "%%%%")))) end,
  split = function(s, sep, maxsplit)
    local out = list()
    if sep == nil or sep == NONE then
      for word in s:gmatch("%S+") do out[#out + 1] = word end
      return out
    end
    local position, splits = 1, 0
    while true do
      local a, b = s:find(sep, position, true)
      if not a or (maxsplit and maxsplit >= 0 and splits >= maxsplit) then break end
      out[#out + 1] = s:sub(position, a - 1)
      position, splits = b + 1, splits + 1
    end
    out[#out + 1] = s:sub(position)
    return out
  end,
}

local DICT_METHODS = {
  items = function(d)
    local out = list()
    for _, k in ipairs(iterate(d)) do out[#out + 1] = list({ k, d[k] }) end
    return out
  end,
  keys = function(d) return iterate(d) end,
  values = function(d)
    local out = list()
    for _, k in ipairs(iterate(d)) do out[#out + 1] = d[k] end
    return out
  end,
  get = function(d, key, default)
    local x = d[key]
    if x == nil then return default == nil and NONE or default end
    return x
  end,
}

local TESTS = {
  defined = function(v) return v ~= UNDEFINED end,
  undefined = function(v) return v == UNDEFINED end,
  none = function(v) return v == NONE or v == nil end,
  string = function(v) return type(v) == "string" end,
  number = function(v) return type(v) == "number" end,
  integer = function(v) return math.type(v) == "integer" end,
  float = function(v) return math.type(v) == "float" end,
  boolean = function(v) return type(v) == "boolean" end,
  ["true"] = function(v) return v == true end,
  ["false"] = function(v) return v == false end,
  mapping = function(v) return is_dict(v) end,
  iterable = function(v) return type(v) == "string" or (type(v) == "table" and v ~= NONE and v ~= UNDEFINED) end,
  sequence = function(v) return type(v) == "string" or is_list(v) end,
  callable = function(v) return type(v) == "function" end,
  equalto = function(v, other) return equal(v, other) end,
  odd = function(v) return v % 2 == 1 end,
  even = function(v) return v % 2 == 0 end,
}
TESTS.eq, TESTS["=="] = TESTS.equalto, TESTS.equalto

local function attribute(v, key) -- v.key: a dict's entry, or a method of a string or dict
  if type(v) == "string" and STRING_METHODS[key] then
    return function(...) return STRING_METHODS[key](v, ...) end
  end
  if is_dict(v) then
    local x = v[key]
    if x ~= nil then return x end
    if DICT_METHODS[key] then return function(...) return DICT_METHODS[key](v, ...) end end
    return UNDEFINED
  end
  if is_list(v) and key == "append" then return function(x) v[#v + 1] = x return NONE end end
  return UNDEFINED
end

local FILTERS
FILTERS = {
  trim = function(v, chars) return STRING_METHODS.strip(str(v), chars) end,
  length = function(v) return length(v) end,
  tojson = function(v, _, named) return tojson(v, named and named.indent) end,
  string = function(v) return str(v) end,
  upper = function(v) return str(v):upper() end,
  lower = function(v) return str(v):lower() end,
  capitalize = function(v) return STRING_METHODS.capitalize(str(v)) end,
  title = function(v) return STRING_METHODS.title(str(v)) end,
  list = function(v) local out = list() for i, x in ipairs(iterate(v)) do out[i] = x end return out end,
  first = function(v) local items = iterate(v) return items[1] == nil and UNDEFINED or items[1] end,
  last = function(v) local items = iterate(v) return items[#items] == nil and UNDEFINED or items[#items] end,
  join = function(v, sep)
    local parts = {}
    for i, x in ipairs(iterate(v)) do parts[i] = str(x) end
    return table.concat(parts, sep == nil and "" or str(sep))
  end,
  replace = function(v, old, new) return STRING_METHODS.replace(str(v), str(old), str(new)) end,
  default = function(v, fallback, named)
    local boolean = named and named.boolean
    if v == UNDEFINED or (boolean and not truthy(v)) then return fallback == nil and "" or fallback end
    return v
  end,
  items = function(v) return DICT_METHODS.items(v) end,
  reverse = function(v)
    if type(v) == "string" then return slice(v, nil, nil, -1) end
    return slice(iterate(v), nil, nil, -1)
  end,
  selectattr = function(v, attr, test, value)
    local out = list()
    for _, x in ipairs(iterate(v)) do
      local a = attribute(x, attr)
      local keep = test == nil and truthy(a) or (TESTS[test] or error("template: no test '" .. tostring(test) .. "'", 0))(a, value)
      if keep then out[#out + 1] = x end
    end
    return out
  end,
  rejectattr = function(v, attr, test, value)
    local kept, out = FILTERS.selectattr(v, attr, test, value), list()
    local set = {}
    for _, x in ipairs(kept) do set[x] = true end
    for _, x in ipairs(iterate(v)) do if not set[x] then out[#out + 1] = x end end
    return out
  end,
  map = function(v, name, named)
    local out = list()
    for i, x in ipairs(iterate(v)) do
      if named and named.attribute then out[i] = attribute(x, named.attribute)
      else out[i] = FILTERS[name](x) end
    end
    return out
  end,
  safe = function(v) return v end,
  int = function(v) return math.tointeger(tonumber(v) and math.floor(tonumber(v))) or 0 end,
  float = function(v) return (tonumber(v) or 0) + 0.0 end,
  abs = function(v) return math.abs(v) end,
}
FILTERS.count, FILTERS.d = FILTERS.length, FILTERS.default

local function arithmetic(op, a, b)
  if op == "+" then
    if type(a) == "string" and type(b) == "string" then return a .. b end
    if is_list(a) and is_list(b) then
      local out = list()
      for _, x in ipairs(a) do out[#out + 1] = x end
      for _, x in ipairs(b) do out[#out + 1] = x end
      return out
    end
  end
  if type(a) ~= "number" or type(b) ~= "number" then
    error(string.format("template: unsupported operand types for %s: '%s' and '%s'", op, a == UNDEFINED and "undefined" or type(a),
      b == UNDEFINED and "undefined" or type(b)), 0)
  end
  if op == "+" then return a + b end
  if op == "-" then return a - b end
  if op == "*" then return a * b end
  if op == "/" then return a / b end
  if op == "//" then return a // b end
  return a % b
end

local function less(a, b)
  if type(a) == type(b) and (type(a) == "number" or type(a) == "string") then return a < b end
  error("template: cannot compare '" .. type(a) .. "' with '" .. type(b) .. "'", 0)
end

function evaluate(e, scope)
  local op = e.op
  if op == "const" then return e.value end
  if op == "var" then
    local v = scope:get(e.name)
    if v == nil then return UNDEFINED end
    return v
  end
  if op == "list" then
    local out = list()
    for i, item in ipairs(e.items) do out[i] = evaluate(item, scope) end
    return out
  end
  if op == "dict" then
    local out = {}
    for _, kv in ipairs(e.pairs) do out[evaluate(kv[1], scope)] = evaluate(kv[2], scope) end
    return out
  end
  if op == "attr" then return attribute(evaluate(e.value, scope), e.key) end
  if op == "index" then
    local v, key = evaluate(e.value, scope), evaluate(e.key, scope)
    if type(key) == "string" and type(v) ~= "string" and not is_list(v) then return attribute(v, key) end
    return index(v, key)
  end
  if op == "slice" then
    local v = evaluate(e.value, scope)
    local function part(n) return e[n] and evaluate(e[n], scope) or nil end
    return slice(v, part(1), part(2), part(3))
  end
  if op == "call" then
    local fn = evaluate(e.fn, scope)
    if type(fn) ~= "function" then error("template: '" .. (e.fn.name or e.fn.key or "value") .. "' is not callable", 0) end
    local args = {}
    for i, a in ipairs(e.args) do args[i] = evaluate(a, scope) end
    local named = {}
    for k, a in pairs(e.args.named) do named[k] = evaluate(a, scope) end
    if next(named) then args[#args + 1] = named end
    return fn(table.unpack(args))
  end
  if op == "filter" then
    local f = FILTERS[e.name]
    if not f then error("template: no filter '" .. e.name .. "'", 0) end
    local args = {}
    for i, a in ipairs(e.args) do args[i] = evaluate(a, scope) end
    local named = {}
    for k, a in pairs(e.args.named or {}) do named[k] = evaluate(a, scope) end
    if e.name == "tojson" then return f(evaluate(e.value, scope), nil, named) end
    if e.name == "default" or e.name == "d" or e.name == "map" then return f(evaluate(e.value, scope), args[1], named) end
    return f(evaluate(e.value, scope), table.unpack(args))
  end
  if op == "test" then
    local t = TESTS[e.name]
    if not t then error("template: no test '" .. e.name .. "'", 0) end
    local args = {}
    for i, a in ipairs(e.args) do args[i] = evaluate(a, scope) end
    return t(evaluate(e.value, scope), table.unpack(args))
  end
  if op == "not" then return not truthy(evaluate(e[1], scope)) end
  if op == "and" then
    local a = evaluate(e[1], scope)
    if not truthy(a) then return a end
    return evaluate(e[2], scope)
  end
  if op == "or" then
    local a = evaluate(e[1], scope)
    if truthy(a) then return a end
    return evaluate(e[2], scope)
  end
  if op == "ternary" then
    if truthy(evaluate(e.cond, scope)) then return evaluate(e.yes, scope) end
    return evaluate(e.no, scope)
  end
  if op == "neg" then return -evaluate(e[1], scope) end
  local a, b = evaluate(e[1], scope), evaluate(e[2], scope)
  if op == "~" then return str(a) .. str(b) end
  if op == "==" then return equal(a, b) end
  if op == "!=" then return not equal(a, b) end
  if op == "<" then return less(a, b) end
  if op == ">" then return less(b, a) end
  if op == "<=" then return not less(b, a) end
  if op == ">=" then return not less(a, b) end
  if op == "in" then
    if type(b) == "string" then return type(a) == "string" and b:find(a, 1, true) ~= nil end
    if is_list(b) then
      for _, x in ipairs(b) do if equal(x, a) then return true end end
      return false
    end
    if type(b) == "table" and b ~= NONE and b ~= UNDEFINED then return b[a] ~= nil end
    return false
  end
  return arithmetic(op, a, b)
end

-- ------------------------------------------------------------------ statements

-- Parses the pieces into a tree of nodes: text, output, for, if, set.
local function build(pieces)
  local position = 1
  local function statement_words(piece) return piece.code:match("^%s*(%w+)%s*(.-)%s*$") end
  local block
  -- The nodes up to one of `terminators` (the words that end the block `opener` began).
  function block(terminators, opener)
    local nodes = {}
    while position <= #pieces do
      local piece = pieces[position]
      if piece.kind == "text" then
        nodes[#nodes + 1] = { kind = "text", text = piece.text }
        position = position + 1
      elseif piece.kind == "expr" then
        nodes[#nodes + 1] = { kind = "output", expr = parse_expression(piece.code, piece.at), at = piece.at }
        position = position + 1
      else
        local word, rest = statement_words(piece)
        if terminators and terminators[word] then return nodes, word, rest, piece end
        position = position + 1
        if word == "for" then
          local targets, iterable = rest:match("^(.-)%s+in%s+(.+)$")
          if not targets then error(string.format("template: a for at offset %d has no 'in'", piece.at), 0) end
          local names = {}
          for name in targets:gmatch("[%w_]+") do names[#names + 1] = name end
          local source = parse_expression(iterable, piece.at)
          local filter
          if source.op == "ternary" and source.implicit then filter, source = source.cond, source.yes end -- `for x in xs if cond`
          local body, ended = block({ ["else"] = true, endfor = true }, piece)
          local otherwise
          if ended == "else" then
            position = position + 1
            otherwise = block({ endfor = true }, piece)
          end
          position = position + 1
          nodes[#nodes + 1] = { kind = "for", names = names, source = source, filter = filter, body = body,
            otherwise = otherwise, at = piece.at }
        elseif word == "if" then
          local branches = { { cond = parse_expression(rest, piece.at) } }
          while true do
            local body, ended, next_rest, at_piece = block({ elif = true, ["else"] = true, endif = true }, piece)
            branches[#branches].body = body
            position = position + 1
            if ended == "elif" then branches[#branches + 1] = { cond = parse_expression(next_rest, at_piece.at) }
            elseif ended == "else" then branches[#branches + 1] = { cond = nil }
            else break end
          end
          nodes[#nodes + 1] = { kind = "if", branches = branches, at = piece.at }
        elseif word == "set" then
          local target, value = rest:match("^([%w_%.]+)%s*=%s*(.+)$")
          if target then
            nodes[#nodes + 1] = { kind = "set", target = target, expr = parse_expression(value, piece.at), at = piece.at }
          else -- {% set name %}...{% endset %}
            local body = block({ endset = true }, piece)
            position = position + 1
            nodes[#nodes + 1] = { kind = "set", target = rest, body = body, at = piece.at }
          end
        elseif word == "generation" then -- (transformers' assistant-mask marker: renders its body)
          local body = block({ endgeneration = true }, piece)
          position = position + 1
          nodes[#nodes + 1] = { kind = "group", body = body }
        elseif word and word:match("^end") or word == "else" or word == "elif" then
          error(string.format("template: the '%s' at offset %d closes no open block", word, piece.at), 0)
        else
          error(string.format("template: unknown statement '%s' at offset %d", tostring(word), piece.at), 0)
        end
      end
    end
    if terminators then
      local opener_word = statement_words(opener)
      error(string.format("template: the '%s' at offset %d is never closed (no {%% end%s %%})", opener_word,
        opener.at, opener_word), 0)
    end
    return nodes
  end
  return block(nil)
end

local Scope = {}
Scope.__index = Scope
function Scope:get(name)
  local s = self
  while s do
    local v = s.vars[name]
    if v ~= nil then return v end
    s = s.parent
  end
  return nil
end
function Scope:set(name, value) self.vars[name] = value end
local function child(parent) return setmetatable({ vars = {}, parent = parent }, Scope) end

local execute
-- The offset of the tag being run, so that an error while running names it.
local running_at = 0

function execute(nodes, scope, out)
  for _, node in ipairs(nodes) do
    local kind = node.kind
    running_at = node.at or running_at
    if kind == "text" then out[#out + 1] = node.text
    elseif kind == "output" then out[#out + 1] = str(evaluate(node.expr, scope))
    elseif kind == "group" then execute(node.body, scope, out)
    elseif kind == "set" then
      local value
      if node.body then
        local parts = {}
        execute(node.body, scope, parts)
        value = table.concat(parts)
      else
        value = evaluate(node.expr, scope)
      end
      local object, field = node.target:match("^([%w_]+)%.([%w_]+)$")
      if object then
        local ns = scope:get(object)
        if type(ns) ~= "table" then error("template: cannot set '" .. node.target .. "'", 0) end
        ns[field] = value
      else
        scope:set(node.target, value)
      end
    elseif kind == "if" then
      for _, branch in ipairs(node.branches) do
        if branch.cond == nil or truthy(evaluate(branch.cond, scope)) then
          execute(branch.body, scope, out)
          break
        end
      end
    elseif kind == "for" then
      local items = iterate(evaluate(node.source, scope))
      local kept = {}
      for _, item in ipairs(items) do
        local inner = child(scope)
        if #node.names == 1 then inner:set(node.names[1], item)
        else for i, name in ipairs(node.names) do inner:set(name, index(item, i - 1)) end end
        if not node.filter or truthy(evaluate(node.filter, inner)) then kept[#kept + 1] = item end
      end
      if #kept == 0 and node.otherwise then execute(node.otherwise, scope, out) end
      for i, item in ipairs(kept) do
        local inner = child(scope)
        if #node.names == 1 then inner:set(node.names[1], item)
        else for n, name in ipairs(node.names) do inner:set(name, index(item, n - 1)) end end
        inner:set("loop", { index = i, index0 = i - 1, first = i == 1, last = i == #kept, length = #kept,
          revindex = #kept - i + 1, revindex0 = #kept - i, previtem = i > 1 and kept[i - 1] or UNDEFINED,
          nextitem = i < #kept and kept[i + 1] or UNDEFINED })
        execute(node.body, inner, out)
        -- `set` inside a loop body stays in it (Jinja's scoping); namespaces carry values out
      end
    end
  end
end

local GLOBALS = {
  range = function(a, b, step)
    if b == nil then a, b = 0, a end
    step = step or 1
    local out = list()
    for i = a, b - 1, step do out[#out + 1] = i end
    return out
  end,
  namespace = function(named)
    return setmetatable(named or {}, { __namespace = true })
  end,
  raise_exception = function(message) error({ template_exception = str(message) }, 0) end,
  strftime_now = function(format) return os.date(format) end,
  dict = function(named) return named or {} end,
}

-- Lua values in: nil -> none, arrays -> lists (cjson's decoded JSON).
local Template = {}
Template.__index = Template

-- A message's "offset N" (0-based, in the source) as the line and column an editor shows.
local function with_lines(message, source)
  return (message:gsub("at offset (%d+)", function(offset)
    local before = source:sub(1, tonumber(offset))
    local line = select(2, before:gsub("\n", "")) + 1
    local line_start = before:match(".*\n()") or 1
    local column = #before - line_start + 2
    return string.format("at line %d, column %d", line, column)
  end))
end

--- Renders the template with `context` (a table of variables). Returns the text, or nil and the
--- message of the exception the template raised (raise_exception) or of an error in it.
function Template:render(context)
  local scope = child(nil)
  for k, v in pairs(GLOBALS) do scope:set(k, v) end
  for k, v in pairs(context or {}) do scope:set(k, v) end
  local out = {}
  local ok, err = pcall(execute, self.nodes, scope, out)
  if not ok then
    if type(err) == "table" and err.template_exception then return nil, "the chat template refused: " .. err.template_exception end
    local message = tostring(err)
    if not message:find("at offset %d") then
      message = string.format("template: %s, in the tag at offset %d", message:gsub("^template: ", ""), running_at)
    end
    return nil, with_lines(message, self.source)
  end
  return table.concat(out)
end

--- Compiles a template's source: the template, or nil and a message naming the line and column.
function M.compile(source)
  if type(source) ~= "string" then return nil, "template: the source must be a string" end
  local ok, nodes = pcall(function() return build(split(source)) end)
  if not ok then return nil, with_lines(tostring(nodes), source) end
  return setmetatable({ nodes = nodes, source = source }, Template)
end

M.tojson = tojson

return M

-- ane.formats.common: what the checkpoint readers share: looking a tensor up by name with
-- the shape the configuration implies, and errors naming the file, the tensor and both shapes;
-- integer and number fields of a config.json, checked as they are read.
local cjson = require("cjson.safe")

local M = {}

local function shape_string(shape) return "[" .. table.concat(shape, ", ") .. "]" end

local function same_shape(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

--- tensors[name] when it exists with `shape`; else nil and an error naming the source file,
--- the tensor, the expected and the found shape.
function M.expect_tensor(tensors, name, shape, source)
  local t = tensors[name]
  if not t then return nil, string.format("%s: tensor '%s' is missing (expected %s)", source, name, shape_string(shape)) end
  if not same_shape(t:shape(), shape) then
    return nil, string.format("%s: tensor '%s' has shape %s, expected %s", source, name, shape_string(t:shape()),
      shape_string(shape))
  end
  return t
end

--- config[key] as a Lua integer (JSON numbers like 12 or 12.0), `default` when absent; else nil
--- and a message naming the source and the key (also for integral floats beyond 2^63).
function M.integer_field(config, key, source, default)
  local value = config[key]
  if value == nil or value == cjson.null then value = default end
  local integer = type(value) == "number" and math.tointeger(value) or nil
  if not integer then return nil, string.format("%s: '%s' is missing or not an integer", source, key) end
  return integer
end

--- config[key] as a positive Lua integer (`default` when absent); else nil and a message naming
--- the source, the key and what it holds.
function M.positive_integer_field(config, key, source, default)
  local integer, err = M.integer_field(config, key, source, default)
  if not integer then return nil, err end
  if integer <= 0 then return nil, string.format("%s: '%s' is %d, expected a positive integer", source, key, integer) end
  return integer
end

--- config[key] as a finite number > 0 (`default` when absent or null): epsilons, RoPE's theta;
--- else nil and a message naming the source, the key and what it holds.
function M.positive_number_field(config, key, source, default)
  local value = config[key]
  if value == nil or value == cjson.null then value = default end
  if type(value) ~= "number" or not (value > 0 and value < math.huge) then
    local shown = type(value) == "number" and string.format("%g", value) or type(value) == "string" and ("the string \"" .. value .. "\"")
        or (value == nil and "missing" or "a " .. (type(value) == "table" and "JSON array or object" or type(value)))
    return nil, string.format("%s: '%s' is %s, expected a positive number", source, key, shown)
  end
  return value + 0.0
end

return M

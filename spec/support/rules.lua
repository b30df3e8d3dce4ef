-- Helpers of the validator's and the targets' specs: graphs with one part under test, and
-- assertions about the violations g:validate reports.
local ane = require("ane")
local assert = require("luassert")

local M = {}

function M.fp16(shape) return ane.tensor.randn(shape, { seed = 1, dtype = "fp16", std = 0.1 }) end

--- A graph with an [1, C, 1, S] input, anchored by a conv so ANE-28 stays quiet; `build`
--- adds the part under test and returns the output node.
function M.graph_with(build, opts)
  opts = opts or {}
  local g = ane.graph("rule")
  local x = g:input("x", opts.input_shape or { 1, 64, 1, 32 }, opts.input_dtype or "fp16")
  local anchored = opts.no_anchor and x or g:conv(x, g:const("anchor_w", M.fp16({ 64, 64, 1, 1 })), { name = "anchor" })
  g:output("y", build(g, anchored, x))
  return g
end

--- The first violation with rule `id`, or nil.
function M.find(violations, id)
  for _, v in ipairs(violations) do
    if v.id == id then return v end
  end
end

function M.expect_violation(g, id, node, severity, pattern, target)
  local v = M.find(g:validate({ target = target }), id)
  assert.is_table(v, "expected " .. id)
  assert.are.equal(node, v.node)
  assert.are.equal(severity, v.severity)
  if pattern then assert.matches(pattern, v.message) end
end

function M.expect_clean(g, id, target)
  local v = M.find(g:validate({ target = target }), id)
  assert.is_nil(v, id .. " reported: " .. (v and v.message or ""))
end

return M

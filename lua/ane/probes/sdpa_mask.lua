-- ANE-06: does scaled_dot_product_attention apply its attn_mask? A causal mask over 32
-- positions; the output is compared with attention computed with and without the mask.
local ane = require("ane")
local programs = require("ane.probes.programs")

local S, D = 32, 64

local function causal_mask()
  local m = ane.tensor({ 1, 1, S, S }, "fp16"):fill(0)
  for i = 1, S do
    for j = i + 1, S do m:set(-30000, 1, 1, i, j) end
  end
  return m
end

local function attention(name, with_mask)
  local g = ane.graph(name)
  local x = g:input("x", { 1, D, 1, S })
  local h = g:conv(x, g:const("w", programs.fp16({ D, D, 1, 1 }, 2)))
  local q = g:transpose(g:reshape(h, { 1, 1, D, S }), { 0, 1, 3, 2 }) -- [1, 1, S, D]
  local mask = with_mask and g:const("mask", causal_mask()) or nil
  local a = g:scaled_dot_product_attention(q, q, q, mask)
  g:output("y", g:reshape(g:transpose(a, { 0, 1, 3, 2 }), { 1, D, 1, S }))
  return g
end

return {
  name = "sdpa_mask",
  rules = { "ANE-06" },
  question = "Does scaled_dot_product_attention ignore its attn_mask (a causal mask over 32 positions)?",
  run = function(bench)
    local g = attention("probe_sdpa_mask", true)
    local inputs = { x = programs.fp16({ 1, D, 1, S }, 3, 1) }
    local ok, program = bench:compile(g)
    if not ok then return { verdict = "cannot tell", summary = "scaled_dot_product_attention with a mask did not compile" } end
    local ran, outputs = bench:eval(program, inputs, nil, "evaluated")
    if not ran then return { verdict = "cannot tell", summary = "it compiled but failed to evaluate" } end
    local masked = bench:reference(g, inputs).y
    local unmasked = bench:reference(attention("probe_sdpa_nomask", false), inputs).y
    local to_masked, to_unmasked = bench:relative_error(outputs.y, masked), bench:relative_error(outputs.y, unmasked)
    bench:note("max relative error vs masked attention %.3g, vs unmasked %.3g", to_masked, to_unmasked)
    if to_unmasked <= bench.tolerance and to_masked > bench.tolerance then
      return { verdict = "holds", summary = "the output is attention without the mask: the mask is ignored" }
    elseif to_masked <= bench.tolerance then
      return { verdict = "does not hold", summary = "the output is masked attention: the mask is applied" }
    end
    return { verdict = "cannot tell", summary = "the output matches neither masked nor unmasked attention" }
  end,
  target = function(v, t)
    if v.verdict == "does not hold" then
      t.sdpa_mask_honoured = true
      t.rules["ANE-06"] = "off"
    end
  end,
}

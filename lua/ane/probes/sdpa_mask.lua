-- ANE-06: does scaled_dot_product_attention apply its attn_mask? A causal mask over 32
-- positions; the output is compared with attention computed with and without the mask. If
-- the mask is applied: a per-head mask (causal for head 1, none for head 2), compared with
-- masking per head and with head 1's plane for both (newer facts: one plane for all heads).
local ane = require("ane")
local programs = require("ane.probes.programs")

local S, D = 32, 64

-- [1, heads, S, S]: causal for the heads listed in `causal`, zero for the others
local function mask_of(heads, causal)
  local m = ane.tensor({ 1, heads, S, S }, "fp16"):fill(0)
  for _, h in ipairs(causal) do
    for i = 1, S do
      for j = i + 1, S do m:set(-30000, 1, h, i, j) end
    end
  end
  return m
end

-- x [1, D, 1, S] -> conv -> `heads` heads of [S, D / heads] -> attention (mask or none)
local function attention(name, heads, mask)
  local g = ane.graph(name)
  local x = g:input("x", { 1, D, 1, S })
  local h = g:conv(x, g:const("w", programs.fp16({ D, D, 1, 1 }, 2)))
  local q = g:transpose(g:reshape(h, { 1, heads, D // heads, S }), { 0, 1, 3, 2 }) -- [1, heads, S, D / heads]
  local a = g:scaled_dot_product_attention(q, q, q, mask and g:const("mask", mask) or nil)
  g:output("y", g:reshape(g:transpose(a, { 0, 1, 3, 2 }), { 1, D, 1, S }))
  return g
end

-- Which reference the device's output matches: the name, or nil.
local function which(bench, got, candidates)
  local errors, found = {}, nil
  for _, c in ipairs(candidates) do
    local err = bench:relative_error(got, c[2])
    errors[#errors + 1] = string.format("%s %.3g", c[1], err)
    if err <= bench.tolerance and not found then found = c[1] end
  end
  bench:note("max relative error vs %s", table.concat(errors, ", "))
  return found
end

local function run_on_device(bench, g, inputs)
  local ok, program = bench:compile(g)
  if not ok then return nil end
  local ran, outputs = bench:eval(program, inputs, nil, "evaluated")
  return ran and outputs.y or nil
end

return {
  name = "sdpa_mask",
  rules = { "ANE-06" },
  question = "Does scaled_dot_product_attention ignore its attn_mask (a causal mask over 32 positions)?",
  run = function(bench)
    local inputs = { x = programs.fp16({ 1, D, 1, S }, 3, 1) }
    local got = run_on_device(bench, attention("probe_sdpa_mask", 1, mask_of(1, { 1 })), inputs)
    if not got then return { verdict = "cannot tell", summary = "attention with a mask did not compile or run" } end
    local seen = which(bench, got, {
      { "masked", bench:reference(attention("probe_sdpa_mask", 1, mask_of(1, { 1 })), inputs).y },
      { "unmasked", bench:reference(attention("probe_sdpa_nomask", 1, nil), inputs).y },
    })
    if seen == "unmasked" then
      return { verdict = "holds", summary = "the output is attention without the mask: the mask is ignored" }
    elseif seen ~= "masked" then
      return { verdict = "cannot tell", summary = "the output matches neither masked nor unmasked attention" }
    end
    -- the mask is applied: per head, or one plane for every head?
    local per_head = mask_of(2, { 1 })
    local got2 = run_on_device(bench, attention("probe_sdpa_heads", 2, per_head), inputs)
    local planes = got2 and which(bench, got2, {
      { "per head", bench:reference(attention("probe_sdpa_heads", 2, per_head), inputs).y },
      { "first plane for all heads", bench:reference(attention("probe_sdpa_heads", 2, mask_of(1, { 1 })), inputs).y },
    }) or "cannot tell"
    return { verdict = "does not hold", summary = "the output is masked attention: the mask is applied; a per-head mask: "
      .. planes, details = { per_head_mask = planes } }
  end,
  target = function(v, t)
    if v.verdict == "does not hold" then
      t.sdpa_mask_honoured = true
      t.sdpa_mask_one_plane = (v.details or {}).per_head_mask == "first plane for all heads"
      t.rules["ANE-06"] = "off"
    end
  end,
}

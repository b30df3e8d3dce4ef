-- The graphs behind the golden MIL files in spec/golden/: small (C = 64, S = 32, 4 heads)
-- so the expected text stays readable, with seeded weights so the bytes are fixed.
-- spec/emit_spec.lua compares against the files; scripts/update_golden.lua rewrites
-- them after an intended change of the emitter (review the diff before committing).
local ane = require("ane")
local nn = require("ane.nn")

local C, S, HEADS = 64, 32, 4
local M = {}

local function weight(shape, seed)
  return ane.tensor.randn(shape, { seed = seed, std = 0.02, dtype = "fp16" })
end

local function optimized(g)
  g:optimize()
  return g
end

function M.linear()
  local g = ane.graph("linear")
  local x = g:input("x", { 1, C, 1, S })
  g:output("y", nn.linear(g, x, weight({ 2 * C, C, 1, 1 }, 1), weight({ 2 * C }, 2), { name = "proj" }))
  return optimized(g)
end

function M.layer_norm()
  local g = ane.graph("layer_norm")
  local x = g:input("x", { 1, C, 1, S })
  g:output("y", nn.layer_norm(g, x, weight({ C }, 3), weight({ C }, 4), { name = "ln", eps = 1e-5 }))
  return optimized(g)
end

function M.rms_norm()
  local g = ane.graph("rms_norm")
  local x = g:input("x", { 1, C, 1, S })
  g:output("y", nn.rms_norm(g, x, weight({ C }, 5), { name = "norm", eps = 1e-5 }))
  return optimized(g)
end

-- GPT-2 attention: ln_1, q/k/v projections (c_attn split in three), causal attention over
-- 4 heads, output projection, residual.
function M.gpt2_attention()
  local g = ane.graph("gpt2_attention")
  local x = g:input("x", { 1, C, 1, S })
  local h = nn.layer_norm(g, x, weight({ C }, 10), weight({ C }, 11), { name = "ln_1" })
  local q = nn.linear(g, h, weight({ C, C, 1, 1 }, 12), weight({ C }, 13), { name = "q" })
  local k = nn.linear(g, h, weight({ C, C, 1, 1 }, 14), weight({ C }, 15), { name = "k" })
  local v = nn.linear(g, h, weight({ C, C, 1, 1 }, 16), weight({ C }, 17), { name = "v" })
  local attended = nn.causal_attention(g, nn.split_heads(g, q, HEADS, { name = "q_heads" }),
    nn.split_heads(g, k, HEADS, { name = "k_heads" }), nn.split_heads(g, v, HEADS, { name = "v_heads" }),
    { name = "attn" })
  local merged = nn.merge_heads(g, attended, { name = "merged" })
  local projected = nn.linear(g, merged, weight({ C, C, 1, 1 }, 18), weight({ C }, 19), { name = "c_proj" })
  g:output("y", g:add(x, projected, { name = "residual" }))
  return optimized(g)
end

-- GPT-2 MLP: ln_2, c_fc (C -> 4C), gelu (tanh form), c_proj (4C -> C), residual.
function M.gpt2_mlp()
  local g = ane.graph("gpt2_mlp")
  local x = g:input("x", { 1, C, 1, S })
  local h = nn.layer_norm(g, x, weight({ C }, 20), weight({ C }, 21), { name = "ln_2" })
  local up = nn.linear(g, h, weight({ 4 * C, C, 1, 1 }, 22), weight({ 4 * C }, 23), { name = "c_fc" })
  local act = nn.gelu(g, up, { name = "gelu" })
  local down = nn.linear(g, act, weight({ C, 4 * C, 1, 1 }, 24), weight({ C }, 25), { name = "c_proj" })
  g:output("y", g:add(x, down, { name = "residual" }))
  return optimized(g)
end

-- LoRA linear with rank-8 adapters as inputs (A: [1, 8, 1, C], B transposed: [1, 8, 1, C]).
function M.lora_linear()
  local g = ane.graph("lora_linear")
  local x = g:input("x", { 1, C, 1, S })
  local a = g:input("lora_a", { 1, 8, 1, C })
  local b = g:input("lora_b", { 1, 8, 1, C })
  g:output("y", nn.lora_linear(g, x, weight({ C, C, 1, 1 }, 30), a, b, { name = "q", alpha = 16 }))
  return optimized(g)
end

M.names = { "linear", "layer_norm", "rms_norm", "gpt2_attention", "gpt2_mlp", "lora_linear" }

return M

-- A linear layer through the whole toolchain: graph -> passes -> MIL text + MILBlob
-- weights -> the sim backend (parsing that MIL, running it with the ANE's fp16 numerics),
-- compared with the same program in fp32 precision, then updated by a delta patch.
--
--   anelua examples/fp16_linear.lua [--channels C] [--out O] [--seq S] [--seed N]
local ane = require("ane")
local nn = require("ane.nn")

local options = require("ane.cli").command {
  name = "examples/fp16_linear.lua",
  summary = "A linear layer through graph, passes, MIL, sim (fp16 against fp32) and a delta patch.",
  options = {
    { "channels", "integer", 768, "input channels", min = 1 },
    { "out", "integer", 768, "output channels", min = 1 },
    { "seq", "integer", 64, "positions", min = 1 },
    { "seed", "integer", 1, "seed of the random weights and input" },
  },
}:parse(arg)
local C, O, S = options.channels, options.out, options.seq

local weight = ane.tensor.randn({ O, C, 1, 1 }, { seed = options.seed, std = 0.02, dtype = "fp16" })
local bias = ane.tensor.randn({ O }, { seed = options.seed + 1, std = 0.02, dtype = "fp16" })

local g = ane.graph("linear")
local x = g:input("x", { 1, C, 1, S })
g:output("y", nn.linear(g, x, weight, bias, { name = "proj" }))
g:optimize()
local violations = g:validate()
local text, weights = g:mil()
print(string.format("graph: %d nodes, %.1f MFLOP, %.2f MB of weights, %d device-rule violations", g:stats().nodes,
  g:stats().flops / 1e6, g:stats().weight_bytes / 2 ^ 20, #violations))
print(string.format("MIL: %d lines, weight.bin %d bytes; the conv statement:", select(2, text:gsub("\n", "")),
  #weights["@model_path/weights/weight.bin"]))
print("  " .. text:match("\n%s*(tensor<[^\n]-= conv%([^\n]*)"):sub(1, 150) .. " ...")

local fp16 = ane.compile(g)                          -- default: backend sim, precision fp16, profile ane
local fp32 = ane.compile(g, { precision = "fp32" })  -- the same MIL, no rounding: the reference
local input = ane.tensor.randn({ 1, C, 1, S }, { seed = options.seed + 2 }):to("fp16")
local start = ane.clock()
local y16 = fp16:eval({ x = input }).y
local elapsed = ane.clock() - start
local y32 = fp32:eval({ x = input }).y
local largest = 0
for _, v in ipairs(y32:reshape(-1):totable()) do largest = math.max(largest, math.abs(v)) end
-- fp16 precision rounds the conv output and the bias-add output to fp16 (2^-11 relative
-- each): the difference stays below 2 * 2^-11 * |y| plus the bias's share.
print(string.format("%s\n  eval %.2f ms (%.1f GFLOP/s); max |y_fp16 - y_fp32| = %.2e, 2 x 2^-11 x max|y| = %.2e",
  tostring(fp16), elapsed * 1000, 2 * C * O * S / elapsed / 1e9, y16:max_abs_diff(y32), 2 * 2 ^ -11 * largest))

local new_weight = ane.tensor.randn({ O, C, 1, 1 }, { seed = options.seed + 3, std = 0.02, dtype = "fp16" })
start = ane.clock()
fp16:patch({ proj_weight = new_weight })
local patch_ms = (ane.clock() - start) * 1000
local stats = ane.stats()
print(string.format("patched proj_weight in %.2f ms; compiles %d, cache hits %d, evals %d, patches %d, budget left %d",
  patch_ms, stats.compiles, stats.cache_hits, stats.evals, stats.patches, stats.budget_left))

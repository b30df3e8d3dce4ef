-- Benchmark: the matrix-vector products of decoding alone -- fp16 rows (an fp16 model's
-- classifier), int8 rows x scale, 4-bit indices into a row's palette (ane_gemv_fp16 /
-- ane_gemv_encoded through t:matmul) -- against BLAS's fp32 product over the same [rows, k]
-- matrix in the same process, alternating in each round: bytes of weights read per second
-- for each, the median ratio of each kernel's rate to BLAS's, with its range, and for fp16
-- the median ratio of its time to BLAS's (the time a decode step saves on that matrix).
-- --matrices M multiplies M different matrices of the shape in turn per call, as a decode
-- step does its layers' (M x the bytes beyond the last-level cache: weights from memory).
--   build/anelua scripts/bench/quantized_kernels.lua [--rows N] [--k K] [--rounds R] [--matrices M]
local ane = require("ane")
local root = (arg[0]:match("^(.*)/scripts/bench/[^/]*$") or ".")
local common = dofile(root .. "/scripts/bench/common.lua")
local opts = require("ane.cli").command {
  name = "scripts/bench/quantized_kernels.lua",
  summary = "fp16 / int8 / int4 matrix-vector products against BLAS's fp32 one on the same matrix, alternating.",
  options = {
    { "rows", "integer", 8192, "rows of the matrix", min = 1 },
    { "k", "integer", 4096, "columns (even)", min = 2 },
    { "rounds", "integer", 5, "alternating rounds", min = 1 },
    { "matrices", "integer", 1, "different matrices of the shape multiplied in turn per call", min = 1 },
  },
}:parse(arg)

local x = ane.tensor.randn({ opts.k, 1 }, { seed = 2 })
local ws, w16s = {}, {}
for m = 1, opts.matrices do
  ws[m] = ane.tensor.randn({ opts.rows, opts.k }, { seed = m, std = 0.02 })
  w16s[m] = ws[m]:to("fp16")
end
-- a kernel over all the matrices: run(matrix, activations) per matrix, bytes the total
local function kernel(name, matrices, bytes, activations)
  return { name = name, bytes = bytes * #matrices, run = function()
    for _, matrix in ipairs(matrices) do matrix:matmul(x, activations) end
  end }
end
local kernels = { kernel("fp32 BLAS", ws, opts.rows * opts.k * 4), kernel("fp16", w16s, opts.rows * opts.k * 2) }
for _, encoding in ipairs({ "int8", "int4" }) do
  local qs = {}
  for m, w in ipairs(ws) do qs[m] = ane.quantize(w, encoding) end
  kernels[#kernels + 1] = kernel(encoding, qs, qs[1]:bytes())
  kernels[#kernels + 1] = kernel(encoding .. "/a8", qs, qs[1]:bytes(), "int8")
  kernels[#kernels + 1] = kernel(encoding .. "/a16", qs, qs[1]:bytes(), "int16")
end
for _, kernel in ipairs(kernels) do kernel.run() end -- warm (pages, helpers)
print(string.format("%d matrices of [%d, %d]; GB/s of weights read (best of 5 calls), rounds alternate the kernels; "
  .. "/a8, /a16: activations quantized to int8 / int16 (integer products)", opts.matrices, opts.rows, opts.k))
local header = { string.format("%-6s", "round") }
for _, kernel in ipairs(kernels) do header[#header + 1] = string.format("%11s", kernel.name) end
print(table.concat(header, " "))
local ratios, fp16_time = {}, {}
for i = 2, #kernels do ratios[i] = {} end
for round = 1, opts.rounds do
  local rates, row = {}, { string.format("%-6d", round) }
  for i, kernel in ipairs(kernels) do
    rates[i] = kernel.bytes / common.best_of(5, kernel.run) / 1e9
    row[#row + 1] = string.format("%11.1f", rates[i])
  end
  for i = 2, #kernels do ratios[i][round] = rates[i] / rates[1] end
  fp16_time[round] = (kernels[2].bytes / rates[2]) / (kernels[1].bytes / rates[1])
  print(table.concat(row, " "))
end
for i = 2, #kernels do
  local name = kernels[i].name
  local median, low, high = common.median_and_range(ratios[i])
  print(string.format("%s bytes/s over BLAS fp32's: median %.2fx (range %.2f-%.2f)", name, median, low, high))
end
local median, low, high = common.median_and_range(fp16_time)
print(string.format("fp16 time over BLAS fp32's: median %.2fx (range %.2f-%.2f)", median, low, high))

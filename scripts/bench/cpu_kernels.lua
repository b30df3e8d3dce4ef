-- Benchmark: each CPU kernel of a decode step against the platform library's counterpart on the
-- same input, alternating in each round (ane.kernel_time times both in C): the matrix-vector
-- products of Stories110M's and Qwen3-0.6B's decode shapes (fp32, fp16, int8 and 4-bit rows)
-- against the BLAS's cblas_sgemv on the fp32 weights (Accelerate on a Mac, OpenBLAS here), and
-- e^x, tanh, sums and maxima against Accelerate's vvexpf, vvtanhf, vDSP_sve and vDSP_maxv (Mac
-- only; elsewhere their rows say so). Prints, per kernel and shape, the median time of each and
-- the median ratio (anelua / library) with its range over the rounds. A Mac user runs it as
--   build/anelua scripts/bench/cpu_kernels.lua [--rounds R] [--calls C] [--family stories|qwen3|all]
local ane = require("ane")
local root = (arg[0]:match("^(.*)/scripts/bench/[^/]*$") or ".")
local common = dofile(root .. "/scripts/bench/common.lua")
local opts = require("ane.cli").command {
  name = "scripts/bench/cpu_kernels.lua",
  summary = "Each CPU kernel of a decode step against Accelerate / the BLAS on the same input, alternating.",
  compiles = false,
  options = {
    { "rounds", "integer", 7, "alternating rounds", min = 1 },
    { "calls", "integer", 20, "calls timed per round and kernel", min = 1 },
    { "family", "string", "all", "decode shapes of: stories (Stories110M), qwen3 (Qwen3-0.6B) or all" },
  },
}:parse(arg)

-- [rows, k] of each family's products (a layer's projections, its feed-forward, the classifier;
-- Qwen3-0.6B's 151,936-row classifier left out: its four encodings would take 1.5 GB here)
local shapes = {
  stories = { { "attention projection", 768, 768 }, { "feed-forward up", 2048, 768 }, { "feed-forward down", 768, 2048 },
              { "classifier", 32000, 768 } },
  qwen3 = { { "query projection", 2048, 1024 }, { "key/value projection", 1024, 1024 },
            { "feed-forward up", 3072, 1024 }, { "feed-forward down", 1024, 3072 } },
}
local families = opts.family == "all" and { "stories", "qwen3" } or { opts.family }
for _, family in ipairs(families) do
  if not shapes[family] then
    io.stderr:write(("cpu_kernels.lua: --family %s: use stories, qwen3 or all\n"):format(family))
    os.exit(2)
  end
end

-- One row of the table: our kernel against the library's, alternating over the rounds.
local function pair(label, ours, theirs, options)
  local ours_times, their_times, ratios = {}, {}, {}
  options.calls = opts.calls
  for _ = 1, opts.rounds do
    local a = ane.kernel_time(ours, options)
    local b, why = ane.kernel_time(theirs, options)
    if not b then return ("| %s | %s | %.1f us | %s | (%s) | |"):format(label, ours, a * 1e6, theirs, why) end
    ours_times[#ours_times + 1], their_times[#their_times + 1], ratios[#ratios + 1] = a, b, a / b
  end
  local median, low, high = common.median_and_range(ratios)
  return ("| %s | %s | %.1f us | %s | %.1f us | %.2fx (%.2f-%.2f) |"):format(label, ours,
    common.median_and_range(ours_times) * 1e6, theirs, common.median_and_range(their_times) * 1e6, median, low, high)
end

print(("# CPU kernels (level %s, BLAS %s), %d rounds of %d calls"):format(ane.cpu_kernels(),
  ane.capabilities().blas_kernels, opts.rounds, opts.calls))
print("| input | anelua | time | library | time | anelua / library (range) |")
print("|---|---|---|---|---|---|")
for _, family in ipairs(families) do
  for _, shape in ipairs(shapes[family]) do
    local label = ("%s %s [%d, %d]"):format(family, shape[1], shape[2], shape[3])
    for _, kernel in ipairs({ "gemv_fp32", "gemv_fp16", "gemv_int8", "gemv_int4" }) do
      print(pair(label, kernel, "sgemv", { rows = shape[2], k = shape[3] }))
    end
  end
end
-- a server's batched step: every weight times a column per session (8 sessions), the fp16 rows
-- against the BLAS's sgemm on the fp32 weights
for _, family in ipairs(families) do
  for _, shape in ipairs(shapes[family]) do
    local label = ("%s %s [%d, %d] x 8 columns"):format(family, shape[1], shape[2], shape[3])
    print(pair(label, "gemm_fp16", "sgemm", { rows = shape[2], k = shape[3], columns = 8 }))
  end
end
local vectors = { { "exp", "vvexpf" }, { "tanh", "vvtanhf" }, { "sum", "sve" }, { "max", "maxv" } }
for _, n in ipairs({ 768, 32000 }) do -- a row of activations; a classifier's logits
  for _, v in ipairs(vectors) do print(pair(("%d values"):format(n), v[1], v[2], { n = n })) end
end

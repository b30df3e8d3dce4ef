-- Benchmark: 1x1 conv (a linear layer) through the sim backend, in GFLOP/s, against OpenBLAS
-- sgemm called directly (t:matmul, which is one cblas_sgemm) on the same shapes in the same
-- run. The program path adds what the device path has: binding by name, staging through
-- fp16/fp32 surfaces, conversion to the fp32 value buffers, and (fp16 precision) rounding
-- of the output. Targets: >= 80% of sgemm in fp32, >= 60% in fp16.
--   build/anelua scripts/bench/sim_ops.lua [--seconds S]
local ane = require("ane")

local budget = require("ane.cli").command{
  name = "scripts/bench/sim_ops.lua", summary = "1x1 conv through sim against sgemm on the same shapes.",
  options = { { "seconds", "number", 0.5, "time per measurement", min = 0, open_min = true } },
}:parse(arg).seconds
ane.set_compile_budget(1000000)

local shapes = {
  { "GPT-2 attention proj", 768, 768, 256 },
  { "GPT-2 MLP up", 768, 3072, 256 },
  { "GPT-2 MLP down", 3072, 768, 256 },
  { "Stories110M FFN up", 768, 2048, 256 },
  { "Stories110M FFN down", 2048, 768, 256 },
  { "Stories110M decode", 768, 2048, 32 },
}

-- Best seconds per call of f over about `budget` seconds of repetitions.
local function best_time(f)
  f()
  local best, spent = math.huge, 0
  while spent < budget do
    local start = ane.clock()
    f()
    local elapsed = ane.clock() - start
    best, spent = math.min(best, elapsed), spent + elapsed
  end
  return best
end

print(string.format("%-22s %5s %5s %4s | %9s | %9s %6s | %9s %6s", "shape", "in", "out", "seq", "sgemm", "sim fp32",
  "ratio", "sim fp16", "ratio"))
local results = {}
for _, case in ipairs(shapes) do
  local name, cin, cout, seq = table.unpack(case)
  local flops = 2 * cin * cout * seq
  local w32 = ane.tensor.randn({ cout, cin }, { seed = 1, std = 0.02 })
  local x32 = ane.tensor.randn({ cin, seq }, { seed = 2 })
  local sgemm = best_time(function() w32:matmul(x32) end)
  local row = { name, cin, cout, seq, flops / sgemm / 1e9 }
  for _, precision in ipairs({ "fp32", "fp16" }) do
    local g = ane.graph("linear")
    local x = g:input("x", { 1, cin, 1, seq }, precision)
    g:output("y", g:conv(x, g:const("w", w32:reshape(cout, cin, 1, 1):to(precision))))
    local program = ane.compile(g, { precision = precision, profile = precision == "fp32" and "cpu" or "ane" })
    local input = { x = x32:reshape(1, cin, 1, seq):to(precision) }
    local t = best_time(function() program:eval(input) end)
    row[#row + 1] = flops / t / 1e9
    row[#row + 1] = sgemm / t
    program:close()
  end
  results[#results + 1] = row
  print(string.format("%-22s %5d %5d %4d | %6.1f GF | %6.1f GF %5.0f%% | %6.1f GF %5.0f%%", row[1], row[2], row[3], row[4],
    row[5], row[6], 100 * row[7], row[8], 100 * row[9]))
end
print("fp32: profile cpu, fp32 I/O; fp16: profile ane (fp16 surfaces, output rounded to fp16)")

-- Shared by the benchmarks: best-of-n timing and the memory read bandwidth that bounds
-- decoding. Load with dofile(<dir of the script> .. "/common.lua").
local ane = require("ane")

local M = {}

--- The fastest of n runs of fn, in seconds.
function M.best_of(n, fn)
  local best = math.huge
  for _ = 1, n do
    local start = ane.clock()
    fn()
    best = math.min(best, ane.clock() - start)
  end
  return best
end

--- Read bandwidth in bytes/s: probe(n) runs y = A x through BLAS with A 1 GB of fp32 (the
--- access pattern of a decode step), best of n. The probe keeps its matrix, so it can
--- measure right next to each timing on a shared machine.
function M.bandwidth_probe()
  local side = 16384
  local A = ane.tensor.rand({ side, side }, { seed = 1 })
  local x = ane.tensor.rand({ side, 1 }, { seed = 2 })
  return function(n) return side * side * 4 / M.best_of(n or 3, function() A:matmul(x) end) end
end

--- Decode rounds on a shared machine: each round measures the read bandwidth (probe, best
--- of 3) and right after it decode() -> tokens/s, ms/token; the bound of a round is
--- bandwidth / bytes_per_token. Returns the round with the median ratio to its bound, and
--- the lowest and highest ratios.
function M.paired_decode_rounds(probe, rounds, bytes_per_token, decode)
  local results = {}
  for r = 1, rounds do
    local bandwidth = probe(3)
    local rate, ms = decode()
    local bound = bandwidth / bytes_per_token
    results[r] = { bandwidth = bandwidth, rate = rate, ms = ms, bound = bound, ratio = rate / bound }
  end
  table.sort(results, function(a, b) return a.ratio < b.ratio end)
  return results[(rounds + 1) // 2], results[1].ratio, results[rounds].ratio
end

return M

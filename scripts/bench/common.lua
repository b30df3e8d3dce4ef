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

--- Read bandwidth in bytes/s: y = A x through BLAS with A 1 GB of fp32 (the access pattern
--- of a decode step), best of 5.
function M.read_bandwidth()
  local side = 16384
  local A = ane.tensor.rand({ side, side }, { seed = 1 })
  local x = ane.tensor.rand({ side, 1 }, { seed = 2 })
  local seconds = M.best_of(5, function() A:matmul(x) end)
  A = nil
  collectgarbage()
  return side * side * 4 / seconds
end

return M

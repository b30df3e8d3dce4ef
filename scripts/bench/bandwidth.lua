-- Shared by the decode benchmarks: the memory read bandwidth that bounds decoding, measured
-- as y = A x through BLAS with A 1 GB of fp32 (the access pattern of a decode step), best of 5.
local ane = require("ane")

return function()
  local side = 16384
  local A = ane.tensor.rand({ side, side }, { seed = 1 })
  local x = ane.tensor.rand({ side, 1 }, { seed = 2 })
  local best = math.huge
  for _ = 1, 5 do
    local start = ane.clock()
    A:matmul(x)
    best = math.min(best, ane.clock() - start)
  end
  A = nil
  collectgarbage()
  return side * side * 4 / best -- bytes per second
end

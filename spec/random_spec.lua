-- tensor/random.c through ane.tensor.randn / rand: deterministic per seed, different across
-- seeds, the requested mean and standard deviation, uniforms inside [low, high).
local ane = require("ane")

describe("ane.tensor random", function()
  it("is deterministic for a seed and differs across seeds", function()
    local a = ane.tensor.randn({ 1000 }, { seed = 42 })
    local b = ane.tensor.randn({ 1000 }, { seed = 42 })
    local c = ane.tensor.randn({ 1000 }, { seed = 43 })
    assert.are.equal(a:bytes(), b:bytes())
    assert.are_not.equal(a:bytes(), c:bytes())
  end)

  it("has the requested mean and standard deviation", function()
    -- 10^5 samples: the sample mean's standard error is std/sqrt(n) = 0.0063, and the
    -- sample std's about std/sqrt(2n) = 0.0045; 5 standard errors bound both.
    local n, t = 100000, ane.tensor.randn({ 100000 }, { seed = 7, mean = 1, std = 2 })
    local sum, sum_sq = 0, 0
    for _, v in ipairs(t:totable()) do sum, sum_sq = sum + v, sum_sq + v * v end
    local mean = sum / n
    local std = math.sqrt(sum_sq / n - mean * mean)
    assert.is_true(math.abs(mean - 1) < 5 * 2 / math.sqrt(n))
    assert.is_true(math.abs(std - 2) < 5 * 2 / math.sqrt(2 * n))
  end)

  it("draws uniforms inside [low, high)", function()
    local t = ane.tensor.rand({ 10000 }, { seed = 3, low = -2, high = 5 })
    local lo, hi = math.huge, -math.huge
    for _, v in ipairs(t:totable()) do lo, hi = math.min(lo, v), math.max(hi, v) end
    assert.is_true(lo >= -2 and hi < 5 and lo < -1.9 and hi > 4.9)
  end)
end)

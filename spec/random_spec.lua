-- tensor/random.c through ane.tensor.randn / rand: deterministic per seed, different across
-- seeds, fresh without one, streams per block, the requested mean and standard deviation, uniforms inside
-- [low, high).
local ane = require("ane")

describe("ane.tensor random", function()
  it("is deterministic for a seed and differs across seeds", function()
    local a = ane.tensor.randn({ 1000 }, { seed = 42 })
    local b = ane.tensor.randn({ 1000 }, { seed = 42 })
    local c = ane.tensor.randn({ 1000 }, { seed = 43 })
    assert.are.equal(a:bytes(), b:bytes())
    assert.are_not.equal(a:bytes(), c:bytes())
  end)

  it("draws fresh values on every call without a seed, in this process and the next", function()
    local drawn = {}
    for i = 1, 3 do drawn[i] = ane.tensor.randn({ 64 }):bytes() end
    drawn[4] = ane.tensor.randn({ 64 }, { std = 2 }):bytes() -- options without a seed
    drawn[5] = ane.tensor.rand({ 64 }):bytes()
    for i = 1, #drawn do
      for j = i + 1, #drawn do assert.are_not.equal(drawn[i], drawn[j], i .. " and " .. j) end
    end
    local helpers = require("spec.helpers")
    local script = "io.write(require('ane').tensor.randn({8}):checksum())"
    local function another_process()
      local pipe = assert(io.popen(helpers.anelua .. " -e " .. string.format("%q", script)))
      local out = pipe:read("a")
      pipe:close()
      return out
    end
    assert.are_not.equal(another_process(), another_process())
  end)

  it("fills large tensors from one stream per 65,536 elements, the first the seed's own", function()
    local block = 65536
    local large = ane.tensor.randn({ 3 * block + 100 }, { seed = 9 })
    assert.are.equal(ane.tensor.randn({ block }, { seed = 9 }):bytes(), large:slice(1, 1, block):bytes())
    assert.are.equal(large:bytes(), ane.tensor.randn({ 3 * block + 100 }, { seed = 9 }):bytes())
    -- the streams are not shifted copies of one another: the blocks' correlations are those of
    -- independent normals (standard error 1/sqrt(n) = 0.004; 5 of them bound it)
    local blocks = {}
    for b = 1, 3 do blocks[b] = large:slice(1, (b - 1) * block + 1, b * block):totable() end
    for _, pair in ipairs({ { 1, 2 }, { 2, 3 }, { 1, 3 } }) do
      local x, y, sum = blocks[pair[1]], blocks[pair[2]], 0
      for i = 1, block do sum = sum + x[i] * y[i] end
      assert.is_true(math.abs(sum / block) < 5 / math.sqrt(block), "blocks " .. pair[1] .. " and " .. pair[2])
    end
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

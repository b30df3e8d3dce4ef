-- MIL emission: golden text for six programs (stored in spec/golden/, regenerated only on
-- purpose by scripts/update_golden.lua), the weight file behind them, determinism, and the
-- dialect's rules: named parameter consts, no conv bias, alphabetical I/O, exact floats.
local ane = require("ane")
local helpers = require("spec.helpers")
local graphs = require("spec.golden_graphs")

local PATH = "@model_path/weights/weight.bin"

describe("golden MIL", function()
  for _, name in ipairs(graphs.names) do
    it("emits the expected text for " .. name, function()
      local text, weights = graphs[name]():mil()
      local expected = helpers.read_file("spec/golden/" .. name .. ".mil")
      assert.are.equal(expected, text)
      -- Every BLOBFILE offset is a valid record of the weight file holding that many bytes.
      local records = assert(ane.milblob.read(weights[PATH]))
      local by_offset = {}
      for _, record in ipairs(records) do by_offset[record.offset] = record end
      local references = 0
      for dims, offset in text:gmatch("val = tensor<fp16, %[([%d, ]+)%]>%(BLOBFILE%(path = string%(\"[^\"]+\"%), offset = uint64%((%d+)%)%)%)") do
        local numel = 1
        for d in dims:gmatch("%d+") do numel = numel * tonumber(d) end
        local record = by_offset[tonumber(offset)]
        assert.is_table(record, "BLOBFILE offset " .. offset .. " is not a record")
        assert.are.equal(numel * 2, record.size)
        references = references + 1
      end
      assert.are.equal(#records, references)
    end)
  end

  it("is deterministic: the same graph gives identical bytes", function()
    for _, name in ipairs(graphs.names) do
      local text1, weights1 = graphs[name]():mil()
      local text2, weights2 = graphs[name]():mil()
      assert.are.equal(text1, text2)
      assert.are.equal(weights1[PATH], weights2[PATH])
    end
  end)
end)

describe("MIL dialect rules", function()
  it("writes conv parameters and matmul flags as named consts, never a conv bias", function()
    local text = graphs.gpt2_attention():mil()
    for call in text:gmatch("= conv%((.-)%)%[") do
      assert.is_nil(call:find("bias =", 1, true)) -- ANE-13
      for _, param in ipairs({ "dilations", "groups", "pad", "pad_type", "strides", "weight", "x" }) do
        assert.matches(param .. " = [%a_][%w_]*", call)
      end
    end
    for call in text:gmatch("= matmul%((.-)%)%[") do
      assert.matches("transpose_x = [%a_][%w_]*,", call) -- ANE-12: a name, not bool(...)
      assert.matches("transpose_y = [%a_][%w_]*,", call)
      assert.is_nil(call:find("bool(", 1, true))
    end
  end)

  it("lists inputs and outputs alphabetically, whatever the declaration order", function()
    local g = ane.graph("order")
    local zeta = g:input("zeta", { 1, 64, 1, 32 })
    local alpha = g:input("alpha", { 1, 64, 1, 32 })
    local w = g:const("w", ane.tensor({ 64, 64, 1, 1 }, "fp16"))
    g:output("second", g:conv(zeta, w))
    g:output("first", g:conv(alpha, w))
    local text = g:mil()
    assert.matches("func main<ios18>%(tensor<fp16, %[1, 64, 1, 32%]> alpha, tensor<fp16, %[1, 64, 1, 32%]> zeta%)", text)
    assert.matches("} %-> %(first, second%);", text)
  end)

  it("writes floats that read back exactly", function()
    local g = ane.graph("floats")
    local x = g:input("x", { 1, 64, 1, 32 })
    local values = { 0.1, 1 / 3, -65504, 1e-7, 2 ^ -24, 1e4, 0.5 }
    local y = x
    for _, v in ipairs(values) do y = g:mul(y, v) end
    g:output("y", g:clip(y, -math.huge, 3.14159))
    local text = g:mil()
    -- Each literal, parsed back and rounded to fp16, equals the fp16 rounding of the value.
    local literals = {}
    for literal in text:gmatch("val = fp16%(([^)]+)%)") do literals[#literals + 1] = literal end
    assert.are.equal(#values + 2, #literals)
    for i, v in ipairs(values) do
      local parsed = tonumber(literals[i])
      local want = ane.tensor.from({ v }):to("fp16"):get(1)
      local got = ane.tensor.from({ parsed }):to("fp16"):get(1)
      assert.are.equal(want, got, literals[i])
    end
    assert.are.equal("0.1", literals[1])
    assert.are.equal("-65504", literals[3])
    assert.are.equal("-inf", literals[#values + 1])
  end)

  it("refuses a graph without outputs", function()
    local g = ane.graph("empty")
    g:input("x", { 1, 64, 1, 32 })
    assert.error_matches(function() g:mil() end, "graph 'empty' has no outputs")
  end)
end)

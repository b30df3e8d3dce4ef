-- What the ANE's fp16 I/O does to a linear layer, measured against fp32.
--
-- An activation of GPT-2 width goes through an fp16 surface (the device's [1, C, 1, S]
-- layout: 64-byte rows, >= 48 KiB allocations), a 1x1-conv-shaped linear layer runs once
-- in fp32 and once on fp16-rounded inputs and weights with an fp16-rounded output, and the
-- script reports the error next to the bound fp16 arithmetic allows.
--
--   anelua examples/fp16_linear.lua [--channels C] [--seq S] [--seed N]
local ane = require("ane")

local options = { channels = 768, seq = 64, seed = 1 }
local i = 1
while i <= #arg do
  local name = arg[i]:match("^%-%-(.+)$")
  if name == "help" or not options[name] or not tonumber(arg[i + 1]) then
    io.stderr:write("usage: anelua examples/fp16_linear.lua [--channels C] [--seq S] [--seed N]\n")
    os.exit(name == "help" and 0 or 1)
  end
  options[name] = math.tointeger(tonumber(arg[i + 1])) or error("--" .. name .. " needs an integer")
  i = i + 2
end
local C, S = options.channels, options.seq

local clock = os.clock
local x = ane.tensor.randn({ C, S }, { seed = options.seed })                    -- [C, S] activation
local w = ane.tensor.randn({ C, C }, { seed = options.seed + 1, std = 0.02 })    -- [out, in] weights

-- The input as the device would receive it.
local surface = ane.surface { channels = C, seq = S, dtype = "fp16" }
surface:write(x)
local info = surface:info()
local x16 = surface:read():reshape(C, S)                 -- fp16, exactly what the surface holds

local start = clock()
local y32 = w:matmul(x)                                  -- fp32 reference
local fp32_seconds = clock() - start
local y16 = w:to("fp16"):matmul(x16)                     -- fp16 in, fp32 accumulate (BLAS), fp16 out

local max_abs = y16:max_abs_diff(y32)
local largest = 0
for _, row in ipairs(y32:totable()) do
  for _, v in ipairs(row) do largest = math.max(largest, math.abs(v)) end
end
-- Each input and weight carries a relative rounding error <= 2^-11 (fp16 unit roundoff),
-- so each product is off by <= 2 * 2^-11 of its magnitude: the sum is off by at most
-- 2^-10 * sum_i |w_i x_i|, whose expected size for N(0, 0.02) weights and N(0, 1) inputs
-- is 2^-10 * C * 0.02 * 2/pi; the output rounding adds 2^-11 * |y|. Typical errors are far
-- smaller, since independent rounding errors cancel.
local bound = 2 ^ -10 * C * 0.02 * 2 / math.pi + 2 ^ -11 * largest

print(string.format("surface: %s, row stride %d bytes, allocation %d bytes", tostring(surface):match("%[.-%]"),
  info.row_stride, info.alloc_size))
print(string.format("linear [%d x %d] x [%d x %d]: %.2f GFLOP/s in fp32 (BLAS)", C, C, C, S,
  2 * C * C * S / fp32_seconds / 1e9))
print(string.format("largest |y|            %.4f", largest))
print(string.format("max |y_fp16 - y_fp32|  %.3e", max_abs))
print(string.format("worst-case fp16 bound  %.3e  (ratio %.2f)", bound, max_abs / bound))
print(string.format("fp16 conversion path: %s", ane.simd()))

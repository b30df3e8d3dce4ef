-- The small programs the probes compile (lua/ane/probes/), built the same way each time: an
-- fp16 [1, C, 1, S] input, anchored by a 1x1 conv (so ANE-28, "a purely elementwise program
-- may be refused", is never the reason a probe's program fails), then the part under test.
local ane = require("ane")

local M = {}

function M.fp16(shape, seed, std)
  return ane.tensor.randn(shape, { seed = seed or 1, std = std or 0.1, dtype = "fp16" })
end

--- An fp16 tensor of this shape holding `value` everywhere.
function M.filled(shape, value) return ane.tensor(shape, "fp16"):fill(value) end

--- The weight of a 1x1 conv that copies its n channels: fp16 [n, n, 1, 1].
function M.identity_weight(n)
  local w = ane.tensor({ n, n, 1, 1 }, "fp16"):fill(0)
  for i = 1, n do w:set(1, i, i, 1, 1) end
  return w
end

--- A graph `name`: x [1, channels, 1, width] -> conv 1x1 -> build(g, h, x) -> output y.
--- Returns the graph and its inputs.
function M.anchored(name, build, channels, width)
  channels, width = channels or 64, width or 32
  local g = ane.graph(name)
  local x = g:input("x", { 1, channels, 1, width })
  local h = g:conv(x, g:const(name .. "_w", M.fp16({ channels, channels, 1, 1 }, 2)), { name = name .. "_anchor" })
  g:output("y", build(g, h, x))
  return g, { x = M.fp16({ 1, channels, 1, width }, 3, 1.0) }
end

--- Compiles and evaluates an anchored program on the bench, compares with the CPU path.
--- Returns "runs" (and matches), "wrong" (runs, wrong data), "refused" (compile) or
--- "fails" (eval), and the message.
function M.try(bench, g, inputs)
  local ok, program = bench:compile(g)
  if not ok then return "refused", program end
  local ran, outputs = bench:eval(program, inputs, nil, "evaluated")
  if not ran then return "fails", outputs end
  local want = bench:reference(g, inputs)
  for name, value in pairs(want) do
    if not bench:matches(outputs[name], value, name) then return "wrong", "output " .. name .. " differs" end
  end
  return "runs"
end

--- The largest value in [lo, hi] (in steps of `step`) for which accepts(value) is true,
--- given accepts(lo) is true and the answer is monotone: a bisection. Returns the value and
--- whether hi itself was accepted (then the limit lies beyond what was tried).
function M.largest(lo, hi, step, accepts)
  if accepts(hi) then return hi, true end
  local good, bad = lo, hi
  while bad - good > step do
    local mid = good + ((bad - good) // (2 * step)) * step
    if mid <= good then mid = good + step end
    if accepts(mid) then good = mid else bad = mid end
  end
  return good, false
end

--- The smallest value in [lo, hi] (steps of `step`) for which accepts(value) is true,
--- given accepts(hi) is true.
function M.smallest(lo, hi, step, accepts)
  if accepts(lo) then return lo, true end
  local bad, good = lo, hi
  while good - bad > step do
    local mid = bad + ((good - bad) // (2 * step)) * step
    if mid <= bad then mid = bad + step end
    if accepts(mid) then good = mid else bad = mid end
  end
  return good, false
end

return M

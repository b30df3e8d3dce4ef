-- Benchmark: the `ane` backend's cost per eval over calling `sim` directly, on the test
-- double (whose evaluation is sim's): descriptor, request, IOSurfaces, the objc_msgSend
-- boundary and the framework's bookkeeping, with the same program and inputs. The two
-- alternate in each round; the row prints the median per-eval times, the difference and
-- the ratio, each with its range over the rounds (the overhead per round is ane - sim).
--   ANELUA_ANE_FRAMEWORK=build/ane-double/AppleNeuralEngine build/anelua scripts/bench/ane_overhead.lua
local ane = require("ane")
local nn = require("ane.nn")

local opts = require("ane.cli").command{
  name = "scripts/bench/ane_overhead.lua", summary = "Per-eval cost of the ane backend over direct sim.",
  options = {
    { "evals", "integer", 300, "evals per timing", min = 1 },
    { "rounds", "integer", 7, "alternating rounds", min = 1 },
  },
}:parse(arg)
if ane.backends().ane ~= true then
  io.stderr:write("ane_overhead.lua: backend 'ane' is not available: ", tostring(ane.backends().ane),
    "\n(on Linux: ANELUA_ANE_FRAMEWORK=build/ane-double/AppleNeuralEngine)\n")
  os.exit(1)
end

local function program(backend, channels, width)
  local g = ane.graph("linear")
  local x = g:input("x", { 1, channels, 1, width })
  g:output("y", nn.linear(g, x, ane.tensor.randn({ channels, channels, 1, 1 }, { seed = 1, std = 0.02, dtype = "fp16" }),
    nil, { name = "fc" }))
  return ane.compile(g, { backend = backend })
end

print(string.format("%d evals per timing, %d rounds; per-eval medians", opts.evals, opts.rounds))
print(string.format("%-16s %10s %10s %22s %9s %13s", "program", "sim us", "ane us", "overhead us (range)", "ratio", "range"))
for _, shape in ipairs({ { 64, 32 }, { 768, 64 }, { 2048, 128 } }) do
  local C, S = shape[1], shape[2]
  local x = ane.tensor.randn({ 1, C, 1, S }, { seed = 2 })
  local programs = { sim = program("sim", C, S), ane = program("ane", C, S) }
  assert(programs.sim:eval({ x = x }).y:bytes() == programs.ane:eval({ x = x }).y:bytes(), "outputs differ")
  local function per_eval_us(name)
    local p = programs[name]
    local start = ane.clock()
    for _ = 1, opts.evals do p:eval({ x = x }) end
    return (ane.clock() - start) / opts.evals * 1e6
  end
  local times = { sim = {}, ane = {} }
  local ratios, overheads = {}, {}
  for r = 1, opts.rounds do
    local order = r % 2 == 1 and { "sim", "ane" } or { "ane", "sim" }
    local t = {}
    for _, name in ipairs(order) do t[name] = per_eval_us(name) end
    times.sim[r], times.ane[r], ratios[r], overheads[r] = t.sim, t.ane, t.ane / t.sim, t.ane - t.sim
  end
  for _, list in pairs({ times.sim, times.ane, ratios, overheads }) do table.sort(list) end
  local mid = (opts.rounds + 1) // 2
  print(string.format("%-16s %10.1f %10.1f %6.1f (%.1f..%.1f) %8.2fx %6.2f-%.2f", string.format("[1,%d,1,%d]", C, S),
    times.sim[mid], times.ane[mid], overheads[mid], overheads[1], overheads[opts.rounds], ratios[mid], ratios[1],
    ratios[opts.rounds]))
end

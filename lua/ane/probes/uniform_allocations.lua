-- ANE-02 / ANE-18: must the surfaces of one program share one allocation size? Outputs of
-- two sizes, then (if the device runs programs with two inputs) inputs of two sizes.
local ane = require("ane")
local programs = require("ane.probes.programs")

local SMALL, LARGE = 49152, 98304

local function surface(channels, width, bytes)
  return ane.surface { channels = channels, seq = width, dtype = "fp16", alloc_size = bytes }
end

local function side_accepts(bench, label, program, inputs, outputs)
  local ok = bench:eval(program, inputs, outputs, label)
  return ok
end

return {
  name = "uniform_allocations",
  rules = { "ANE-02", "ANE-18" },
  question = "Must the input (and the output) surfaces of one program share one allocation size?",
  run = function(bench)
    local g = ane.graph("probe_allocations")
    local a = g:input("a", { 1, 64, 1, 32 })
    local h = g:conv(a, g:const("w", programs.fp16({ 64, 64, 1, 1 }, 2)))
    g:output("y", h)
    g:output("z", g:relu(h))
    local ok, program = bench:compile(g)
    if not ok then return { verdict = "cannot tell", summary = "the probe's program did not compile" } end
    local x = surface(64, 32, SMALL)
    x:write(programs.fp16({ 1, 64, 1, 32 }, 3, 1))
    if not side_accepts(bench, "outputs at one size (49,152 bytes each)", program, { a = x }, { y = surface(64, 32, SMALL), z = surface(64, 32, SMALL) }) then
      return { verdict = "cannot tell", summary = "even equal allocations failed" }
    end
    local outputs_uneven = side_accepts(bench, "outputs at 49,152 and 98,304 bytes", program, { a = x },
      { y = surface(64, 32, SMALL), z = surface(64, 32, LARGE) })
    -- inputs: a two-input program, if the device runs those at all (open question 2)
    local g2 = ane.graph("probe_allocations_in")
    local p, q = g2:input("p", { 1, 64, 1, 32 }), g2:input("q", { 1, 64, 1, 32 })
    g2:output("y", g2:add(g2:conv(p, g2:const("w", programs.fp16({ 64, 64, 1, 1 }, 2))), q))
    local ok2, program2 = bench:compile(g2)
    local inputs_uneven
    if ok2 and side_accepts(bench, "inputs at one size", program2, { p = x, q = x }) then
      local big = surface(64, 32, LARGE)
      big:write(programs.fp16({ 1, 64, 1, 32 }, 4, 1))
      inputs_uneven = side_accepts(bench, "inputs at 49,152 and 98,304 bytes", program2, { p = x, q = big })
    end
    local parts = { "outputs of two sizes " .. (outputs_uneven and "run" or "are refused") }
    if inputs_uneven ~= nil then parts[2] = "inputs of two sizes " .. (inputs_uneven and "run" or "are refused") end
    local holds = not outputs_uneven and not inputs_uneven
    return { verdict = holds and "holds" or "does not hold", summary = table.concat(parts, "; "),
      details = { outputs_uneven = outputs_uneven, inputs_uneven = inputs_uneven } }
  end,
}

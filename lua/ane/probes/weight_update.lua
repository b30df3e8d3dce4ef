-- ANE-07 and open question 1: which weight-update strategy takes effect on this device
-- (unload + overwrite + reload, a load from copied compiled files, or a recompile); the
-- backend checks the first patch of the process against the CPU path and keeps what works.
local ane = require("ane")
local nn = require("ane.nn")
local programs = require("ane.probes.programs")

local function linear(weight)
  local g = ane.graph("probe_patch")
  local x = g:input("x", { 1, 64, 1, 32 })
  g:output("y", nn.linear(g, x, weight, nil, { name = "fc" }))
  return g
end

return {
  name = "weight_update",
  rules = { "ANE-07", "Q1" },
  question = "Which weight update takes effect: reload after overwriting, load from copied compiled files, or recompile?",
  run = function(bench)
    local w0, w1 = programs.fp16({ 64, 64, 1, 1 }, 5), programs.fp16({ 64, 64, 1, 1 }, 6)
    local inputs = { x = programs.fp16({ 1, 64, 1, 32 }, 3, 1) }
    local ok, program = bench:compile(linear(w0))
    if not ok then return { verdict = "cannot tell", summary = "the probe's program did not compile" } end
    bench:eval(program, inputs, nil, "evaluated with the first weights")
    local patched = pcall(program.patch, program, { fc_weight = w1 })
    bench:note("patched fc_weight: %s", patched and "ok" or "failed")
    local ran, outputs = bench:eval(program, inputs, nil, "evaluated after the patch")
    if not (patched and ran) then return { verdict = "cannot tell", summary = "the patch or the eval after it failed" } end
    if not bench:matches(outputs.y, bench:reference(linear(w1), inputs).y, "y after the patch") then
      return { verdict = "does not hold", summary = "the patched program kept computing with old weights" }
    end
    if bench.modelled then
      return { verdict = "measured", value = "patch", unit = "",
        summary = "sim replaces the weight in place (the device's strategies are not modelled)" }
    end
    local caps = ane.capabilities()
    bench:note("the backend's check: %s", ane.stats().device and ane.stats().device.patch_check or "?")
    local strategy = caps.patch_strategy
    local meaning = { reload = "unload, overwrite the weight files, reload: the new weights count (ANE-07 does not hold here)",
      donor = "a load from copied compiled files with new weights takes effect; reload keeps the old weights (ANE-07 holds)",
      recompile = "only a recompile takes effect (ANE-07 holds; each patch costs a compile)" }
    return { verdict = "measured", value = strategy, unit = "", summary = meaning[strategy] or strategy }
  end,
}

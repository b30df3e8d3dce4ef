-- ANE-03 / ANE-19: ports bind in the alphabetical order of their names. MIL text whose
-- signature and return tuple list the ports against that order (anelua's emitter sorts
-- them, so the text is reordered here); the outputs must still be right, and the device's
-- own port listing (modelAttributes) shows which order it uses.
local ane = require("ane")
local programs = require("ane.probes.programs")

return {
  name = "binding_order",
  rules = { "ANE-03", "ANE-19" },
  question = "Does the device bind inputs and outputs in the alphabetical order of their names?",
  run = function(bench)
    local g = ane.graph("probe_binding")
    local b = g:input("beta", { 1, 64, 1, 32 })
    local a = g:input("alpha", { 1, 64, 1, 32 })
    local h = g:conv(a, g:const("w", programs.fp16({ 64, 64, 1, 1 }, 2)))
    g:output("zeta", g:add(h, b))
    g:output("eta", g:sub(h, b))
    local inputs = { alpha = programs.fp16({ 1, 64, 1, 32 }, 3, 1), beta = programs.fp16({ 1, 64, 1, 32 }, 4, 1) }
    local text, weights = g:mil()
    local reordered, swaps = text:gsub("%((tensor<[^>]+> alpha), (tensor<[^>]+> beta)%)", "(%2, %1)")
    reordered, swaps = reordered:gsub("%-> %(eta, zeta%)", "-> (zeta, eta)"), swaps
    assert(swaps == 1, "the probe's MIL signature is not as expected")
    local ok, program = bench:compile_mil(reordered, weights, "MIL declaring inputs beta, alpha and returning zeta, eta")
    if not ok then return { verdict = "cannot tell", summary = "the probe's program did not compile" } end
    local ran, outputs = bench:eval(program, inputs, nil, "evaluated")
    if not ran then
      return { verdict = "cannot tell", summary = "a program with two inputs does not run here (see multi_input)" }
    end
    local want = bench:reference(g, inputs)
    local right = bench:matches(outputs.zeta, want.zeta, "zeta") and bench:matches(outputs.eta, want.eta, "eta")
    local listing = bench.backend == "ane" and ane.capabilities().port_listing or "alphabetical (sim's model)"
    bench:note("the device lists its ports: %s", listing)
    if not right then return { verdict = "does not hold", summary = "outputs bound by alphabetical position came back wrong" } end
    if listing == "not alphabetical" then
      return { verdict = "does not hold", summary = "the device lists ports in another order (anelua binds them by the "
        .. "names it lists, so results are right)", details = { listing = listing } }
    end
    return { verdict = "holds", summary = "outputs bound by alphabetical position are right; ports listed alphabetically",
      details = { listing = listing } }
  end,
}

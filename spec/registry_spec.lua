-- backend/registry.c through the module: the backends this build knows, each usable or
-- saying why not; unknown names refused with the known ones listed (from the registry);
-- ANELUA_BACKEND naming an unknown or unavailable backend is an error at load, not a
-- fallback to sim; the CPU profile and fp32 programs always go to sim.
local ane = require("ane")
local helpers = require("spec.helpers")

describe("the backend registry", function()
  it("lists sim as usable and the device with the reason it is not, where it is not", function()
    local backends = ane.backends()
    assert.is_true(backends.sim)
    assert.is_truthy(backends.ane == true or (type(backends.ane) == "string" and #backends.ane > 0))
    local names = {}
    for name in pairs(backends) do names[#names + 1] = name end
    table.sort(names)
    assert.are.same({ "ane", "sim" }, names)
  end)

  it("refuses unknown backends, naming the ones it knows", function()
    local g = ane.graph("one")
    g:output("y", g:relu(g:input("x", { 1, 32, 1, 32 })))
    local ok, err = pcall(ane.compile, g, { backend = "tpu" })
    assert.is_false(ok)
    assert.matches("tpu", tostring(err))
    local _, stderr, status = helpers.run_anelua("-e " .. helpers.quote("require('ane')"), nil, "ANELUA_BACKEND=tpu")
    assert.are_not.equal(0, status)
    assert.matches("ANELUA_BACKEND=tpu: unknown backend 'tpu' %(known: sim, ane%)", stderr)
  end)

  it("sends CPU-profile and fp32 programs to sim", function()
    assert.are.equal("sim", ane.backend_for { precision = "fp32", profile = "cpu" })
    assert.are.equal("sim", ane.backend_for { precision = "fp16", profile = "cpu" })
  end)
end)

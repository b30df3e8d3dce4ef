-- passes/pipeline.c: the passes iterated to a fixed point, their dumps, and the SRAM
-- annotation (passes/sram_annotate.c) the pipeline ends with.
local ane = require("ane")
local helpers = require("spec.helpers")

local ops_of = helpers.ops_of -- "name:op name:op ..." of the graph's nodes

describe("the pipeline", function()
  it("iterates to a fixed point and reports its rounds", function()
    local g = ane.graph("fixpoint")
    local x = g:input("x", { 1, 64, 1, 32 })
    local v = x
    for _ = 1, 5 do v = g:identity(g:cast(g:cast(v, "fp32"), "fp16")) end
    g:output("y", g:relu(v))
    local report = g:optimize()
    assert.are.equal("x:input y:relu", ops_of(g))
    assert.is_true(report.rounds >= 2 and report.rounds <= 20)
    local again = g:optimize()
    assert.are.equal(0, again.changes)
    assert.are.equal(1, again.rounds)
  end)

  it("dumps the IR after each pass on request and through ANELUA_DUMP=passes", function()
    local g = ane.graph("dumped")
    local x = g:input("x", { 1, 64, 1, 32 })
    g:output("y", g:relu(g:identity(x)))
    local report = g:optimize({ dump = true })
    assert.matches("%-%-%- after building", report.dump)
    assert.matches("%-%-%- after dead_code", report.dump)
    assert.matches("%-%-%- after identity", report.dump)
    assert.matches("%-%-%- after cast_fusion", report.dump)
    assert.matches("%-%-%- after sram_annotate", report.dump)
    local script = "local ane = require('ane'); local g = ane.graph('d'); local x = g:input('x', {1, 64, 1, 32}); " ..
        "g:output('y', g:relu(x)); g:optimize()"
    local _, err = helpers.run_anelua("-e " .. helpers.quote(script), nil, "ANELUA_DUMP=passes")
    assert.matches("%-%-%- after identity\ngraph d\n", err)
  end)
end)

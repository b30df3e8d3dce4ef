-- passes/sram_annotate.c: working sets annotated on every node, and the ANE-27 warning
-- beyond 32 MB of SRAM.
local ane = require("ane")

describe("SRAM annotation", function()
  it("annotates working sets and warns beyond 32 MB of SRAM (ANE-27)", function()
    local g = ane.graph("big")
    local x = g:input("x", { 1, 4096, 1, 4096 }) -- 32 MiB in fp16
    g:output("y", g:relu(x, { name = "wide" }))
    local report = g:optimize()
    assert.are.equal(1, #report.warnings)
    assert.are.equal("ANE-27", report.warnings[1].id)
    assert.are.equal("y", report.warnings[1].node)
    assert.matches("64%.0 MB", report.warnings[1].message)
    assert.matches("working set 67108864 bytes", g:dump())
  end)
end)

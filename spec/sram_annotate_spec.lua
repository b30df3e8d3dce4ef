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

  it("gives a compile one ANE-27 per node: the device rules leave annotated nodes to it", function()
    local g = ane.graph("big_conv")
    local x = g:input("x", { 1, 4096, 1, 2048 })
    g:output("y", g:conv(x, g:const("w", ane.tensor({ 4096, 4096, 1, 1 }, "fp16"):fill(0.01))))
    local _, diagnostics = ane.compile(g, { quiet = true }) -- profile ane: the device rules run too
    local sram = {}
    for _, d in ipairs(diagnostics) do
      if d.id == "ANE-27" then sram[#sram + 1] = d end
    end
    assert.are.equal(1, #sram)
    assert.matches("node 'y' %(conv%) works on 64%.0 MB", sram[1].message)
  end)
end)

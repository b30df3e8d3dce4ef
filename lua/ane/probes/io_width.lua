-- ANE-21: the narrowest I/O width (last axis) the device runs correctly (catalogue: 32;
-- Orion ran width 16). Widths 1, 2, 4, 8, 16, 32 of an anchored program, checked against
-- the CPU path.
local programs = require("ane.probes.programs")

return {
  name = "io_width",
  rules = { "ANE-21" },
  question = "What is the narrowest I/O width (last axis) that runs correctly (catalogue: 32; one report: 16)?",
  run = function(bench)
    local narrowest
    for _, width in ipairs({ 32, 16, 8, 4, 2, 1 }) do
      local g, inputs = programs.anchored("probe_width_" .. width, function(g, h) return g:relu(h) end, 64, width)
      if programs.try(bench, g, inputs) ~= "runs" then break end
      narrowest = width
    end
    if not narrowest then return { verdict = "cannot tell", summary = "not even width 32 ran correctly" } end
    return { verdict = "measured", value = narrowest, unit = "elements",
      summary = narrowest == 32 and "width 32 runs, 16 does not: the catalogue's minimum holds"
        or string.format("widths down to %d run and match the CPU path", narrowest) }
  end,
  values = { 32, 16, 8, 4, 2, 1 }, -- the widths tried
  target = function(v, t) if type(v.value) == "number" then t.min_io_width = math.tointeger(v.value) end end,
}

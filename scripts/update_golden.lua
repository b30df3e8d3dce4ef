-- Rewrites spec/golden/*.mil from spec/golden_graphs.lua. Run from the project root:
--   build/anelua scripts/update_golden.lua
-- Only after an intended change of the emitter; review `git diff spec/golden` first.
require("ane.cli").command{ name = "scripts/update_golden.lua",
  summary = "Rewrites spec/golden/*.mil from spec/golden_graphs.lua (after an intended emitter change)." }:parse(arg)
local graphs = require("spec.golden_graphs")
for _, name in ipairs(graphs.names) do
  local text = graphs[name]():mil()
  local file = assert(io.open("spec/golden/" .. name .. ".mil", "wb"))
  file:write(text)
  file:close()
  print("wrote spec/golden/" .. name .. ".mil (" .. #text .. " bytes)")
end

-- Prints the corpus of real programs (spec/real_mil/corpus.lua) as a Markdown table:
-- program, project and generator, the verdict on the default backend, and the largest
-- error against the corpus's host reference. docs/compiler.md holds its output.
--   build/anelua scripts/real_mil_table.lua [--backend ane]
local ane = require("ane")
local cli = require("ane.cli")
local command = cli.command { name = "scripts/real_mil_table.lua", summary = "the corpus of real programs as a table" }
command:parse(arg)
package.path = "./?.lua;" .. package.path
local corpus = require("spec.real_mil.corpus")
local relative_error = require("ane.probe").relative_error

print(string.format("| program | project | generator | verdict on %s | max error |", ane.default_backend()))
print("|---|---|---|---|---|")
for _, entry in ipairs(corpus.programs) do
  local f = assert(io.open("spec/real_mil/" .. entry.file))
  local text = f:read("a")
  f:close()
  local p = {}
  entry.setup(p)
  local ok, program, warnings = pcall(ane.compile_mil, text, p.weights or {})
  local verdict, err = "", "-"
  if not ok then
    verdict = "rejected: " .. (tostring(program):match("(ANE%-%d+[^\n]*)") or tostring(program):match("[^\n]*"))
  else
    local outputs, worst = program:eval(p.inputs), 0
    for name, want in pairs(entry.reference(p)) do worst = math.max(worst, relative_error(outputs[name], want)) end
    err = string.format("%.1e", worst)
    local ids = {}
    for _, w in ipairs(warnings) do ids[w.id] = true end
    local list = {}
    for id in pairs(ids) do list[#list + 1] = id end
    table.sort(list)
    verdict = "runs" .. (#list > 0 and (" (warnings: " .. table.concat(list, ", ") .. ")") or "")
  end
  print(string.format("| `%s` | %s | %s | %s | %s |", entry.file, entry.project, entry.source:gsub("|", "/"), verdict:gsub("|", "/"), err))
end

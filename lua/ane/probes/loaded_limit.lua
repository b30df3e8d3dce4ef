-- How many programs one process can hold loaded at once (newer facts: ~128, the 129th load
-- fails). Runs in a child process.
local TRIES = 300

local CHILD = [[
local ane = require("ane")
local cjson = require("cjson")
local g = ane.graph("loaded")
local x = g:input("x", { 1, 16, 1, 32 })
g:output("y", g:conv(x, g:const("w", ane.tensor({ 16, 16, 1, 1 }, "fp16"):fill(0.5))))
local held, failure = {}, nil
for i = 1, %d do
  local ok, program = pcall(ane.compile, g, { target = "unchecked", key = "loaded" })
  if not ok then failure = require("ane.probe").gist(program); break end
  held[i] = program
end
print(cjson.encode({ loaded = #held, failure = failure or cjson.null }))
]]

return {
  name = "loaded_limit",
  rules = { "ANE-05" },
  question = "How many programs can one process hold loaded at once (newer reports: 128)?",
  run = function(bench)
    local result, why = bench:child(string.format(CHILD, TRIES))
    if not result then return { verdict = "cannot tell", summary = why } end
    for k, v in pairs(result) do result[k] = math.tointeger(v) or v end
    local failed = result.failure ~= require("cjson").null
    bench:note("child process: %d instances of one program loaded%s", result.loaded,
      failed and ("; then: " .. tostring(result.failure)) or "")
    if not failed then
      return { verdict = "measured", value = result.loaded, unit = "programs (no failure: at least this many)",
        summary = string.format("%d loaded at once, no load failed", result.loaded) }
    end
    return { verdict = "measured", value = result.loaded, unit = "programs",
      summary = string.format("load %d failed with %d loaded", result.loaded + 1, result.loaded) }
  end,
}

-- busted's helper for the whole suite (`--helper`, set in .busted and by ctest): each test
-- starts with the per-process compile budget (ANE-05) a fresh process would have, so the
-- specs pass alike when busted runs them all in one process (`busted spec/`) and when ctest
-- runs one file per process. A test still fails if it alone compiles more than a process
-- may. Only the public API is used: ane.stats() and ane.set_compile_budget().
local busted = require("busted")
local ane = require("ane")

ane.set_compile_budget() -- the default
local default_budget = ane.stats().compile_budget

busted.subscribe({ "test", "start" }, function()
  local stats = ane.stats()
  local compiled_so_far = stats.compile_budget - stats.budget_left
  ane.set_compile_budget(compiled_so_far + default_budget)
  return nil, true
end)

-- Temporary directories of a spec file (spec/helpers.lua's tmpdir) go when it ends.
busted.subscribe({ "file", "end" }, function()
  local loaded = package.loaded["spec.helpers"]
  if loaded then loaded.remove_tmpdirs() end
  return nil, true
end)

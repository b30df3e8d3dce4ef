-- Benchmark: what one decode step's attention program costs against how much of its cache is
-- written, at one cache size (Stories110M shape, random weights, sim, cpu profile). Each row
-- writes N positions of the k and v caches (the rest zeros, as a session's cache holds them)
-- and times evals of layer 1's attention program; rows alternate within every round, and each
-- ratio pairs a row with the fullest row of the same round. Sim's products over the cache read
-- the written positions only (the element-wise work of the softmax runs over the whole size),
-- so a row with few positions written should cost less than a full one. Run it against two
-- builds with scripts/bench/builds.sh to compare a change with the build before it.
--   build/anelua scripts/bench/attention_positions.lua [--size S] [--written 64,256,...] [--rounds N]
--                                                      [--evals N] [--precision fp16|fp32]
local ane = require("ane")
local llama = require("ane.models.llama")

local command = require("ane.cli").command {
  name = "scripts/bench/attention_positions.lua", summary = "Decode attention cost by positions written.",
  options = {
    { "size", "integer", 1024, "cache positions of the program", min = 64 },
    { "written", "string", "64,256,512,1000", "comma-separated positions written per row (each below --size)" },
    { "rounds", "integer", 5, "alternating rounds", min = 1 },
    { "evals", "integer", 200, "evals timed per row and round", min = 1 },
    { "precision", "choice", "fp16", "precision of the program", choices = { "fp16", "fp32" } },
  },
}
local opts = command:parse(arg)
local rows = {}
for n in opts.written:gmatch("[^,]+") do
  local written = math.tointeger(tonumber(n))
  if not written or written < 1 or written >= opts.size then
    command:fail(string.format("--written: '%s' is not a position count from 1 to %d", n, opts.size - 1))
  end
  rows[#rows + 1] = written
end
table.sort(rows)

local config = { dim = 768, hidden = 2048, n_layer = 1, n_head = 12, vocab_size = 512, seq_len = opts.size }
local model = llama.from_weights(llama.random_weights(config, 11), { precision = opts.precision, profile = "cpu" })
local program = model:program("attn_decode", 1, 1, opts.size)
local keys = ane.tensor.randn({ 1, config.dim, 1, opts.size }, { seed = 3 }):to(model.dtype)
local closed = ane.tensor({ 1, 1, 1, opts.size }, model.dtype):fill(require("ane.models.decoder").MASK)

-- seconds per eval with `written` positions of the caches filled (and let in by the mask)
local function per_eval(written)
  if program.reset_input then program:reset_input("k_cache"):reset_input("v_cache") end
  program:write_input("k_cache", keys:slice(4, 1, written)):write_input("v_cache", keys:slice(4, 1, written))
  program:write_input("mask", closed):write_input("mask", ane.tensor({ 1, 1, 1, written }, model.dtype):fill(0))
  local inputs = model:decode_inputs(written, 1)
  inputs.x = ane.tensor.randn({ 1, config.dim, 1, 1 }, { seed = 4 }):to(model.dtype)
  program:eval(inputs) -- (warm)
  local start = ane.clock()
  for _ = 1, opts.evals do program:eval(inputs) end
  return (ane.clock() - start) / opts.evals
end

local function median(values)
  local sorted = { table.unpack(values) }
  table.sort(sorted)
  return sorted[math.ceil(#sorted / 2)], sorted[1], sorted[#sorted]
end

local times = {}
for _, n in ipairs(rows) do times[n] = {} end
for round = 1, opts.rounds do
  for _, n in ipairs(rows) do times[n][round] = per_eval(n) end
end
local fullest = rows[#rows]
print(string.format("Stories110M-shaped attention program, %s, cpu profile, cache of %d positions: %d rounds of %d evals",
  opts.precision, opts.size, opts.rounds, opts.evals))
print(string.format("%-18s %12s %18s %28s", "positions written", "us per eval", "range", "ratio to " .. fullest .. " (range)"))
for _, n in ipairs(rows) do
  local ratios = {}
  for round = 1, opts.rounds do ratios[round] = times[n][round] / times[fullest][round] end
  local m, lo, hi = median(times[n])
  local r, rlo, rhi = median(ratios)
  print(string.format("%-18d %12.1f %8.1f-%8.1f %15.3f (%.3f-%.3f)", n, m * 1e6, lo * 1e6, hi * 1e6, r, rlo, rhi))
end

-- Shared by the benchmarks: best-of-n timing and the memory read bandwidth that bounds
-- decoding. Load with dofile(<dir of the script> .. "/common.lua").
local ane = require("ane")

local M = {}

--- The fastest of n runs of fn, in seconds.
function M.best_of(n, fn)
  local best = math.huge
  for _ = 1, n do
    local start = ane.clock()
    fn()
    best = math.min(best, ane.clock() - start)
  end
  return best
end

--- Read bandwidth in bytes/s: probe(n) runs y = A x through BLAS with A 1 GB of fp32 (the
--- access pattern of a decode step), best of n. The probe keeps its matrix, so it can
--- measure right next to each timing on a shared machine.
function M.bandwidth_probe()
  local side = 16384
  local A = ane.tensor.rand({ side, side }, { seed = 1 })
  local x = ane.tensor.rand({ side, 1 }, { seed = 2 })
  return function(n) return side * side * 4 / M.best_of(n or 3, function() A:matmul(x) end) end
end

--- Decode rounds on a shared machine: each round measures the read bandwidth (probe, best
--- of 3) and right after it decode() -> tokens/s, ms/token; the bound of a round is
--- bandwidth / bytes_per_token. Returns the round with the median ratio to its bound, and
--- the lowest and highest ratios.
function M.paired_decode_rounds(probe, rounds, bytes_per_token, decode)
  local results = {}
  for r = 1, rounds do
    local bandwidth = probe(3)
    local rate, ms = decode()
    local bound = bandwidth / bytes_per_token
    results[r] = { bandwidth = bandwidth, rate = rate, ms = ms, bound = bound, ratio = rate / bound }
  end
  table.sort(results, function(a, b) return a.ratio < b.ratio end)
  return results[(rounds + 1) // 2], results[1].ratio, results[rounds].ratio
end

function M.quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

--- The median of a list of numbers and its lowest and highest values.
function M.median_and_range(list)
  local sorted = { table.unpack(list) }
  table.sort(sorted)
  return sorted[(#sorted + 1) // 2], sorted[1], sorted[#sorted]
end

--- The peers of ../shared/peers built into `work` (run.c, a random Stories110M checkpoint):
--- returns the paths { runc =, checkpoint = }, or nil and why they are not available.
function M.stories_peers(peers, work)
  local lfs = require("lfs")
  if not lfs.attributes(peers .. "/build.sh") then return nil, "no " .. peers .. "/build.sh (the peers' sources)" end
  local paths = { runc = work .. "/run", checkpoint = work .. "/stories110M.bin" }
  if not lfs.attributes(paths.runc) or not lfs.attributes(paths.checkpoint) then
    print("building the peers into " .. work .. " (run.c, a random Stories110M checkpoint) ...")
    if not os.execute("bash " .. M.quote(peers .. "/build.sh") .. " " .. M.quote(work) .. " > /dev/null") then
      return nil, peers .. "/build.sh failed"
    end
  end
  return paths
end

--- run.c's greedy generation of `tokens` positions: its own "achieved tok/s" and its text.
function M.run_runc(paths, tokenizer_bin, tokens, prompt)
  local out = os.tmpname()
  local command = string.format("%s %s -z %s -t 0 -n %d -i %s > %s.out 2> %s.err", M.quote(paths.runc),
    M.quote(paths.checkpoint), M.quote(tokenizer_bin), tokens, M.quote(prompt), out, out)
  assert(os.execute(command), "run.c failed: " .. command)
  local text = io.open(out .. ".out"):read("a")
  local rate = tonumber(io.open(out .. ".err"):read("a"):match("achieved tok/s: ([%d.]+)"))
  os.remove(out .. ".out")
  os.remove(out .. ".err")
  os.remove(out)
  return rate, text
end

--- anelua's greedy generation from `prompt` (with BOS) to `tokens` positions, as run.c
--- counts them: decode tok/s without compile time, and the text.
function M.anelua_greedy(model, tok, prompt, tokens)
  local ids = tok:encode(prompt, { bos = true })
  local produced = {}
  local before = model:stats()
  local start = ane.clock()
  for id in model:generate(ids, { max_tokens = tokens - #ids, temperature = 0, stop_at_end = false }) do
    produced[#produced + 1] = id
  end
  local seconds = ane.clock() - start
  local compiling = (model:stats().compile_ms - before.compile_ms) / 1000
  return #produced / (seconds - compiling), tok:decode({ 29871, table.unpack(produced) })
end

return M

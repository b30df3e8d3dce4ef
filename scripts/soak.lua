-- A long fp16 training run on `sim` and through the `ane` backend (the test double on
-- Linux): examples/train_stories.lua for --steps steps on each, then a summary per run: NaN
-- activations, skipped steps (the loss scaler's), compiles after step 1 (they must stay
-- flat), and resident memory growth from steps 100-149 to the last 50 (under 5%); the
-- memory curve is in each run's metrics.svg.
--   build/anelua scripts/soak.lua [--steps 1000] [--dir runs/soak] [--backends sim,ane]
--   (for the ane row on Linux: ANELUA_ANE_FRAMEWORK=build/ane-double/AppleNeuralEngine)
local ane = require("ane")
local json = require("cjson")
local opts = require("ane.cli").command{
  name = "scripts/soak.lua", summary = "A long fp16 training run on sim and on the ane backend, checked.",
  options = {
    { "steps", "integer", 1000, "training steps per backend", min = 200 },
    { "dir", "string", "runs/soak", "where the runs go" },
    { "backends", "string", "sim,ane", "comma-separated backends to soak" },
  },
}:parse(arg)

local interpreter, lowest = nil, 0
while arg[lowest - 1] do lowest = lowest - 1 end
interpreter = arg[lowest]
local script_dir = arg[0]:match("^(.*)/scripts/[^/]*$") or "."

local failed = false
for backend in opts.backends:gmatch("[^,]+") do
  if backend == "ane" and ane.backends().ane ~= true then
    print("ane: skipped: " .. tostring(ane.backends().ane))
  else
    local dir = opts.dir .. "/" .. backend
    os.execute("rm -rf '" .. dir .. "' && mkdir -p '" .. opts.dir .. "'")
    local command = string.format("%s %s/examples/train_stories.lua --steps %d --precision fp16 --backend %s "
      .. "--ckpt-dir '%s' --ckpt-every %d > '%s.log' 2>&1", interpreter, script_dir, opts.steps, backend, dir,
      opts.steps, dir)
    local started = ane.clock()
    local ok = os.execute(command)
    local seconds = ane.clock() - started
    local records = {}
    local metrics = io.open(dir .. "/metrics.jsonl", "r")
    if not metrics then
      io.stderr:write(string.format("soak: the %s run wrote no metrics; see %s.log\n", backend, dir))
      os.exit(1)
    end
    for line in metrics:lines() do records[#records + 1] = json.decode(line) end
    metrics:close()
    local nans, skipped, compiles_after_1, rss = 0, 0, {}, {}
    for _, r in ipairs(records) do
      nans = nans + (r.nans or 0)
      skipped = skipped + ((r.skipped == true) and 1 or 0)
      if r.step >= 2 then compiles_after_1[r.compiles] = true end
      rss[r.step] = r.rss_mb
    end
    local distinct = 0
    for _ in pairs(compiles_after_1) do distinct = distinct + 1 end
    -- resident memory swings with the allocator's reuse of large buffers: compare the mean of
    -- steps 100-149 with the mean of the last 50 steps
    local function mean(first, last)
      local sum, count = 0, 0
      for step = first, last do
        if rss[step] then sum, count = sum + rss[step], count + 1 end
      end
      return count > 0 and sum / count or nil
    end
    local early, late = mean(100, 149), mean(#records - 49, #records)
    local growth = early and late and (late - early) / early or nil
    local good = ok and #records == opts.steps and nans == 0 and distinct == 1 and growth and growth < 0.05
    failed = failed or not good
    print(string.format("%-4s %s: %d steps in %.0f s, final loss %.4f, NaN %d, skipped steps %d, compiles after "
      .. "step 1 %s, resident %.1f MB (mean of steps 100-149) -> %.1f MB (last 50) (%+.1f%%); curve %s/metrics.svg",
      backend, good and "ok" or "FAILED", #records, seconds, records[#records].loss, nans, skipped,
      distinct == 1 and "flat" or "NOT flat", early or 0, late or 0, 100 * (growth or 0), dir))
  end
end
os.exit(failed and 1 or 0)

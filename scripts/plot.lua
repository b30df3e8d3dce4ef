-- Draws a training run's loss and tokens/s from its metrics file as an SVG.
--   anelua scripts/plot.lua runs/stories/metrics.jsonl [--out runs/stories/metrics.svg]
local plot = require("ane.plot")
local command = require("ane.cli").command{
  compiles = false, -- (no program: no --target)
  name = "scripts/plot.lua",
  usage = "METRICS.jsonl [--out FILE.svg]",
  summary = "Writes the loss curve and tokens/s of a training run as an SVG a browser opens.",
  positional = { { "METRICS.jsonl", "the metrics of examples/train_stories.lua" } },
  options = { { "out", "path", nil, "the SVG to write (default: the metrics file with .svg)" } },
}
local opts, positional = command:parse(arg)
local path = positional[1]
local records, err = plot.read_metrics(path)
if not records then command:fail(err) end
local out = opts.out or (path:gsub("%.jsonl?$", "") .. ".svg")
local file, open_err = io.open(out, "w")
if not file then command:fail(open_err) end
file:write(plot.training_svg(records, { title = path }))
file:close()
print(string.format("%s: %d steps", out, #records))

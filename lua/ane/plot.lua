-- ane.plot: a training run's metrics as an SVG a browser opens (no dependencies).
--
--   local svg = require("ane.plot").training_svg(records, { title = "..." })
--   records: the JSON lines of examples/train_stories.lua ({ step, loss, tokens_per_s, ... });
--   a skipped step (loss null or NaN) breaks the line instead of bending it.
-- Panels share the step axis: loss (top), tokens/s, and resident memory when recorded. Each panel's <g> carries
-- its data ranges and pixel box (data-x-min, data-x-max, data-y-min, data-y-max, data-left,
-- data-top, data-width, data-height), so the points can be read back exactly.
local M = {}

local WIDTH, PANEL_HEIGHT, MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, GAP = 760, 240, 70, 20, 40, 50

local function escape(text)
  return (tostring(text):gsub("[&<>\"]", { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;" }))
end

local function finite(value) return type(value) == "number" and value == value and value > -math.huge and value < math.huge end

-- A "nice" tick step for a range (1, 2 or 5 times a power of ten).
local function tick_step(range, count)
  local raw = range / count
  local power = 10 ^ math.floor(math.log(raw, 10))
  for _, factor in ipairs({ 1, 2, 5, 10 }) do
    if factor * power >= raw then return factor * power end
  end
  return 10 * power
end

-- One panel: the series field of each record against its step.
local function panel(out, records, field, label, top, color)
  local x_min, x_max, y_min, y_max = math.huge, -math.huge, math.huge, -math.huge
  for _, r in ipairs(records) do
    if finite(r.step) then x_min, x_max = math.min(x_min, r.step), math.max(x_max, r.step) end
    if finite(r[field]) then y_min, y_max = math.min(y_min, r[field]), math.max(y_max, r[field]) end
  end
  if x_min > x_max then x_min, x_max = 0, 1 end
  if y_min > y_max then y_min, y_max = 0, 1 end
  if x_max == x_min then x_max = x_min + 1 end
  if y_max == y_min then y_min, y_max = y_min - 0.5, y_max + 0.5 end
  -- a margin above and below (memory from 0 MB), so no line runs along the frame
  local margin = (y_max - (field == "rss_mb" and math.min(0, y_min) or y_min)) * 0.08
  y_min, y_max = field == "rss_mb" and math.min(0, y_min) or y_min - margin, y_max + margin
  local left, width, height = MARGIN_LEFT, WIDTH - MARGIN_LEFT - MARGIN_RIGHT, PANEL_HEIGHT
  local function px(x) return left + (x - x_min) / (x_max - x_min) * width end
  local function py(y) return top + height - (y - y_min) / (y_max - y_min) * height end
  out[#out + 1] = string.format('<g class="panel" data-field="%s" data-x-min="%.17g" data-x-max="%.17g" data-y-min="%.17g" ' ..
    'data-y-max="%.17g" data-left="%d" data-top="%d" data-width="%d" data-height="%d">', field, x_min, x_max, y_min, y_max,
    left, top, width, height)
  out[#out + 1] = string.format('<rect x="%d" y="%d" width="%d" height="%d" fill="#fafafa" stroke="#888"/>', left, top, width, height)
  local step = tick_step(y_max - y_min, 5)
  for y = math.ceil(y_min / step) * step, y_max + step * 1e-9, step do
    out[#out + 1] = string.format('<line x1="%d" x2="%d" y1="%.2f" y2="%.2f" stroke="#ddd"/>', left, left + width, py(y), py(y))
    out[#out + 1] = string.format('<text x="%d" y="%.2f" text-anchor="end" font-size="11">%s</text>', left - 6, py(y) + 4,
      escape(string.format("%g", y)))
  end
  local xstep = math.max(1, tick_step(x_max - x_min, 8))
  for x = math.ceil(x_min / xstep) * xstep, x_max + xstep * 1e-9, xstep do
    out[#out + 1] = string.format('<text x="%.2f" y="%d" text-anchor="middle" font-size="11">%s</text>', px(x),
      top + height + 14, escape(string.format("%g", x)))
  end
  out[#out + 1] = string.format('<text x="%d" y="%d" font-size="13" font-weight="bold">%s</text>', left, top - 8, escape(label))
  local points = {}
  local function flush()
    if #points > 0 then
      out[#out + 1] = string.format('<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>', color,
        table.concat(points, " "))
      points = {}
    end
  end
  for _, r in ipairs(records) do
    if finite(r.step) and finite(r[field]) then
      points[#points + 1] = string.format("%.3f,%.3f", px(r.step), py(r[field]))
    else
      flush() -- a skipped step breaks the line
    end
  end
  flush()
  out[#out + 1] = "</g>"
end

function M.training_svg(records, opts)
  opts = opts or {}
  -- a third panel, resident memory, when the records carry it (Linux: rss_mb)
  local with_memory = false
  for _, r in ipairs(records) do with_memory = with_memory or finite(r.rss_mb) end
  local panels = with_memory and 3 or 2
  local height = MARGIN_TOP + panels * PANEL_HEIGHT + (panels - 1) * GAP + 40
  local out = {
    '<?xml version="1.0" encoding="UTF-8"?>',
    string.format('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" ' ..
      'font-family="sans-serif">', WIDTH, height, WIDTH, height),
    string.format('<title>%s</title>', escape(opts.title or "training run")),
    '<rect width="100%" height="100%" fill="white"/>',
  }
  panel(out, records, "loss", "loss", MARGIN_TOP, "#c0392b")
  panel(out, records, "tokens_per_s", "tokens/s", MARGIN_TOP + PANEL_HEIGHT + GAP, "#2471a3")
  if with_memory then
    panel(out, records, "rss_mb", "resident memory (MB)", MARGIN_TOP + 2 * (PANEL_HEIGHT + GAP), "#7d3c98")
  end
  out[#out + 1] = string.format('<text x="%d" y="%d" text-anchor="middle" font-size="12">step</text>', WIDTH // 2, height - 8)
  out[#out + 1] = "</svg>"
  return table.concat(out, "\n") .. "\n"
end

-- Reads a metrics JSON-lines file; returns the records or nil and a message naming the line.
function M.read_metrics(path)
  local json = require("cjson.safe")
  if require("lfs").attributes(path, "mode") == "directory" then
    return nil, path .. " is a directory, not a metrics file (its metrics.jsonl, say)"
  end
  local file, err = io.open(path, "r")
  if not file then return nil, err end
  local records, number = {}, 0
  for line in file:lines() do
    number = number + 1
    if line ~= "" then
      local record = json.decode(line)
      if type(record) ~= "table" then
        file:close()
        return nil, string.format("%s:%d: not a JSON object", path, number)
      end
      if record.loss == json.null then record.loss = nil end
      records[#records + 1] = record
    end
  end
  file:close()
  if #records == 0 then return nil, path .. " holds no metrics: nothing to draw" end
  return records
end

return M

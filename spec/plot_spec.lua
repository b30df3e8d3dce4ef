-- ane.plot: the SVG of a training run is well-formed and its points are the metrics' values.
local helpers = require("spec.helpers")
local plot = require("ane.plot")
local cjson = require("cjson")

-- A small well-formedness check (no XML library here): every element closes in order,
-- attributes are quoted, and only the five XML entities appear.
local function assert_well_formed(svg)
  local body = svg:gsub("^<%?xml[^>]*%?>%s*", "")
  local stack, position = {}, 1
  while true do
    local open_at, close_at, tag = body:find("<([^>]*)>", position)
    if not open_at then break end
    local text = body:sub(position, open_at - 1)
    for entity in text:gmatch("&([^;]*);") do
      assert.is_truthy(({ amp = 1, lt = 1, gt = 1, quot = 1, apos = 1 })[entity], "entity &" .. entity .. ";")
    end
    assert.is_nil(text:find("[<>]"), "a stray angle bracket")
    if tag:sub(1, 1) == "/" then
      assert.are.equal(table.remove(stack), tag:sub(2), "closing tag")
    else
      local name = tag:match("^([%w:_-]+)")
      assert.is_truthy(name, "tag <" .. tag .. ">")
      local attributes = tag:sub(#name + 1):gsub("/$", "")
      local rest = attributes:gsub('%s+[%w:_-]+="[^"<]*"', "")
      assert.is_truthy(rest:match("^%s*$"), "unquoted attribute in <" .. tag .. ">")
      if tag:sub(-1) ~= "/" then stack[#stack + 1] = name end
    end
    position = close_at + 1
  end
  assert.are.same({}, stack)
  assert.are.equal("svg", body:match("^<(%w+)"))
end

-- The points of each panel, mapped back to data values through the panel's ranges and box.
local function panels(svg)
  local found = {}
  for attributes, inner in svg:gmatch('<g class="panel"(.-)>(.-)</g>') do
    local a = {}
    for key, value in attributes:gmatch('data%-([%w-]+)="([^"]*)"') do a[key] = tonumber(value) or value end
    local lines = {}
    for points in inner:gmatch('<polyline[^>]-points="([^"]*)"') do
      local line = {}
      for x, y in points:gmatch("([%d.-]+),([%d.-]+)") do
        line[#line + 1] = {
          step = a["x-min"] + (tonumber(x) - a.left) / a.width * (a["x-max"] - a["x-min"]),
          value = a["y-min"] + (a.top + a.height - tonumber(y)) / a.height * (a["y-max"] - a["y-min"]),
        }
      end
      lines[#lines + 1] = line
    end
    found[a.field] = { lines = lines, attributes = a }
  end
  return found
end

describe("training plots", function()
  it("come out of a 50-step run well-formed, with one point per step at the metrics' values", function()
    local dir = helpers.tmpdir()
    local out, err, code = helpers.run_anelua(helpers.quote(helpers.root .. "/examples/train_stories.lua") ..
      " --steps 50 --batch 2 --seq 16 --dim 16 --hidden 32 --layers 1 --heads 2 --ckpt-every 100 --ckpt-dir " .. dir)
    assert.are.equal(0, code, err)
    assert.matches("loss curve " .. dir:gsub("%p", "%%%0") .. "/metrics%.svg", out)
    local svg = helpers.read_file(dir .. "/metrics.svg")
    assert_well_formed(svg)
    local records = {}
    for line in io.lines(dir .. "/metrics.jsonl") do records[#records + 1] = cjson.decode(line) end
    assert.are.equal(50, #records)
    local found = panels(svg)
    local checked = { loss = found.loss, tokens_per_s = found.tokens_per_s }
    if io.open("/proc/self/status") then -- Linux: the run records its resident memory, a third panel
      assert.is_true(records[1].rss_mb > 0)
      checked.rss_mb = found.rss_mb
    end
    for field, panel in pairs(checked) do
      assert.are.equal(1, #panel.lines, field)
      local line = panel.lines[1]
      assert.are.equal(50, #line, field)
      local a = panel.attributes
      -- points are printed to 1/1000 of a pixel: the data error is at most that share of
      -- the panel's range per pixel, ~1e-5 of the range here
      local step_tolerance = 1e-3 / a.width * (a["x-max"] - a["x-min"]) * 1.01
      local value_tolerance = 1e-3 / a.height * (a["y-max"] - a["y-min"]) * 1.01
      for i, point in ipairs(line) do
        assert.is_true(math.abs(point.step - records[i].step) <= step_tolerance, field .. " step " .. i)
        assert.is_true(math.abs(point.value - records[i][field]) <= value_tolerance, field .. " value " .. i)
      end
    end
  end)

  it("keep every line off the panel's frame (memory drawn from 0 MB)", function()
    local records = {}
    for step = 1, 20 do records[step] = { step = step, loss = 5 - step / 10, tokens_per_s = 100 + step, rss_mb = 200 + step } end
    local found = panels(plot.training_svg(records))
    for _, field in ipairs({ "loss", "tokens_per_s", "rss_mb" }) do
      local a = found[field].attributes
      for _, point in ipairs(found[field].lines[1]) do
        local y = a.top + a.height - (point.value - a["y-min"]) / (a["y-max"] - a["y-min"]) * a.height
        assert.is_true(y > a.top + 2 and y < a.top + a.height - 2, field .. " at y " .. y)
      end
    end
    assert.are.equal(0, found.rss_mb.attributes["y-min"])
  end)

  it("break the line at a skipped step and escape the title", function()
    local records = { { step = 1, loss = 3, tokens_per_s = 10 }, { step = 2, loss = 0 / 0, tokens_per_s = 11 },
      { step = 3, tokens_per_s = 12 }, { step = 4, loss = 2, tokens_per_s = 13 }, { step = 5, loss = 1, tokens_per_s = 9 } }
    local svg = plot.training_svg(records, { title = "a <run> & more" })
    assert_well_formed(svg)
    assert.matches("<title>a &lt;run&gt; &amp; more</title>", svg)
    local found = panels(svg)
    assert.are.equal(2, #found.loss.lines)           -- 1 | 4, 5
    assert.are.equal(1, #found.loss.lines[1])
    assert.are.equal(1, #found.tokens_per_s.lines)   -- every step has a speed
  end)

  it("reads metrics files and names a bad line", function()
    local dir = helpers.tmpdir()
    helpers.write_file(dir .. "/m.jsonl", '{"step":1,"loss":null}\n{"step":2,"loss":1.5}\nnot json\n')
    local records, err = plot.read_metrics(dir .. "/m.jsonl")
    assert.is_nil(records)
    assert.matches("m%.jsonl:3: not a JSON object", err)
    helpers.write_file(dir .. "/m.jsonl", '{"step":1,"loss":null}\n{"step":2,"loss":1.5}\n')
    records = assert(plot.read_metrics(dir .. "/m.jsonl"))
    assert.is_nil(records[1].loss)
    local out, perr, code = helpers.run_anelua(helpers.quote(helpers.root .. "/scripts/plot.lua") .. " " ..
      helpers.quote(dir .. "/m.jsonl"))
    assert.are.equal(0, code, perr)
    assert.matches("m%.svg: 2 steps", out)
  end)
end)

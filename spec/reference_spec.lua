-- The facts the code cites live in the repository: every `docs/....md` that a source file,
-- script, spec or page names exists in the clone (another project's files are cited with the
-- project's name in front, `ANEForge/docs/...`), no citation points at a reference page
-- outside it (a reference page named without its docs/ folder, or in ../shared), the
-- reference pages' own links resolve, and the constraint catalogue page lists exactly the IDs of ane.rules.
local lfs = require("lfs")
local helpers = require("spec.helpers")

local ROOT = helpers.root
local SCANNED = { "ane_core", "bindings", "host", "lua", "spec", "scripts", "docs", "cmake", "examples" }
local SUFFIXES = { ".c", ".h", ".S", ".lua", ".md", ".sh", ".py", ".js", ".cmake", ".txt", ".in" }

local function exists(path) return lfs.attributes(ROOT .. "/" .. path, "mode") == "file" end

local function scanned_file(name)
  for _, suffix in ipairs(SUFFIXES) do
    if name:sub(-#suffix) == suffix then return true end
  end
  return false
end

-- Every text file under the scanned folders and the root's, as paths relative to ROOT.
local function text_files()
  local found = {}
  local function walk(dir)
    for name in lfs.dir(ROOT .. "/" .. dir) do
      if name ~= "." and name ~= ".." then
        local path = dir .. "/" .. name
        local mode = lfs.attributes(ROOT .. "/" .. path, "mode")
        if mode == "directory" then walk(path)
        elseif mode == "file" and scanned_file(name) then found[#found + 1] = path end
      end
    end
  end
  for _, dir in ipairs(SCANNED) do walk(dir) end
  for name in lfs.dir(ROOT) do
    if (name:match("%.md$") or name == "CMakeLists.txt") and exists(name) then found[#found + 1] = name end
  end
  return found
end

local function read(path)
  local file = assert(io.open(ROOT .. "/" .. path, "rb"))
  local text = file:read("a")
  file:close()
  return text
end

-- Line number of byte offset `at` in text.
local function line_of(text, at)
  local _, newlines = text:sub(1, at):gsub("\n", "")
  return newlines + 1
end

describe("citations", function()
  it("name only pages that exist inside the clone", function()
    local missing, outside, cited = {}, {}, 0
    for _, path in ipairs(text_files()) do
      local text = read(path)
      for at, page in text:gmatch("()(docs/[%w_%-/]+%.md)") do
        -- (another project's file is cited with its name first: ANEForge/docs/...)
        local project_file = text:sub(at - 1, at - 1):match("[%w_/%.%-]")
        cited = cited + (project_file and 0 or 1)
        if not project_file and not exists(page) then missing[#missing + 1] = string.format("%s:%d %s", path, line_of(text, at), page) end
      end
      -- reference pages cited without their folder, or in ../shared (outside a clone)
      for at, page in text:gmatch("()reference/([%w_%-]+%.md)") do
        if text:sub(at - 5, at - 1) ~= "docs/" then
          outside[#outside + 1] = string.format("%s:%d reference/%s", path, line_of(text, at), page)
        end
      end
    end
    assert.are.same({}, missing)
    assert.are.same({}, outside)
    assert.is_true(cited > 40, "the scan found only " .. cited .. " citations: is it reading the tree?")
  end)

  it("between the reference pages resolve", function()
    for name in lfs.dir(ROOT .. "/docs/reference") do
      if name:match("%.md$") then
        local text = read("docs/reference/" .. name)
        for target in text:gmatch("%]%(([%w_%-]+%.md)%)") do
          assert.is_true(exists("docs/reference/" .. target), name .. " links to " .. target .. ", which is missing")
        end
      end
    end
  end)
end)

describe("docs/reference/constraints.md", function()
  it("lists the IDs of ane.rules, each once", function()
    local on_page, order = {}, {}
    for id in read("docs/reference/constraints.md"):gmatch("\n| (ANE%-%d%d) |") do
      assert.is_nil(on_page[id], id .. " has two rows")
      on_page[id] = true
      order[#order + 1] = id
    end
    local rules = {}
    for _, rule in ipairs(require("ane.rules").list()) do rules[#rules + 1] = rule.id end
    assert.are.same(rules, order)
  end)
end)

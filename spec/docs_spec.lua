-- The docs' commands run: every `build/anelua FILE.lua ...` and `anelua run ...` that README.md,
-- CONTRIBUTING.md, ARCHITECTURE.md and docs/ show (inline or in a fenced block) is started with
-- --help appended. Its option parser reads every flag the page gives before --help ends it, so
-- exit 0 says the script exists and takes those flags and values (a placeholder in capitals,
-- such as --rounds R, may be refused as a value: the flag itself was known). Every file path
-- the pages name in code (examples/, scripts/, docs/, spec/, lua/, ane_core/) exists.
local helpers = require("spec.helpers")
local lfs = require("lfs")

local root = helpers.root

local function pages()
  local list = { "README.md", "CONTRIBUTING.md", "ARCHITECTURE.md" }
  for _, dir in ipairs({ "docs", "docs/reference" }) do
    for name in lfs.dir(root .. "/" .. dir) do
      if name:match("%.md$") and name ~= "performance-log.md" then list[#list + 1] = dir .. "/" .. name end
    end
  end
  table.sort(list)
  return list
end

-- The code of a page: inline spans and the lines of fenced blocks (a "$ " prompt dropped).
local function code_of(text)
  local pieces = {}
  local outside = text:gsub("```[%w]*\n(.-)```", function(block)
    for line in block:gmatch("[^\n]+") do pieces[#pieces + 1] = (line:gsub("^%$ ", "")) end
    return ""
  end)
  for span in outside:gmatch("`([^`]+)`") do -- (a span may wrap onto the next line)
    pieces[#pieces + 1] = (span:gsub("%s*\n%s*", " "))
  end
  return pieces
end

-- Shell-like words (single and double quotes kept together, no expansion).
local function words(command)
  local list, position = {}, 1
  while position <= #command do
    local s, e = command:find("^%s+", position)
    if s then position = e + 1 end
    if position > #command then break end
    local quote = command:sub(position, position)
    if quote == "'" or quote == '"' then
      local close = command:find(quote, position + 1, true) or #command
      list[#list + 1] = command:sub(position, close)
      position = close + 1
    else
      local word = command:match("^[^%s]+", position)
      list[#list + 1] = word
      position = position + #word
    end
  end
  return list
end

describe("the docs", function()
  it("show commands that run: each documented invocation's flags taken by its script", function()
    local checked, seen = 0, {}
    for _, page in ipairs(pages()) do
      -- (docs/reliability.md shows wrong invocations on purpose, each with the answer it gets)
      local pieces = page == "docs/reliability.md" and {} or code_of(helpers.read_file(root .. "/" .. page))
      for _, piece in ipairs(pieces) do
        -- `build/anelua X.lua ...`, `anelua run ...`, a script named by its path with its flags
        -- (`examples/stories.lua MODEL.bin`), or a bench by its name (docs/performance.md's table)
        local bench = piece:match("^([%w_]+%.lua)") and lfs.attributes(root .. "/scripts/bench/" .. piece:match("^([%w_]+%.lua)"))
        local command = piece:match("^build/anelua (.+)$") or piece:match("^anelua (run .+)$")
          or piece:match("^((examples/[%w_]+%.lua).*)$") or piece:match("^((scripts/[%w_/]+%.lua).*)$")
          or (bench and "scripts/bench/" .. piece)
        -- (templates such as `<name>.lua [flags]` and pipelines are prose, not invocations)
        if command and not command:find("[<%[|>]") and not command:find("%.%.%.") and not seen[command] then
          local argv = words(command)
          local target = argv[1]
          local exists = target:match("^[%w_/]+%.lua$") and lfs.attributes(root .. "/" .. target)
          -- (a library a page names, as scripts/bench/common.lua, is no command: only files with options run)
          local runnable = target == "run" or (exists and helpers.read_file(root .. "/" .. target):find("ane.cli", 1, true))
          if target:match("%.lua$") and not target:match("^script%.") then
            assert.is_truthy(exists, page .. ": `" .. piece .. "` names " .. target .. ", which does not exist")
          end
          if runnable then
            seen[command] = true
            local out, err, code = helpers.run_anelua(command .. " --help")
            local placeholder = code == 2 and err:match("got '(%u[%u_]*)'")
            assert.is_true(code == 0 or placeholder ~= nil, page .. ": `" .. piece .. " --help` exits " .. tostring(code)
              .. ": " .. tostring(err))
            if code == 0 then assert.matches("^usage: ", out, page .. ": " .. piece) end
            checked = checked + 1
          end
        end
      end
    end
    print(string.format("docs_spec: %d documented commands run with --help", checked))
    assert.is_true(checked >= 40, checked .. " commands")
  end)

  it("name files that exist", function()
    local missing = {}
    for _, page in ipairs(pages()) do
      for _, piece in ipairs(code_of(helpers.read_file(root .. "/" .. page))) do
        for path in (" " .. piece .. " "):gmatch("[%s(]((%a[%w_]*)/[%w_./-]*%.%a+)") do
          local top = path:match("^([%w_]+)/")
          if (top == "examples" or top == "scripts" or top == "docs" or top == "lua" or top == "ane_core")
              and not path:find("[<>*]") and not lfs.attributes(root .. "/" .. path) then
            missing[#missing + 1] = page .. ": " .. path
          end
        end
      end
    end
    assert.are.same({}, missing)
  end)
end)

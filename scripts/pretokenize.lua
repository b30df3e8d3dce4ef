-- Turns text files into a token shard for training (examples/train_stories.lua --data).
--   anelua scripts/pretokenize.lua --tokenizer tokenizer.bin|tokenizer.model --out train.bin
--          [--format llama2c|llmc] [--split-lines] FILE...
-- Each file (or, with --split-lines, each non-empty line) is one document, encoded with BOS
-- in front, as llama2.c's pretokenizer does for TinyStories.
local sentencepiece = require("ane.sentencepiece")
local data = require("ane.data")
local ane = require("ane")

local usage = "usage: anelua scripts/pretokenize.lua --tokenizer FILE --out SHARD [--format llama2c|llmc] [--split-lines] FILE...\n"
local opts, inputs = { format = "llama2c" }, {}
local i = 1
while i <= #arg do
  local name = arg[i]:match("^%-%-([%w-]+)$")
  if name == "split-lines" then
    opts.split_lines = true
    i = i + 1
  elseif name == "help" then
    io.write(usage) os.exit(0)
  elseif name then
    if arg[i + 1] == nil then io.stderr:write(usage) os.exit(1) end
    opts[name] = arg[i + 1]
    i = i + 2
  else
    inputs[#inputs + 1] = arg[i]
    i = i + 1
  end
end
local function die(message) io.stderr:write("pretokenize.lua: " .. message .. "\n") os.exit(1) end
if not opts.tokenizer or not opts.out or #inputs == 0 then io.stderr:write(usage) os.exit(1) end
local tok, err = sentencepiece.load(opts.tokenizer)
if not tok then die(err) end

local ids, documents = {}, 0
local function add(text)
  if text:match("^%s*$") then return end
  documents = documents + 1
  local encoded = tok:encode(text, { bos = true })
  table.move(encoded, 1, #encoded, #ids + 1, ids)
end
local start = ane.clock()
for _, path in ipairs(inputs) do
  local text, read_err = ane.io.read_file(path)
  if not text then die(path .. ": " .. tostring(read_err)) end
  if opts.split_lines then
    for line in text:gmatch("[^\n]+") do add(line) end
  else
    add(text)
  end
end
local ok, write_err = data.write(opts.out, ids, { format = opts.format })
if not ok then die(write_err) end
print(string.format("%s: %d tokens from %d documents in %d file(s), %.2f s (%s format)", opts.out, #ids, documents,
  #inputs, ane.clock() - start, opts.format))

-- Turns text files into a token shard for training (examples/train_stories.lua --data).
--   anelua scripts/pretokenize.lua --tokenizer tokenizer.bin|tokenizer.model --out train.bin
--          [--format llama2c|llmc] [--split-lines] FILE...
-- Each file (or, with --split-lines, each non-empty line) is one document, encoded with BOS
-- in front, as llama2.c's pretokenizer does for TinyStories.
local sentencepiece = require("ane.sentencepiece")
local data = require("ane.data")
local ane = require("ane")

local command = require("ane.cli").command{
  compiles = false, -- (no program: no --target)
  name = "scripts/pretokenize.lua",
  usage = "--tokenizer FILE --out SHARD [--format llama2c|llmc] [--split-lines] FILE...",
  summary = "Turns text files into a token shard (each file, or each line, one document with BOS).",
  positional = { { "FILE...", "text files to encode" } },
  rest = true,
  options = {
    { "tokenizer", "path", nil, "SentencePiece tokenizer.model or llama2.c tokenizer.bin", required = true },
    { "out", "path", nil, "the shard to write", required = true },
    { "format", "choice", "llama2c", "llama2c (headerless uint16) or llmc (header + uint16)", choices = { "llama2c", "llmc" } },
    { "split-lines", "flag", false, "each non-empty line is a document" },
  },
}
local opts, inputs = command:parse(arg)
local function die(message) command:fail(message) end
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
  if not text then die(read_err) end -- (it names the file)
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

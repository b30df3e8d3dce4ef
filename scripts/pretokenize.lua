-- Turns text files into a token shard for training (examples/train_stories.lua --data).
--   anelua scripts/pretokenize.lua --tokenizer TOKENIZER --out train.bin [--format llama2c|llmc]
--          [--split-lines] FILE...
-- TOKENIZER: a SentencePiece tokenizer (llama2.c's tokenizer.bin, tokenizer.model), each
-- document encoded with BOS in front as llama2.c's pretokenizer does for TinyStories; or a
-- byte-level BPE (GPT-2's vocab.json with merges.txt beside it, a tokenizer.json, or a model
-- directory holding either), each document preceded by <|endoftext|> as llm.c's data scripts
-- write it. Each file (or, with --split-lines, each non-empty line) is one document.
local sentencepiece = require("ane.sentencepiece")
local bpe_tokenizer = require("ane.tokenizer")
local lfs = require("lfs")
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
    { "tokenizer", "path", nil, "llama2.c tokenizer.bin, SentencePiece tokenizer.model, or a BPE vocab.json (merges.txt "
      .. "beside it), tokenizer.json or model directory", required = true },
    { "out", "path", nil, "the shard to write", required = true },
    { "format", "choice", "llama2c", "llama2c (headerless uint16) or llmc (header + uint16)", choices = { "llama2c", "llmc" } },
    { "split-lines", "flag", false, "each non-empty line is a document" },
  },
}
local opts, inputs = command:parse(arg)
local function die(message) command:fail(message) end
-- A byte-level BPE (GPT-2 style), or nil when the path names a SentencePiece file.
local function load_bpe(path)
  if lfs.attributes(path, "mode") == "directory" or path:match("%.json$") and not path:match("vocab%.json$") then
    return bpe_tokenizer.load(path)
  end
  if path:match("vocab%.json$") then
    local merges = (path:match("^(.*)/[^/]*$") or ".") .. "/merges.txt"
    if not lfs.attributes(merges) then return nil, path .. ": no merges.txt beside it (a GPT-2 BPE needs both files)" end
    return bpe_tokenizer.load({ vocab = path, merges = merges })
  end
end

local tok, err = load_bpe(opts.tokenizer)
local bpe = tok ~= nil
if not tok and not err then tok, err = sentencepiece.load(opts.tokenizer) end
if not tok then die(err) end
if bpe and not tok.eot then die(opts.tokenizer .. ": the tokenizer has no <|endoftext|> token to separate documents with") end

local ids, documents = {}, 0
local function add(text)
  if text:match("^%s*$") then return end
  documents = documents + 1
  local encoded = bpe and tok:encode(text) or tok:encode(text, { bos = true })
  if bpe then ids[#ids + 1] = math.tointeger(tok.eot) end -- llm.c: <|endoftext|> before each document
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

-- The readers spec/fuzz/fuzz_lua_reader.c fuzzes, by the name FUZZ_READER gives: each takes
-- the path of a file holding the fuzz input and calls one reader of user files. A reader
-- must return a value, or nil and a message that names the file; raising an error is a
-- finding (readers never answer a user's file with a traceback), so each call is checked
-- here and an error is re-raised with the reader's name.
local ane = require("ane")

local function check(name, ok, value, message)
  if not ok then error(name .. " raised: " .. tostring(value), 0) end
  if value == nil and type(message) ~= "string" then error(name .. " returned nil without a message", 0) end
  if value == nil and not message:find("fuzz_lua_reader", 1, true) and not message:find("/tmp/", 1, true) then
    error(name .. "'s message does not name the file: " .. message, 0)
  end
end

local function reader(name, call)
  return function(path) check(name, pcall(call, path)) end
end

-- A directory holding the input as `file` (for readers that take directories).
local function in_dir(file, call)
  return function(path)
    local dir = path .. ".d"
    require("lfs").mkdir(dir)
    os.rename(path, dir .. "/" .. file)
    local results = table.pack(pcall(call, dir))
    os.remove(dir .. "/" .. file)
    require("lfs").rmdir(dir)
    return table.unpack(results, 1, results.n)
  end
end

-- vocab.json and merges.txt from one input: the bytes before the first NUL, and after it.
local function vocab_and_merges(path)
  local bytes = assert(io.open(path, "rb")):read("a")
  local split = bytes:find("\0", 1, true) or #bytes + 1
  local vocab, merges = path .. ".vocab.json", path .. ".merges.txt"
  local f = assert(io.open(vocab, "wb")); f:write(bytes:sub(1, split - 1)); f:close()
  f = assert(io.open(merges, "wb")); f:write(bytes:sub(split + 1)); f:close()
  local results = table.pack(pcall(require("ane.tokenizer").load, { vocab = vocab, merges = merges }))
  os.remove(vocab)
  os.remove(merges)
  return table.unpack(results, 1, results.n)
end

return {
  safetensors = reader("ane.io.load_safetensors", ane.io.load_safetensors),
  llama2c = reader("ane.formats.llama2c.read", require("ane.formats.llama2c").read),
  llmc = reader("ane.formats.llmc.read", require("ane.formats.llmc").read),
  shard = reader("ane.data.open", require("ane.data").open),
  sentencepiece = reader("ane.sentencepiece.load", require("ane.sentencepiece").load),
  tokenizer_json = reader("ane.tokenizer.load (tokenizer.json)", function(path)
    local json = path .. ".json"
    os.rename(path, json)
    local results = table.pack(require("ane.tokenizer").load(json))
    os.rename(json, path)
    return table.unpack(results, 1, results.n)
  end),
  tokenizer_bin = reader("ane.tokenizer.load (llm.c tokenizer.bin)", require("ane.tokenizer").load),
  vocab_merges = function(path) check("ane.tokenizer.load (vocab.json + merges.txt)", vocab_and_merges(path)) end,
  checkpoint = reader("ane.checkpoint.load", require("ane.checkpoint").load),
  hf_config = function(path)
    check("ane.formats.hf_llama.read (config.json)", in_dir("config.json", require("ane.formats.hf_llama").read)(path))
  end,
}

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

-- What the tokenizer readers encode after a load: a character outside most vocabularies too.
local SAMPLE_TEXT = "Once upon a time, \u{1F600} 42"

-- A tokenizer loader, then an encode of a text with a character outside most vocabularies
-- (a loaded tokenizer must encode: a 4-byte tokenizer.bin once loaded as 0 pieces, and
-- every encode crashed). llm.c's decode-only files are only decoded.
local function tokenizer_reader(name, load)
  return reader(name, function(path)
    local tok, err = load(path)
    if tok then
      if not tok.bpe or tok:can_encode() then tok:encode(SAMPLE_TEXT) end
    end
    return tok, err
  end)
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
  local results = table.pack(pcall(function()
    local tok, err = require("ane.tokenizer").load({ vocab = vocab, merges = merges })
    if tok then tok:encode(SAMPLE_TEXT) end -- (a tokenizer refused at load when it cannot encode)
    return tok, err
  end))
  os.remove(vocab)
  os.remove(merges)
  return table.unpack(results, 1, results.n)
end

-- The project's root, from where this file is (the harness and the specs both load it).
local ROOT = debug.getinfo(1, "S").source:match("^@(.*)/spec/fuzz/readers%.lua$") or "."

-- A model built from a config.json (the input) beside a small reference model's weights, then
-- run on two tokens: a configuration must be refused when read, never trusted until first
-- use. `load` is the family's loader; the weights are linked, not copied, for speed.
local function config_and_model(reference, load)
  return function(path)
    local dir = path .. ".d"
    require("lfs").mkdir(dir)
    os.rename(path, dir .. "/config.json")
    require("lfs").link(ROOT .. "/spec/data/reference/" .. reference .. "/model.safetensors", dir .. "/model.safetensors", true)
    local results = table.pack(pcall(function()
      local model, err = load(dir, { precision = "fp32", profile = "cpu" })
      if model then model:logits(model.context_length >= 2 and { 1, 2 } or { 1 }) end -- (as many as it holds)
      return model, err
    end))
    os.remove(dir .. "/model.safetensors")
    os.remove(dir .. "/config.json")
    require("lfs").rmdir(dir)
    return table.unpack(results, 1, results.n)
  end
end

-- A reader whose refusals are raised (ane.target): a raised message must begin with the file's
-- path and carry no position inside the library; anything else is a finding.
local function raises_naming(name, call)
  return function(path)
    local ok, err = pcall(call, path)
    if ok then return end
    if type(err) ~= "string" or err:sub(1, #path) ~= path or err:find("%.lua:%d+:") then
      error(name .. " raised without naming the file, or with a library position: " .. tostring(err), 0)
    end
  end
end

-- A checkpoint whose metadata is the input (a JSON object of strings), over a tiny Llama's
-- parameters, loaded and built into a model: checkpoint.load checks the metadata (a missing
-- checksum only for a file provably older than checksums), transformer.init the config.
local checkpoint_parameters
local function checkpoint_with_metadata(path)
  local text = assert(io.open(path, "rb")):read("a")
  local ok, metadata = pcall(require("cjson").decode, text)
  -- (answers as pcall does: true and the reader's results)
  if not ok or type(metadata) ~= "table" then return true, true end -- not metadata: nothing to write
  for key, value in pairs(metadata) do
    if type(key) ~= "string" or type(value) ~= "string" then return true, true end -- safetensors holds strings only
  end
  local llama = require("ane.models.llama")
  if not checkpoint_parameters then
    local W = llama.random_weights({ dim = 16, hidden = 32, n_layer = 1, n_head = 2, vocab_size = 32, seq_len = 16 }, 1)
    checkpoint_parameters = {}
    for name, t in pairs(assert(llama.from_weights(W, { precision = "fp32", profile = "cpu" })):parameters()) do
      checkpoint_parameters["param." .. name] = t
    end
  end
  local file = path .. ".safetensors"
  local written, why = ane.io.save_safetensors(file, checkpoint_parameters, metadata)
  if not written then return true, nil, why end
  local results = table.pack(pcall(function()
    local state, err = require("ane.checkpoint").load(file)
    if not state then return nil, err end
    return llama.from_weights(llama.weights_from_parameters(state.config, state.params, file),
      { precision = "fp32", profile = "cpu" })
  end))
  os.remove(file)
  return table.unpack(results, 1, results.n)
end

return {
  safetensors = reader("ane.io.load_safetensors", ane.io.load_safetensors),
  llama2c = reader("ane.formats.llama2c.read", require("ane.formats.llama2c").read),
  llmc = reader("ane.formats.llmc.read", require("ane.formats.llmc").read),
  shard = reader("ane.data.open", require("ane.data").open),
  sentencepiece = tokenizer_reader("ane.sentencepiece.load", require("ane.sentencepiece").load),
  tokenizer_json = tokenizer_reader("ane.tokenizer.load (tokenizer.json)", function(path)
    local json = path .. ".json"
    os.rename(path, json)
    local results = table.pack(require("ane.tokenizer").load(json))
    os.rename(json, path)
    return table.unpack(results, 1, results.n)
  end),
  tokenizer_bin = tokenizer_reader("ane.tokenizer.load (llm.c tokenizer.bin)", require("ane.tokenizer").load),
  vocab_merges = function(path) check("ane.tokenizer.load (vocab.json + merges.txt)", vocab_and_merges(path)) end,
  checkpoint = reader("ane.checkpoint.load", require("ane.checkpoint").load),
  -- a GGUF file's matrices kept as the model keeps them (block types split into codes and
  -- scales) and each multiplied once; the file read, built into a model and run on two tokens;
  -- its tokenizer loaded and used
  gguf = reader("ane.formats.gguf.read, the model, its tokenizer", function(path)
    local gguf = require("ane.formats.gguf")
    local file, problem = gguf.open(path)
    if not file then return nil, problem end
    for _, name in ipairs(file.order) do
      local t = file.tensors[name]
      local kept = #t.shape == 2 and gguf.tensor(file, name, true, nil, "fp32")
      if kept and ane.quantized.is(kept) then kept:matmul(ane.tensor.randn({ t.shape[2], 1 }, { seed = 1 })) end
    end
    local W, err = gguf.read(path)
    if not W then return nil, err end
    local model, why = require("ane.models.llama").from_weights(W, { precision = "fp32", profile = "cpu" })
    if not model then return nil, why end
    local last = model.vocab_size - 1 -- (ids the vocabulary holds, as many as the model's positions)
    model:logits(model.context_length >= 2 and { math.min(1, last), math.min(2, last) } or { math.min(1, last) })
    local tok = gguf.tokenizer(path)
    if tok then tok:encode(SAMPLE_TEXT) end
    return model
  end),
  hf_config = function(path)
    check("ane.formats.hf_llama.read (config.json)", in_dir("config.json", require("ane.formats.hf_llama").read)(path))
  end,
  llama_config = function(path)
    check("ane.models.llama.load (config.json, then two tokens)",
      config_and_model("qwen3-tiny", require("ane.models.llama").load)(path))
  end,
  gpt2_config = function(path)
    check("ane.models.gpt2.load (config.json, then two tokens)",
      config_and_model("gpt2-tiny", require("ane.models.gpt2").load)(path))
  end,
  probe_report = raises_naming("ane.target (a probe report)", function(path)
    local json = path .. ".json" -- ane.target takes .json paths as reports
    os.rename(path, json)
    local ok, err = pcall(ane.target, json)
    os.rename(json, path)
    if not ok then error((tostring(err):gsub(json:gsub("%p", "%%%0"), path, 1)), 0) end
  end),
  checkpoint_metadata = function(path) check("ane.checkpoint.load (metadata), then the model", checkpoint_with_metadata(path)) end,
}

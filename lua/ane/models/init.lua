-- ane.models: one loader for every model family, by what the path holds: a Hugging Face
-- directory's config.json model_type (gpt2; llama, mistral, phi3, qwen2, gemma3_text through
-- ane.models.llama; qwen3 through ane.models.qwen3), an llm.c GPT-2 .bin, a llama2.c .bin, a
-- GGUF file (architecture llama, qwen2 or qwen3); and
-- the tokenizer beside it, when there is one.
--
--   local models = require("ane.models")
--   local model, err = models.load("models/Llama-3.2-1B", { precision = "fp16", quantize = "int4" })
--   model.tokenizer   -- the directory's tokenizer (nil when it has none: ids in, logits out)
--   model:chat_template()  -- its chat template (ane.chat), or nil and why not
local ane = require("ane")
local lfs = require("lfs")

local M = {}

-- model_type -> the model module that loads it
M.FAMILIES = { gpt2 = "ane.models.gpt2", llama = "ane.models.llama", mistral = "ane.models.llama",
  phi3 = "ane.models.llama", qwen2 = "ane.models.llama", qwen3 = "ane.models.qwen3", gemma3_text = "ane.models.llama" }

local function known_types()
  local names = {}
  for name in pairs(M.FAMILIES) do names[#names + 1] = name end
  table.sort(names)
  return table.concat(names, ", ")
end

-- The module that reads path, or nil and a message naming the file and what it holds.
local function family_of(path)
  if lfs.attributes(path, "mode") == "directory" then
    local config, err = ane.io.read_json(path .. "/config.json")
    if not config then return nil, err end
    local module = M.FAMILIES[config.model_type]
    if not module then
      return nil, string.format("%s/config.json: model_type '%s' is not one anelua runs (%s)", path,
        tostring(config.model_type), known_types())
    end
    return module
  end
  local f, err = io.open(path, "rb")
  if not f then return nil, err end
  local head = f:read(4) or ""
  f:close()
  if head == "GGUF" then return "ane.models.llama" end -- (ane.formats.gguf: llama, qwen2, qwen3)
  if #head == 4 and string.unpack("<I4", head) == 20240326 then return "ane.models.gpt2" end -- llm.c's magic
  return "ane.models.llama" -- llama2.c's files have no magic (v1: "ak42" is read by the loader itself)
end

--- The tokenizer of a model at `path`: a directory's tokenizer.json (or vocab.json and merges.txt,
--- tokenizer.model, tokenizer.bin); a GGUF file's own; beside a .bin file, tokenizer.bin or
--- tokenizer.model. Returns
--- the tokenizer, or nil and why (no file: "no tokenizer").
function M.tokenizer(path, vocab_size)
  local is_directory = lfs.attributes(path, "mode") == "directory"
  if not is_directory and require("ane.models.llama").is_gguf(path) then return require("ane.formats.gguf").tokenizer(path) end
  local dir = is_directory and path or path:match("^(.*)/[^/]*$") or "."
  local bpe = require("ane.tokenizer")
  if is_directory and (lfs.attributes(dir .. "/tokenizer.json") or lfs.attributes(dir .. "/vocab.json")) then
    return bpe.load(dir)
  end
  for _, name in ipairs({ "tokenizer.model", "tokenizer.bin" }) do
    if lfs.attributes(dir .. "/" .. name) then
      return require("ane.sentencepiece").load(dir .. "/" .. name, { vocab_size = vocab_size })
    end
  end
  return nil, string.format("%s: no tokenizer (tokenizer.json, vocab.json + merges.txt, tokenizer.model or tokenizer.bin) "
    .. "beside the model", dir)
end

--- The tokenizer in file `path` (a --tokenizer): tokenizer.json (byte-level BPE), llm.c's
--- gpt2_tokenizer.bin (its magic), else SentencePiece (tokenizer.model, llama2.c's
--- tokenizer.bin) checked against vocab_size. Returns it, or nil and why.
function M.tokenizer_file(path, vocab_size)
  if path:match("%.json$") then return require("ane.tokenizer").load(path) end
  local f, err = io.open(path, "rb")
  if not f then return nil, err end
  local head = f:read(4) or ""
  f:close()
  if #head == 4 and string.unpack("<I4", head) == 20240328 then return require("ane.tokenizer").load(path) end
  return require("ane.sentencepiece").load(path, { vocab_size = vocab_size })
end

-- The id a tokenizer.json's post-processor puts first in a single sequence (Llama 3's
-- <|begin_of_text|>: TemplateProcessing, alone or in a Sequence), or nil.
local function template_bos(dir)
  local json = lfs.attributes(dir .. "/tokenizer.json") and ane.io.read_json(dir .. "/tokenizer.json")
  local post = type(json) == "table" and json.post_processor
  if type(post) ~= "table" then return nil end
  local processors = post.type == "Sequence" and post.processors or { post }
  for _, p in ipairs(type(processors) == "table" and processors or {}) do
    if type(p) == "table" and p.type == "TemplateProcessing" and type(p.single) == "table" then
      local first = p.single[1]
      local special = type(first) == "table" and first.SpecialToken
      local entry = special and type(p.special_tokens) == "table" and p.special_tokens[special.id]
      local ids = type(entry) == "table" and entry.ids
      if type(ids) == "table" and math.tointeger(ids[1]) then return math.tointeger(ids[1]) end
    end
  end
  return nil
end

--- The ids of a raw-text prompt as the model's tokenizer frames it: SentencePiece with its BOS,
--- a byte-level BPE with the BOS its tokenizer.json's post-processor adds (Llama 3), else the
--- text's ids alone (GPT-2, Qwen). Fails (an error) when the model has no tokenizer.
function M.prompt_ids(model, text)
  local tok = model.tokenizer
  if not tok then error(model.tokenizer_problem or "the model has no tokenizer", 2) end
  if tok.spm then return tok:encode(text, { bos = true }) end
  local ids = tok:encode(text)
  local dir = lfs.attributes(model.source or "", "mode") == "directory" and model.source
  local bos = dir and template_bos(dir)
  if bos then table.insert(ids, 1, bos) end
  return ids
end

-- The chat template of the model at `path` (ane.chat.template), or nil and why not.
local function chat_template_at(path)
  if lfs.attributes(path, "mode") ~= "directory" then
    if require("ane.models.llama").is_gguf(path) then return require("ane.formats.gguf").chat_template(path) end
    return nil, path .. ": a checkpoint file carries no chat template; `anelua run` continues raw text"
  end
  return require("ane.chat").template(path)
end

--- Loads the model at `path` whatever its family (opts as its module's load takes them), with
--- model.tokenizer set when a tokenizer lies beside it (model.tokenizer_problem says why not).
--- Returns the model, or nil and a message naming the file.
function M.load(path, opts)
  if type(path) ~= "string" then error("models.load: path must be a string", 2) end
  local module, err = family_of(path)
  if not module then return nil, err end
  local model, problem = require(module).load(path, opts)
  if not model then return nil, problem end
  if model.file_header then -- a GGUF file's tokenizer, from the header its weights were read with
    model.tokenizer, model.tokenizer_problem = require("ane.formats.gguf").tokenizer(model.file_header)
    model.file_header = nil
  else
    model.tokenizer, model.tokenizer_problem = M.tokenizer(path, model.config and model.config.vocab_size)
  end
  function model.chat_template() return chat_template_at(path) end
  return model
end

return M

-- Generate a story from a llama2.c checkpoint (Stories15M/42M/110M) or a Hugging Face
-- Llama / Qwen3 directory on anelua.
--   anelua examples/stories.lua MODEL.bin|MODEL_DIR [--tokenizer tokenizer.bin|tokenizer.model|tokenizer.json]
--          [--prompt TEXT] [--max-tokens N] [--temperature T] [--top-k K] [--seed S]
--          [--precision fp16|fp32] [--profile ane|cpu]
-- The tokenizer defaults to tokenizer.bin or tokenizer.model beside a checkpoint file (the
-- SentencePiece vocabulary, with BOS), or tokenizer.json inside a model directory (byte-level
-- BPE, no BOS).
local llama = require("ane.models.llama")
local sentencepiece = require("ane.sentencepiece")
local lfs = require("lfs")

local usage = "usage: anelua examples/stories.lua MODEL.bin|MODEL_DIR [--tokenizer FILE] [--prompt TEXT] [--max-tokens N]\n" ..
    "       [--temperature T] [--top-k K] [--seed S] [--precision fp16|fp32] [--profile ane|cpu]\n"
local model_path = arg[1]
if not model_path or model_path == "--help" then io.write(usage) os.exit(model_path and 0 or 1) end
local opts = { prompt = "Once upon a time", ["max-tokens"] = 64, temperature = 0.8, ["top-k"] = 40, seed = 1 }
for i = 2, #arg, 2 do
  local name = arg[i]:match("^%-%-([%w-]+)$")
  if not name or arg[i + 1] == nil then io.stderr:write(usage) os.exit(1) end
  opts[name] = tonumber(arg[i + 1]) or arg[i + 1]
end
local model, err = llama.load(model_path, { precision = opts.precision, profile = opts.profile })
if not model then io.stderr:write("stories.lua: " .. err .. "\n") os.exit(1) end
local is_directory = lfs.attributes(model_path, "mode") == "directory"
local dir = is_directory and model_path or model_path:match("^(.*)/[^/]*$") or "."
local tokenizer_path = opts.tokenizer
if not tokenizer_path then
  for _, name in ipairs(is_directory and { "tokenizer.json" } or { "tokenizer.bin", "tokenizer.model" }) do
    if lfs.attributes(dir .. "/" .. name) then tokenizer_path = dir .. "/" .. name break end
  end
end
if not tokenizer_path then
  io.stderr:write("stories.lua: no tokenizer.bin, tokenizer.model or tokenizer.json by the model; use --tokenizer\n")
  os.exit(1)
end
local byte_level = tokenizer_path:match("%.json$") ~= nil
local tok, terr = (byte_level and require("ane.tokenizer") or sentencepiece).load(tokenizer_path)
if not tok then io.stderr:write("stories.lua: " .. terr .. "\n") os.exit(1) end
print(tostring(model))
io.write(opts.prompt)
local prompt_ids = byte_level and tok:encode(opts.prompt) or tok:encode(opts.prompt, { bos = true })
local produced, shown = {}, ""
for id in model:generate(prompt_ids, { max_tokens = math.tointeger(opts["max-tokens"]), temperature = opts.temperature,
  top_k = math.tointeger(opts["top-k"]), seed = math.tointeger(opts.seed) }) do
  if id == model.stop_token then break end
  if byte_level then -- a token may end inside a UTF-8 character: print what the whole text adds
    produced[#produced + 1] = id
    local text = tok:decode(produced)
    io.write(text:sub(#shown + 1))
    shown = text
  else
    io.write(tok:decode({ 29871, id })) -- after a lone space piece, the token keeps its own leading space
  end
  io.flush()
end
io.write("\n")
local s = model:stats()
print(string.format("--- %s, %s, profile %s: %d programs in %.0f ms; prefill %.1f tok/s; decode %.1f tok/s (%.1f ms/token)",
  s.backend, s.precision, s.profile, s.programs, s.compile_ms, s.prefill_tokens_per_s, s.decode_tokens_per_s,
  s.decode_ms_per_token))

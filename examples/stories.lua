-- Generate a story from a llama2.c checkpoint (Stories15M/42M/110M) on anelua.
--   anelua examples/stories.lua MODEL.bin [--tokenizer tokenizer.bin|tokenizer.model]
--          [--prompt TEXT] [--max-tokens N] [--temperature T] [--top-k K] [--seed S]
--          [--precision fp16|fp32] [--profile ane|cpu]
-- The tokenizer defaults to tokenizer.bin or tokenizer.model beside the checkpoint.
local ane = require("ane")
local llama = require("ane.models.llama")
local sentencepiece = require("ane.sentencepiece")
local lfs = require("lfs")

local usage = "usage: anelua examples/stories.lua MODEL.bin [--tokenizer FILE] [--prompt TEXT] [--max-tokens N]\n" ..
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
local dir = model_path:match("^(.*)/[^/]*$") or "."
local tokenizer_path = opts.tokenizer
if not tokenizer_path then
  for _, name in ipairs({ "tokenizer.bin", "tokenizer.model" }) do
    if lfs.attributes(dir .. "/" .. name) then tokenizer_path = dir .. "/" .. name break end
  end
end
if not tokenizer_path then io.stderr:write("stories.lua: no tokenizer.bin or tokenizer.model beside the model; use --tokenizer\n") os.exit(1) end
local tok = assert(sentencepiece.load(tokenizer_path))
print(tostring(model))
io.write(opts.prompt)
local previous = tok:encode(opts.prompt, { bos = true })
for id in model:generate(previous, { max_tokens = math.tointeger(opts["max-tokens"]), temperature = opts.temperature,
  top_k = math.tointeger(opts["top-k"]), seed = math.tointeger(opts.seed) }) do
  if id == 2 then break end
  io.write(tok:decode({ 29871, id })) -- after a lone space piece, the token keeps its own leading space
  io.flush()
end
io.write("\n")
local s = model:stats()
print(string.format("--- %s, %s, profile %s: %d programs in %.0f ms; prefill %.1f tok/s; decode %.1f tok/s (%.1f ms/token)",
  s.backend, s.precision, s.profile, s.programs, s.compile_ms, s.prefill_tokens_per_s, s.decode_tokens_per_s,
  s.decode_ms_per_token))

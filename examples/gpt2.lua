-- GPT-2 text generation on anelua: the project's main job.
--
--   anelua examples/gpt2.lua [--model PATH] [--prompt TEXT] [--max-tokens N] [--temperature T]
--                            [--top-k K] [--top-p P] [--seed S] [--backend sim|ane]
--                            [--precision fp16|fp32] [--profile ane|cpu]
--
-- Weights: --model (a Hugging Face GPT-2 directory or an llm.c gpt2_124M.bin), else
-- $ANELUA_MODELS/gpt2, else models/gpt2. Without weights it says how to get them and runs a
-- clearly labelled demo on a randomly initialized GPT-2-shaped model with the real
-- tokenizer: the text is noise, the pipeline and the statistics are real.
local ane = require("ane")
local gpt2 = require("ane.models.gpt2")
local tokenizer = require("ane.tokenizer")
local lfs = require("lfs")

local usage = [[
usage: anelua examples/gpt2.lua [options]
  --model PATH         Hugging Face GPT-2 directory or llm.c gpt2_124M.bin
                       (default: $ANELUA_MODELS/gpt2, else models/gpt2)
  --prompt TEXT        text to continue (default: "Once upon a time")
  --max-tokens N       tokens to generate (default 32)
  --temperature T      0 = greedy (default 0.8)
  --top-k K            sample among the K most likely tokens (default 40; 0 = all)
  --top-p P            nucleus sampling mass (default 1 = off)
  --seed S             sampling seed (default 1)
  --backend NAME       sim (CPU, everywhere) or ane (the device, macOS); default: ane.default_backend()
  --precision P        fp16 (the device's numerics, default) or fp32 (the CPU reference)
  --profile P          ane (the device's rules, default for fp16) or cpu (single-token decode
                       without padding; the default for fp32)
  --help               this text
]]

local options = { prompt = "Once upon a time", ["max-tokens"] = 32, temperature = 0.8, ["top-k"] = 40, ["top-p"] = 1,
  seed = 1 }
local numeric = { ["max-tokens"] = true, temperature = true, ["top-k"] = true, ["top-p"] = true, seed = true }
local known = { model = true, prompt = true, backend = true, precision = true, profile = true }
local i = 1
while i <= #arg do
  local name = arg[i]:match("^%-%-([%w-]+)$")
  if name == "help" then io.write(usage) os.exit(0) end
  if not name or not (numeric[name] or known[name]) or arg[i + 1] == nil then
    io.stderr:write("gpt2.lua: bad argument '" .. tostring(arg[i]) .. "'\n" .. usage)
    os.exit(1)
  end
  local value = arg[i + 1]
  if numeric[name] then
    value = tonumber(value)
    if not value then io.stderr:write("gpt2.lua: --" .. name .. " needs a number\n") os.exit(1) end
  end
  options[name] = value
  i = i + 2
end
if options.backend then
  local ok, err = pcall(ane.set_default_backend, options.backend)
  if not ok then io.stderr:write("gpt2.lua: " .. err .. "\n") os.exit(1) end
end

local here = (arg[0]:match("^(.*)/[^/]*$") or ".") .. "/.."
local function exists(path) return path and lfs.attributes(path) ~= nil end
local model_path = options.model
if not model_path then
  local candidates = { os.getenv("ANELUA_MODELS") and (os.getenv("ANELUA_MODELS") .. "/gpt2"), "models/gpt2", here .. "/models/gpt2" }
  for _, candidate in ipairs(candidates) do
    if exists(candidate) then model_path = candidate break end
  end
elseif not exists(model_path) then
  io.stderr:write("gpt2.lua: --model " .. model_path .. " does not exist\n")
  os.exit(1)
end

local model_opts = { precision = options.precision, profile = options.profile }
local model, tok, err
if model_path then
  model, err = gpt2.load(model_path, model_opts)
  if not model then io.stderr:write("gpt2.lua: " .. err .. "\n") os.exit(1) end
  local dir = lfs.attributes(model_path, "mode") == "directory" and model_path or model_path:match("^(.*)/[^/]*$") or "."
  tok = tokenizer.load(dir)
else
  print("No GPT-2 weights found (looked at --model, $ANELUA_MODELS/gpt2 and models/gpt2).")
  print("To get them on a machine with internet:  scripts/get_models.sh gpt2")
  print("")
  print("=== DEMO: a randomly initialized GPT-2-shaped model (124M parameters). The text below is")
  print("=== noise; the tokenizer, the programs, the KV cache and the statistics are real.")
  local config = { n_embd = 768, n_layer = 12, n_head = 12, n_positions = 1024, vocab_size = 50257, eps = 1e-5 }
  model = gpt2.from_weights(gpt2.random_weights(config, options.seed), model_opts)
end
if not tok or not tok.can_encode or not tok:can_encode() then
  local shipped = here .. "/data/tokenizers/gpt2"
  tok, err = tokenizer.load(shipped)
  if not tok then io.stderr:write("gpt2.lua: no tokenizer: " .. err .. "\n") os.exit(1) end
end

print(tostring(model))
local prompt = tok:encode(options.prompt)
if #prompt == 0 then io.stderr:write("gpt2.lua: the prompt is empty\n") os.exit(1) end
io.write(options.prompt)
io.flush()
local generate_opts = {
  max_tokens = math.tointeger(options["max-tokens"]), temperature = options.temperature,
  top_k = options["top-k"] > 0 and math.tointeger(options["top-k"]) or nil,
  top_p = options["top-p"] < 1 and options["top-p"] or nil, seed = math.tointeger(options.seed),
}
local count = 0
for id in model:generate(prompt, generate_opts) do
  io.write(tok:decode({ id }))
  io.flush()
  count = count + 1
end
io.write("\n")

local s = model:stats()
local runtime = ane.stats()
print(string.format([[
--- stats
backend            %s (precision %s, profile %s)
programs           %d compiled in %.0f ms (runtime: %d compiles, %d cache hits, budget left %d)
prefill            %d tokens, %.1f tokens/s
decode             %d tokens, %.1f tokens/s, %.1f ms/token]], s.backend, s.precision, s.profile, s.programs, s.compile_ms,
  runtime.compiles, runtime.cache_hits, runtime.budget_left, s.prefill_tokens, s.prefill_tokens_per_s, s.decode_tokens,
  s.decode_tokens_per_s, s.decode_ms_per_token))

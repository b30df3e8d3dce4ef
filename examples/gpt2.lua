-- GPT-2 text generation on anelua: the project's main job.
--
--   anelua examples/gpt2.lua [--model PATH] [--prompt TEXT] [--max-tokens N] [--temperature T]
--                            [--top-k K] [--top-p P] [--seed S] [--backend sim|ane] [--quantize int8|int4]
--                            [--precision fp16|fp32] [--profile ane|cpu]   (--help: all options)
-- `anelua run`'s options and output (lua/ane/commands/run.lua), with the model found for you.
--
-- Weights: --model (a Hugging Face GPT-2 directory or an llm.c gpt2_124M.bin), else
-- $ANELUA_MODELS/gpt2, else models/gpt2. Without weights it says how to get them and runs a
-- clearly labelled demo on a randomly initialized GPT-2-shaped model with the real
-- tokenizer: the text is noise, the pipeline and the statistics are real.
local ane = require("ane")
local gpt2 = require("ane.models.gpt2")
local tokenizer = require("ane.tokenizer")
local lfs = require("lfs")
local cli = require("ane.cli")

local run = require("ane.commands.run")
local command = cli.command{
  name = "examples/gpt2.lua",
  summary = "GPT-2 text generation (without weights: a labelled demo on a random GPT-2-shaped model).",
  options = run.options({
    { "model", "path", nil, "Hugging Face GPT-2 directory or llm.c gpt2_124M.bin (default: $ANELUA_MODELS/gpt2, else models/gpt2)" },
  }, 32, "and the weights of the demo model, without --model"),
  epilog = "Ctrl-C stops after the current token and prints the statistics.",
}
local options = command:parse(arg)
command:use_backend(options.backend)
command:check_activations(options, options.model)
command:graceful_interrupts() -- from here on, Ctrl-C ends the run cleanly (see the epilog)

local function exists(path) return path and lfs.attributes(path) ~= nil end

-- The files a GPT-2 directory lacks (a download that stopped half-way), or nil.
local function missing_files(dir)
  if lfs.attributes(dir, "mode") ~= "directory" then return nil end
  local missing = {}
  if not exists(dir .. "/config.json") then missing[#missing + 1] = "config.json" end
  if not exists(dir .. "/model.safetensors") and not exists(dir .. "/model.safetensors.index.json") then
    missing[#missing + 1] = "model.safetensors"
  end
  return #missing > 0 and table.concat(missing, ", ") or nil
end

local model_path = options.model
if not model_path then
  local candidates = { os.getenv("ANELUA_MODELS") and (os.getenv("ANELUA_MODELS") .. "/gpt2") or false, "models/gpt2",
    ane.data_dir() and (ane.data_dir() .. "/../models/gpt2") or false }
  for _, candidate in ipairs(candidates) do
    if candidate and exists(candidate) then
      local missing = missing_files(candidate)
      if not missing then model_path = candidate break end
      io.stderr:write(string.format("%s is an incomplete GPT-2 directory (no %s), not used; %s gpt2 completes it\n",
        candidate, missing, cli.script_path("get_models.sh")))
    end
  end
elseif not exists(model_path) then
  command:fail("--model " .. model_path .. " does not exist")
elseif missing_files(model_path) then
  command:fail(string.format("--model %s is an incomplete GPT-2 directory: no %s (%s gpt2 completes it)", model_path,
    missing_files(model_path), cli.script_path("get_models.sh")))
end

local model, err
if model_path then
  model, err = command:call(require("ane.models").load, model_path, run.model_options(options))
  if not model then command:fail(err) end
else
  io.stderr:write("No GPT-2 weights found (looked at --model, $ANELUA_MODELS/gpt2 and models/gpt2).\n",
    "To get them on a machine with internet:  " .. cli.script_path("get_models.sh") .. " gpt2\n\n",
    "=== DEMO: a randomly initialized GPT-2-shaped model (124M parameters). The text below is\n",
    "=== noise; the tokenizer, the programs, the KV cache and the statistics are real.\n")
  local config = { n_embd = 768, n_layer = 12, n_head = 12, n_positions = 1024, vocab_size = 50257, eps = 1e-5 }
  model = command:call(gpt2.from_weights, gpt2.random_weights(config, options.seed), run.model_options(options))
end
-- an llm.c file's tokenizer decodes only, and the demo has none: GPT-2's own, shipped
local tok = model.tokenizer
if not options.tokenizer and (not tok or not tok.can_encode or not tok:can_encode()) then
  local shipped = (ane.data_dir() or "data") .. "/tokenizers/gpt2"
  model.tokenizer, err = tokenizer.load(shipped)
  if not model.tokenizer then command:fail("no tokenizer: " .. err) end
end
run.generate(command, options, model)

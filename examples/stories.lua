-- Generate a story from a llama2.c checkpoint (Stories15M/42M/110M) or a Hugging Face
-- Llama / Qwen3 directory on anelua.
--   anelua examples/stories.lua MODEL.bin|MODEL_DIR [--tokenizer tokenizer.bin|tokenizer.model|tokenizer.json]
--          [--prompt TEXT] [--max-tokens N] [--temperature T] [--top-k K] [--seed S]
--          [--precision fp16|fp32] [--profile ane|cpu] [--quantize int8|int4] [--activations int8|int16]
-- --quantize quantizes every linear layer at load (ane.quantize; the classifier in int8);
-- --activations int8 | int16 multiplies them on integer activations (the cpu profile, chosen by it).
-- The tokenizer defaults to tokenizer.bin or tokenizer.model beside a checkpoint file (the
-- SentencePiece vocabulary, with BOS), or tokenizer.json inside a model directory (byte-level
-- BPE, no BOS).
local llama = require("ane.models.llama")
local sentencepiece = require("ane.sentencepiece")
local lfs = require("lfs")
local cli = require("ane.cli")

local command = cli.command{
  name = "examples/stories.lua",
  usage = "MODEL.bin|MODEL_DIR [options]",
  summary = "Generate a story from a llama2.c checkpoint or a Hugging Face Llama / Qwen3 directory.",
  positional = { { "MODEL.bin|MODEL_DIR", "llama2.c checkpoint (v0 or v1), or a Hugging Face directory" } },
  options = cli.with_generation_options(cli.join({
    { "tokenizer", "path", nil, "tokenizer.bin, tokenizer.model or tokenizer.json (default: beside the model)" },
  }, cli.quantize_options()), 64),
  epilog = "Ctrl-C stops after the current token and prints the statistics.",
}
local opts, positional = command:parse(arg)
local model_path = positional[1]
command:use_backend(opts.backend)
command:check_activations(opts, model_path)
command:graceful_interrupts() -- from here on, Ctrl-C ends the run cleanly (see the epilog)
if not lfs.attributes(model_path) then command:fail(model_path .. " does not exist") end
local model, err = command:call(llama.load, model_path, { precision = opts.precision, profile = opts.profile or (opts.activations and "cpu"),
  quantize = opts.quantize, activations = opts.activations })
if not model then command:fail(err) end
local is_directory = lfs.attributes(model_path, "mode") == "directory"
local dir = is_directory and model_path or model_path:match("^(.*)/[^/]*$") or "."
local tokenizer_path = opts.tokenizer
if not tokenizer_path then
  for _, name in ipairs(is_directory and { "tokenizer.json", "tokenizer.bin", "tokenizer.model" } or { "tokenizer.bin", "tokenizer.model" }) do
    if lfs.attributes(dir .. "/" .. name) then tokenizer_path = dir .. "/" .. name break end
  end
end
if not tokenizer_path then command:fail("no tokenizer.bin, tokenizer.model or tokenizer.json by the model; use --tokenizer") end
local byte_level = tokenizer_path:match("%.json$") ~= nil
local tok, terr
if byte_level then tok, terr = require("ane.tokenizer").load(tokenizer_path)
else tok, terr = sentencepiece.load(tokenizer_path, { vocab_size = model.config.vocab_size }) end
if not tok then command:fail(terr) end
io.stderr:write(tostring(model), "\n")
io.write(opts.prompt)
local prompt_ids = byte_level and tok:encode(opts.prompt) or tok:encode(opts.prompt, { bos = true })
local produced, shown = {}, ""
local interrupted = cli.stream(model, prompt_ids, opts, tok.vocab_size, function(id)
  if id == model.stop_token then return false end
  if byte_level then -- a token may end inside a UTF-8 character: print what the whole text adds
    produced[#produced + 1] = id
    local text = tok:decode(produced)
    io.write(text:sub(#shown + 1))
    shown = text
  else
    io.write(tok:decode({ 29871, id })) -- after a lone space piece, the token keeps its own leading space
  end
end)
cli.report_stats(model)
if interrupted then os.exit(cli.INTERRUPTED_EXIT) end

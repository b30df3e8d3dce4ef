-- `anelua run MODEL --prompt TEXT`: continues raw text with any model anelua loads
-- (ane.models.load: Hugging Face directories of every family, llama2.c and llm.c files), its
-- tokenizer found beside it or named by --tokenizer. The generated text goes to stdout,
-- statistics and notices to stderr; Ctrl-C stops after the current token.
-- examples/stories.lua is this command under its own name (M.command, M.run).
local cli = require("ane.cli")
local models = require("ane.models")

local M = {}

--- The command's options (its own `extra` rows first), for a length of max_tokens by default;
--- seed_help says what else --seed seeds.
function M.options(extra, max_tokens, seed_help)
  return cli.with_generation_options(cli.join(extra or {}, cli.quantize_options(), {
    { "tokenizer", "path", nil, "tokenizer.json, tokenizer.model or tokenizer.bin (default: the one beside the model)" },
    { "context", "integer", nil, "positions of context to use (default: the model's)", min = 2 },
    { "stop", "strings", nil, "end the text before this string (repeatable)", metavar = "TEXT" },
  }), max_tokens or 128, seed_help)
end

--- The command's parser under `name` (usage line `usage`, default length max_tokens).
function M.command(name, usage, max_tokens)
  return cli.command {
    name = name,
    usage = usage or "MODEL --prompt TEXT [options]",
    summary = "Continues TEXT with the model at MODEL (a Hugging Face directory, a llama2.c or llm.c .bin, a GGUF file).",
    positional = { { "MODEL", "a model directory or checkpoint file" } },
    options = M.options(nil, max_tokens),
    epilog = "Ctrl-C stops after the current token and prints the statistics.",
  }
end

--- The options ane.models.load takes from the parsed ones.
function M.model_options(opts)
  return { precision = opts.precision, profile = opts.profile or (opts.activations and "cpu"), quantize = opts.quantize,
    activations = opts.activations }
end

--- Parses argv with `command` and runs it: load, then M.generate.
function M.run(command, argv)
  local opts, positional = command:parse(argv)
  local path = positional[1]
  command:use_backend(opts.backend)
  command:check_activations(opts, path)
  command:graceful_interrupts()
  local model, err = command:call(models.load, path, M.model_options(opts))
  if not model then command:fail(err) end
  M.generate(command, opts, model)
end

--- The text of a loaded model (its tokenizer, or --tokenizer's): the prompt framed, streamed,
--- the statistics; exits 130 after a Ctrl-C.
function M.generate(command, opts, model)
  if opts.tokenizer then
    model.tokenizer, model.tokenizer_problem = models.tokenizer_file(opts.tokenizer, model.config and model.config.vocab_size)
  end
  if not model.tokenizer then command:fail(model.tokenizer_problem .. "; `" .. command.name .. "` needs text in and out") end
  if model.tokenizer.vocab_size > model.vocab_size then
    command:fail(string.format("the tokenizer has %d tokens but the model's vocabulary %d: its ids beyond %d cannot be "
      .. "embedded (a model and a tokenizer of different vocabularies)", model.tokenizer.vocab_size, model.vocab_size,
      model.vocab_size - 1))
  end
  if opts.context then model.context_length = math.min(model.context_length, opts.context) end
  local tok = model.tokenizer
  local prompt = models.prompt_ids(model, opts.prompt)
  if #prompt == 0 then command:fail("the prompt is empty: give --prompt TEXT") end
  io.stderr:write(tostring(model), "\n")
  io.write(opts.prompt)
  local text = require("ane.text_stream").new(tok, prompt, opts.stop or {}, io.write)
  local function on_token(id)
    if id == model.stop_token then return false end
    return text:push(id)
  end
  local interrupted = cli.stream(model, prompt, opts, tok.vocab_size, on_token, function() text:finish() end)
  cli.report_stats(model)
  if interrupted then os.exit(cli.INTERRUPTED_EXIT) end
end

function M.main(...) return M.run(M.command("run"), { ... }) end

return M

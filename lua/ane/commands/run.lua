-- `anelua run MODEL --prompt TEXT`: continues raw text with any model anelua loads
-- (ane.models.load: Hugging Face directories of every family, llama2.c and llm.c files), its
-- tokenizer found beside it. The generated text goes to stdout, statistics and notices to
-- stderr; Ctrl-C stops after the current token.
local ane = require("ane")
local cli = require("ane.cli")
local models = require("ane.models")

local M = {}

function M.main(...)
  local command = cli.command {
    name = "run",
    usage = "MODEL --prompt TEXT [options]",
    summary = "Continues TEXT with the model at MODEL (a Hugging Face directory, a llama2.c or llm.c .bin).",
    positional = { { "MODEL", "a model directory or checkpoint file" } },
    options = cli.with_generation_options(cli.join(cli.quantize_options(), {
      { "context", "integer", nil, "positions of context to use (default: the model's)", min = 2 },
      { "stop", "strings", nil, "end the text before this string (repeatable)", metavar = "TEXT" },
    }), 128),
    epilog = "Ctrl-C stops after the current token and prints the statistics.",
  }
  local opts, positional = command:parse({ ... })
  local path = positional[1]
  command:use_backend(opts.backend)
  command:check_activations(opts, path)
  command:graceful_interrupts()
  local model, err = command:call(models.load, path, { precision = opts.precision,
    profile = opts.profile or (opts.activations and "cpu"), quantize = opts.quantize, activations = opts.activations })
  if not model then command:fail(err) end
  if not model.tokenizer then command:fail(model.tokenizer_problem .. "; `run` needs text in and out") end
  if opts.context then model.context_length = math.min(model.context_length, opts.context) end
  local tok = model.tokenizer
  local prompt = models.prompt_ids(model, opts.prompt)
  io.stderr:write(tostring(model), "\n")
  io.write(opts.prompt)
  local produced, shown, text, stopped, stops = {}, "", "", false, opts.stop or {}
  local interrupted = cli.stream(model, prompt, opts, tok.vocab_size, function(id)
    if id == model.stop_token then return false end
    produced[#produced + 1] = id
    text = tok:decode(produced) -- a token may end inside a UTF-8 character: print what the whole text adds
    for _, stop in ipairs(stops) do
      local at = text:find(stop, 1, true)
      if at then
        io.write(text:sub(#shown + 1, at - 1))
        stopped = true
        return false
      end
    end
    -- hold back a tail that could begin a stop string, so it is never printed
    local hold = 0
    for _, stop in ipairs(stops) do
      for n = math.min(#stop - 1, #text), 1, -1 do
        if text:sub(-n) == stop:sub(1, n) then hold = math.max(hold, n) break end
      end
    end
    local upto = #text - hold
    if upto > #shown then io.write(text:sub(#shown + 1, upto)) shown = text:sub(1, upto) end
  end, function() if not stopped then io.write(text:sub(#shown + 1)) end end)
  cli.report_stats(model)
  if interrupted then os.exit(cli.INTERRUPTED_EXIT) end
end

return M

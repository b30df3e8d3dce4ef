-- `anelua chat MODEL`: a conversation with any model anelua loads that has a chat template
-- (ane.models.load, ane.chat): one answer to --prompt, or interactive turns read with the
-- host's line editor (history in ~/.anelua_chat_history), with /commands, multi-line input
-- ("""), per-turn statistics on stderr, and a notice when the context is full. The answers
-- alone go to stdout. examples/chat.lua runs the same loop on a random-weight demo model.
local ane = require("ane")
local chat = require("ane.chat")
local cli = require("ane.cli")
local lfs = require("lfs")
local models = require("ane.models")

local M = {}

local HELP = [[
/help                 this text
/bye                  end the chat (Ctrl-D too)
/reset                forget the conversation (the system message stays)
/set NAME VALUE       temperature, top-k, top-p, min-p, repeat-penalty, max-tokens, seed, system
/show                 the settings and how full the context is
"""                   on a line of its own: start or end a multi-line message
Ctrl-C                stops an answer; at the prompt, abandons the line]]

-- The /set names: option key, kind, the range a value must lie in.
local SETTINGS = {
  temperature = { "temperature", "number", 0 }, ["top-k"] = { "top_k", "integer", 0 },
  ["top-p"] = { "top_p", "number", 0, 1 }, ["min-p"] = { "min_p", "number", 0, 1 },
  ["repeat-penalty"] = { "repeat_penalty", "number", 0 }, ["max-tokens"] = { "max_tokens", "integer", 1 },
  seed = { "seed", "integer" },
}

--- The command's options: the generation options with the model's sampling defaults, and chat's.
function M.options(extra)
  return cli.with_generation_options(cli.join(cli.quantize_options(), {
    { "system", "string", nil, "a system message for the conversation" },
    { "context", "integer", 2048, "positions the conversation may fill (at most the model's)", min = 16 },
    { "no-think", "flag", false, "switch thinking off where the template has the switch (enable_thinking)" },
    { "show-thinking", "flag", false, "print <think> blocks as they stream" },
  }, extra or {}), 512, nil, { prompt = "answer this one user turn and exit (default: interactive)" })
end

-- A reader of the user's messages: the host's line editor when there is one (anelua), else
-- io.read; returns a line, false (Ctrl-C abandoned it) or nil (end of input).
local function line_reader(interactive)
  local ok, lines = pcall(require, "anelua.lines")
  if ok then
    lines.history("chat")
    return function(prompt) return lines.read(interactive and prompt or "") end
  end
  return function(prompt)
    if interactive then io.write(prompt) io.flush() end
    return io.read("l")
  end
end

-- One turn's statistics, on stderr.
local function turn_stats(result, session)
  local decode_rate = result.decode_seconds > 0 and result.tokens / result.decode_seconds or 0
  local prompt_rate = result.prefill_seconds > 0 and result.prompt_tokens / result.prefill_seconds or 0
  io.stderr:write(string.format("(%d tokens at %.1f tokens/s; prompt: %d tokens at %.1f tokens/s, %d from the cache; "
    .. "context %d/%d)\n", result.tokens, decode_rate, result.prompt_tokens, prompt_rate, result.reused,
    session.position, session.capacity))
end

--- The chat loop over `model` (its tokenizer set) in `template`. opts: the parsed options;
--- generation: generation_config.json (sampling defaults), config: config.json (stop ids).
--- Returns the process's exit status.
function M.converse(command, model, template, opts, config, generation)
  local tok = model.tokenizer
  local stop = chat.stop_ids(config, generation, template, tok)
  if next(stop) == nil then command:fail("the model names no end-of-turn token (eos_token_id, eos_token) to end a turn at") end
  local settings = cli.sampling(opts, tok.vocab_size, generation)
  settings.stop = stop
  local capacity = math.min(opts.context, model.context_length)
  local conversation = chat.conversation(model, template, { capacity = capacity, system = opts.system,
    variables = { enable_thinking = not opts.no_think } })
  command:graceful_interrupts()
  io.stderr:write(string.format("%s; %d positions of context; temperature %g%s\n", tostring(model), capacity,
    settings.temperature, opts.no_think and ", thinking off" or ""))

  -- One turn: the streamed answer on stdout; false when the turn could not be taken.
  local function turn(content)
    local filter = chat.thinking_filter(opts.show_thinking)
    local result, why = conversation:ask(content, settings, function(piece)
      io.write(filter(piece))
      io.flush()
    end, cli.stop_requested)
    if not result then
      io.stderr:write("(" .. why .. ")\n")
      return false
    end
    io.write(filter("", true), "\n") -- (what the filter held back: an answer may end in "<thi")
    io.flush() -- (before the notices on stderr, for a reader of both)
    if result.ended == "interrupted" then
      io.stderr:write("(interrupted)\n")
      ane.set_graceful_interrupts(true) -- the next Ctrl-C is a request again
    end
    turn_stats(result, conversation.session)
    if result.ended == "context" then
      io.stderr:write(string.format("(the conversation filled its %d positions: the answer stops here)\n"
        .. "(starting a new conversation)\n", capacity))
      conversation:reset()
    end
    return true
  end

  if opts.prompt then
    local ok = turn(opts.prompt)
    cli.report_stats(model)
    return ok and 0 or 1
  end

  local interactive = os.execute("test -t 0") == true
  if interactive then io.stderr:write("/help lists the commands; Ctrl-D or /bye ends the chat\n") end
  local read = line_reader(interactive)
  while true do
    local line = read("> ")
    if line == nil then break end
    if line == false then goto continue end
    if line == '"""' then -- a multi-line message, to the next """
      local parts = {}
      while true do
        local more = read("... ")
        if more == nil or more == '"""' then break end
        if more ~= false then parts[#parts + 1] = more end
      end
      line = table.concat(parts, "\n")
      if line:match("%S") then turn(line) end
      goto continue
    end
    do
      local word, rest = line:match("^/(%S+)%s*(.-)%s*$")
      if word == "bye" or word == "exit" or word == "quit" then break
      elseif word == "help" then io.stderr:write(HELP, "\n")
      elseif word == "reset" or word == "clear" then
        conversation:reset()
        io.stderr:write("(a new conversation)\n")
      elseif word == "show" then
        io.stderr:write(string.format("temperature %g, top-k %s, top-p %s, min-p %s, repeat-penalty %g, max-tokens %d, "
          .. "seed %d; context %d/%d%s\n", settings.temperature, tostring(settings.top_k or 0),
          tostring(settings.top_p or 1), tostring(settings.min_p or 0), settings.repeat_penalty or 1, settings.max_tokens,
          settings.seed, conversation.session.position, capacity,
          conversation.system and ("; system: " .. conversation.system) or ""))
      elseif word == "set" then
        local name, value = rest:match("^(%S+)%s+(.+)$")
        local setting = name and SETTINGS[name]
        if name == "system" then
          conversation.system = value
          conversation:reset()
          io.stderr:write("(a new conversation with that system message)\n")
        elseif not setting then
          io.stderr:write("(/set takes a name and a value: " .. "temperature, top-k, top-p, min-p, repeat-penalty, "
            .. "max-tokens, seed or system)\n")
        else
          local key, kind, low, high = table.unpack(setting)
          local number = tonumber(value)
          if kind == "integer" then number = number and math.tointeger(number) end
          if not number or number ~= number or (low and number < low) or (high and number > high) then
            io.stderr:write(string.format("(/set %s needs %s%s, got '%s')\n", name, kind == "integer" and "a whole number"
              or "a number", low and (high and string.format(" from %g to %g", low, high) or string.format(" >= %g", low))
              or "", value))
          else
            if key == "top_k" then number = number > 0 and number or nil end
            if key == "top_p" then number = number < 1 and number or nil end
            if key == "min_p" then number = number > 0 and number or nil end
            settings[key] = number
            if key == "seed" then conversation.session.random = nil end -- (draws restart from the new seed)
            io.stderr:write(string.format("(%s = %s)\n", name, value))
          end
        end
      elseif word then
        io.stderr:write("(no command /" .. word .. "; /help lists them)\n")
      elseif line:match("%S") then
        turn(line)
      end
    end
    ::continue::
  end
  cli.report_stats(model)
  return 0
end

--- The chat template of a loaded model at `path` with what ends a turn: template, config
--- (config.json's, or the model's own eos as one), generation (generation_config.json, or {}),
--- stop_ids (ane.chat.stop_ids: a set of ids); nil and why when it has no template. Fails the
--- command on an unreadable generation_config.json.
function M.chat_setup(command, path, model)
  local template, why = model:chat_template()
  if not template then return nil, why end
  -- the end-of-turn ids: a directory's config.json's, else the model's own (a GGUF file's eos)
  local is_directory = lfs.attributes(path, "mode") == "directory"
  local config = is_directory and ane.io.read_json(path .. "/config.json") or { eos_token_id = model.stop_token }
  local generation, err = {}, nil
  if is_directory and lfs.attributes(path .. "/generation_config.json") then
    generation, err = ane.io.read_json(path .. "/generation_config.json")
    if type(generation) ~= "table" then command:fail(err or (path .. "/generation_config.json: not a JSON object")) end
  end
  return template, config, generation, chat.stop_ids(config, generation, template, model.tokenizer)
end

function M.main(...)
  local command = cli.command {
    name = "chat",
    usage = "MODEL [--prompt TEXT] [options]",
    summary = "Chats with the model at MODEL (a Hugging Face directory or a GGUF file, with a chat template) in its own chat format.",
    positional = { { "MODEL", "a model directory (config.json, weights, tokenizer, tokenizer_config.json) or a GGUF file" } },
    options = M.options(),
    epilog = "Interactive without --prompt: /help lists the commands; Ctrl-C stops an answer, Ctrl-D ends the chat.",
  }
  local opts, positional = command:parse({ ... })
  local path = positional[1]
  command:use_backend(opts.backend)
  command:check_activations(opts, path)
  local model, err = command:call(models.load, path, { precision = opts.precision,
    profile = opts.profile or (opts.activations and "cpu"), quantize = opts.quantize, activations = opts.activations })
  if not model then command:fail(err) end
  if not model.tokenizer then command:fail(model.tokenizer_problem .. "; `chat` needs text in and out") end
  local template, config, generation = M.chat_setup(command, path, model)
  if not template then command:fail(config) end
  local status = M.converse(command, model, template, opts, config, generation)
  if status ~= 0 then os.exit(status) end
end

return M

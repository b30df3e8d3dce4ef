-- ane.cli: the one command-line parser of the examples and scripts.
--
--   local cli = require("ane.cli")
--   local command = cli.command{
--     name = "gpt2.lua", summary = "GPT-2 text generation",
--     usage = "[options]",                         -- after "usage: anelua <script>"
--     options = {
--       { "prompt", "string", "Once upon a time", "text to continue" },
--       { "max-tokens", "integer", 32, "tokens to generate", min = 1 },
--       { "top-p", "number", 1, "nucleus sampling mass", min = 0, max = 1, open_min = true },
--       { "precision", "choice", "fp16", "numerics", choices = { "fp16", "fp32" } },
--       { "weights-as-inputs", "flag", false, "feed weights as program inputs" },
--     },
--     positional = { { "MODEL", "a checkpoint file or directory" } },   -- optional
--   }
--   local opts, positional = command:parse(arg)  -- opts.max_tokens, opts.weights_as_inputs, ...
--
-- Option kinds: string, path (a string that names a file), integer, number, choice, flag.
-- A default of nil means "not given" (the script decides); `required = true` makes it a
-- mistake to leave out. --help prints the usage with each option, its kind and default,
-- and exits 0. A user's mistake (unknown flag, missing or bad value, a value out of range)
-- is one line naming the flag, then the usage line, and exit code 2; command:fail(message) is the same for mistakes found later (exit 1, no usage).
-- Programming errors in the script itself still raise Lua errors with a traceback.
--
-- Interrupts: command:graceful_interrupts() makes the first Ctrl-C a request that the
-- script polls with cli.stop_requested() (so a decode loop ends after its token, a training
-- loop after its step and checkpoint); a second Ctrl-C interrupts at once. Scripts exit
-- with cli.INTERRUPTED_EXIT (130, as shells report SIGINT).
local ane = require("ane")

local M = { INTERRUPTED_EXIT = 130, USAGE_EXIT = 2 }

local Command = {}
Command.__index = Command

local function option_key(name) return (name:gsub("-", "_")) end

-- Converts a value string by the option's kind; returns the value or nil and why not.
local function convert(option, text)
  local kind = option.kind
  if kind == "string" or kind == "path" or kind == "strings" then return text end
  if kind == "choice" then
    for _, choice in ipairs(option.choices) do
      if choice == text then return text end
    end
    return nil, "must be one of " .. table.concat(option.choices, ", ") .. ", got '" .. text .. "'"
  end
  local number = tonumber(text)
  if kind == "integer" then
    number = number and math.tointeger(number)
    if not number then return nil, "needs a whole number, got '" .. text .. "'" end
  elseif kind == "number" then
    if not number or number ~= number then return nil, "needs a number, got '" .. text .. "'" end
  else
    error("option --" .. option.name .. " has an unknown kind '" .. tostring(kind) .. "'")
  end
  local low_ok = option.min == nil or (option.open_min and number > option.min or not option.open_min and number >= option.min)
  local high_ok = option.max == nil or number <= option.max
  if not (low_ok and high_ok) then
    local range
    if option.min and option.max then
      range = string.format("in %s%s, %s]", option.open_min and "(" or "[", option.min, option.max)
    elseif option.min then
      range = (option.open_min and "> " or ">= ") .. option.min
    else
      range = "<= " .. option.max
    end
    return nil, "must be " .. range .. ", got " .. text
  end
  return number
end

function M.command(spec)
  local command = setmetatable({ name = spec.name, summary = spec.summary, usage_line = spec.usage or "[options]",
    options = {}, by_name = {}, positional = spec.positional or {}, rest = spec.rest, epilog = spec.epilog }, Command)
  for _, row in ipairs(spec.options or {}) do
    local option = { name = row[1], kind = row[2], default = row[3], help = row[4], min = row.min, max = row.max,
      open_min = row.open_min, choices = row.choices, metavar = row.metavar, required = row.required }
    assert(option.kind ~= "choice" or option.choices, "choice option --" .. option.name .. " needs choices")
    command.options[#command.options + 1] = option
    command.by_name[option.name] = option
  end
  if spec.compiles ~= false and not command.by_name.target then -- a command that compiles does so for a target (docs/compiler.md)
    command.options[#command.options + 1] = { name = "target", kind = "string", metavar = "T",
      help = "the device validation checks: generic (default), m1 .. m5, or a probe report (.json)" }
    command.by_name.target = command.options[#command.options]
  end
  command.options[#command.options + 1] = { name = "help", kind = "flag", help = "this text" }
  command.by_name.help = command.options[#command.options]
  return command
end

function Command:usage()
  local lines = { "usage: anelua " .. self.name .. " " .. self.usage_line }
  if self.summary then lines[#lines + 1] = self.summary end
  if #self.positional > 0 then
    lines[#lines + 1] = ""
    for _, p in ipairs(self.positional) do lines[#lines + 1] = string.format("  %-24s %s", p[1], p[2]) end
  end
  lines[#lines + 1] = ""
  lines[#lines + 1] = "options:"
  for _, option in ipairs(self.options) do
    local left = "--" .. option.name
    if option.kind ~= "flag" then
      left = left .. " " .. (option.metavar or (option.kind == "choice" and table.concat(option.choices, "|")) or
        option.kind:upper())
    end
    local help = option.help or ""
    if option.default ~= nil and option.kind ~= "flag" then help = help .. " (default " .. tostring(option.default) .. ")" end
    if #left > 24 then
      lines[#lines + 1] = "  " .. left
      lines[#lines + 1] = string.rep(" ", 27) .. help
    else
      lines[#lines + 1] = string.format("  %-24s %s", left, help)
    end
  end
  if self.epilog then
    lines[#lines + 1] = ""
    lines[#lines + 1] = self.epilog
  end
  return table.concat(lines, "\n") .. "\n"
end

-- One line naming the mistake, the usage line, exit 2.
function Command:usage_error(message)
  io.stderr:write(self.name .. ": " .. message .. "\n" .. "usage: anelua " .. self.name .. " " .. self.usage_line ..
    "\n(--help lists the options)\n")
  os.exit(M.USAGE_EXIT)
end

-- --activations multiplies quantized weights: without --quantize the model must come quantized
-- (an anelua quantized directory, config.json's quantization_config, or a GGUF file); else a
-- usage error.
function Command:check_activations(opts, model_path)
  if not opts.activations or opts.activations == "float" or opts.quantize then return end
  if model_path and require("ane.models.llama").is_gguf(model_path) then return end -- (its Q8_0 / Q4_0 blocks; the loader says if none)
  local config = model_path and ane.io.read_json(model_path .. "/config.json")
  if type(config) == "table" and type(config.quantization_config) == "table" then return end
  self:usage_error("--activations " .. opts.activations .. " multiplies quantized weights: add --quantize int8 or int4 "
    .. "(or load a quantized checkpoint)")
end

-- A user's mistake found after parsing (a missing file, an unusable value): one line, exit 1.
function Command:fail(message)
  io.stderr:write(self.name .. ": " .. tostring(message) .. "\n")
  os.exit(1)
end

-- Calls f(...) and returns its results; an error it raises (a model refusing a combination
-- of options, say) ends the run with that message on one line instead of a traceback.
function Command:call(f, ...)
  local results = table.pack(pcall(f, ...))
  if not results[1] then self:fail((tostring(results[2]):gsub("^[^:\n]+:%d+: ", ""))) end
  return table.unpack(results, 2, results.n)
end

-- Parses argv (a script's `arg`): returns opts (keys with underscores, defaults filled in)
-- and the list of positional arguments.
function Command:parse(argv)
  local opts, positional = {}, {}
  for _, option in ipairs(self.options) do
    if option.kind == "flag" then opts[option_key(option.name)] = false
    else opts[option_key(option.name)] = option.default end
  end
  local i = 1
  while i <= #argv do
    local word = argv[i]
    if word == "--" then
      for j = i + 1, #argv do positional[#positional + 1] = argv[j] end
      break
    end
    local name, inline = word:match("^%-%-([^=]+)=(.*)$")
    name = name or word:match("^%-%-(.+)$") or (word == "-h" and "help" or nil) -- (-h: as --help, as every tool)
    if name then
      local option = self.by_name[name]
      if not option then self:usage_error("unknown option --" .. name) end
      if option.name == "help" then
        io.write(self:usage())
        os.exit(0)
      end
      if option.kind == "flag" then
        if inline then self:usage_error("--" .. name .. " takes no value") end
        opts[option_key(name)] = true
      else
        local text = inline
        if not text then
          i = i + 1
          text = argv[i]
          if text == nil then self:usage_error("--" .. name .. " needs a value") end
        end
        local value, why = convert(option, text)
        if value == nil then self:usage_error("--" .. name .. " " .. why) end
        if option.kind == "strings" then -- repeatable: every value, in order
          local list = opts[option_key(name)]
          list = type(list) == "table" and list or {}
          list[#list + 1] = value
          value = list
        end
        opts[option_key(name)] = value
      end
    elseif word:match("^%-.") and not tonumber(word) then
      self:usage_error("unknown option " .. word)
    else
      positional[#positional + 1] = word
    end
    i = i + 1
  end
  for _, option in ipairs(self.options) do
    if option.required and opts[option_key(option.name)] == nil then self:usage_error("--" .. option.name .. " is required") end
  end
  if opts.target then
    local ok, why = pcall(ane.set_default_target, opts.target)
    if not ok then self:usage_error("--target: " .. tostring(why):gsub("^[^:]*:%d+: ", ""):gsub("^target ", "")) end
  end
  local required = 0
  for _, p in ipairs(self.positional) do if not p.optional then required = required + 1 end end
  if #positional < required then self:usage_error("missing " .. self.positional[#positional + 1][1]) end
  if #positional > #self.positional and not self.rest then
    self:usage_error("unexpected argument '" .. positional[#self.positional + 1] .. "'")
  end
  return opts, positional
end

--- The path of one of anelua's scripts (get_models.sh, pretokenize.lua, plot.lua, quantize.lua)
--- as a user types it: <checkout>/scripts/NAME, or <prefix>/share/anelua/scripts/NAME installed.
function M.script_path(name)
  local data = ane.data_dir()
  local root = data and data:match("^(.*)/data$")
  return root and (root .. "/scripts/" .. name) or ("scripts/" .. name)
end

--- The option rows of several lists, in order, as one list.
function M.join(...)
  local rows = {}
  for _, list in ipairs({ ... }) do
    for _, row in ipairs(list) do rows[#rows + 1] = row end
  end
  return rows
end

--- The rows of --quantize and --activations (a model loaded quantized), for a command's options.
function M.quantize_options()
  return {
    { "quantize", "choice", nil, "quantize the linear layers at load: int8 (per-row scales), int4 (per-row palettes), "
      .. "or on sim q8_0 / q4_0 (llama.cpp's blocks of 32, a scale each)", choices = { "int8", "int4", "q8_0", "q4_0" } },
    { "activations", "choice", nil, "products with the quantized weights on integer activations, the cpu profile's: "
      .. "int8 (fastest; a small measured drift) or int16 (int4 weights faster, drift below fp16's rounding), or float "
      .. "(the exact products); default float, but int8 for a GGUF file's Q8_0 / Q4_0 / Q4_K / Q5_K / Q6_K layers on sim (llama.cpp's "
      .. "arithmetic); docs/performance.md", choices = { "int8", "int16", "float" } },
  }
end

-- The sampling settings a generating command starts from when neither its flags nor (for
-- chat) the model's generation_config.json set them.
M.SAMPLING_DEFAULTS = { temperature = 0.8, top_k = 40, top_p = 1, min_p = 0 }

-- The options every generating command takes (prompt, sampling, backend, numerics), after
-- `first` (the command's own rows); max_tokens is its default length; seed_help what else
-- --seed seeds (gpt2.lua's demo weights), if anything. chat (optional): {prompt = the help of a
-- --prompt without default}, whose sampling defaults are the model's generation_config.json
-- (M.sampling reads it).
function M.with_generation_options(first, max_tokens, seed_help, chat)
  local D = M.SAMPLING_DEFAULTS
  local function default(name, fallback_text)
    if chat then return nil, " (default: generation_config.json's, else " .. fallback_text .. ")" end
    return D[name], ""
  end
  local temperature, temperature_help = default("temperature", D.temperature)
  local top_k, top_k_help = default("top_k", D.top_k)
  local top_p, top_p_help = default("top_p", D.top_p)
  local min_p, min_p_help = default("min_p", D.min_p)
  local rows = { table.unpack(first) }
  for _, row in ipairs({
    chat and { "prompt", "string", nil, chat.prompt } or { "prompt", "string", "Once upon a time", "text to continue" },
    { "max-tokens", "integer", max_tokens, "tokens to generate" .. (chat and " per answer" or ""), min = 1 },
    { "temperature", "number", temperature, "0 = greedy" .. temperature_help, min = 0 },
    { "top-k", "integer", top_k, "sample among the K most likely tokens (0 = all)" .. top_k_help, min = 0 },
    { "top-p", "number", top_p, "nucleus sampling mass (1 = off)" .. top_p_help, min = 0, max = 1, open_min = true },
    { "min-p", "number", min_p, "leave out tokens less likely than this share of the likeliest (0 = off)" .. min_p_help,
      min = 0, max = 1 },
    { "repeat-penalty", "number", 1, "divide the logits of the last 64 tokens by this (llama.cpp's; 1 = off)", min = 0,
      open_min = true },
    { "presence-penalty", "number", 0, "subtract this from the logits of tokens in the last 64" },
    { "frequency-penalty", "number", 0, "subtract this times their count from the logits of tokens in the last 64" },
    { "seed", "integer", 1, "sampling seed" .. (seed_help and (" (" .. seed_help .. ")") or "") },
    { "backend", "choice", nil, "sim (CPU, everywhere) or ane (the device, macOS); default ane.default_backend()",
      choices = { "sim", "ane" } },
    { "precision", "choice", "fp16", "fp16 (the device's numerics) or fp32 (the CPU reference)", choices = { "fp16", "fp32" } },
    { "profile", "choice", nil, "ane (the device's rules; default for fp16) or cpu (no padding; default for fp32)",
      choices = { "ane", "cpu" } },
  }) do rows[#rows + 1] = row end
  return rows
end

-- model:generate's options from the parsed generation options; vocab: the number of ids the
-- tokenizer decodes (none beyond are drawn); generation: the model's generation_config.json
-- (its temperature, top_k, top_p, min_p and do_sample stand where no flag was given).
function M.sampling(opts, vocab, generation)
  generation = generation or {}
  local function pick(name)
    local value = opts[name]
    if value == nil and type(generation[name]) == "number" then value = generation[name] end
    if value == nil then value = M.SAMPLING_DEFAULTS[name] end
    return value
  end
  local temperature = pick("temperature")
  if opts.temperature == nil and generation.do_sample == false then temperature = 0 end -- (its greedy default)
  local top_k, top_p, min_p = math.floor(pick("top_k")), pick("top_p"), pick("min_p")
  return { max_tokens = opts.max_tokens, temperature = temperature, top_k = top_k > 0 and top_k or nil,
    top_p = top_p < 1 and top_p or nil, min_p = min_p > 0 and min_p or nil,
    repeat_penalty = opts.repeat_penalty, presence_penalty = opts.presence_penalty,
    frequency_penalty = opts.frequency_penalty, seed = opts.seed, vocab = vocab }
end

-- Streams a generation of ids below vocab (the tokenizer's): hands each id to on_token (which
-- writes it; returning false stops), and after a Ctrl-C (graceful interrupts) stops after the
-- current token. Ends the line and returns whether it was interrupted.
function M.stream(model, prompt, opts, vocab, on_token, on_end)
  local room = model.context_length - #prompt -- positions left after the prompt
  if room < 1 then
    io.stderr:write(string.format("the prompt's %d tokens fill the model's context of %d positions: nothing to generate\n",
      #prompt, model.context_length))
    os.exit(1)
  end
  local interrupted, produced, last = false, 0, nil
  for id in model:generate(prompt, M.sampling(opts, vocab)) do
    produced, last = produced + 1, id
    if on_token(id) == false then break end
    io.flush()
    if M.stop_requested() then interrupted = true break end
  end
  if on_end then on_end() end -- (text held back until the end: a stop string's possible start)
  io.write("\n")
  io.flush()
  if interrupted then io.stderr:write("(interrupted: stopped after the current token)\n") end
  if not interrupted and produced == room and room < opts.max_tokens and last ~= model.stop_token then
    io.stderr:write(string.format("(stopped at the end of the model's context: %d positions, %d of them the prompt; "
      .. "--max-tokens asked for %d)\n", model.context_length, #prompt, opts.max_tokens))
  end
  return interrupted
end

-- Selects the default backend, or fails with the backend's own message (no traceback).
function Command:use_backend(name)
  if not name then return end
  local ok, err = pcall(ane.set_default_backend, name)
  if not ok then self:fail((tostring(err):gsub("^[^:]*:%d+: ", ""))) end
end

function Command:graceful_interrupts()
  ane.set_graceful_interrupts(true)
end

function M.stop_requested() return ane.stop_requested() end

-- The generation statistics every example prints, in one format, on stderr (stdout is the
-- generated text alone).
function M.report_stats(model)
  local s, runtime = model:stats(), ane.stats()
  local why = s.profile == "ane" and "the device's rules and its 32-wide I/O rows (ANE-21); each decode step computes one "
    .. "position, and a prompt of up to 8 tokens goes through those steps" or "no device rules, no padding"
  io.stderr:write(string.format([[
--- stats
backend            %s (precision %s)
profile            %s: %s
programs           %d compiled in %.0f ms (runtime: %d compiles, %d cache hits, budget left %d)
prefill            %d tokens, %.1f tokens/s
decode             %d tokens, %.1f tokens/s, %.1f ms/token
]], s.backend, s.precision, s.profile, why, s.programs, s.compile_ms, runtime.compiles, runtime.cache_hits,
    runtime.budget_left, s.prefill_tokens, s.prefill_tokens_per_s, s.decode_tokens, s.decode_tokens_per_s,
    s.decode_ms_per_token))
end

return M

-- ane.chat: conversations in a model's own chat template. The template is the directory's
-- (tokenizer_config.json's chat_template, or chat_template.jinja beside it), rendered by
-- ane.jinja as transformers renders it; a conversation keeps its turns in one session's KV
-- cache, feeding only what a re-render of the whole conversation adds to what the cache holds
-- (and going back to where they part, when the template rewrites an earlier turn: Qwen3 drops
-- an answered turn's <think> block). Also the end-of-turn ids and a <think> filter for
-- streamed text.
--
--   local chat = require("ane.chat")
--   local template = assert(chat.template("models/Qwen3-0.6B"))
--   template:render({ { role = "user", content = "Hi" } }, { add_generation_prompt = true })
--   local conversation = chat.conversation(model, template, { capacity = 2048 })
--   conversation:ask("Hi", { temperature = 0.6, stop = chat.stop_ids(...) }, io.write)
local ane = require("ane")
local jinja = require("ane.jinja")
local lfs = require("lfs")

local M = {}

-- A special token as tokenizer_config.json writes it: a string, or an AddedToken {content =}.
local function token_text(entry)
  if type(entry) == "table" then entry = entry.content end
  return type(entry) == "string" and entry or nil
end

local Template = {}
Template.__index = Template

--- The chat template of the model directory `dir`: chat_template.jinja, else
--- tokenizer_config.json's chat_template (a string, or a list of named ones: "default").
--- Returns the template, or nil and a message naming the file.
function M.template(dir)
  local config_path = dir .. "/tokenizer_config.json"
  local config = {}
  if lfs.attributes(config_path) then
    local err
    config, err = ane.io.read_json(config_path)
    if not config then return nil, err end
  end
  local source, where = nil, config_path .. ": chat_template"
  local jinja_path = dir .. "/chat_template.jinja"
  if lfs.attributes(jinja_path) then
    local f = assert(io.open(jinja_path, "rb"))
    source, where = f:read("a"), jinja_path
    f:close()
  elseif type(config.chat_template) == "string" then
    source = config.chat_template
  elseif type(config.chat_template) == "table" then
    for _, named in ipairs(config.chat_template) do
      if type(named) == "table" and named.name == "default" then source = named.template end
    end
    if type(source) ~= "string" then return nil, config_path .. ": chat_template is a list with no 'default' template" end
  end
  if not source then
    return nil, string.format("%s: no chat template (tokenizer_config.json's chat_template or chat_template.jinja); "
      .. "`anelua run` continues raw text", dir)
  end
  local compiled, err = jinja.compile(source)
  if not compiled then return nil, where .. ": " .. err end
  return setmetatable({ compiled = compiled, where = where, bos_token = token_text(config.bos_token),
    eos_token = token_text(config.eos_token) }, Template)
end

--- The template from a source string (bos_token and eos_token as the template reads them).
function M.template_from_source(source, specials)
  local compiled, err = jinja.compile(source)
  if not compiled then return nil, "chat template: " .. err end
  specials = specials or {}
  return setmetatable({ compiled = compiled, where = "chat template", bos_token = specials.bos_token,
    eos_token = specials.eos_token }, Template)
end

local function check(messages)
  if type(messages) ~= "table" or #messages == 0 then error("render: messages must be a non-empty list", 3) end
  for i, m in ipairs(messages) do
    if type(m) ~= "table" or type(m.role) ~= "string" then error(string.format("render: message %d has no role string", i), 3) end
    if type(m.content) ~= "string" then error(string.format("render: message %d has no content string", i), 3) end
  end
end

--- The conversation as the model reads it: opts.add_generation_prompt opens the assistant's
--- turn; other fields of opts (enable_thinking = false, ...) are variables the template reads.
--- Returns the text, or nil and the template's message (e.g. a role order it refuses).
function Template:render(messages, opts)
  check(messages)
  local context = { bos_token = self.bos_token, eos_token = self.eos_token }
  for k, v in pairs(opts or {}) do context[k] = v end
  context.messages = messages
  local text, err = self.compiled:render(context)
  if not text then return nil, self.where .. ": " .. err end
  return text
end

--- A splitter of streamed assistant text: returns a function that takes the next piece and
--- returns two strings, the part inside <think> ... </think> (the reasoning) and the part
--- outside it (the answer, without the newlines that follow a </think>). A piece that may
--- begin a tag waits for the next, unless `last` says no piece follows (then all is given).
function M.thinking_splitter()
  local buffer, inside = "", false
  local function held_back(tag) -- how much of the buffer's end could begin `tag`
    for k = math.min(#buffer, #tag - 1), 1, -1 do
      if tag:sub(1, k) == buffer:sub(-k) then return k end
    end
    return 0
  end
  return function(piece, last)
    buffer = buffer .. piece
    local reasoning, answer = {}, {}
    while true do
      local tag = inside and "</think>" or "<think>"
      local at = buffer:find(tag, 1, true)
      local out = inside and reasoning or answer
      if not at then
        local keep = last and 0 or held_back(tag)
        out[#out + 1] = buffer:sub(1, #buffer - keep)
        buffer = buffer:sub(#buffer - keep + 1)
        return table.concat(reasoning), table.concat(answer)
      end
      out[#out + 1] = buffer:sub(1, at - 1)
      buffer = buffer:sub(at + #tag)
      if inside then buffer = buffer:gsub("^\n+", "") end
      inside = not inside
    end
  end
end

--- A filter for streamed assistant text: returns a function that takes the next piece and
--- returns what to show, dropping <think> ... </think> when show_thinking is false; `last`
--- (no piece follows) gives what it held back.
function M.thinking_filter(show_thinking)
  if show_thinking then return function(piece) return piece end end
  local split = M.thinking_splitter()
  return function(piece, last)
    local _, answer = split(piece, last)
    return answer
  end
end

--- The ids that end an assistant turn: config.json's and generation_config.json's
--- eos_token_id (a number or a list), and the template's eos_token when the tokenizer reads
--- it as one id; as a set.
function M.stop_ids(config, generation_config, template, tokenizer)
  local ids = {}
  for _, source in ipairs({ config or {}, generation_config or {} }) do
    local eos = source.eos_token_id
    for _, id in ipairs(type(eos) == "table" and eos or { eos }) do
      local integer = type(id) == "number" and math.tointeger(id) -- (anything else names no token)
      if integer then ids[integer] = true end
    end
  end
  if template and template.eos_token and tokenizer and tokenizer.encode then
    local ok, eos = pcall(tokenizer.encode, tokenizer, template.eos_token)
    if ok and #eos == 1 then ids[eos[1]] = true end
  end
  return ids
end

-- ------------------------------------------------------------------ conversations

local Conversation = {}
Conversation.__index = Conversation

--- A conversation with `model` (its tokenizer) in `template`: opts.capacity positions of one
--- session, opts.system a system message, opts.variables what the template reads besides
--- (enable_thinking = false, ...).
function M.conversation(model, template, opts)
  opts = opts or {}
  local conversation = setmetatable({ model = model, template = template, tokenizer = model.tokenizer,
    capacity = opts.capacity, system = opts.system, variables = opts.variables or {} }, Conversation)
  conversation:reset()
  return conversation
end

--- Forgets every turn (the system message stays).
function Conversation:reset()
  self.session = self.model:session({ capacity = self.capacity })
  self.messages = self.system and { { role = "system", content = self.system } } or {}
  self.held = {} -- the ids the session holds, in order
end

--- How many leading ids the arrays a and b share.
function M.shared_prefix(a, b)
  local n = 0
  while n < #a and n < #b and a[n + 1] == b[n + 1] do n = n + 1 end
  return n
end
local shared_prefix = M.shared_prefix

--- One user turn and the streamed answer: sampling as Session:generate takes it (stop = the
--- end-of-turn ids), on_text(piece) for each piece of new text. Returns a table {answer,
--- prompt_tokens (fed this turn), reused (positions kept from earlier turns), tokens (new),
--- prefill_seconds, decode_seconds, ended = "stop" | "length" | "context" | "interrupted"}, or
--- nil and why the turn was not taken (it does not fit, or the template refuses it).
function Conversation:ask(content, sampling, on_text, should_stop)
  local messages = {}
  for i, m in ipairs(self.messages) do messages[i] = m end
  messages[#messages + 1] = { role = "user", content = content }
  local variables = { add_generation_prompt = true }
  for k, v in pairs(self.variables) do variables[k] = v end
  local text, err = self.template:render(messages, variables)
  if not text then return nil, err end
  local ids = self.tokenizer:encode(text)
  local session = self.session
  -- keep what the cache shares with the new text; at least one id is fed (its logits are read)
  local keep = math.min(shared_prefix(self.held, ids), #ids - 1)
  if #ids > session.capacity then
    return nil, string.format("this turn does not fit: the conversation would take %d of its %d positions", #ids,
      session.capacity)
  end
  session:rewind(keep)
  local counters = self.model.counters
  local prefill_before, decode_before = counters.prefill_seconds + counters.decode_seconds, counters.decode_seconds
  local new = {}
  for i = keep + 1, #ids do new[#new + 1] = ids[i] end
  assert(session:feed(new))
  local prefill_seconds = counters.prefill_seconds + counters.decode_seconds - prefill_before
  decode_before = counters.decode_seconds
  local produced, shown, ended = {}, "", "length"
  local options = {}
  for k, v in pairs(sampling or {}) do options[k] = v end
  options.max_tokens = math.min(options.max_tokens or 512, session:room())
  options.vocab = options.vocab or self.tokenizer.vocab_size
  options.recent = {}
  for i, id in ipairs(ids) do options.recent[i] = id end
  local stop = options.stop or {}
  for id in session:generate(options) do
    if stop[id] then ended = "stop" break end
    produced[#produced + 1] = id
    local decoded = self.tokenizer:decode(produced) -- a token may end inside a UTF-8 character
    if on_text then on_text(decoded:sub(#shown + 1)) end
    shown = decoded
    if should_stop and should_stop() then ended = "interrupted" break end
  end
  if ended == "length" and session:room() == 0 then ended = "context" end
  -- what the cache holds: the prompt, and the answer's ids that were fed (the last one is
  -- not fed when the answer stopped or was interrupted after it)
  local prompt_length = #ids
  self.held = ids
  for i = 1, session.position - prompt_length do self.held[prompt_length + i] = produced[i] end
  messages[#messages + 1] = { role = "assistant", content = shown }
  self.messages = messages
  return { answer = shown, prompt_tokens = #new, reused = keep, tokens = #produced, ended = ended,
    prefill_seconds = prefill_seconds, decode_seconds = counters.decode_seconds - decode_before }
end

return M

-- ane.serve: an OpenAI-compatible API over one loaded model, for `anelua serve`
-- (lua/ane/commands/serve.lua runs it over anelua.http). Endpoints: POST /v1/chat/completions
-- and /v1/completions (whole, or streamed as server-sent events ending in `data: [DONE]`),
-- GET /v1/models and /health. Requests are checked field by field against what OpenAI's API
-- defines; a field this server does not carry out is a 400 naming it, never ignored.
--
-- The engine: `parallel` slots, each a session with its own KV cache. Every turn of the loop
-- (M.Server:step) draws each busy slot's next token and feeds them all in one decode step
-- (ane.models.generation.step_together: each slot's attention on its own cache, the FFNs and
-- the classifier as one product over all the slots, so each weight is read once per turn for
-- all of them; in fp16 each slot's logits are bit for bit those it would get alone). A new
-- request takes the idle slot whose cache shares the longest prefix with its prompt, and only
-- the rest of the prompt is fed (a conversation's next turn does not prefill again), in parts:
-- each turn feeds at most `prefill_chunk` prompt tokens over all the slots (default 256) before
-- the decode step, so a long prompt delays the other slots' next tokens by one part's time, not
-- its whole prefill's (llama.cpp's server likewise splits prompts into batches). A request that
-- finds every slot busy waits in a queue of `queue` places (503 beyond it).
--
--   local server = require("ane.serve").new(model, { id = "qwen3", parallel = 4, chat = {...} })
--   server:handle(request)   -- an anelua.http request: answered, or taken as a job
--   server:step()            -- one part of the waiting prompts, then one token for every slot
--                            -- past its prompt; true while any slot is busy or a request waits
local cjson = require("cjson")
local text_stream = require("ane.text_stream")
local ane = require("ane")
local chat = require("ane.chat")
local generation = require("ane.models.generation")

local M = {}
local Server = {}
Server.__index = Server
M.Server = Server

local null = cjson.null
-- lua-cjson 2.1 writes an empty table as {}: an empty list is this marker, turned into [] as
-- the body is encoded.
local EMPTY_LIST = "\0anelua:empty-list\0"
local function encode(value) return (cjson.encode(value):gsub('"\\u0000anelua:empty%-list\\u0000"', "[]")) end

-- ------------------------------------------------------------------ errors in OpenAI's shape

local ERROR_TYPES = { [400] = "invalid_request_error", [401] = "authentication_error", [404] = "not_found_error",
  [405] = "invalid_request_error", [413] = "invalid_request_error", [503] = "server_error", [500] = "server_error" }

-- A request's mistake: status, message, the field it names (param) and a code.
local function refusal(status, message, param, code)
  return { status = status, message = message, param = param, code = code }
end

local function json_response(request, status, value, extra_headers)
  local headers = { ["Content-Type"] = "application/json" }
  for k, v in pairs(extra_headers or {}) do headers[k] = v end
  request:respond(status, headers, encode(value))
end

local function send_refusal(request, r, extra_headers)
  json_response(request, r.status, { error = { message = r.message, type = ERROR_TYPES[r.status] or "server_error",
    param = r.param or null, code = r.code or null } }, extra_headers)
end

-- ------------------------------------------------------------------ request fields

-- The fields of each endpoint: a checker per field (value -> the value to use, or nil and a
-- message), and the fields OpenAI defines that this server does not carry out.
local function number_in(low, high, integer)
  return function(v)
    if type(v) ~= "number" or v ~= v then return nil, "must be a number" end
    if integer and math.tointeger(v) == nil then return nil, "must be an integer" end
    if (low and v < low) or (high and v > high) then
      return nil, string.format("must be %s", high and string.format("from %g to %g", low, high) or ">= " .. low)
    end
    return integer and math.tointeger(v) or v
  end
end

local function boolean(v)
  if type(v) ~= "boolean" then return nil, "must be true or false" end
  return v
end

local function string_field(v)
  if type(v) ~= "string" then return nil, "must be a string" end
  return v
end

local function stop_list(v)
  if type(v) == "string" then return { v } end
  if type(v) ~= "table" or (next(v) ~= nil and #v == 0) then return nil, "must be a string or a list of strings" end
  if #v > 4 then return nil, "takes at most 4 strings" end
  for _, s in ipairs(v) do
    if type(s) ~= "string" or s == "" then return nil, "must be a string or a list of non-empty strings" end
  end
  return v
end

local function object(v)
  if type(v) ~= "table" or (next(v) ~= nil and #v > 0) then return nil, "must be an object" end
  return v
end

local function stream_options(v)
  local o, err = object(v)
  if not o then return nil, err end
  for key, value in pairs(o) do
    if key ~= "include_usage" then return nil, "has no field '" .. tostring(key) .. "' this server knows" end
    if type(value) ~= "boolean" then return nil, "include_usage must be true or false" end
  end
  return o
end

local function n_one(v)
  if v ~= 1 then return nil, "must be 1: this server gives one choice per request" end
  return v
end

local COMMON = {
  model = string_field, stream = boolean, stream_options = stream_options, stop = stop_list,
  max_tokens = number_in(1, nil, true), temperature = number_in(0, 2), top_p = number_in(0, 1),
  top_k = number_in(0, nil, true), min_p = number_in(0, 1), seed = number_in(nil, nil, true),
  presence_penalty = number_in(-2, 2), frequency_penalty = number_in(-2, 2), repetition_penalty = number_in(0, nil),
  n = n_one, user = string_field,
}
local CHAT_FIELDS = setmetatable({ messages = function(v) return v end, max_completion_tokens = number_in(1, nil, true),
  logprobs = boolean, top_logprobs = number_in(0, 20, true), chat_template_kwargs = object }, { __index = COMMON })
local COMPLETION_FIELDS = setmetatable({ prompt = function(v) return v end, logprobs = number_in(0, 5, true),
  echo = function(v) if v ~= false then return nil, "is not supported (only false)" end return v end },
  { __index = COMMON })
local UNSUPPORTED = { tools = true, tool_choice = true, functions = true, function_call = true, response_format = true,
  logit_bias = true, parallel_tool_calls = true, suffix = true, best_of = true, audio = true, modalities = true,
  prediction = true, reasoning_effort = true, service_tier = true, store = true, metadata = true,
  web_search_options = true }

-- The request's JSON body checked against `fields`: the options table, or nil and a refusal.
local function parse_body(body, fields)
  local ok, json = pcall(cjson.decode, body)
  if not ok then return nil, refusal(400, "the body is not valid JSON: " .. tostring(json):gsub("^.-: ", "")) end
  if type(json) ~= "table" or (next(json) ~= nil and #json > 0) then
    return nil, refusal(400, "the body must be a JSON object")
  end
  local opts = {}
  for key, value in pairs(json) do
    if type(key) ~= "string" then return nil, refusal(400, "the body must be a JSON object") end
    if UNSUPPORTED[key] then
      return nil, refusal(400, "'" .. key .. "' is not supported by this server", key, "unsupported_parameter")
    end
    local check = fields[key]
    if not check then return nil, refusal(400, "unrecognized request argument: '" .. key .. "'", key, "unknown_parameter") end
    if value ~= null then
      local v, why = check(value)
      if v == nil then return nil, refusal(400, "'" .. key .. "' " .. why, key, "invalid_value") end
      opts[key] = v
    end
  end
  return opts
end

-- The messages of a chat request as the template reads them (content a string; a list of
-- text parts joined), or nil and a refusal.
local ROLES = { system = true, developer = true, user = true, assistant = true, tool = true }
local function chat_messages(list)
  if type(list) ~= "table" or #list == 0 then
    return nil, refusal(400, "'messages' must be a non-empty list", "messages", "invalid_value")
  end
  local messages = {}
  for i, m in ipairs(list) do
    local where = string.format("messages[%d]", i - 1)
    if type(m) ~= "table" or not ROLES[m.role] then
      return nil, refusal(400, where .. " must be an object with a role of system, developer, user, assistant or tool",
        where, "invalid_value")
    end
    local content = m.content
    if type(content) == "table" then
      local parts = {}
      for j, part in ipairs(content) do
        if type(part) ~= "table" or part.type ~= "text" or type(part.text) ~= "string" then
          return nil, refusal(400, string.format("%s.content[%d]: only text parts are supported", where, j - 1),
            where .. ".content", "invalid_value")
        end
        parts[#parts + 1] = part.text
      end
      content = table.concat(parts)
    elseif content == nil or content == null then
      content = ""
    end
    if type(content) ~= "string" then
      return nil, refusal(400, where .. ".content must be a string or a list of text parts", where .. ".content",
        "invalid_value")
    end
    for key in pairs(m) do
      if key ~= "role" and key ~= "content" and key ~= "name" then
        return nil, refusal(400, string.format("%s.%s is not supported by this server", where, key), where .. "." .. key,
          "unsupported_parameter")
      end
    end
    messages[i] = { role = m.role == "developer" and "system" or m.role, content = content }
  end
  return messages
end

-- ------------------------------------------------------------------ the server

--- A server over `model` (its tokenizer set). opts: id (the model's name in the API),
--- parallel (slots), queue (waiting places), context (positions per slot), api_key,
--- template + stop_ids (the chat template and its end-of-turn ids; absent: no chat endpoint),
--- log (a function taking one line per request).
function M.new(model, opts)
  local self = setmetatable({ model = model, tok = model.tokenizer, id = opts.id, api_key = opts.api_key,
    template = opts.template, chat_stop_ids = opts.stop_ids or {}, queue_limit = opts.queue or 16, slots = {},
    waiting = {}, log = opts.log or function() end, next_id = 1, created = os.time(), decode_steps = 0,
    decode_tokens = 0, prefill_chunk = opts.prefill_chunk or 256, prefill_parts = 0, prefill_tokens = 0,
    context = math.min(opts.context or model.context_length, model.context_length) }, Server)
  if model.stop_token then self.completion_stop_ids = { [model.stop_token] = true } else self.completion_stop_ids = {} end
  for i = 1, opts.parallel or 1 do self.slots[i] = { index = i, held = {} } end
  return self
end

--- Compiles what the batched decode steps of 2 .. parallel slots use (each layer's attention at
--- a new slot's cache size and FFN, and the final norm, at that many positions), so no request
--- waits for a compile until a conversation outgrows that size; returns how many programs that was.
function Server:prepare()
  local m, count = self.model, 0
  if m.min_width ~= 1 or not m.classify_steps then return 0 end -- (slots stepped one by one)
  local size = require("ane.models.generation").first_cache_size(m, self.context)
  for B = 2, math.min(#self.slots, 16) do
    for l = 1, m.n_layer do
      m:program("ffn", l, B)
      if m.graphs.attn_batch then m:program("attn_batch", l, B, size) end
    end
    m:program("norm", nil, B)
    count = count + m.n_layer * (m.graphs.attn_batch and 2 or 1) + 1
  end
  return count
end

-- Compares two strings in time that depends on their lengths only.
local function same_secret(a, b)
  if #a ~= #b then return false end
  local difference = 0
  for i = 1, #a do difference = difference | (a:byte(i) ~ b:byte(i)) end
  return difference == 0
end

function Server:counts()
  local busy = 0
  for _, slot in ipairs(self.slots) do if slot.job then busy = busy + 1 end end
  return busy, #self.slots - busy, #self.waiting
end

--- Answers a request, or takes it as a job (answered as its tokens come).
function Server:handle(request)
  local method, path = request:method(), request:path()
  local started = ane.clock()
  local function refuse(r, headers)
    send_refusal(request, r, headers)
    self.log(string.format("%s %s %d (%s)", method, path, r.status, r.message))
  end
  if self.api_key then
    local given = (request:header("authorization") or ""):match("^Bearer%s+(.-)%s*$") or ""
    if not same_secret(given, self.api_key) then
      return refuse(refusal(401, "a valid API key is needed (Authorization: Bearer KEY)", nil, "invalid_api_key"))
    end
  end
  if path == "/health" or path == "/v1/health" then
    if method ~= "GET" then return refuse(refusal(405, "use GET on " .. path)) end
    local busy, idle, waiting = self:counts()
    json_response(request, 200, { status = "ok", slots_idle = idle, slots_processing = busy, requests_waiting = waiting,
      decode_steps = self.decode_steps, decode_tokens = self.decode_tokens, prefill_parts = self.prefill_parts,
      prefill_tokens = self.prefill_tokens })
    return
  end
  if path == "/v1/models" then
    if method ~= "GET" then return refuse(refusal(405, "use GET on " .. path)) end
    json_response(request, 200, { object = "list", data = { { id = self.id, object = "model", created = self.created,
      owned_by = "anelua" } } })
    return
  end
  local kind = path == "/v1/chat/completions" and "chat" or path == "/v1/completions" and "completion" or nil
  if not kind then return refuse(refusal(404, "no endpoint " .. method .. " " .. path, nil, "unknown_url")) end
  if method ~= "POST" then return refuse(refusal(405, "use POST on " .. path)) end
  local job, r = self:job(kind, request)
  if not job then return refuse(r) end
  if #self.waiting >= self.queue_limit and not self:idle_slot() then
    return refuse(refusal(503, "every slot is busy and the queue is full; retry shortly", nil, "server_busy"),
      { ["Retry-After"] = "1" })
  end
  job.received = started
  self.waiting[#self.waiting + 1] = job
  self:assign()
end

-- A job from a request's body, or nil and a refusal.
function Server:job(kind, request)
  local opts, r = parse_body(request:body(), kind == "chat" and CHAT_FIELDS or COMPLETION_FIELDS)
  if not opts then return nil, r end
  if opts.model == nil then return nil, refusal(400, "'model' is required", "model", "missing_required_parameter") end
  if opts.model ~= self.id then
    return nil, refusal(404, string.format("the model '%s' does not exist here; this server has '%s'", opts.model, self.id),
      "model", "model_not_found")
  end
  local prompt_text
  local job = { kind = kind, request = request, stream = opts.stream == true,
    include_usage = opts.stream_options and opts.stream_options.include_usage == true,
    stops = opts.stop or {}, max_tokens = opts.max_completion_tokens or opts.max_tokens }
  if opts.stream_options and not job.stream then
    return nil, refusal(400, "'stream_options' is only allowed with stream: true", "stream_options", "invalid_value")
  end
  if kind == "chat" then
    if not self.template then
      return nil, refusal(400, "this model has no chat template: use /v1/completions", "messages", "no_chat_template")
    end
    if opts.messages == nil then return nil, refusal(400, "'messages' is required", "messages", "missing_required_parameter") end
    local messages
    messages, r = chat_messages(opts.messages)
    if not messages then return nil, r end
    local variables = { add_generation_prompt = true }
    for k, v in pairs(opts.chat_template_kwargs or {}) do variables[k] = v end
    local text, why = self.template:render(messages, variables)
    if not text then return nil, refusal(400, why, "messages", "template_refused") end
    prompt_text = text
    job.ids = self.tok:encode(text)
    job.stop_ids = self.chat_stop_ids
    job.logprobs = opts.logprobs == true and (opts.top_logprobs or 0) or nil
    if opts.top_logprobs and not opts.logprobs then
      return nil, refusal(400, "'top_logprobs' needs logprobs: true", "top_logprobs", "invalid_value")
    end
  else
    local prompt = opts.prompt
    if type(prompt) == "table" and #prompt == 1 and type(prompt[1]) == "string" then prompt = prompt[1] end
    if type(prompt) ~= "string" or prompt == "" then
      return nil, refusal(400, "'prompt' must be a non-empty string (one prompt per request)", "prompt", "invalid_value")
    end
    prompt_text = prompt
    job.ids = require("ane.models").prompt_ids(self.model, prompt)
    job.stop_ids = self.completion_stop_ids
    job.logprobs = opts.logprobs
  end
  if #job.ids == 0 then return nil, refusal(400, "the prompt encodes to no tokens", kind == "chat" and "messages" or "prompt") end
  if #job.ids >= self.context then
    return nil, refusal(400, string.format("the prompt is %d tokens; this server's context is %d positions", #job.ids,
      self.context), kind == "chat" and "messages" or "prompt", "context_length_exceeded")
  end
  job.prompt_text = prompt_text
  job.sampling = { temperature = opts.temperature or 1, top_p = opts.top_p and opts.top_p < 1 and opts.top_p or nil,
    top_k = opts.top_k and opts.top_k > 0 and opts.top_k or nil, min_p = opts.min_p and opts.min_p > 0 and opts.min_p or nil,
    seed = opts.seed, presence_penalty = opts.presence_penalty, frequency_penalty = opts.frequency_penalty,
    repeat_penalty = opts.repetition_penalty, vocab = self.tok.vocab_size }
  job.id = (kind == "chat" and "chatcmpl-" or "cmpl-") .. self.next_id
  self.next_id = self.next_id + 1
  return job
end

local shared_prefix = chat.shared_prefix

function Server:idle_slot()
  for _, slot in ipairs(self.slots) do if not slot.job then return slot end end
end

-- Gives waiting jobs to idle slots, in order; each the idle slot sharing most of its prompt.
function Server:assign()
  while #self.waiting > 0 do
    local job = self.waiting[1]
    local best, best_shared = nil, -1
    for _, slot in ipairs(self.slots) do
      if not slot.job then
        local shared = shared_prefix(slot.held, job.ids)
        if shared > best_shared then best, best_shared = slot, shared end
      end
    end
    if not best then return end
    table.remove(self.waiting, 1)
    best.job = job
    job.slot = best
  end
end

-- The chunk of an SSE stream for `job` with this choice delta (or text) and finish reason.
local function chunk(job, self, fields, finish_reason)
  local choice = { index = 0, finish_reason = finish_reason or null }
  for k, v in pairs(fields) do choice[k] = v end
  if job.kind == "chat" then
    return { id = job.id, object = "chat.completion.chunk", created = job.created, model = self.id, choices = { choice } }
  end
  return { id = job.id, object = "text_completion", created = job.created, model = self.id, choices = { choice } }
end

local function send_event(job, value)
  if not job.request:write("data: " .. encode(value) .. "\n\n") then job.cancelled = true end
end

-- The log-probabilities of `id` and the `top` likeliest ids in the row of logits it was drawn
-- from (log-softmax of the model's logits, before sampling's changes).
local function logprob_entry(tok, row, id, top)
  local values = row:totable()
  local largest = -math.huge
  for _, v in ipairs(values) do if v > largest then largest = v end end
  local sum = 0
  for _, v in ipairs(values) do sum = sum + math.exp(v - largest) end
  local log_total = largest + math.log(sum)
  local function entry(i)
    local text = tok:decode({ i })
    local bytes = { text:byte(1, -1) }
    return { token = text, logprob = values[i + 1] - log_total, bytes = bytes }
  end
  local result = entry(id)
  result.top_logprobs = EMPTY_LIST
  if top > 0 then
    result.top_logprobs = {}
    -- the `top` largest in one pass (a short list kept in order), not a sort of the whole row
    local best = {}
    for i, v in ipairs(values) do
      if #best < top or v > values[best[#best]] then
        local at = math.min(#best + 1, top)
        while at > 1 and values[best[at - 1]] < v do
          best[at] = best[at - 1]
          at = at - 1
        end
        best[at] = i
      end
    end
    for k, i in ipairs(best) do result.top_logprobs[k] = entry(i - 1) end
  end
  return result
end

-- The logprobs of a choice in the endpoint's shape, for `entries` (logprob_entry's): a chat's
-- {content = entries}; a completion's parallel lists (tokens, token_logprobs, top_logprobs as
-- {token = logprob} maps, text_offset: each token's byte offset in the completion's text).
local function logprobs_field(job, entries)
  if job.kind == "chat" then return { content = #entries > 0 and entries or EMPTY_LIST } end
  local tokens, logprobs, tops, offsets = {}, {}, {}, {}
  for i, e in ipairs(entries) do
    tokens[i], logprobs[i], offsets[i] = e.token, e.logprob, job.text_offset
    job.text_offset = job.text_offset + #e.token
    local top = {}
    for _, t in ipairs(type(e.top_logprobs) == "table" and e.top_logprobs or {}) do top[t.token] = t.logprob end
    tops[i] = top -- (an empty map is written {}, as OpenAI writes it)
  end
  if #entries == 0 then return { tokens = EMPTY_LIST, token_logprobs = EMPTY_LIST, top_logprobs = EMPTY_LIST,
    text_offset = EMPTY_LIST } end
  return { tokens = tokens, token_logprobs = logprobs, top_logprobs = tops, text_offset = offsets }
end

-- The logprobs a streamed chunk carries: those of the tokens drawn since the last chunk.
local function pending_logprobs(job)
  if not job.logprobs then return null end
  local entries = job.pending_logprobs
  job.pending_logprobs = {}
  return logprobs_field(job, entries)
end

-- Starts a job in its slot: the prompt past what the slot's cache shares is what its prefill
-- (Server:prefill) feeds.
function Server:start(job)
  local slot = job.slot
  if not slot.session then slot.session = self.model:session({ capacity = self.context }) end
  local session = slot.session
  local keep = math.min(shared_prefix(slot.held, job.ids), #job.ids - 1, session.position)
  session:rewind(keep)
  job.prompt_left, job.prompt_fed, job.prompt_parts = {}, 0, 0
  for i = keep + 1, #job.ids do job.prompt_left[#job.prompt_left + 1] = job.ids[i] end
  job.reused = keep
  slot.held = { table.unpack(job.ids) }
  job.created = os.time()
  job.produced = {}
  -- without max_tokens: OpenAI's 16 for a completion, the context's room for a chat answer
  local room = session:room() - #job.prompt_left -- (once the prompt is fed)
  local budget = math.min(job.max_tokens or (job.kind == "completion" and 16 or room), room)
  job.budget = budget
  -- drawn as Session:generate draws: the sampling options, the request's own seed, the
  -- penalties over the prompt and what follows it
  job.recent = { table.unpack(job.ids) }
  job.random = generation.rng(job.sampling.seed)
  job.started = true
  job.answer = {}
  job.reasoning = {}
  job.split = job.kind == "chat" and chat.thinking_splitter() or nil
  job.text = text_stream.new(self.tok, job.ids, job.stops, function(piece) self:emit(job, piece) end)
  job.logprob_entries = job.logprobs and {} or nil
  job.pending_logprobs, job.text_offset = {}, 0
  if job.stream then
    job.request:stream(200, { ["Content-Type"] = "text/event-stream", ["Cache-Control"] = "no-cache" })
    if job.kind == "chat" then send_event(job, chunk(job, self, { delta = { role = "assistant", content = "" } })) end
  end
end

-- Feeds the next part of a started job's prompt, at most `most` tokens; returns how many. On a
-- cache that holds positions the prompt's last id is left for the turn's decode step
-- (Server:step); on an empty one a prompt that fits goes in one prefill, as `anelua run` feeds
-- it. The job is past its prompt (job.prompt_left nil) once every id is in its slot's cache.
function Server:prefill(job, most)
  local left = job.prompt_left
  local remaining = #left - job.prompt_fed
  local held_back = job.slot.session.position > 0 and 1 or 0
  local count = math.min(remaining - held_back, most)
  if count <= 0 then return 0 end
  local part = table.move(left, job.prompt_fed + 1, job.prompt_fed + count, 1, {})
  local ok, err = job.slot.session:feed(part)
  if not ok then error(err) end
  job.prompt_fed, job.prompt_parts = job.prompt_fed + count, job.prompt_parts + 1
  self.prefill_parts, self.prefill_tokens = self.prefill_parts + 1, self.prefill_tokens + count
  if job.prompt_fed == #left then job.prompt_left = nil end
  return count
end

-- New text of a job: split into reasoning and answer (chat), sent as a chunk when streaming;
-- `last`: no text follows (the splitter gives what it held back).
function Server:emit(job, piece, last)
  local reasoning, answer = "", piece
  if job.split then reasoning, answer = job.split(piece, last) end
  if reasoning ~= "" then job.reasoning[#job.reasoning + 1] = reasoning end
  if answer ~= "" then job.answer[#job.answer + 1] = answer end
  if not job.first_token_at then job.first_token_at = ane.clock() end
  if not job.stream or (reasoning == "" and answer == "") then return end
  if job.kind == "chat" then
    local delta = {}
    if reasoning ~= "" then delta.reasoning_content = reasoning end
    if answer ~= "" then delta.content = answer end
    send_event(job, chunk(job, self, { delta = delta, logprobs = pending_logprobs(job) }))
  else
    send_event(job, chunk(job, self, { text = answer, logprobs = pending_logprobs(job) }))
  end
end

-- The next token of a started job, drawn from its slot's logits; returns the id to feed, or
-- nil when the job ends here (its finish_reason set, or cancelled).
function Server:draw(job)
  local session = job.slot.session
  local id = generation.sample(session.logits, job.sampling, job.random, job.recent)
  job.recent[#job.recent + 1] = id
  if job.stop_ids[id] then job.finish_reason = "stop" return nil end
  job.produced[#job.produced + 1] = id
  if job.logprobs then
    local entry = logprob_entry(self.tok, session.logits, id, job.logprobs)
    job.logprob_entries[#job.logprob_entries + 1] = entry
    job.pending_logprobs[#job.pending_logprobs + 1] = entry
  end
  if not job.text:push(id) then job.finish_reason = "stop" return nil end
  if #job.produced >= job.budget then job.finish_reason = "length" return nil end
  if job.cancelled or job.request:gone() then job.cancelled = true return nil end
  return id
end

-- Ends a job: its whole answer, or the stream's last chunks; frees its slot.
function Server:finish(job)
  local slot = job.slot
  -- what the slot's cache holds: the prompt and the answer's ids that were fed
  local session = slot.session
  for i = 1, session.position - #job.ids do slot.held[#job.ids + i] = job.produced[i] end
  for i = session.position + 1, #slot.held do slot.held[i] = nil end
  slot.job, job.slot = nil, nil
  if not job.cancelled then
    job.text:finish()
    if job.split then self:emit(job, "", true) end -- what the splitter still holds
  end
  local usage = { prompt_tokens = #job.ids, completion_tokens = #job.produced,
    total_tokens = #job.ids + #job.produced }
  local seconds = ane.clock() - (job.first_token_at or ane.clock())
  local status = job.cancelled and 499 or 200
  if job.cancelled then
    if job.stream then job.request:finish() end
  elseif job.stream then
    local last = job.kind == "chat" and chunk(job, self, { delta = {}, logprobs = pending_logprobs(job) }, job.finish_reason)
      or chunk(job, self, { text = "", logprobs = pending_logprobs(job) }, job.finish_reason)
    send_event(job, last)
    if job.include_usage then
      send_event(job, { id = job.id, object = job.kind == "chat" and "chat.completion.chunk" or "text_completion",
        created = job.created, model = self.id, choices = EMPTY_LIST, usage = usage })
    end
    job.request:write("data: [DONE]\n\n")
    job.request:finish()
  else
    local choice = { index = 0, finish_reason = job.finish_reason, logprobs = null }
    if job.kind == "chat" then
      choice.message = { role = "assistant", content = table.concat(job.answer) }
      if #job.reasoning > 0 then choice.message.reasoning_content = table.concat(job.reasoning) end
      if job.logprob_entries then choice.logprobs = logprobs_field(job, job.logprob_entries) end
    else
      choice.text = table.concat(job.answer)
      if job.logprob_entries then choice.logprobs = logprobs_field(job, job.logprob_entries) end
    end
    json_response(job.request, 200, { id = job.id, object = job.kind == "chat" and "chat.completion" or "text_completion",
      created = job.created, model = self.id, choices = { choice }, usage = usage })
  end
  local ttft = (job.first_token_at or ane.clock()) - job.received
  self.log(string.format("%s %s %d in=%d (cached %d) out=%d ttft=%.3fs %.1f tok/s%s%s", job.id, job.kind, status,
    #job.ids, job.reused or 0, #job.produced, ttft, seconds > 0 and (#job.produced - 1) / seconds or 0,
    (job.prompt_parts or 0) > 1 and string.format(" prompt in %d parts", job.prompt_parts) or "",
    job.cancelled and " (client gone)" or ""))
end

--- One turn of the engine: jobs that waited start, the prompts not yet fed take up to
--- prefill_chunk tokens between them (the earlier slots first), every slot past its prompt
--- draws its next token, and the slots that go on feed theirs in one decode step, with the
--- last id of each prompt that has only that left. Returns whether any slot is busy or any
--- request waits.
function Server:step()
  self:assign()
  local sessions, ids = {}, {}
  local prefill_room, busy = self.prefill_chunk, false
  for _, slot in ipairs(self.slots) do
    local job = slot.job
    if job and (not job.started or job.prompt_left) then
      local ok, err = pcall(function()
        if not job.started then self:start(job) end
        prefill_room = prefill_room - self:prefill(job, prefill_room)
      end)
      if not ok then
        slot.job, job.slot = nil, nil
        slot.held, slot.session = {}, nil
        send_refusal(job.request, refusal(500, "the model failed on this request: " .. tostring(err):gsub("^[^:]*:%d+: ", "")))
        self.log(job.id .. " 500 " .. tostring(err))
        job = nil
      end
    end
    if job and job.prompt_left then
      busy = true
      if job.cancelled or job.request:gone() then
        job.cancelled = true
        self:finish(job)
      elseif #job.prompt_left - job.prompt_fed == 1 and slot.session.position > 0 then
        -- the prompt's last id rides in this turn's decode step, with no pass over the weights
        -- of its own (a conversation's next turn often has no other new id); the logits after
        -- it give the first token next turn
        sessions[#sessions + 1], ids[#ids + 1] = slot.session, job.prompt_left[#job.prompt_left]
        job.prompt_fed, job.prompt_left = job.prompt_fed + 1, nil
        self.prefill_tokens = self.prefill_tokens + 1
      end -- (else its prompt's next part comes in a later turn)
      job = nil
    end
    if job then
      local id = self:draw(job)
      if id then
        sessions[#sessions + 1], ids[#ids + 1] = slot.session, id
      else
        self:finish(job)
      end
    end
  end
  -- (at most ANE_FEW_COLUMNS = 16 slots a step: each slot's logits its own step's, bit for bit)
  if #sessions > 0 then self.decode_steps, self.decode_tokens = self.decode_steps + 1, self.decode_tokens + #sessions end
  for first = 1, #sessions, 16 do
    generation.step_together(table.move(sessions, first, math.min(first + 15, #sessions), 1, {}),
      table.move(ids, first, math.min(first + 15, #ids), 1, {}))
  end
  return busy or #sessions > 0 or #self.waiting > 0
end

--- Answers a request that came in while the server stops: 503.
function Server:handle_refused(request)
  send_refusal(request, refusal(503, "the server is shutting down", nil, "shutting_down"))
end

--- Refuses what waits (503) and cuts every busy job short (a shutdown's second stage).
function Server:cancel_all()
  for _, job in ipairs(self.waiting) do
    send_refusal(job.request, refusal(503, "the server is shutting down", nil, "shutting_down"))
  end
  self.waiting = {}
  for _, slot in ipairs(self.slots) do
    if slot.job then
      slot.job.cancelled = true
      self:finish(slot.job)
    end
  end
end

return M

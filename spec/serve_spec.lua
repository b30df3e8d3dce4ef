-- `anelua serve` over a real socket: the server started on the tiny Qwen3 (its tokenizer and
-- chat template) on a free loopback port, talked to with curl. Whole and streamed answers equal
-- `anelua run` / `anelua chat` at temperature 0 on the same prompt; stop strings; usage counts;
-- each error status in OpenAI's shape; a client that disconnects mid-stream frees its slot;
-- four concurrent streams give the texts of four sequential ones; SIGTERM exits 0. And the
-- engine's turns driven directly (ane.serve over requests made here): a long prompt fed in
-- parts between the other slot's decode steps.
local cjson = require("cjson")
local helpers = require("spec.helpers")

local MODEL = helpers.root .. "/spec/data/reference/qwen3-tiny"
local NAME = "qwen3-tiny"

-- A server: started with `args`, its port read from the line it prints; stop() sends SIGTERM
-- and returns the exit status and the log.
local function start(args)
  local dir = helpers.tmpdir()
  local log, status_file = dir .. "/serve.log", dir .. "/status"
  -- (the status is written aside and renamed, so that stop() never reads a half-written file)
  local pid = helpers.run(string.format("(%s serve %s --port 0 %s 2> %s > /dev/null; echo $? > %s.part; mv %s.part %s) & echo $!",
    helpers.quote(helpers.anelua), helpers.quote(MODEL), args or "", log, status_file, status_file, status_file,
    status_file)):match("(%d+)")
  local port
  for _ = 1, 600 do
    local text = io.open(log) and helpers.read_file(log) or ""
    port = text:match("on http://[%d.]+:(%d+)/v1")
    if port or text:match("error") then break end
    os.execute("sleep 0.05")
  end
  assert(port, "the server did not start: " .. (io.open(log) and helpers.read_file(log) or "(no log)"))
  -- the profile it runs (its model line): cpu on sim, the device's on the ane backend (ane/ rows);
  -- what it is compared with runs the same
  local profile = assert(helpers.read_file(log):match("profile (%a+)%)"), "no profile in the server's model line")
  local server = { port = tonumber(port), url = "http://127.0.0.1:" .. port, log = log, profile = profile }
  function server.stop()
    os.execute("pkill -TERM -P " .. pid .. " 2>/dev/null")
    for _ = 1, 200 do
      local f = io.open(status_file)
      if f then
        local status = tonumber(f:read("a"))
        f:close()
        return status, helpers.read_file(log)
      end
      os.execute("sleep 0.05")
    end
    error("the server did not stop within 10 s")
  end
  return server
end

-- curl: the status and the body of one request (body a Lua table sent as JSON, or a string).
local function request(server, method, path, body, headers)
  local dir = helpers.tmpdir()
  local args = { "-s", "-o", dir .. "/body", "-w", "'%{http_code}'", "-X", method }
  for _, h in ipairs(headers or {}) do args[#args + 1] = "-H " .. helpers.quote(h) end
  if body then
    helpers.write_file(dir .. "/request", type(body) == "table" and cjson.encode(body) or body)
    args[#args + 1] = "-H 'Content-Type: application/json' --data-binary @" .. dir .. "/request"
  end
  local code = helpers.run("curl " .. table.concat(args, " ") .. " " .. server.url .. path)
  return tonumber(code), helpers.read_file(dir .. "/body")
end

local function post(server, path, body, headers)
  local status, text = request(server, "POST", path, body, headers)
  local ok, json = pcall(cjson.decode, text)
  return status, ok and json or text
end

-- The events of a streamed answer: the decoded chunks, and whether it ended with [DONE].
local function events(text)
  local chunks, done = {}, false
  for data in text:gmatch("data: ([^\n]*)\n\n") do
    if data == "[DONE]" then done = true else chunks[#chunks + 1] = cjson.decode(data) end
  end
  return chunks, done
end

local function streamed_text(chunks, field)
  local parts = {}
  for _, c in ipairs(chunks) do
    local choice = c.choices[1]
    if choice then
      local piece = field == "text" and choice.text or (choice.delta or {})[field]
      if type(piece) == "string" then parts[#parts + 1] = piece end
    end
  end
  return table.concat(parts)
end

describe("anelua serve", function()
  local server
  setup(function() server = start("--parallel 4") end)
  teardown(function()
    local status, log = server.stop()
    assert.are.equal(0, status, log)
  end)

  it("answers /health and /v1/models", function()
    local status, health = post(server, "/health", nil)
    assert.are.equal(405, status) -- (POST on a GET endpoint)
    status, health = request(server, "GET", "/health")
    assert.are.equal(200, status)
    health = cjson.decode(health)
    assert.are.same({ "ok", 4, 0 }, { health.status, health.slots_idle, health.slots_processing })
    local _, models = request(server, "GET", "/v1/models")
    models = cjson.decode(models)
    assert.are.equal("list", models.object)
    assert.are.equal(NAME, models.data[1].id)
  end)

  it("completes text as `anelua run` does at temperature 0, whole and streamed", function()
    local prompt = "Once upon a time"
    local out, err, code = helpers.run_anelua("run " .. helpers.quote(MODEL) .. " --prompt " .. helpers.quote(prompt)
      .. " --temperature 0 --max-tokens 12 --profile " .. server.profile)
    assert.are.equal(0, code, err)
    local want = out:sub(#prompt + 1, -2) -- (run prints the prompt, the text and a newline)
    local status, whole = post(server, "/v1/completions", { model = NAME, prompt = prompt, max_tokens = 12, temperature = 0 })
    assert.are.equal(200, status, cjson.encode(whole))
    assert.are.equal(want, whole.choices[1].text)
    assert.are.equal("length", whole.choices[1].finish_reason)
    local ids = #require("ane.models").prompt_ids(assert(require("ane.models").load(MODEL)), prompt)
    assert.are.same({ ids, 12, ids + 12 }, { whole.usage.prompt_tokens, whole.usage.completion_tokens,
      whole.usage.total_tokens })
    local _, text = request(server, "POST", "/v1/completions", { model = NAME, prompt = prompt, max_tokens = 12,
      temperature = 0, stream = true, stream_options = { include_usage = true } })
    local chunks, done = events(text)
    assert.is_true(done)
    assert.are.equal(want, streamed_text(chunks, "text"))
    assert.are.equal("length", chunks[#chunks - 1].choices[1].finish_reason)
    assert.are.same(whole.usage, chunks[#chunks].usage)
  end)

  it("chats as `anelua chat` does at temperature 0, whole and streamed", function()
    local out, err, code = helpers.run_anelua("chat " .. helpers.quote(MODEL) .. " --prompt 'Hi there' --temperature 0 "
      .. "--max-tokens 10 --no-think --profile " .. server.profile)
    assert.are.equal(0, code, err)
    local body = { model = NAME, messages = { { role = "user", content = "Hi there" } }, max_tokens = 10, temperature = 0,
      chat_template_kwargs = { enable_thinking = false } }
    local status, whole = post(server, "/v1/chat/completions", body)
    assert.are.equal(200, status, cjson.encode(whole))
    assert.are.equal(out:sub(1, -2), whole.choices[1].message.content)
    assert.are.equal("assistant", whole.choices[1].message.role)
    body.stream = true
    local _, text = request(server, "POST", "/v1/chat/completions", body)
    local chunks, done = events(text)
    assert.is_true(done)
    assert.are.equal("assistant", chunks[1].choices[1].delta.role)
    assert.are.equal(whole.choices[1].message.content, streamed_text(chunks, "content"))
    assert.are.equal(whole.choices[1].finish_reason, chunks[#chunks].choices[1].finish_reason)
  end)

  -- The official client (npm `openai`, pinned in spec/openai/package-lock.json, installed by
  -- scripts/setup.sh) parses the same answers curl gets, streamed and whole.
  it("serves the official OpenAI client: chat and completions, whole and streamed", function()
    local client = helpers.root .. "/spec/openai/client.mjs"
    assert.is_truthy(io.open(helpers.root .. "/spec/openai/node_modules/openai/package.json"),
      "the openai package is missing: scripts/setup.sh installs it (npm ci --prefix spec/openai)")
    local out, err, code = helpers.run("node " .. helpers.quote(client) .. " " .. server.url .. "/v1 " .. NAME)
    assert.are.equal(0, code, err)
    local got = cjson.decode(out)
    local _, chat = post(server, "/v1/chat/completions", { model = NAME, messages = { { role = "user",
      content = "Hi there" } }, temperature = 0, max_tokens = 10 })
    local _, completion = post(server, "/v1/completions", { model = NAME, prompt = "Once upon a time", temperature = 0,
      max_tokens = 10 })
    assert.are.equal(chat.choices[1].message.content, got.chat)
    assert.are.equal(chat.choices[1].message.content, got.chat_streamed)
    assert.are.same({ chat.choices[1].finish_reason, chat.choices[1].finish_reason }, { got.chat_finish,
      got.chat_streamed_finish })
    assert.are.same(chat.usage, got.chat_usage)
    assert.are.equal(completion.choices[1].text, got.completion)
    assert.are.equal(completion.choices[1].text, got.completion_streamed)
    assert.are.same(completion.usage, got.completion_usage)
    assert.are.same({ 400, "n" }, { got.refusal.status, got.refusal.param })
    assert.are.same({ NAME }, got.models)
  end)

  -- logprobs against the model run in this process (fp16, the server's profile), on a
  -- prompt no slot has seen (its prefill, as the in-process session's): the first token's
  -- log-probability is the log-softmax of the prompt's logits (double here, fp32 there: within
  -- 1e-5 of values of size ~5). The same prompt again takes the slot's cache (its last token
  -- through a decode step, whose fp16 sums differ from the prefill's by ~3e-4), whole and
  -- streamed alike: those two carry the same entries.
  it("gives the log-probabilities of the drawn tokens, whole and streamed alike", function()
    local prompt = "Zebras never sleep"
    local body = { model = NAME, prompt = prompt, max_tokens = 5, temperature = 0, logprobs = 2 }
    local _, first = post(server, "/v1/completions", body)
    local lp = first.choices[1].logprobs
    assert.are.equal(5, #lp.tokens)
    assert.are.equal(first.choices[1].text, table.concat(lp.tokens))
    local model = assert(require("ane.models").load(MODEL, { precision = "fp16", profile = server.profile }))
    local session = model:session({ capacity = 64 })
    local row = session:feed(require("ane.models").prompt_ids(model, prompt)):totable()
    local peak, sum, best = -math.huge, 0, 1
    for i, v in ipairs(row) do
      peak = math.max(peak, v)
      if v > row[best] then best = i end
    end
    for _, v in ipairs(row) do sum = sum + math.exp(v - peak) end
    local want = row[best] - peak - math.log(sum)
    assert.is_true(math.abs(lp.token_logprobs[1] - want) < 1e-5, lp.token_logprobs[1] .. " vs " .. want)
    for i = 1, 5 do
      local top, count, highest = lp.top_logprobs[i], 0, -math.huge
      for _, v in pairs(top) do count, highest = count + 1, math.max(highest, v) end
      assert.are.equal(2, count)
      assert.are.equal(highest, lp.token_logprobs[i]) -- greedy: the drawn token is the likeliest
    end
    local _, whole = post(server, "/v1/completions", body)
    body.stream = true
    local _, text = request(server, "POST", "/v1/completions", body)
    local tokens, values = {}, {}
    for _, c in ipairs((events(text))) do
      local l = c.choices[1] and c.choices[1].logprobs
      if type(l) == "table" then
        for i, t in ipairs(l.tokens) do tokens[#tokens + 1], values[#values + 1] = t, l.token_logprobs[i] end
      end
    end
    assert.are.same(whole.choices[1].logprobs.tokens, tokens)
    assert.are.same(whole.choices[1].logprobs.token_logprobs, values)
    local _, chat = post(server, "/v1/chat/completions", { model = NAME, messages = { { role = "user", content = "Hi" } },
      max_tokens = 4, temperature = 0, logprobs = true, top_logprobs = 3 })
    local content = chat.choices[1].logprobs.content
    assert.are.equal(4, #content)
    assert.are.equal(3, #content[1].top_logprobs)
    assert.are.equal(content[1].top_logprobs[1].logprob, content[1].logprob)
  end)

  it("ends the text before a stop string, with finish_reason stop", function()
    local _, free = post(server, "/v1/completions", { model = NAME, prompt = "Once upon a time", max_tokens = 12,
      temperature = 0 })
    local text = free.choices[1].text
    local stop = text:sub(5, 6) -- two characters from inside the free text
    local status, cut = post(server, "/v1/completions", { model = NAME, prompt = "Once upon a time", max_tokens = 12,
      temperature = 0, stop = { "never appears", stop } })
    assert.are.equal(200, status)
    assert.are.equal(text:sub(1, text:find(stop, 1, true) - 1), cut.choices[1].text)
    assert.are.equal("stop", cut.choices[1].finish_reason)
    assert.is_true(cut.usage.completion_tokens < 12)
  end)

  it("refuses a client's mistakes with 400 or 404 in OpenAI's shape, naming the field", function()
    local cases = {
      { "{bad", 400, nil, "not valid JSON" },
      { { model = NAME, prompt = "x", temperature = "hot" }, 400, "temperature", "'temperature' must be a number" },
      { { model = NAME, prompt = "x", n = 2 }, 400, "n", "must be 1" },
      { { model = NAME, prompt = "x", tools = {} }, 400, "tools", "not supported" },
      { { model = NAME, prompt = "x", frobnicate = 1 }, 400, "frobnicate", "unrecognized request argument" },
      { { prompt = "x" }, 400, "model", "'model' is required" },
      { { model = "gpt-4o", prompt = "x" }, 404, "model", "does not exist here" },
      { { model = NAME, prompt = "" }, 400, "prompt", "non-empty string" },
      { { model = NAME, prompt = "x", stop = { 1 } }, 400, "stop", "list of non-empty strings" },
    }
    for _, case in ipairs(cases) do
      local status, answer = post(server, "/v1/completions", case[1])
      assert.are.equal(case[2], status, cjson.encode(answer))
      assert.are.equal(case[3] or cjson.null, answer.error.param)
      assert.matches(case[4], answer.error.message, 1, true)
      assert.is_string(answer.error.type)
    end
    local status, answer = post(server, "/v1/chat/completions", { model = NAME, messages = { { role = "robot",
      content = "x" } } })
    assert.are.equal(400, status)
    assert.are.equal("messages[0]", answer.error.param)
    status, answer = post(server, "/v1/nothing", { model = NAME })
    assert.are.equal(404, status)
    assert.matches("no endpoint POST /v1/nothing", answer.error.message, 1, true)
  end)

  it("frees the slot of a client that disconnects mid-stream", function()
    -- curl gives up after 0.3 s of a 4,000-token stream the tiny model cannot finish by then
    os.execute("curl -s -m 0.3 -o /dev/null " .. server.url .. "/v1/completions -d "
      .. helpers.quote(cjson.encode({ model = NAME, prompt = "Once", max_tokens = 100, temperature = 1, stream = true })))
    local health
    for _ = 1, 100 do
      local _, text = request(server, "GET", "/health")
      health = cjson.decode(text)
      if health.slots_idle == 4 then break end
      os.execute("sleep 0.05")
    end
    assert.are.equal(4, health.slots_idle)
  end)

  it("gives four concurrent streams the texts of four sequential answers", function()
    local prompts = { "A dog", "Blue sky", "Cold rain", "Deep sea" } -- (no prefix shared with earlier prompts)
    local sequential = {}
    for i, prompt in ipairs(prompts) do
      local _, answer = post(server, "/v1/completions", { model = NAME, prompt = prompt, max_tokens = 16,
        temperature = 0.8, seed = i })
      sequential[i] = answer.choices[1].text
    end
    local dir = helpers.tmpdir()
    -- (one curl opening the four connections at once, -Z --parallel-immediate: four processes
    -- started one after another could each finish before the next connected on a loaded machine)
    local transfers = {}
    for i, prompt in ipairs(prompts) do
      transfers[i] = string.format("-s -N -o %s/%d %s/v1/completions -d %s", dir, i, server.url,
        helpers.quote(cjson.encode({ model = NAME, prompt = prompt, max_tokens = 16, temperature = 0.8, seed = i,
          stream = true })))
    end
    local function health() return cjson.decode(select(2, request(server, "GET", "/health"))) end
    local before = health()
    os.execute("curl -Z --parallel-immediate --parallel-max 4 " .. table.concat(transfers, " --next "))
    local after = health()
    -- the streams overlapped: their decode steps fed several slots at once
    local steps, tokens = after.decode_steps - before.decode_steps, after.decode_tokens - before.decode_tokens
    assert.is_true(tokens > steps, tokens .. " tokens in " .. steps .. " decode steps")
    for i = 1, #prompts do
      local chunks, done = events(helpers.read_file(dir .. "/" .. i))
      assert.is_true(done)
      assert.are.equal(sequential[i], streamed_text(chunks, "text"), prompts[i])
    end
  end)
end)

describe("anelua serve's limits", function()
  it("says 401 without the key, 413 for a large body, 503 when the queue is full", function()
    local server = start("--api-key sesame --max-body 2048 --parallel 1 --queue 0")
    local stopped
    finally(function() if not stopped then server.stop() end end)
    local body = { model = NAME, prompt = "Once", max_tokens = 4, temperature = 0 }
    local status, answer = post(server, "/v1/completions", body)
    assert.are.equal(401, status)
    assert.are.equal("invalid_api_key", answer.error.code)
    status = post(server, "/v1/completions", body, { "Authorization: Bearer sesam" })
    assert.are.equal(401, status)
    status = post(server, "/v1/completions", body, { "Authorization: Bearer sesame" })
    assert.are.equal(200, status)
    status, answer = post(server, "/v1/completions", { model = NAME, prompt = string.rep("a ", 2000) },
      { "Authorization: Bearer sesame" })
    assert.are.equal(413, status)
    assert.matches("larger than the server takes", answer.error.message, 1, true)
    -- one slot, no queue: of 12 requests sent at once, those that find the slot busy are
    -- turned away with Retry-After (each of the others takes the slot for 100 tokens)
    local dir = helpers.tmpdir()
    local commands = {}
    for i = 1, 12 do
      commands[i] = string.format("curl -s -D %s/headers%d -o %s/body%d -H 'Authorization: Bearer sesame' %s/v1/completions "
        .. "-d %s &", dir, i, dir, i, server.url, helpers.quote(cjson.encode({ model = NAME, prompt = "Once",
        max_tokens = 100, temperature = 1, seed = i })))
    end
    os.execute(table.concat(commands, " ") .. " wait")
    local busy, served = 0, 0
    for i = 1, 12 do
      local headers = helpers.read_file(dir .. "/headers" .. i)
      if headers:match("^HTTP/1.1 503") then
        busy = busy + 1
        assert.matches("Retry%-After: 1", headers)
        assert.are.equal("server_busy", cjson.decode(helpers.read_file(dir .. "/body" .. i)).error.code)
      else
        assert.matches("^HTTP/1.1 200", headers)
        served = served + 1
      end
    end
    assert.is_true(busy >= 1 and served >= 1, busy .. " busy, " .. served .. " served")
    local code, log = server.stop()
    stopped = true
    assert.are.equal(0, code, log)
    assert.matches("cmpl%-%d+ completion 200 in=%d+ %(cached %d+%) out=4 ttft=", log)
  end)

  it("refuses to listen beyond loopback without a key, and names a port it cannot take", function()
    local _, err, code = helpers.run_anelua("serve " .. helpers.quote(MODEL) .. " --host 0.0.0.0")
    assert.are.equal(2, code)
    assert.matches("%-%-host 0%.0%.0%.0 is reachable from other machines: give %-%-api%-key KEY", err)
    _, err, code = helpers.run_anelua("serve " .. helpers.quote(MODEL) .. " --host localhost --no-api-key")
    assert.are.equal(1, code)
    assert.matches("%-%-host localhost is not an IPv4 address", err)
  end)
end)

-- A request as anelua.http hands one to the engine: a POST of `body`, its answer kept here.
local function request_of(path, body)
  local r = { events = {}, ended = false }
  function r.method() return "POST" end
  function r.path() return path end
  function r.header() return nil end
  function r.body() return cjson.encode(body) end
  function r.respond(_, status, _, text) r.status, r.text, r.ended = status, text, true end
  function r.stream(_, status) r.status = status end
  function r.write(_, text) r.events[#r.events + 1] = text return true end
  function r.finish() r.ended = true end
  function r.gone() return false end
  return r
end

describe("ane.serve's turns", function()
  it("feeds a long prompt in parts of prefill_chunk tokens between the other slot's decode steps", function()
    local m = assert(require("ane.models").load(MODEL, { precision = "fp16", profile = "cpu" }))
    local server = require("ane.serve").new(m, { id = NAME, parallel = 2, prefill_chunk = 4 })
    local first = request_of("/v1/completions", { model = NAME, prompt = "Once", max_tokens = 40, temperature = 0,
      stream = true })
    server:handle(first)
    server:step()
    local prompt = string.rep("The cat sat on the mat. ", 4)
    local second = request_of("/v1/completions", { model = NAME, prompt = prompt, max_tokens = 3, temperature = 0 })
    server:handle(second)
    local running, long = server.slots[1], server.slots[2]
    assert.is_truthy(running.job)
    local turns, fed, produced = 0, 0, #running.job.produced
    server:step() -- (the second job starts: its first part)
    local job = long.job
    local length = #job.ids
    assert.is_true(length > 12, length .. " prompt tokens") -- (several parts)
    local parts_before = server.prefill_parts
    while job.prompt_left do
      -- each turn: 4 more of the prompt in the cache (the last id alone rides in the decode
      -- step), and one more token of the other answer
      assert.are.equal(fed + 4, job.prompt_fed)
      assert.are.equal(produced + 1, #running.job.produced)
      fed, produced, turns = job.prompt_fed, #running.job.produced, turns + 1
      server:step()
    end
    assert.are.equal(length, job.prompt_fed)
    assert.are.equal(produced + 1, #running.job.produced)
    -- parts of 4 (the first of them before the loop) but the last id, which took no part
    assert.are.equal(math.ceil((length - 1) / 4), job.prompt_parts)
    assert.are.equal(math.ceil((length - 1) / 4) - 1, server.prefill_parts - parts_before)
    assert.is_true(turns >= 3, turns .. " turns")
    -- the logits after the prompt fed in parts against the same prompt fed at once: a part runs
    -- the decode programs over the caches where a whole prompt runs the prefill ones, the same
    -- arithmetic in another order, each activation rounded to fp16 (unit roundoff 2^-11)
    -- between them; held within 2^-9 of the largest logit, four such roundings of it
    -- (the last id came in the decode step, so no token has been drawn yet)
    assert.are.equal(0, #job.produced)
    local whole = m:session({ capacity = 64 })
    whole:feed(job.ids)
    local at_once, in_parts = whole.logits:totable(), job.slot.session.logits:totable()
    local largest, differs = 0, 0
    for i = 1, #at_once do
      largest = math.max(largest, math.abs(at_once[i]))
      differs = math.max(differs, math.abs(at_once[i] - in_parts[i]))
    end
    assert.is_true(differs <= largest * 2 ^ -9, differs .. " apart, largest " .. largest)
    while server:step() do end
    assert.are.equal(200, second.status)
    assert.is_true(first.ended and second.ended)
  end)
end)

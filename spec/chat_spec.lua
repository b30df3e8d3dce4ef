-- ane.chat and chat sessions: Qwen3's own template (data/tokenizers/qwen3) through ane.jinja
-- against jinja2's renders (spec/data/chat/qwen3_conversations.json,
-- scripts/make_chat_golden.py), the turn boundaries as token ids, the thinking filter, templates
-- found in directories, and a conversation that keeps the KV cache across turns computing
-- what one prefill of the whole conversation computes.
local chat = require("ane.chat")
local cjson = require("cjson")
local helpers = require("spec.helpers")
local tokenizer = require("ane.tokenizer")

local golden = cjson.decode(helpers.read_file(helpers.root .. "/spec/data/chat/qwen3_conversations.json"))
local qwen3_dir = helpers.root .. "/data/tokenizers/qwen3"

describe("the Qwen3 chat format, from its own template", function()
  local template = assert(chat.template(qwen3_dir))

  for _, case in ipairs(golden.cases) do
    it("renders '" .. case.name .. "' as jinja2 renders it", function()
      local text = assert(template:render(case.messages, { add_generation_prompt = case.add_generation_prompt,
        enable_thinking = case.enable_thinking }))
      assert.are.equal(case.text, text)
    end)
  end

  it("marks every turn with one <|im_start|> and one <|im_end|> id", function()
    local tok = assert(tokenizer.load(qwen3_dir .. "/tokenizer.json"))
    local case = golden.cases[3]
    local ids = tok:encode(assert(template:render(case.messages, { add_generation_prompt = true })))
    local starts, ends = 0, 0
    for _, id in ipairs(ids) do
      if id == 151644 then starts = starts + 1 end
      if id == 151645 then ends = ends + 1 end
    end
    assert.are.same({ 4, 3 }, { starts, ends }) -- three closed turns and the open assistant turn
    assert.are.equal(151644, ids[1])
    assert.are.equal(tok:decode(ids), case.text)
  end)

  it("refuses messages it cannot render, naming the message", function()
    assert.error_matches(function() template:render({ { role = "user" } }) end, "message 1 has no content string")
    assert.error_matches(function() template:render({}) end, "messages must be a non%-empty list")
  end)

  it("filters <think> blocks out of streamed text, across piece boundaries", function()
    local filter = chat.thinking_filter(false)
    local out = {}
    for _, piece in ipairs({ "<th", "ink>\nLet me", " see.\n</th", "ink>\n\nBlue", ".", "<|im_end|>" }) do out[#out + 1] = filter(piece) end
    assert.are.equal("Blue.<|im_end|>", table.concat(out))
    local shown = chat.thinking_filter(true)
    assert.are.equal("<think>x</think>y", shown("<think>x</think>y"))
    -- an answer whose end could begin a tag is held back until the last piece gives it
    local ending = chat.thinking_filter(false)
    assert.are.equal("a ", ending("a <thi"))
    assert.are.equal("<thi", ending("", true))
    local split = chat.thinking_splitter()
    assert.are.same({ "why", "" }, { split("<think>why</th") })
    assert.are.same({ "</th", "" }, { split("", true) })
  end)

  it("ignores eos_token_id entries that name no token (fractions, strings, beyond 2^63)", function()
    local ids = chat.stop_ids({ eos_token_id = { 1.5, 7, "x", 3e108 } }, { eos_token_id = 2 })
    assert.are.same({ [7] = true, [2] = true }, ids)
  end)

  it("stops at the end-of-turn ids of config.json, generation_config.json and the template's eos_token", function()
    assert.are.same({ [514] = true, [151645] = true, [151643] = true },
      chat.stop_ids({ eos_token_id = 514 }, { eos_token_id = { 151645, 151643 } }))
    local tok = assert(tokenizer.load(qwen3_dir .. "/tokenizer.json"))
    assert.are.same({ [151645] = true }, chat.stop_ids({}, {}, template, tok)) -- eos_token "<|im_end|>"
  end)
end)

describe("templates in model directories", function()
  it("reads chat_template.jinja before tokenizer_config.json, and a list's 'default'", function()
    local dir = helpers.tmpdir()
    helpers.write_file(dir .. "/tokenizer_config.json", cjson.encode({ eos_token = { content = "</s>" },
      chat_template = { { name = "tool_use", template = "T" }, { name = "default", template = "D{{ eos_token }}" } } }))
    assert.are.equal("D</s>", assert(chat.template(dir)):render({ { role = "user", content = "x" } }))
    helpers.write_file(dir .. "/chat_template.jinja", "J{{ messages[0].content }}")
    assert.are.equal("Jx", assert(chat.template(dir)):render({ { role = "user", content = "x" } }))
  end)

  it("says which file has no template, or a broken one, with the line", function()
    local dir = helpers.tmpdir()
    local template, err = chat.template(dir)
    assert.is_nil(template)
    assert.matches("no chat template %(tokenizer_config%.json's chat_template or chat_template%.jinja%)", err)
    helpers.write_file(dir .. "/tokenizer_config.json", cjson.encode({ chat_template = "ok\n{% if %}" }))
    template, err = chat.template(dir)
    assert.is_nil(template)
    assert.matches("tokenizer_config%.json: chat_template: template: the tag at line 2, column 1 ends before", err)
  end)
end)

describe("a conversation", function()
  it("keeps earlier turns in the KV cache, goes back where the template rewrites them, and computes what one "
    .. "prefill of the whole text computes", function()
    local dir = helpers.repo_data():reference("qwen3-tiny")
    local model = assert(require("ane.models").load(dir, { precision = "fp32", profile = "cpu" }))
    local template = assert(model:chat_template())
    local conversation = chat.conversation(model, template, { capacity = 96, variables = { enable_thinking = false } })
    local sampling = { max_tokens = 6, temperature = 0, stop = { [514] = true } }
    local first = assert(conversation:ask("hi", sampling))
    assert.are.equal(0, first.reused)
    local held_after_first = #conversation.held
    local second = assert(conversation:ask("and again", sampling))
    -- the template writes an answered turn without the empty think block the generation prompt
    -- opened, so the cache is kept up to that block and the rest is fed again
    assert.is_true(second.reused > 0 and second.reused < held_after_first, tostring(second.reused))
    local rendered = model.tokenizer:encode(assert(template:render({ { role = "user", content = "hi" },
      { role = "assistant", content = first.answer }, { role = "user", content = "and again" } },
      { add_generation_prompt = true, enable_thinking = false })))
    for i, id in ipairs(rendered) do assert.are.equal(id, conversation.held[i], "position " .. i) end
    assert.are.equal(#conversation.held, conversation.session.position)
    -- the same conversation from scratch: one prefill of every id the cache holds
    local whole = model:logits(conversation.held)
    local n = #conversation.held
    -- fp32 on the cpu profile: prefill and decode sum in different orders; 1e-4 on logits
    -- of order 1 is that rounding, a wrong cache position would be off by order 1
    assert.is_true(conversation.session.logits:max_abs_diff(whole:slice(1, n, n):reshape(-1)) < 1e-4)
    conversation:reset()
    assert.are.equal(0, conversation.session.position)
    local _, err = conversation:ask(string.rep("hello ", 80), sampling)
    assert.matches("this turn does not fit: the conversation would take %d+ of its 96 positions", err)
  end)

  -- Gemma 3's tiny model slides over 5 positions in two layers: rewinding from 13 to 6 must
  -- open again the positions its window had closed and that are back inside it
  for _, name in ipairs({ "qwen3-tiny", "gemma3-tiny" }) do
    it("rewinds a session (" .. name .. "): the positions let go are computed again as if never held", function()
      local dir = helpers.repo_data():reference(name)
      local model = assert(require("ane.models.llama").load(dir, { precision = "fp32", profile = "cpu" }))
      local session = model:session({ capacity = 64 })
      session:feed({ 5, 6, 7, 8, 9, 10, 11, 12, 13, 14 })
      session:feed({ 20, 21, 22 })
      for _, back_to in ipairs({ 11, 6 }) do
        session:rewind(back_to)
        assert.are.equal(back_to, session.position)
        local logits = assert(session:feed({ 30, 31 }))
        local ids = { 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 20 }
        for i = #ids, back_to + 1, -1 do ids[i] = nil end
        ids[#ids + 1], ids[#ids + 2] = 30, 31
        local whole = model:logits(ids)
        -- as above: 1e-4 is the fp32 summation-order difference; a stale key would be order 1
        local diff = logits:max_abs_diff(whole:slice(1, #ids, #ids):reshape(-1))
        assert.is_true(diff < 1e-4, "back to " .. back_to .. ": " .. diff)
      end
      assert.error_matches(function() session:rewind(9) end, "position must be an integer from 0 to 8")
    end)
  end
end)

describe("anelua chat", function()
  local dir = helpers.root .. "/spec/data/reference/qwen3-tiny"
  local function run(args, input)
    return helpers.run(helpers.quote(helpers.anelua) .. " chat " .. helpers.quote(dir) .. " " .. args, input)
  end

  it("answers one --prompt and exits, the turn's statistics on stderr", function()
    local out, err, code = run("--prompt hi --max-tokens 4 --temperature 0", "")
    assert.are.equal(0, code, err)
    assert.matches("^qwen3 %(2 layers.-128 positions of context; temperature 0\n", err)
    assert.matches("%(4 tokens at [%d.]+ tokens/s; prompt: %d+ tokens at [%d.]+ tokens/s, 0 from the cache; context %d+/128%)", err)
    assert.is_true(#out > 0)
  end)

  it("quantizes the model at load with --quantize, saying so", function()
    for _, mode in ipairs({ "int8", "int4" }) do
      local _, err, code = run("--prompt hi --max-tokens 4 --temperature 0 --quantize " .. mode, "")
      assert.are.equal(0, code, err)
      assert.matches(mode .. " weights %(classifier int8%)", err)
    end
  end)

  it("takes /commands and multi-line messages between turns", function()
    local input = table.concat({ "/set temperature 0", "/set top-k lots", "/set colour blue", "/show", "first",
      '"""', "a message", "of two lines", '"""', "/frobnicate", "/help", "/bye", "never read" }, "\n") .. "\n"
    local out, err, code = run("--max-tokens 3 --no-think", input)
    assert.are.equal(0, code, err)
    assert.matches("%(temperature = 0%)", err)
    assert.matches("%(/set top%-k needs a whole number >= 0, got 'lots'%)", err)
    assert.matches("%(/set takes a name and a value: temperature, top%-k", err)
    assert.matches("temperature 0, top%-k 40", err)
    assert.matches("%(no command /frobnicate; /help lists them%)", err)
    assert.matches("/reset%s+forget the conversation", err)
    -- two turns were answered (the multi-line message is one), the second reusing the first's cache
    local turns = {}
    for reused in err:gmatch("(%d+) from the cache") do turns[#turns + 1] = tonumber(reused) end
    assert.are.equal(2, #turns, err)
    assert.are.equal(0, turns[1])
    assert.is_true(turns[2] > 0)
    assert.is_nil(out:find("temperature = 0", 1, true)) -- notices on stderr, answers alone on stdout
  end)

  it("holds a scripted conversation, says when the context is full and starts again", function()
    local out, err, code = run("--max-tokens 30 --no-think --context 40 --temperature 0", "hi there friend\nand you?\n/reset\nagain\n")
    assert.are.equal(0, code, err)
    assert.matches("%(the conversation filled its 40 positions: the answer stops here%)\n%(starting a new conversation%)", err)
    assert.matches("%(a new conversation%)", err)
    assert.is_nil(out:find("(the conversation filled", 1, true))
    assert.is_nil(out:find("(a new conversation)", 1, true))
  end)

  it("says what a directory without a template lacks", function()
    local _, err, code = helpers.run(helpers.quote(helpers.anelua) .. " chat "
      .. helpers.quote(helpers.root .. "/spec/data/reference/llama3-tiny") .. " --prompt hi", "")
    assert.are.equal(1, code)
    assert.matches("llama3%-tiny: no tokenizer", err)
  end)
end)

describe("examples/chat.lua", function()
  it("runs a labelled random-weight demo when no model directory is given", function()
    local script = helpers.root .. "/examples/chat.lua"
    local out, err, code = helpers.run(helpers.quote(helpers.anelua) .. " " .. helpers.quote(script)
      .. " --max-tokens 6 --seed 2", "hello\nsecond turn\n")
    assert.are.equal(0, code, err)
    assert.matches("demo: no MODEL_DIR given, so a small Qwen3%-shaped model with random weights answers", err)
    assert.matches("from random Qwen3 weights %(seed 2%)", err)
    assert.is_true(#out > 0)
  end)

  it("is anelua chat when given a directory", function()
    local out, err, code = helpers.run(helpers.quote(helpers.anelua) .. " " .. helpers.quote(helpers.root .. "/examples/chat.lua")
      .. " " .. helpers.quote(helpers.root .. "/spec/data/reference/qwen3-tiny") .. " --prompt hi --max-tokens 3 --temperature 0", "")
    assert.are.equal(0, code, err)
    assert.matches("%(3 tokens at", err)
    assert.is_true(#out > 0)
  end)
end)

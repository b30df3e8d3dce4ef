-- ane.chat and chat sessions: the Qwen3 chat format against the model's own Jinja2 template
-- rendered by jinja2 (spec/data/chat/qwen3_conversations.json, scripts/make_chat_golden.py),
-- the turn boundaries as token ids, the thinking filter, and a session that keeps the KV
-- cache across turns computing what one prefill of the whole conversation computes.
local chat = require("ane.chat")
local cjson = require("cjson")
local helpers = require("spec.helpers")
local tokenizer = require("ane.tokenizer")

local golden = cjson.decode(helpers.read_file(helpers.root .. "/spec/data/chat/qwen3_conversations.json"))

describe("the Qwen3 chat format", function()
  for _, case in ipairs(golden.cases) do
    it("renders '" .. case.name .. "' as the model's template does", function()
      local text = chat.render(case.messages, { add_generation_prompt = case.add_generation_prompt,
        enable_thinking = case.enable_thinking })
      assert.are.equal(case.text, text)
    end)
  end

  it("marks every turn with one <|im_start|> and one <|im_end|> id", function()
    local tok = assert(tokenizer.load(helpers.root .. "/data/tokenizers/qwen3/tokenizer.json"))
    local case = golden.cases[3]
    local ids = tok:encode(chat.render(case.messages, { add_generation_prompt = true }))
    local starts, ends = 0, 0
    for _, id in ipairs(ids) do
      if id == 151644 then starts = starts + 1 end
      if id == 151645 then ends = ends + 1 end
    end
    assert.are.same({ 4, 3 }, { starts, ends }) -- three closed turns and the open assistant turn
    assert.are.equal(151644, ids[1])
    assert.are.equal(tok:decode(ids), case.text)
  end)

  it("refuses roles and contents it cannot render", function()
    assert.error_matches(function() chat.render({ { role = "tool", content = "x" } }) end, "message 1 has role 'tool'")
    assert.error_matches(function() chat.render({}) end, "messages must be a non%-empty list")
  end)

  it("filters <think> blocks out of streamed text, across piece boundaries", function()
    local filter = chat.thinking_filter(false)
    local out = {}
    for _, piece in ipairs({ "<th", "ink>\nLet me", " see.\n</th", "ink>\n\nBlue", ".", "<|im_end|>" }) do out[#out + 1] = filter(piece) end
    assert.are.equal("Blue.<|im_end|>", table.concat(out))
    local shown = chat.thinking_filter(true)
    assert.are.equal("<think>x</think>y", shown("<think>x</think>y"))
  end)

  it("ignores eos_token_id entries that name no token (fractions, strings, beyond 2^63)", function()
    local ids = chat.stop_ids({ eos_token_id = { 1.5, 7, "x", 3e108 } }, { eos_token_id = 2 })
    assert.are.same({ [7] = true, [2] = true }, ids)
  end)

  it("stops at the end-of-turn ids of config.json and generation_config.json", function()
    assert.are.same({ [514] = true, [151645] = true, [151643] = true },
      chat.stop_ids({ eos_token_id = 514 }, { eos_token_id = { 151645, 151643 } }))
  end)
end)

describe("a chat session", function()
  it("keeps earlier turns in the KV cache: turn two's logits equal one prefill of the whole text", function()
    local dir = helpers.repo_data():reference("qwen3-tiny")
    local model = assert(require("ane.models.qwen3").load(dir, { precision = "fp32", profile = "cpu" }))
    local tok = assert(tokenizer.load(dir .. "/tokenizer.json"))
    local first = tok:encode(chat.render({ { role = "user", content = "hi" } }, { add_generation_prompt = true,
      enable_thinking = false }))
    local session = model:session({ capacity = 96 })
    session:feed(first)
    local answer = {}
    for id in session:generate({ max_tokens = 6, temperature = 0, stop = { [514] = true } }) do answer[#answer + 1] = id end
    assert.is_true(#answer >= 1)
    if answer[#answer] == 514 then table.remove(answer) end -- a stop id is returned, not fed
    local second = tok:encode(chat.next_turn("and again", { enable_thinking = false }))
    local logits = assert(session:feed(second))
    -- the same conversation from scratch: one prefill of every id
    local all = {}
    for _, list in ipairs({ first, answer, second }) do for _, id in ipairs(list) do all[#all + 1] = id end end
    local whole = model:logits(all)
    -- fp32 on the cpu profile: prefill and decode sum in different orders; 1e-4 on logits
    -- of order 1 is that rounding, a wrong cache position would be off by order 1
    assert.is_true(logits:max_abs_diff(whole:slice(1, #all, #all):reshape(-1)) < 1e-4)
    assert.are.equal(#all, session.position)
    local too_many = {}
    for i = 1, session:room() + 1 do too_many[i] = 1 end
    local ok, err = session:feed(too_many)
    assert.is_nil(ok)
    assert.matches("more tokens do not fit: %d+ of the session's 96 positions are used", err)
  end)
end)

describe("examples/chat.lua", function()
  local dir = helpers.root .. "/spec/data/reference/qwen3-tiny"
  local function run(args, input)
    local script = helpers.root .. "/examples/chat.lua"
    return helpers.run(helpers.quote(helpers.anelua) .. " " .. helpers.quote(script) .. " " .. helpers.quote(dir) .. " " .. args,
      input)
  end

  it("answers one --prompt and exits", function()
    local out, err, code = run("--prompt hi --max-tokens 4 --temperature 0", "")
    assert.are.equal(0, code, err)
    assert.matches("^qwen3 %(2 layers.-128 positions of context; temperature 0\n", err)
  end)

  it("quantizes the model at load with --quantize, saying so", function()
    for _, mode in ipairs({ "int8", "int4" }) do
      local _, err, code = run("--prompt hi --max-tokens 4 --temperature 0 --quantize " .. mode, "")
      assert.are.equal(0, code, err)
      assert.matches(mode .. " weights %(classifier int8%)", err)
    end
  end)

  it("runs a labelled random-weight demo when no model directory is given", function()
    local script = helpers.root .. "/examples/chat.lua"
    local out, err, code = helpers.run(helpers.quote(helpers.anelua) .. " " .. helpers.quote(script)
      .. " --max-tokens 6 --seed 2", "hello\nsecond turn\n")
    assert.are.equal(0, code, err)
    assert.matches("demo: no MODEL_DIR given, so a small Qwen3%-shaped model with random weights answers", err)
    assert.matches("from random Qwen3 weights %(seed 2%)", err)
    assert.is_true(#out > 0)
  end)

  it("holds a scripted conversation, says when the context is full and starts again", function()
    local out, err, code = run("--max-tokens 30 --no-think --context 40 --temperature 0", "hi there friend\nand you?\n/reset\nagain\n")
    assert.are.equal(0, code, err)
    -- the notices on stderr, the answers alone on stdout
    assert.matches("%(the conversation filled its 40 positions: the answer stops here%)\n%(starting a new conversation%)", err)
    assert.matches("%(a new conversation%)", err)
    assert.is_nil(out:find("(the conversation filled", 1, true))
    assert.is_nil(out:find("(a new conversation)", 1, true))
  end)
end)

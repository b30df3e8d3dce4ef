-- ane.chat: the Qwen3 chat format (ChatML turns with <think> blocks) as its chat template
-- renders it (data/tokenizers/qwen3/tokenizer_config.json; tool calls are not supported),
-- and the pieces a chat loop needs: the text of one turn, the end-of-turn ids, a thinking
-- filter for streamed text.
--
--   local chat = require("ane.chat")
--   chat.render({ { role = "system", content = "Be brief." }, { role = "user", content = "Hi" } },
--     { add_generation_prompt = true, enable_thinking = false })
--   --> "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
--   --   .. "<|im_start|>assistant\n<think>\n\n</think>\n\n"
local M = {}

local function lstrip_newlines(s) return (s:gsub("^\n+", "")) end
local function rstrip_newlines(s) return (s:gsub("\n+$", "")) end

-- An assistant message's answer and reasoning, as the template splits them: the text after
-- the last </think>, and what lies between the last <think> and the first </think>.
local function split_thinking(message)
  local content, reasoning = message.content, message.reasoning_content or ""
  if message.reasoning_content == nil then
    local close = content:find("</think>", 1, true)
    if close then
      local before = content:sub(1, close - 1)
      local last_close = close
      while true do
        local nxt = content:find("</think>", last_close + 1, true)
        if not nxt then break end
        last_close = nxt
      end
      reasoning = rstrip_newlines(before)
      local open = 0
      while true do
        local nxt = reasoning:find("<think>", open + 1, true)
        if not nxt then break end
        open = nxt
      end
      if open > 0 then reasoning = reasoning:sub(open + #"<think>") end
      reasoning = lstrip_newlines(reasoning)
      content = lstrip_newlines(content:sub(last_close + #"</think>"))
    end
  end
  return content, reasoning
end

local function check(messages)
  if type(messages) ~= "table" or #messages == 0 then error("chat.render: messages must be a non-empty list", 3) end
  for i, m in ipairs(messages) do
    if m.role ~= "system" and m.role ~= "user" and m.role ~= "assistant" then
      error(string.format("chat.render: message %d has role '%s' (system, user or assistant)", i, tostring(m.role)), 3)
    end
    if type(m.content) ~= "string" then error(string.format("chat.render: message %d has no content string", i), 3) end
  end
end

--- The conversation as the model reads it. opts.add_generation_prompt opens the assistant's
--- turn; opts.enable_thinking = false adds the empty think block that switches thinking off.
function M.render(messages, opts)
  opts = opts or {}
  check(messages)
  local out = {}
  if messages[1].role == "system" then out[#out + 1] = "<|im_start|>system\n" .. messages[1].content .. "<|im_end|>\n" end
  local last_query = #messages -- 1-based index of the last user message
  for i = #messages, 1, -1 do
    if messages[i].role == "user" then last_query = i; break end
  end
  for i, m in ipairs(messages) do
    if m.role == "user" or (m.role == "system" and i > 1) then
      out[#out + 1] = "<|im_start|>" .. m.role .. "\n" .. m.content .. "<|im_end|>\n"
    elseif m.role == "assistant" then
      local content, reasoning = split_thinking(m)
      if i > last_query and (i == #messages or reasoning ~= "") then
        out[#out + 1] = "<|im_start|>assistant\n<think>\n" .. lstrip_newlines(rstrip_newlines(reasoning)) .. "\n</think>\n\n"
          .. lstrip_newlines(content)
      else
        out[#out + 1] = "<|im_start|>assistant\n" .. content
      end
      out[#out + 1] = "<|im_end|>\n"
    end
  end
  if opts.add_generation_prompt then
    out[#out + 1] = "<|im_start|>assistant\n"
    if opts.enable_thinking == false then out[#out + 1] = "<think>\n\n</think>\n\n" end
  end
  return table.concat(out)
end

--- The text that continues a conversation whose earlier turns are already in the model's
--- cache: the end of the assistant's last turn is the caller's (its end-of-turn token was
--- generated); this is the next user turn and the assistant's opening.
function M.next_turn(content, opts)
  opts = opts or {}
  local text = "\n<|im_start|>user\n" .. content .. "<|im_end|>\n<|im_start|>assistant\n"
  if opts.enable_thinking == false then text = text .. "<think>\n\n</think>\n\n" end
  return text
end

--- A filter for streamed assistant text: returns a function that takes the next piece and
--- returns what to show, dropping <think> ... </think> when show_thinking is false.
function M.thinking_filter(show_thinking)
  if show_thinking then return function(piece) return piece end end
  local buffer, inside = "", false
  return function(piece)
    buffer = buffer .. piece
    local shown = {}
    while true do
      if inside then
        local close = buffer:find("</think>", 1, true)
        if not close then return table.concat(shown) end
        buffer, inside = lstrip_newlines(buffer:sub(close + #"</think>")), false
      else
        local open = buffer:find("<think>", 1, true)
        if open then
          shown[#shown + 1] = buffer:sub(1, open - 1)
          buffer, inside = buffer:sub(open + #"<think>"), true
        else
          -- keep a possible start of "<think>" for the next piece
          local keep = 0
          for k = math.min(#buffer, #"<think>" - 1), 1, -1 do
            if ("<think>"):sub(1, k) == buffer:sub(-k) then keep = k; break end
          end
          shown[#shown + 1] = buffer:sub(1, #buffer - keep)
          buffer = buffer:sub(#buffer - keep + 1)
          return table.concat(shown)
        end
      end
    end
  end
end

--- The ids that end an assistant turn: config.json's and generation_config.json's
--- eos_token_id (a number or a list), as a set.
function M.stop_ids(config, generation_config)
  local ids = {}
  for _, source in ipairs({ config or {}, generation_config or {} }) do
    local eos = source.eos_token_id
    for _, id in ipairs(type(eos) == "table" and eos or { eos }) do
      local integer = type(id) == "number" and math.tointeger(id) -- (anything else names no token)
      if integer then ids[integer] = true end
    end
  end
  return ids
end

return M

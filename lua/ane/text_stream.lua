-- ane.text_stream: the text of generated ids as it grows, for a command that streams it
-- (`anelua run`'s stdout, `anelua serve`'s chunks): each new piece handed to emit(text) as soon
-- as it cannot be the start of a stop string, the text cut before a stop string that appears.
--
--   local stream = require("ane.text_stream").new(tokenizer, prompt_ids, { "\n\n" }, io.write)
--   for id in ids do if not stream:push(id) then break end end   -- false: a stop string ended it
--   stream:finish()                                              -- what was held back
--   stream.text, stream.stopped
local M = {}
local Stream = {}
Stream.__index = Stream

--- A stream of the text after `prompt` (ids) in `tok`'s decoding, cut at any of `stops`.
function M.new(tok, prompt, stops, emit)
  -- Decoded after the prompt's last id, whose text is then cut off: a SentencePiece decode
  -- drops the leading space of the text it starts ("▁there" alone is "there").
  local anchor = prompt[#prompt]
  return setmetatable({ tok = tok, stops = stops or {}, emit = emit, produced = { anchor },
    anchor_length = #tok:decode({ anchor }), shown = 0, text = "", stopped = false }, Stream)
end

--- Adds the next id; returns false when a stop string ended the text (nothing more is shown).
function Stream:push(id)
  if self.stopped then return false end
  self.produced[#self.produced + 1] = id
  local text = self.tok:decode(self.produced):sub(self.anchor_length + 1) -- (may end inside a UTF-8 character)
  for _, stop in ipairs(self.stops) do
    local at = text:find(stop, 1, true)
    if at then
      self.text = text:sub(1, at - 1)
      if #self.text > self.shown then self.emit(self.text:sub(self.shown + 1)) end
      self.shown, self.stopped = #self.text, true
      return false
    end
  end
  self.text = text
  -- hold back a tail that could begin a stop string, so it is never shown
  local hold = 0
  for _, stop in ipairs(self.stops) do
    for n = math.min(#stop - 1, #text), 1, -1 do
      if text:sub(-n) == stop:sub(1, n) then hold = math.max(hold, n) break end
    end
  end
  local upto = #text - hold
  if upto > self.shown then
    self.emit(text:sub(self.shown + 1, upto))
    self.shown = upto
  end
  return true
end

--- Shows what was held back (the generation ended without a stop string).
function Stream:finish()
  if not self.stopped and #self.text > self.shown then
    self.emit(self.text:sub(self.shown + 1))
    self.shown = #self.text
  end
end

return M

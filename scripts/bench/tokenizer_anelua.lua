-- The anelua side of scripts/bench/tokenizer: the same ~8 KB chunks cut after a newline as
-- the peer gets, a fresh tokenizer (cold cache) per run, best of 3.
-- Prints "<file> <bytes> <tokens> <seconds>".
local ane = require("ane")
local tokenizer = require("ane.tokenizer")
require("ane.cli").command{
  name = "scripts/bench/tokenizer_anelua.lua", usage = "TOKENIZER_DIR FILE...",
  summary = "Times the byte-level BPE on files (the anelua side of scripts/bench/tokenizer).",
  positional = { { "TOKENIZER_DIR", "vocab.json + merges.txt" }, { "FILE...", "text files" } }, rest = true,
}:parse(arg)
local function chunks(text)
  local out, start = {}, 1
  while start <= #text do
    local stop = text:find("\n", math.min(start + 8192, #text), true) or #text
    out[#out + 1] = text:sub(start, stop)
    start = stop + 1
  end
  return out
end
for i = 2, #arg do
  local file = assert(io.open(arg[i], "rb"))
  local text = file:read("a")
  file:close()
  local pieces = chunks(text)
  local best, tokens = math.huge, 0
  for _ = 1, 3 do
    local tok = assert(tokenizer.load(arg[1]))
    local start = ane.clock()
    tokens = 0
    for _, piece in ipairs(pieces) do tokens = tokens + #tok:encode(piece) end
    best = math.min(best, ane.clock() - start)
  end
  print(arg[i], #text, tokens, best)
end

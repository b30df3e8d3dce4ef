-- Writes the tokenizer benchmark's corpus: ~3 MB of English (varied sentences built from a
-- word list) and ~1 MB of mixed text (code, numbers, accents, CJK, emoji), deterministic.
--   build/anelua scripts/bench/tokenizer_corpus.lua OUT_DIR
local _, positional = require("ane.cli").command{
  name = "scripts/bench/tokenizer_corpus.lua", usage = "OUT_DIR", summary = "Writes the tokenizer benchmark's corpus.",
  positional = { { "OUT_DIR", "where english.txt and mixed.txt go" } },
}:parse(arg)
local out = positional[1]
local words = {}
for w in ([[the a little girl named Lily loved to play outside with her friend Ben in the big green park
  one day they found a shiny red ball under an old tree and decided to share it with everyone they met
  mother said that kindness is the most important thing in the world and the children smiled happily
  scientists measured the temperature of the ocean every morning while the ship sailed slowly north
  however nobody expected the results to change so quickly after the storm had passed over the island]]):gmatch("%a+") do
  words[#words + 1] = w
end
local state = 12345
local function random(n)
  state = (state * 1103515245 + 12345) % 2147483648
  return (state >> 16) % n + 1 -- the high bits: an LCG's low bits cycle quickly
end
local english = {}
local size = 0
while size < 3 * 1024 * 1024 do
  local sentence = {}
  for i = 1, random(12) + 4 do sentence[i] = words[random(#words)] end
  sentence[1] = sentence[1]:sub(1, 1):upper() .. sentence[1]:sub(2)
  local text = table.concat(sentence, " ") .. ({ ". ", "! ", "? ", ", and ", "; " })[random(5)]
  if random(8) == 1 then text = text .. "\n\n" end
  english[#english + 1] = text
  size = size + #text
end
local mixed_pieces = {
  "def forward(self, x):\n    return self.proj(x) + x  # residual\n",
  "for (int i = 0; i < n; i++) { sum += a[i] * b[i]; }\n",
  "Numbers: 0 1 12 123 1234 12345 3.14159 -42 1e-5 0x1F 1,000,000\n",
  "naïve café résumé coöperate Ångström Grüße aus München! Ça va? ¿Qué tal?\n",
  "東京は日本の首都です。中文测试：你好，世界！한국어 텍스트와 日本語のテキスト\n",
  "Emoji: 😀🚀🔥 👩‍💻 🇩🇪 ❤️ Mathematics: ∑_{i=1}^{n} x_i² ≤ ∞, α + β = γ\n",
  'JSON: {"key": [1, 2, 3], "nested": {"a": null, "b": true}}\n',
  "URLs like https://example.com/path?q=1&r=2#frag and emails a.b@c.org\n",
}
local mixed = {}
size = 0
while size < 1024 * 1024 do
  local piece = mixed_pieces[random(#mixed_pieces)]
  mixed[#mixed + 1] = piece
  size = size + #piece
end
for name, parts in pairs({ english = english, mixed = mixed }) do
  local file = assert(io.open(out .. "/" .. name .. ".txt", "wb"))
  file:write(table.concat(parts))
  file:close()
end

-- text/normalize.c through ane._nfc against Python's unicodedata (an implementation of NFC
-- independent of the utf8proc the core uses): spec/data/nfc/golden.jsonl, written by
-- scripts/make_nfc_golden.py, holds composition, canonical reordering, Hangul, composition
-- exclusions, singletons, 600 random strings of such code points, and invalid bytes, which
-- stay where they are.
local ane = require("ane")
local cjson = require("cjson")
local GOLDEN = require("spec.helpers").root .. "/spec/data/nfc/golden.jsonl"

local function from_hex(hex) return (hex:gsub("..", function(pair) return string.char(tonumber(pair, 16)) end)) end

describe("NFC normalization", function()
  it("equals Python's unicodedata on every golden line", function()
    local lines, mismatches = 0, {}
    for line in io.lines(GOLDEN) do
      local case = cjson.decode(line)
      local input, expected = from_hex(case.input), from_hex(case.nfc)
      local got = ane._nfc(input)
      if got ~= expected and #mismatches < 5 then
        mismatches[#mismatches + 1] = string.format("%s (%s): got %q, expected %q", case.input, case.note, got, expected)
      end
      lines = lines + 1
    end
    assert.is_true(lines >= 650, "the golden file has " .. lines .. " lines")
    assert.are.same({}, mismatches)
  end)

  it("is idempotent: NFC of NFC text is itself", function()
    for line in io.lines(GOLDEN) do
      local nfc = from_hex(cjson.decode(line).nfc)
      assert.are.equal(nfc, ane._nfc(nfc))
    end
  end)
end)

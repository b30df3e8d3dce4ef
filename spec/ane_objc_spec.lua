-- backend/ane_objc.c: the `ane` backend's boundary table (ane_core/backend/ane_objc.h):
-- every message has an exact prototype and an encoding, and none is variadic (a variadic
-- cast of objc_msgSend works on x86-64 and breaks on arm64, where variadic arguments go on
-- the stack).
local helpers = require("spec.helpers")

describe("the ane backend's boundary table", function()
  local header = helpers.read_file(helpers.root .. "/ane_core/backend/ane_objc.h")
  local table_text = header:match("#define ANE_OBJC_MESSAGES%(X%)(.-)\n\n")

  it("lists messages with a prototype and an encoding each, none variadic", function()
    assert.is_not_nil(table_text)
    local rows = 0
    for name, class, class_method, selector in table_text:gmatch("X%((%w[%w_]*),%s*(%w+),%s*([01]),[%s\\]*\"([^\"]+)\"") do
      rows = rows + 1
      assert.is_truthy(selector:match("^[%a_][%w_:]*$"), name .. ": selector " .. selector)
      assert.is_truthy(class:match("^%u"), name)
      assert.is_truthy(class_method == "0" or class_method == "1")
    end
    assert.is_true(rows >= 13)
    assert.is_nil(table_text:find("...", 1, true), "a variadic prototype in the boundary table")
    -- every row ends in its encoding: a string literal (ANE_ENC_BOOL counts as one)
    local _, encodings = table_text:gsub('"[@vBcIQ:^{}_%w=]+"%)', "")
    assert.are.equal(rows, encodings)
  end)

  it("is the only place the backend sends messages from", function()
    local device = helpers.read_file(helpers.root .. "/ane_core/backend/device.c")
    assert.is_nil(device:find("objc_msgSend)(", 1, true))
    assert.is_nil(device:find("objc_msgSend(", 1, true))
    assert.is_truthy(device:find("ANE_SEND(", 1, true))
  end)
end)

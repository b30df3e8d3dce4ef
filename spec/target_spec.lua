-- passes/target.c: the built-in compile targets: what each turns off, demotes or promotes,
-- which ops it accepts, their names, and programs kept apart per target in the cache.
local ane = require("ane")

local rules = require("spec.support.rules")
local graph_with, expect_violation, expect_clean = rules.graph_with, rules.expect_violation, rules.expect_clean

describe("compile targets", function()
  it("a target turns rules off, demotes or promotes them, and accepts or refuses ops", function()
    local concat = graph_with(function(g, h) return g:concat({ h, h }, 3, { name = "qkv_cat" }) end)
    expect_clean(concat, "ANE-01", { accepted_ops = { "concat" } })
    expect_violation(concat, "ANE-01", "qkv_cat", "warning", nil, { rules = { ["ANE-01"] = "warning" } })
    expect_clean(concat, "ANE-01", { rules = { ["ANE-01"] = "off" } })
    local softmax = graph_with(function(g, h) return g:softmax(h, 3, { name = "sm" }) end, { input_shape = { 1, 64, 1, 48 } })
    expect_violation(softmax, "ANE-30", "sm", "error", nil, { rules = { ["ANE-30"] = "error" } })
    local exp = graph_with(function(g, h) return g:exp(h, { name = "e" }) end)
    expect_clean(exp, "target")
    expect_violation(exp, "target", "e", "error", "target my%-m4 measured that this chip refuses exp",
      { name = "my-m4", refused_ops = { "exp" } })
    -- the unchecked target lets everything through to the device (the probes' way to ask it)
    assert.are.same({}, concat:validate({ target = "unchecked" }))
    local t = ane.target({ base = "m4", max_spatial = 1000, rules = { ["ANE-06"] = "off" } })
    assert.are.same({ 1000, 15, "off" }, { t.max_spatial, t.max_kernel_width, t.rules["ANE-06"] })
  end)

  it("names the targets there are", function()
    local g = graph_with(function(_, h) return h end)
    assert.error_matches(function() g:validate({ target = "gpu" }) end,
      "target 'gpu' is neither a built%-in target %(generic, m1, m2, m3, m4, m5, unchecked%) nor a probe report")
    assert.error_matches(function() g:validate({ target = { rules = { ["ANE-1x"] = "off" } } }) end, "'ANE%-1x' is no rule ID")
    assert.error_matches(function() g:validate({ target = { rules = { ["ANE-01"] = "maybe" } } }) end, "invalid option 'maybe'")
    assert.error_matches(function() g:validate({ target = { refused_ops = { "frobnicate" } } }) end, "no op 'frobnicate'")
  end)

  it("keeps programs compiled for different targets apart in the cache", function()
    local concat = graph_with(function(g, h) return g:concat({ h, h }, 3, { name = "qkv_cat" }) end)
    local accepted = ane.compile(concat, { backend = "sim", target = { accepted_ops = { "concat" } } })
    assert.is_not_nil(accepted)
    assert.error_matches(function() ane.compile(concat, { backend = "sim" }) end, "ANE%-01")
  end)
end)

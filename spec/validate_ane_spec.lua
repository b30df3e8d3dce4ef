-- passes/validate_ane.c: for every rule of the constraint catalogue that can be checked on a
-- graph, one graph that violates it (reported with its ID and node) and one that passes.
local ane = require("ane")

local rules = require("spec.support.rules")
local fp16, graph_with = rules.fp16, rules.graph_with
local expect_violation, expect_clean, find = rules.expect_violation, rules.expect_clean, rules.find

describe("ANE validation", function()
  it("ANE-01: concat is rejected", function()
    expect_violation(graph_with(function(g, h) return g:concat({ h, h }, 3, { name = "qkv_cat" }) end),
      "ANE-01", "qkv_cat", "error", "concat is rejected by the ANE compiler %(node 'qkv_cat'%)")
    expect_clean(graph_with(function(g, h) return g:add(h, h) end), "ANE-01")
  end)

  it("ANE-06: scaled_dot_product_attention ignores its mask", function()
    local function attention(with_mask)
      return graph_with(function(g, h)
        local q = g:reshape(h, { 1, 4, 16, 32 })
        local mask = g:const("mask", fp16({ 16, 16 }))
        local out = with_mask and g:scaled_dot_product_attention(q, q, q, mask, { name = "sdpa" })
            or g:scaled_dot_product_attention(q, q, q, { name = "sdpa" })
        return g:reshape(out, { 1, 64, 1, 32 })
      end)
    end
    expect_violation(attention(true), "ANE-06", "sdpa", "warning", "silently ignores")
    expect_clean(attention(false), "ANE-06")
  end)

  it("ANE-16: convs wider than 16384 channels", function()
    local function classifier(vocab)
      return graph_with(function(g, h)
        return g:conv(h, g:const("wcls", ane.tensor({ vocab, 64, 1, 1 }, "fp16")), { name = "logits" })
      end)
    end
    expect_violation(classifier(32000), "ANE-16", "logits", "error", "64 input and 32000 output channels")
    expect_clean(classifier(16384), "ANE-16")
    local wide = classifier(20000)
    assert.is_nil(find(wide:validate { max_conv_channels = 32768 }, "ANE-16")) -- configurable
  end)

  it("ANE-20: device I/O is rank 4; [1, C, 1, S] in rows, other rank-4 shapes packed", function()
    expect_violation(graph_with(function(g, h) return h end, { input_shape = { 64, 32 }, no_anchor = true }),
      "ANE-20", "x", "error", "input 'x' is %[64, 32%]; device I/O tensors are rank 4")
    expect_clean(graph_with(function(g, h) return h end), "ANE-20")
    -- maderix's SDPA tests run [1, H, S, D] I/O on the device (docs/reference/constraints.md)
    expect_clean(graph_with(function(g, _, x) return g:relu(x) end, { input_shape = { 1, 12, 8, 64 }, no_anchor = true }),
      "ANE-20")
  end)

  it("ANE-21: width below 32 is disputed (a warning), below a target's measured minimum an error", function()
    local narrow = graph_with(function(g, h) return h end, { input_shape = { 1, 64, 1, 16 } })
    expect_violation(narrow, "ANE-21", "x", "warning", "width 16 < 32: disputed %(ane%-bridge%-rs and tinygrad report .*Orion ran decode at width 16%)")
    expect_violation(narrow, "ANE-21", "x", "error", "width 16 < 32, the narrowest target mine runs", { name = "mine", min_io_width = 32 })
    expect_violation(graph_with(function(g, h) return h end, { input_shape = { 1, 64, 1, 48 } }),
      "ANE-21", "x", "warning", "not a multiple of 32")
    expect_clean(graph_with(function(g, h) return h end, { input_shape = { 1, 64, 1, 64 } }), "ANE-21")
  end)

  it("ANE-23: conv kernels wider than 13 (generic and M1) or 15 (M2 and later)", function()
    local function kernel(width)
      return graph_with(function(g, h)
        local y = g:conv(h, g:const("k", ane.tensor({ 64, 64, 1, width }, "fp16")), { pads = { 0, 0, width // 2, width // 2 }, name = "wide_conv" })
        return g:slice_by_size(y, { 0, 0, 0, 0 }, { 1, 64, 1, 32 })
      end)
    end
    expect_violation(kernel(15), "ANE-23", "wide_conv", "error", "kernel width 15; target generic allows at most 13")
    expect_violation(kernel(15), "ANE-23", "wide_conv", "error", "target m1 allows at most 13", "m1")
    expect_clean(kernel(13), "ANE-23")
    expect_clean(kernel(15), "ANE-23", "m2")
    expect_violation(kernel(17), "ANE-23", "wide_conv", "error", "target m4 allows at most 15", "m4")
  end)

  it("ANE-25: gather stays on the CPU", function()
    expect_violation(graph_with(function(g, h)
      local ids = g:const("ids", ane.tensor.from({ 0, 1 }, { 2 }, "int32"))
      local picked = g:gather(h, ids, 3, { name = "embed" })
      return g:pad(picked, { 0, 30 })
    end), "ANE-25", "embed", "error", "do embeddings and sampling on the CPU")
    expect_clean(graph_with(function(g, h) return h end), "ANE-25")
  end)

  it("ANE-26: fp32 compute, fp32 inputs used directly, fp32 weights, bf16", function()
    expect_violation(graph_with(function(g, h, x) return g:cast(g:relu(x, { name = "relu32" }), "fp16") end,
      { input_dtype = "fp32", no_anchor = true }), "ANE-26", "relu32", "error", "fp32 input 'x' feeds 'relu32'")
    expect_violation(graph_with(function(g, h)
      local h32 = g:cast(h, "fp32")
      return g:cast(g:exp(h32, { name = "exp32" }), "fp16")
    end), "ANE-26", "exp32", "error", "computes in fp32")
    expect_violation(graph_with(function(g, _, x)
      local x16 = g:cast(x, "fp16")
      local w32 = g:const("w32", ane.tensor({ 64, 64, 1, 1 }, "fp32"))
      return g:conv(g:cast(x16, "fp32"), w32)
    end, { input_dtype = "fp32", no_anchor = true }), "ANE-26", "w32", "error", "store weights in fp16")
    -- cast at the boundary: fp32 in, fp16 compute, fp32 out
    expect_clean(graph_with(function(g, _, x)
      local h = g:conv(g:cast(x, "fp16"), g:const("w", fp16({ 64, 64, 1, 1 })))
      return g:cast(h, "fp32")
    end, { input_dtype = "fp32", no_anchor = true }), "ANE-26")
  end)

  it("ANE-27: working sets beyond 32 MB (a warning)", function()
    expect_violation(graph_with(function(g, h) return g:relu(h, { name = "huge" }) end, { input_shape = { 1, 4096, 1, 4096 }, no_anchor = true }),
      "ANE-27", "huge", "warning", "32 MB")
    expect_clean(graph_with(function(g, h) return g:relu(h) end), "ANE-27")
  end)

  it("ANE-28: purely elementwise programs (a warning)", function()
    expect_violation(graph_with(function(g, h) return g:relu(h) end, { no_anchor = true }), "ANE-28", "", "warning",
      "no conv or matmul")
    expect_clean(graph_with(function(g, h) return g:relu(h) end), "ANE-28")
  end)

  it("ANE-29: reduce_mean (a warning)", function()
    expect_violation(graph_with(function(g, h) return g:add(h, g:reduce_mean(h, { 1 }, { keep_dims = true, name = "avg" })) end),
      "ANE-29", "avg", "warning", "reduce_sum times 1/N")
    expect_clean(graph_with(function(g, h) return g:add(h, g:reduce_sum(h, { 1 }, { keep_dims = true })) end), "ANE-29")
  end)

  it("ANE-30: softmax over a non-power-of-two axis (a warning)", function()
    expect_violation(graph_with(function(g, h) return g:softmax(h, 3, { name = "sm" }) end, { input_shape = { 1, 64, 1, 48 } }),
      "ANE-30", "sm", "warning", "48 elements")
    expect_clean(graph_with(function(g, h) return g:softmax(h, 3) end), "ANE-30")
  end)

  it("ANE-31: the width axis and matmul contractions are at most 16,384 (M1-M3) or 65,536 (M4/M5)", function()
    -- a [1, 1, 1, 20000] x [1, 1, 20000, 32] matmul: its contraction is 20,000 long
    local function long_contraction()
      local g = ane.graph("contraction")
      local x = g:input("x", { 1, 1, 1, 32 })
      local a = g:const("a", fp16({ 1, 1, 1, 20000 }))
      local b = g:const("b", fp16({ 1, 1, 20000, 32 }))
      g:output("y", g:add(x, g:matmul(a, b, { name = "long_mm" })))
      return g
    end
    expect_violation(long_contraction(), "ANE-31", "long_mm", "error", "20000 elements along its width or contraction axis; target generic allows 16384")
    expect_violation(long_contraction(), "ANE-31", "long_mm", "error", "target m3 allows 16384", "m3")
    expect_clean(long_contraction(), "ANE-31", "m4")
    expect_clean(graph_with(function(g, h) return h end), "ANE-31")
  end)

  it("ANE-32: the baked weights of one program (about 2 GB; here a target of 1 KB)", function()
    local g = graph_with(function(g, h) return g:conv(h, g:const("big", fp16({ 64, 64, 1, 1 })), { name = "c2" }) end)
    -- two 64x64 fp16 consts: 16,384 bytes
    expect_violation(g, "ANE-32", "", "error", "bakes 0%.00 GB of weights; target small allows 0%.00 GB", { name = "small", max_weight_bytes = 1024 })
    expect_violation(g, "ANE-32", "", "warning", "near the", { max_weight_bytes = 20000 })
    expect_clean(g, "ANE-32")
  end)

  it("ANE-33: cast is rejected by the M1 and M2 compilers (a warning elsewhere)", function()
    local g = graph_with(function(g, h) return g:cast(h, "fp32", { name = "to32" }) end)
    expect_violation(g, "ANE-33", "to32", "error", "the M1 and M2 compilers reject cast; give the program fp16", "m1")
    expect_violation(g, "ANE-33", "to32", "error", nil, "m2")
    expect_violation(g, "ANE-33", "to32", "warning", "a problem only there")
    expect_violation(g, "ANE-33", "to32", "warning", nil, "m4")
    expect_clean(graph_with(function(g, h) return h end), "ANE-33", "m1")
  end)
end)

-- ane.models.transformer: the architecture table is what builds the programs. The consts a
-- compiled program holds are exactly the roles its table lists (and their names follow
-- one rule); two tables that describe the same function compute the same logits (a Llama
-- with one fused qkv product against the same weights as separate q, k, v); and a model
-- built from an architecture no model file uses (LayerNorm with biases, RoPE and SwiGLU)
-- runs, decodes like its prefill and trains: its gradients, in its own naming, agree with
-- central differences of its loss.
local ane = require("ane")
local decoder = require("ane.models.decoder")
local transformer = require("ane.models.transformer")
local gpt2 = require("ane.models.gpt2")
local llama = require("ane.models.llama")
local helpers = require("spec.helpers")

local TINY_LLAMA = { dim = 64, hidden = 128, n_layer = 2, n_head = 4, vocab_size = 97, seq_len = 64 }
local TINY_GPT2 = { n_embd = 64, n_layer = 2, n_head = 4, n_positions = 64, vocab_size = 97, eps = 1e-5 }
local IDS = { 5, 17, 3, 88, 41, 0, 12, 9 }

-- A model of `arch` from weights by role, under a naming that calls every tensor by its role.
local function custom_model(W, arch, opts)
  local Model = transformer.mixin({})
  Model.__index = Model
  local self = setmetatable(decoder.new_state(arch.name, opts, opts.precision, opts.profile), Model)
  local naming = { name = function(role, l) return l and role .. "." .. l or role end }
  return transformer.init(self, W, arch, naming, opts, 1)
end

-- The program's weight consts (its other consts are masks, rotations and scalars).
local function sorted_weight_names(program)
  local names = {}
  for _, w in ipairs(program:weights()) do
    if w.name:match("_weight$") or w.name:match("_bias$") then names[#names + 1] = w.name end
  end
  table.sort(names)
  return names
end

describe("the transformer's architecture table", function()
  it("names each role's const by one rule, and programs hold exactly the table's roles", function()
    assert.are.equal("q_weight", transformer.const_name("q"))
    assert.are.equal("qkv_bias", transformer.const_name("qkv_bias"))
    local m = gpt2.from_weights(gpt2.random_weights(TINY_GPT2, 1), { precision = "fp32", profile = "cpu" })
    assert.are.same({ "attn_norm", "attn_norm_bias", "qkv", "qkv_bias", "out", "out_bias" }, transformer.roles(m.arch, "attn"))
    assert.are.same({ "ffn_norm", "ffn_norm_bias", "up", "up_bias", "down", "down_bias" }, transformer.roles(m.arch, "ffn"))
    m:logits(IDS)
    assert.are.same(m.weight_consts.attn_prefill, sorted_weight_names(m:program("attn_prefill", 1, 8)))
    assert.are.same(m.weight_consts.ffn, sorted_weight_names(m:program("ffn", 1, 8)))
    local l = llama.from_weights(llama.random_weights(TINY_LLAMA, 2), { precision = "fp32", profile = "cpu" })
    assert.are.same({ "attn_norm", "q", "k", "v", "out" }, transformer.roles(l.arch, "attn"))
    assert.are.same({ "ffn_norm", "gate", "up", "down" }, transformer.roles(l.arch, "ffn"))
    l:logits(IDS)
    assert.are.same(l.weight_consts.attn_prefill, sorted_weight_names(l:program("attn_prefill", 1, 8)))
  end)

  it("reads the classifier in fp16 for one position in fp16 models, in fp32 for sequences", function()
    local m = llama.from_weights(llama.random_weights(TINY_LLAMA, 4), { precision = "fp16", profile = "cpu" })
    local x, _, S = m:forward(IDS)
    local h = m:program("norm", nil, S):eval({ x = x }).y:slice(4, #IDS, #IDS):reshape(TINY_LLAMA.dim, 1):to("fp32")
    local one = m:classify(x, #IDS, S, #IDS)                                   -- [1, V]: the last position
    local fp16_rows = m.P.classifier:to("fp16"):to("fp32"):matmul(h):reshape(1, TINY_LLAMA.vocab_size)
    local fp32_rows = m.P.classifier:matmul(h):reshape(1, TINY_LLAMA.vocab_size)
    -- the same rounded weights, summed in another order: 1e-5 of the logits' scale; the fp32
    -- classifier's logits differ by the rounding of the weights (relative ~2^-11 each)
    local scale = math.max(1, select(1, fp32_rows:abs():topk(1))[1])
    assert.is_true(one:max_abs_diff(fp16_rows) <= 1e-5 * scale)
    assert.is_true(one:max_abs_diff(fp32_rows) > 1e-5 * scale)
    local all = m:classify(x, #IDS, S)                                         -- every position: fp32
    assert.is_true(all:slice(1, #IDS, #IDS):max_abs_diff(fp32_rows) <= 1e-5 * scale)
  end)

  it("computes the same logits from one fused qkv product as from separate q, k, v", function()
    local W = llama.random_weights(TINY_LLAMA, 3)
    local separate = llama.from_weights(W, { precision = "fp32", profile = "cpu" })
    local fused_W = { config = W.config, layers = {}, token_embedding = W.token_embedding, final_norm = W.final_norm,
      source = "the same weights, q k v stacked" }
    local C = TINY_LLAMA.dim
    for l, L in ipairs(W.layers) do
      local qkv = ane.tensor({ 3 * C, C })
      for i, role in ipairs({ "q", "k", "v" }) do qkv:slice(1, (i - 1) * C + 1, i * C):copy_from(L[role]) end
      fused_W.layers[l] = { attn_norm = L.attn_norm, qkv = qkv, out = L.out, ffn_norm = L.ffn_norm, gate = L.gate,
        up = L.up, down = L.down }
    end
    local arch = llama.architecture(W.config)
    arch.name, arch.qkv = "llama_fused", "fused"
    local fused = custom_model(fused_W, arch, { precision = "fp32", profile = "cpu" })
    -- the same dot products in another matrix: fp32 sums that may group differently (BLAS
    -- blocks by matrix size), so agreement to 1e-5 of the logits' scale, not bit for bit
    local a, b = separate:logits(IDS), fused:logits(IDS)
    assert.is_true(a:max_abs_diff(b) <= 1e-5 * math.max(1, select(1, a:abs():topk(1))[1]))
  end)

  it("builds, trains and decodes an architecture no model file uses", function()
    local C, V, H = 64, 97, 4
    local randn = decoder.seeded_randn(7)
    local function vector(n, value) return ane.tensor({ n }):fill(value) end
    local W = { config = { source = "spec" }, layers = {}, token_embedding = randn({ V, C }, 0.02), final_norm = vector(C, 1),
      final_norm_bias = vector(C, 0), source = "random (spec)" }
    for l = 1, 2 do
      W.layers[l] = { attn_norm = vector(C, 1), attn_norm_bias = vector(C, 0.01), q = randn({ C, C }, 0.05),
        k = randn({ C, C }, 0.05), v = randn({ C, C }, 0.05), out = randn({ C, C }, 0.05), out_bias = vector(C, 0.01),
        ffn_norm = vector(C, 1), ffn_norm_bias = vector(C, 0), gate = randn({ 128, C }, 0.05), gate_bias = vector(128, 0.01), up = randn({ 128, C }, 0.05),
        up_bias = vector(128, 0), down = randn({ C, 128 }, 0.05), down_bias = vector(C, 0) }
    end
    local arch = { name = "hybrid", dim = C, hidden = 128, n_layer = 2, n_head = H, n_kv_head = H, head_dim = C // H,
      vocab_size = V, context_length = 64, norm = "layer", norm_eps = 1e-5, qkv = "separate", bias = true,
      positions = "rope", rope = "half", rope_theta = 10000, ffn = "swiglu" }
    local incomplete = { config = W.config, layers = { W.layers[1], {} }, token_embedding = W.token_embedding,
      final_norm = W.final_norm, final_norm_bias = W.final_norm_bias, source = "incomplete (spec)" }
    local ok, err = pcall(custom_model, incomplete, arch, { precision = "fp32", profile = "cpu" })
    assert.is_false(ok)
    assert.matches("incomplete %(spec%): no weight 'attn_norm.1' %(role attn_norm of layer 1", err)
    local m = custom_model(W, arch, { precision = "fp32", profile = "cpu" })
    local logits = m:logits(IDS)
    assert.are.same({ #IDS, V }, logits:shape())
    helpers.assert_decode_matches_prefill(m, { 5, 17, 3 }, 4)
    local targets = { 17, 3, 88, 41, 0, 12, 9, 5 }
    local _, grads = m:loss(IDS, targets)
    assert.are.same({ 128, C }, grads["gate.1"]:shape())
    assert.is_nil(grads["position_embedding"])
    -- gradients in the model's own naming against central differences of the loss, one
    -- element of each kind of weight. h = 1e-2: the difference's truncation error is
    -- O(h^2) relative (3e-3 |g| covers it); the fp32 loss (~4.6) carries ~3e-7 of rounding,
    -- which the division by 2h turns into ~1.5e-5 (3e-5 covers it). The gradients here are
    -- 7e-4 .. 0.14, so a missing or zero gradient fails.
    local params, h = m:parameters(), 1e-2
    for _, case in ipairs({ { "attn_norm_bias.0", { 3 } }, { "gate.1", { 5, 7 } }, { "out_bias.1", { 2 } },
      { "k.0", { 1, 9 } }, { "token_embedding", { 18, 4 } } }) do
      local t = params[case[1]]
      local at = t:get(table.unpack(case[2]))
      local function loss_at(value)
        t:set(value, table.unpack(case[2]))
        m:load_parameters()
        return (m:loss(IDS, targets))
      end
      local numeric = (loss_at(at + h) - loss_at(at - h)) / (2 * h)
      loss_at(at)
      local analytic = grads[case[1]]:get(table.unpack(case[2]))
      assert.is_true(math.abs(numeric - analytic) <= 3e-5 + 3e-3 * math.abs(analytic),
        string.format("%s%s: analytic %.6g, central difference %.6g", case[1], table.concat(case[2], ","), analytic, numeric))
    end
  end)
end)

describe("model method tables", function()
  it("refuse a mixin that would replace a method another one added", function()
    local decoder = require("ane.models.decoder")
    local methods = decoder.add_methods({}, { forward = function() end }, "first.module")
    assert.error_matches(function() decoder.add_methods(methods, { forward = function() end }, "second.module") end,
      "method 'forward' of second.module clashes with the one first.module added")
    -- the same function again is no clash; the models' own tables mix in without one
    decoder.add_methods(methods, { forward = methods.forward }, "first.module")
    assert.is_function(require("ane.models.transformer").mixin({}).session)
  end)
end)

-- LoRA adapters on wq and wv, passed to the attention programs as inputs. The independent
-- reference is the merged model: W' = W + (alpha / rank) B A built on the CPU and loaded as an
-- ordinary Llama, whose weight gradient G gives the adapters' by the chain rule
-- (dL/dA = s B^T G, dL/dB = s G A^T).
local ane = require("ane")
local helpers = require("spec.helpers")
local llama = require("ane.models.llama")
local optim = require("ane.optim")

local RANK, ALPHA = 4, 8

local function reference()
  local dir, expected = helpers.repo_data():reference("llama-tiny")
  return dir .. "/model.bin", expected.input_ids:totable(), expected.targets:totable()
end

-- Gives every B a nonzero value, so the adapters change the model.
local function randomize_b(model, seed)
  for name, t in pairs(model.adapters) do
    if name:match("^lora_b") then t:copy_from(ane.tensor.randn(t:shape(), { seed = seed + #name, std = 0.05 })) end
  end
end

-- The base model with the adapters folded into wq and wv.
local function merged(path, lora_model)
  local base = assert(llama.load(path, { precision = "fp32" }))
  local params, dim, s = {}, base.config.dim, ALPHA / RANK
  for name, t in pairs(base:parameters()) do params[name] = t end
  for l = 0, base.config.n_layer - 1 do
    for _, which in ipairs({ "q", "v" }) do
      local a = lora_model.adapters["lora_a_" .. which .. "." .. l]:reshape(RANK, dim)
      local b_t = lora_model.adapters["lora_b_" .. which .. "." .. l]:reshape(RANK, dim)
      local name = "w" .. which .. "." .. l
      params[name] = params[name]:add(b_t:transpose():matmul(a):scale(s))
    end
  end
  return llama.from_weights(llama.weights_from_parameters(base.config, params, "merged"), { precision = "fp32" })
end

describe("LoRA", function()
  it("starts as the base model (B = 0)", function()
    local path, ids = reference()
    local base = assert(llama.load(path, { precision = "fp32" }))
    local adapted = assert(llama.load(path, { precision = "fp32", lora = { rank = RANK, alpha = ALPHA } }))
    assert.are.equal(0, base:logits(ids[1]):max_abs_diff(adapted:logits(ids[1])))
  end)

  it("gives the adapters' gradients the merged model implies", function()
    local path, ids, targets = reference()
    local adapted = assert(llama.load(path, { precision = "fp32", lora = { rank = RANK, alpha = ALPHA } }))
    randomize_b(adapted, 3)
    local loss, grads = adapted:loss(ids, targets)
    local reference_model = merged(path, adapted)
    local want_loss, want = reference_model:loss(ids, targets)
    -- fp32; the two compute the same function in different orders: observed 4e-9 relative
    assert.is_true(math.abs(loss - want_loss) < 1e-6 * want_loss, loss .. " vs " .. want_loss)
    local dim, s, checked = adapted.config.dim, ALPHA / RANK, 0
    for l = 0, adapted.config.n_layer - 1 do
      for _, which in ipairs({ "q", "v" }) do
        local G = want["w" .. which .. "." .. l] -- dL/dW [dim, dim]
        local a = adapted.adapters["lora_a_" .. which .. "." .. l]:reshape(RANK, dim)
        local b_t = adapted.adapters["lora_b_" .. which .. "." .. l]:reshape(RANK, dim)
        local want_a, want_b_t = b_t:matmul(G):scale(s), a:matmul(G:transpose()):scale(s) -- [rank, dim]
        -- observed <= 1.4e-7 on gradients up to ~0.09 (fp32 rounding of reordered sums)
        assert.is_true(grads["lora_a_" .. which .. "." .. l]:reshape(RANK, dim):max_abs_diff(want_a) < 1e-6)
        assert.is_true(grads["lora_b_" .. which .. "." .. l]:reshape(RANK, dim):max_abs_diff(want_b_t) < 1e-6)
        checked = checked + 2
      end
    end
    assert.are.equal(4 * adapted.config.n_layer, checked)
  end)

  it("trains only the adapters and swaps them at runtime with zero compiles", function()
    local path, ids, targets = reference()
    local adapted = assert(llama.load(path, { precision = "fp32", lora = { rank = RANK, alpha = ALPHA } }))
    local frozen = adapted.P.layers[1].q:copy()
    local opt = optim.adamw(adapted:parameters(), { lr = 1e-2 })
    local losses = {}
    for step = 1, 4 do
      local loss, grads = adapted:loss(ids, targets)
      losses[step] = loss
      opt:step(grads)
      adapted:load_parameters()
    end
    assert.is_true(losses[4] < losses[1], "loss " .. losses[1] .. " -> " .. losses[4])
    assert.are.equal(0, adapted.P.layers[1].q:max_abs_diff(frozen)) -- base weights untouched
    local dir = helpers.tmpdir()
    assert(adapted:save_adapters(dir .. "/trained.safetensors"))

    -- a second model swaps between its own adapters and the trained ones without compiling
    local other = assert(llama.load(path, { precision = "fp32", lora = { rank = RANK, alpha = ALPHA } }))
    local before = other:logits(ids[1])
    local compiles = ane.stats().compiles
    assert(other:load_adapters(dir .. "/trained.safetensors"))
    local after = other:logits(ids[1])
    assert.are.equal(compiles, ane.stats().compiles)
    assert.are.equal(0, after:max_abs_diff(adapted:logits(ids[1])))
    assert.is_true(after:max_abs_diff(before) > 1e-3) -- the swap changed the model
    -- and the result is the merged model's (fp32, reordered sums)
    assert.is_true(after:max_abs_diff(merged(path, other):logits(ids[1])) < 1e-4)
  end)

  it("refuses adapters of another rank or alpha, by file", function()
    local path = reference()
    local dir = helpers.tmpdir()
    local rank2 = assert(llama.load(path, { precision = "fp32", lora = { rank = 2, alpha = ALPHA } }))
    assert(rank2:save_adapters(dir .. "/rank2.safetensors"))
    local adapted = assert(llama.load(path, { precision = "fp32", lora = { rank = RANK, alpha = ALPHA } }))
    local ok, err = adapted:load_adapters(dir .. "/rank2.safetensors")
    assert.is_nil(ok)
    assert.matches("rank2%.safetensors: adapters of rank 2, the model uses rank 4", err)
    local alpha16 = assert(llama.load(path, { precision = "fp32", lora = { rank = RANK, alpha = 16 } }))
    assert(alpha16:save_adapters(dir .. "/alpha16.safetensors"))
    ok, err = adapted:load_adapters(dir .. "/alpha16.safetensors")
    assert.is_nil(ok)
    assert.matches("alpha 16", err)
  end)
end)

-- Llama-2 inference against the PyTorch expectations for reference/llama-tiny (llama2.c v0
-- checkpoint, dim 64, hidden 192, 2 layers, 4 heads, unshared classifier, interleaved RoPE;
-- a small vocabulary in spec/data, Llama-2's 32000 in the shared data), the KV-cache decode
-- against full prefills, and corrupt checkpoints. Each block runs once per data set.
local ane = require("ane")
local llama = require("ane.models.llama")
local helpers = require("spec.helpers")

for _, data in ipairs(helpers.data_sets()) do
local label = " [" .. data.label .. "]"
local function reference() return data:reference("llama-tiny") end

describe("Llama logits" .. label, function()
  it("match PyTorch within 1e-4 in fp32", function()
    local dir, expected, V = reference()
    local model = assert(llama.load(dir .. "/model.bin", { precision = "fp32" }))
    local logits = model:logits(expected.input_ids:totable())
    assert.are.same({ 2, 16, V }, logits:shape())
    -- fp32 throughout, sums over <= 192 terms: differences from PyTorch ~1e-6 (bar 1e-4)
    local diff = logits:max_abs_diff(expected.logits)
    assert.is_true(diff < 1e-4, "max |diff| = " .. diff)
  end)

  for _, setup in ipairs({ { "fp32", "cpu" }, { "fp16", "ane" } }) do
    it("decode with the KV cache like a full prefill (" .. setup[1] .. ", " .. setup[2] .. ")", function()
      local dir, _, V = reference()
      local model = assert(llama.load(dir .. "/model.bin", { precision = setup[1], profile = setup[2] }))
      -- BOS, "Once upon a" in Llama-2's ids (folded into a small vocabulary)
      helpers.assert_decode_matches_prefill(model, { 1, 9038 % V, 2501 % V, 263 % V }, 16)
    end)
  end

  it("computes the loss and every gradient like PyTorch (fp32)", function()
    local dir, expected, V = reference()
    local model = assert(llama.load(dir .. "/model.bin", { precision = "fp32" }))
    local loss, grads = model:loss(expected.input_ids:totable(), expected.targets:totable())
    -- fp32 end to end: the loss (~10.7) to 1e-5 relative, gradients (|g| <= 0.26, sums over
    -- <= 192 terms per program plus CPU sums over 32 positions) to 1e-5 absolute: the
    -- differences from PyTorch are ~2e-7.
    assert.is_true(math.abs(loss - expected.loss:get(1)) < 1e-4, "loss " .. loss)
    local checked = helpers.assert_gradients(grads, expected, 1e-5)
    assert.are.equal(21, checked) -- token_embedding, wcls, rms_final and 9 fields x 2 layers
  end)

  it("reproduces PyTorch's five AdamW steps, updating weights by patching only", function()
    local dir, expected, V = reference()
    local model = assert(llama.load(dir .. "/model.bin", { precision = "fp32" }))
    local losses, moved = helpers.adamw_losses(model, expected)
    local want = expected.adamw_losses:totable()
    for step = 1, 6 do
      -- fp32 throughout; the six losses (~8-11) drift from PyTorch's by < 1e-5 over 5 steps
      assert.is_true(math.abs(losses[step] - want[step]) < 1e-4, string.format("loss %d: %.7f vs %.7f", step, losses[step], want[step]))
    end
    assert.are.equal(0, moved.compiles) -- weights changed by patching only
  end)

  it("builds programs compiled after an update from the updated weights", function()
    local dir, expected, V = reference()
    local optim = require("ane.optim")
    local long = {}
    for i = 1, 40 do long[i] = (i * 31) % V end -- 40 tokens: a bucket not compiled before the update
    for _, precision in ipairs({ "fp32", "fp16" }) do
      local model = assert(llama.load(dir .. "/model.bin", { precision = precision, profile = "cpu" }))
      local opt = optim.adamw(model:parameters(), { lr = 1e-2 })
      local _, grads = model:loss(expected.input_ids:totable(), expected.targets:totable())
      opt:step(grads)
      model:load_parameters()
      local fresh = llama.from_weights(llama.weights_from_parameters(model.config, model:parameters(), "copy"),
        { precision = precision, profile = "cpu" })
      assert.are.equal(0, model:logits(long):max_abs_diff(fresh:logits(long)), precision)
    end
  end)

  it("reports corrupt checkpoints by file and tensor", function()
    local dir = reference()
    local bytes = helpers.read_file(dir .. "/model.bin")
    local tmp = helpers.tmpdir()
    helpers.write_file(tmp .. "/short.bin", bytes:sub(1, #bytes - 1000))
    local ok, err = llama.load(tmp .. "/short.bin")
    assert.is_nil(ok)
    assert.matches("short%.bin: tensor 'wcls'", err)
    helpers.write_file(tmp .. "/long.bin", bytes .. "xxxx")
    ok, err = llama.load(tmp .. "/long.bin")
    assert.matches("the tensors end at byte %d+ but the file has %d+ bytes", err)
    helpers.write_file(tmp .. "/zero.bin", string.pack("<i4i4i4i4i4i4i4", 0, 1, 1, 1, 1, 1, 1))
    ok, err = llama.load(tmp .. "/zero.bin")
    assert.matches("zero%.bin %(header%): configuration field 'dim' is 0, expected a positive integer", err)
    helpers.write_file(tmp .. "/no_heads.bin", string.pack("<i4i4i4i4i4i4i4", 8, 1, 1, 0, 0, 1, 1))
    ok, err = llama.load(tmp .. "/no_heads.bin")
    assert.matches("configuration field 'n_head' is 0", err)
    helpers.write_file(tmp .. "/groups.bin", string.pack("<i4i4i4i4i4i4i4", 8, 1, 1, 4, 3, 1, 1))
    ok, err = llama.load(tmp .. "/groups.bin")
    assert.matches("4 query heads cannot share 3 kv heads evenly", err)
    helpers.write_file(tmp .. "/v2.bin", string.pack("<I4i4", 0x616b3432, 2) .. string.rep("\0", 248))
    ok, err = llama.load(tmp .. "/v2.bin")
    assert.matches("v2%.bin: llama2%.c export version 2; versions 0 %(legacy%) and 1 %(fp32%) are read", err)
  end)
end)
end

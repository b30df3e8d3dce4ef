-- ane.models.qwen3: Qwen3's own entry point over the Llama programs: loading a Hugging Face
-- Qwen3 directory (the PyTorch-checked fixture; other model types refused) and random
-- Qwen3-shaped weights (GQA, q/k norms, rotate-half RoPE, tied embeddings) that decode like
-- a full prefill.
local helpers = require("spec.helpers")
local qwen3 = require("ane.models.qwen3")
local llama = require("ane.models.llama")

describe("Qwen3", function()
  it("loads a Hugging Face Qwen3 directory: the Llama model's logits, PyTorch's within 1e-4", function()
    local dir, expected, V = helpers.repo_data():reference("qwen3-tiny")
    local model = assert(qwen3.load(dir, { precision = "fp32" }))
    assert.matches("^qwen3 %(", tostring(model))
    local ids = expected.input_ids:totable()[1]
    local logits = model:logits(ids)
    assert.are.equal(0, logits:max_abs_diff(assert(llama.load(dir, { precision = "fp32" })):logits(ids)))
    -- fp32 against the float64 reference, summation order only (as llama_formats_spec)
    assert.is_true(logits:max_abs_diff(expected.logits:reshape(#ids, V)) < 1e-4)
  end)

  it("refuses a directory of another model type, naming its config", function()
    local dir = helpers.repo_data():reference("gpt2-tiny")
    local model, err = qwen3.load(dir)
    assert.is_nil(model)
    assert.matches("config%.json: model_type 'gpt2', not 'qwen3'", err)
  end)

  it("builds random Qwen3-shaped models that decode like a full prefill", function()
    local config = { dim = 32, hidden = 64, n_layer = 2, n_head = 4, n_kv_head = 2, head_dim = 16, vocab_size = 96, seq_len = 64 }
    local W = qwen3.random_weights(config, 3)
    assert.is_true(W.config.qk_norm)
    assert.are.same({ 32, 32 }, W.layers[1].k:shape()) -- kv heads x head_dim rows
    for _, setup in ipairs({ { "fp32", "cpu" }, { "fp16", "ane" } }) do
      local model = qwen3.from_weights(W, { precision = setup[1], profile = setup[2] })
      assert.matches("qwen3 %(2 layers, 4 %(2 kv%) heads of 16", tostring(model))
      helpers.assert_decode_matches_prefill(model, { 1, 7, 42, 9 }, 12)
    end
    assert.are.equal(28, qwen3.CONFIGS["0.6B"].n_layer)
  end)
end)

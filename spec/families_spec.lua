-- The Llama-like families from Hugging Face directories (spec/data/reference/*-tiny, written by
-- scripts/make_fixtures.py from transformers' modelling code in float64): Llama 3.1 (rope_scaling
-- of type llama3, untied, GQA), SmolLM2 (tied), Qwen2 (q/k/v biases), Mistral (a sliding window
-- narrower than the context), Phi-3 (fused qkv_proj / gate_up_proj, LongRoPE) and Gemma 3
-- ((1 + w) norms, post-norms, GeGLU, sliding layers past their window). Each loads through ane.models.llama, gives PyTorch's logits, its
-- greedy choice, PyTorch's loss and every gradient, decodes as a full prefill does, and saves to a
-- directory that loads back the same.
local helpers = require("spec.helpers")
local llama = require("ane.models.llama")
local nn = require("ane.nn")

local FAMILIES = {
  { "llama3-tiny", "llama", function(model) assert.are.equal("llama3", model.arch.rope_scaling.type) end },
  { "smollm2-tiny", "llama", function(model) assert.is_true(model.shared_classifier) end },
  { "qwen2-tiny", "qwen2", function(model) assert.is_true(model.arch.qkv_bias) end },
  { "mistral-tiny", "mistral", function(model) -- every layer slides over 16 of the 128 positions
    assert.are.equal(128, model.context_length)
    assert.are.equal(16, model.arch.sliding_window)
  end },
  { "gemma3-tiny", "gemma3_text", function(model) -- layers 1 and 3 slide over 5 positions, 2 attends to all
    assert.are.same({ true, false, true }, { model:is_sliding(1), model:is_sliding(2), model:is_sliding(3) })
    assert.are.equal(5, model.arch.sliding_window)
    assert.are.equal(6.9375, model.arch.embed_scale) -- sqrt(48) in bf16, as the checkpoint's dtype rounds it
  end },
  { "gemma3-softcap-tiny", "gemma3_text", function(model) -- scores capped at 2, logits at 3
    assert.are.same({ 2, 3 }, { model.arch.attn_softcap, model.arch.final_softcap })
  end },
  { "phi3-tiny", "phi3", function(model) -- fused projections read apart; LongRoPE's short range
    assert.are.equal("longrope", model.arch.rope_scaling.type)
    assert.are.equal(32, model.context_length)
  end },
}

describe("Llama-like families", function()
  for _, family in ipairs(FAMILIES) do
    local name, model_type, check = family[1], family[2], family[3]
    it(name .. ": PyTorch's logits within 1e-4 in fp32, its greedy choices, decoding as prefill", function()
      local dir, expected, V = helpers.repo_data():reference(name)
      local model = assert(llama.load(dir, { precision = "fp32" }))
      assert.matches("^" .. model_type .. " %(", tostring(model))
      check(model)
      local ids = expected.input_ids:totable()[1]
      local logits = model:logits(ids)
      local want = expected.logits:reshape(#ids, V)
      -- fp32 sums against the float64 reference (bf16 weights exact in both): summation order only
      assert.is_true(logits:max_abs_diff(want) < 1e-4, tostring(logits:max_abs_diff(want)))
      for t = 1, #ids do
        assert.are.equal(want:slice(1, t, t):argmax(), logits:slice(1, t, t):argmax(), "position " .. t)
      end
      for _, setup in ipairs({ { "fp32", "cpu" }, { "fp16", "ane" } }) do
        helpers.assert_decode_matches_prefill(assert(llama.load(dir, { precision = setup[1], profile = setup[2] })),
          { ids[1], ids[2], ids[3] }, 6)
      end
      -- training: the loss and every gradient, in Hugging Face names (fp32 sums against float64:
      -- differences ~1e-7, as llama_formats_spec's; bars 1e-4 and 1e-5)
      local loss, grads = model:loss(ids, expected.targets:totable()[1])
      assert.is_true(math.abs(loss - expected.loss:get(1)) < 1e-4, loss .. " vs " .. expected.loss:get(1))
      local checked = 0
      for key, want in pairs(expected) do
        local param = key:match("^grad%.(.*)$")
        if param then
          assert.is_truthy(grads[param], "no gradient for " .. param)
          local diff = grads[param]:max_abs_diff(want:reshape(table.unpack(grads[param]:shape())))
          assert.is_true(diff < 1e-5, param .. ": " .. diff)
          checked = checked + 1
        end
      end
      assert.is_true(checked >= 20, checked .. " gradients")
      local saved = helpers.tmpdir() .. "/" .. name
      assert(model:save(saved))
      assert.are.equal(0, assert(llama.load(saved, { precision = "fp32" })):logits(ids):max_abs_diff(logits))
    end)
  end

  -- (and Qwen3, whose fixture's expectations hold logits and the loss but no gradients)
  local lora_families = { { "qwen3-tiny" } }
  for _, family in ipairs(FAMILIES) do table.insert(lora_families, family) end
  for _, family in ipairs(lora_families) do
    local name = family[1]
    it(name .. ": LoRA adapters start as the model and their gradients match finite differences", function()
      local dir, expected = helpers.repo_data():reference(name)
      local ids, targets = expected.input_ids:totable()[1], expected.targets:totable()[1]
      local model = assert(llama.load(dir, { precision = "fp32", lora = { rank = 2, alpha = 4, seed = 3 } }))
      local loss, grads = model:loss(ids, targets)
      -- B starts at zero: the adapted model is the model (the same fp32 sums, a zero delta added)
      assert.is_true(math.abs(loss - expected.loss:get(1)) < 1e-4, loss .. " vs " .. expected.loss:get(1))
      local adapters = model:parameters()
      for _, key in ipairs({ "lora_b_q.0", "lora_b_v.1" }) do
        local grad = grads[key]:reshape(-1)
        local index, largest = 1, 0
        for i = 1, grad:numel() do
          if math.abs(grad:get(i)) > largest then index, largest = i, math.abs(grad:get(i)) end
        end
        assert.is_true(largest > 0, key .. " has no gradient")
        -- central differences with h = 1e-2: the loss is smooth in B (truncation ~h^2 = 1e-4) and
        -- its fp32 noise (~1e-6) divided by 2h is ~1e-4; the bar, 1e-3 + 1%, is above both
        local flat, h = adapters[key]:reshape(-1), 1e-2
        local saved = flat:get(index)
        flat:set(saved + h, index)
        local up = model:loss(ids, targets)
        flat:set(saved - h, index)
        local down = model:loss(ids, targets)
        flat:set(saved, index)
        local numeric = (up - down) / (2 * h)
        assert.is_true(math.abs(numeric - grad:get(index)) < 1e-3 + 0.01 * largest,
          string.format("%s[%d]: %g analytic, %g numeric", key, index, grad:get(index), numeric))
      end
    end)
  end

  -- transformers' _compute_llama3_parameters, read as a rule: wavelengths above n / low are
  -- divided by the factor, below n / high kept, between them interpolated
  it("rescales Llama 3.1's rotary frequencies by wavelength", function()
    local n, scaling = 32, { type = "llama3", factor = 8, low_freq_factor = 1, high_freq_factor = 4,
      original_max_position_embeddings = 32 }
    local plain, scaled = nn.rope_frequencies(64, 500000), nn.rope_frequencies(64, 500000, scaling)
    local seen = {}
    for i = 1, #plain do
      local wavelength = 2 * math.pi / plain[i]
      if wavelength < n / 4 then
        assert.are.equal(plain[i], scaled[i]); seen.kept = true
      elseif wavelength > n then
        assert.is_true(math.abs(scaled[i] - plain[i] / 8) <= 1e-15 * plain[i]); seen.divided = true
      else
        assert.is_true(scaled[i] < plain[i] and scaled[i] > plain[i] / 8); seen.between = true
      end
    end
    assert.is_true(seen.kept and seen.divided and seen.between, "every band is exercised")
    local linear = nn.rope_frequencies(16, 10000, { type = "linear", factor = 4 })
    assert.are.equal(nn.rope_frequencies(16, 10000)[3] / 4, linear[3])
  end)

  it("refuses rope_scaling types it does not know and bad fields, naming them", function()
    local dir = helpers.repo_data():reference("llama3-tiny")
    local function with(config_change, from)
      local copy = helpers.tmpdir() .. "/llama3-variant"
      dir = from and helpers.repo_data():reference(from) or dir
      helpers.run("rm -rf " .. helpers.quote(copy) .. " && cp -r " .. helpers.quote(dir) .. " " .. helpers.quote(copy))
      local cjson = require("cjson")
      local config = cjson.decode(helpers.read_file(copy .. "/config.json"))
      config_change(config)
      local f = assert(io.open(copy .. "/config.json", "w"))
      f:write(cjson.encode(config))
      f:close()
      return llama.load(copy)
    end
    local model, err = with(function(c) c.rope_scaling.rope_type = "yarn" end)
    assert.is_nil(model)
    assert.matches("config%.json: rope_scaling%.rope_type 'yarn' is not supported %(anelua reads linear, dynamic, llama3 and longrope%)", err)
    model, err = with(function(c) c.rope_scaling.low_freq_factor = "one" end)
    assert.matches("config%.json: rope_scaling%.low_freq_factor is \"one\", expected a positive number", err)
    model, err = with(function(c) c.rope_scaling.high_freq_factor = 0.5 end)
    assert.matches("rope_scaling%.high_freq_factor %(0%.5%) must be above low_freq_factor %(1%)", err)
    model, err = with(function(c) c.model_type = "gemma" end)
    assert.matches("model_type 'gemma'; the Llama loader reads 'llama', 'mistral', 'phi3', 'qwen2', 'qwen3' and "
      .. "'gemma3_text'", err)
    model, err = with(function(c) c.model_type = "gemma3" end)
    assert.matches("model_type 'gemma3' is Gemma 3 with its vision tower; anelua reads the text%-only 'gemma3_text'", err)
    -- dynamic scaling changes nothing within max_position_embeddings, the context anelua gives
    model = assert(with(function(c) c.rope_scaling = { rope_type = "dynamic", factor = 2.0 } end))
    assert.is_nil(model.arch.rope_scaling)
  end)

  it("reads Gemma 3's older and newer config fields alike, and refuses what it does not run", function()
    local dir, expected = helpers.repo_data():reference("gemma3-tiny")
    local cjson = require("cjson")
    local function with(config_change)
      local copy = helpers.tmpdir() .. "/gemma3-variant"
      helpers.run("rm -rf " .. helpers.quote(copy) .. " && cp -r " .. helpers.quote(dir) .. " " .. helpers.quote(copy))
      local config = cjson.decode(helpers.read_file(copy .. "/config.json"))
      config_change(config)
      helpers.write_file(copy .. "/config.json", cjson.encode(config))
      return llama.load(copy, { precision = "fp32" })
    end
    local ids = expected.input_ids:totable()[1]
    local reference = assert(llama.load(dir, { precision = "fp32" })):logits(ids)
    -- sliding_window_pattern 2 (transformers' rule: every second layer global) is layer_types' pattern
    local model = assert(with(function(c) c.layer_types = nil; c.sliding_window_pattern = 2 end))
    assert.are.equal(0, model:logits(ids):max_abs_diff(reference))
    -- rope_parameters per layer type, as newer transformers writes them
    model = assert(with(function(c)
      c.rope_parameters = { sliding_attention = { rope_type = "default", rope_theta = 10000 },
        full_attention = { rope_type = "linear", factor = 8, rope_theta = 1000000 } }
      c.rope_theta, c.rope_scaling, c.rope_local_base_freq = nil, nil, nil
    end))
    assert.are.equal(0, model:logits(ids):max_abs_diff(reference))
    local _, err = with(function(c) c.final_logit_softcapping = -30 end)
    assert.matches("'final_logit_softcapping' is %-30, expected a positive number", err)
    _, err = with(function(c) c.layer_types[2] = "chunked" end)
    assert.matches("layer_types%[2%] is \"chunked\", expected \"sliding_attention\" or \"full_attention\"", err)
    _, err = with(function(c) c.hidden_activation = "silu" end)
    assert.matches("hidden_activation 'silu'; Gemma 3 runs GELU's tanh form", err)
    _, err = with(function(c) c.query_pre_attn_scalar = nil end)
    assert.matches("'query_pre_attn_scalar' is missing, expected a positive number", err)
  end)
end)

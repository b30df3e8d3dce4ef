-- The other Llama-family formats against PyTorch: llama2.c v1 exports and Hugging Face
-- Llama directories (rotate-half RoPE) rebuilt from reference/llama-tiny, and the real
-- Hugging Face Qwen3 checkpoint reference/qwen3-tiny (bf16 weights, grouped-query attention
-- with 4 query heads on 2 kv heads, per-head q/k RMSNorms, rotate-half RoPE with theta 1e6,
-- head_dim 32 with dim 64, tied embeddings).
local ane = require("ane")
local llama = require("ane.models.llama")
local cjson = require("cjson")
local helpers = require("spec.helpers")

-- llama-tiny's shape (meta.json / the v0 header): dim 64, hidden 192, 2 layers, 4 heads;
-- the vocabulary (small in spec/data, 32000 in the shared data) comes from the header.
local DIM, HIDDEN, LAYERS, HEADS, SEQ = 64, 192, 2, 4, 64
local HEAD = DIM // HEADS

-- The v0 file's tensors as fp32 byte strings, by field (all layers together), and its
-- vocabulary size as fields.vocab.
local function v0_fields(bytes)
  local VOCAB = -select(6, string.unpack("<i4i4i4i4i4i4i4", bytes)) -- negative: unshared classifier
  local order = {
    { "token_embedding", VOCAB * DIM }, { "rms_att", LAYERS * DIM }, { "wq", LAYERS * DIM * DIM },
    { "wk", LAYERS * DIM * DIM }, { "wv", LAYERS * DIM * DIM }, { "wo", LAYERS * DIM * DIM },
    { "rms_ffn", LAYERS * DIM }, { "w1", LAYERS * HIDDEN * DIM }, { "w2", LAYERS * DIM * HIDDEN },
    { "w3", LAYERS * HIDDEN * DIM }, { "rms_final", DIM }, { "freq_cis_real", SEQ * HEAD // 2 },
    { "freq_cis_imag", SEQ * HEAD // 2 }, { "wcls", VOCAB * DIM },
  }
  local fields, offset = {}, 28
  for _, field in ipairs(order) do
    fields[field[1]] = bytes:sub(offset + 1, offset + field[2] * 4)
    offset = offset + field[2] * 4
  end
  assert(offset == #bytes, "llama-tiny's model.bin is not the expected v0 layout")
  fields.vocab = VOCAB
  return fields
end

-- Hugging Face stores wq/wk rows per head as (first halves of the pairs, second halves), so
-- that rotate-half pairs i with i + head/2 what llama2.c pairs as 2i, 2i + 1:
-- new row h*head + j*head/2 + i <- old row h*head + 2i + j.
local function to_rotate_half(w, heads) -- [heads * head, in]
  local rows = w:shape()[1]
  local head = rows // heads
  local out = ane.tensor(w:shape())
  for h = 0, heads - 1 do
    for i = 0, head // 2 - 1 do
      for j = 0, 1 do
        local new, old = h * head + j * head // 2 + i, h * head + 2 * i + j
        out:slice(1, new + 1, new + 1):copy_from(w:slice(1, old + 1, old + 1))
      end
    end
  end
  return out
end

for _, data in ipairs(helpers.data_sets()) do
local label = " [" .. data.label .. "]"
local function llama_reference() return data:reference("llama-tiny") end
local function qwen3_reference() return data:reference("qwen3-tiny") end

describe("llama2.c v1 exports" .. label, function()
  it("give PyTorch's logits (the v0 reference rewritten in v1 order)", function()
    local dir, expected = llama_reference()
    local f = v0_fields(helpers.read_file(dir .. "/model.bin"))
    -- 256-byte header: magic "ak42", version 1, the 7 fields (vocab positive), u8 shared = 0
    local header = string.pack("<I4i4i4i4i4i4i4i4i4B", 0x616b3432, 1, DIM, HIDDEN, LAYERS, HEADS, HEADS, f.vocab, SEQ, 0)
    header = header .. string.rep("\0", 256 - #header)
    local body = { header }
    for _, field in ipairs({ "rms_att", "rms_ffn", "rms_final", "token_embedding", "wq", "wk", "wv", "wo", "w1", "w2",
      "w3", "wcls" }) do
      body[#body + 1] = f[field]
    end
    local path = helpers.tmpdir() .. "/tiny_v1.bin"
    helpers.write_file(path, table.concat(body))
    local model = assert(llama.load(path, { precision = "fp32" }))
    local logits = model:logits(expected.input_ids:totable())
    -- the same fp32 computation as the v0 file (llama_spec: ~1e-6 from PyTorch; bar 1e-4)
    assert.is_true(logits:max_abs_diff(expected.logits) < 1e-4)
    assert.is_false(model.shared_classifier)
    -- and a v1 file cut short names the tensor that does not fit
    helpers.write_file(path, table.concat(body):sub(1, -100))
    local ok, err = llama.load(path)
    assert.is_nil(ok)
    assert.matches("tiny_v1%.bin: tensor 'wcls'", err)
  end)
end)

-- llama-tiny as a Hugging Face Llama directory (fp32 safetensors, rotate-half row order).
local function write_hf_llama(dir, fields, extra_config)
  local VOCAB = fields.vocab
  local function matrices(field, rows, cols)
    local all = ane.tensor.from_bytes(fields[field], { LAYERS, rows, cols }, "fp32")
    local list = {}
    for l = 1, LAYERS do list[l] = all:slice(1, l, l):reshape(rows, cols):copy() end
    return list
  end
  local function vectors(field)
    local all = ane.tensor.from_bytes(fields[field], { LAYERS, DIM }, "fp32")
    local list = {}
    for l = 1, LAYERS do list[l] = all:slice(1, l, l):reshape(DIM):copy() end
    return list
  end
  local wq, wk, wv, wo = matrices("wq", DIM, DIM), matrices("wk", DIM, DIM), matrices("wv", DIM, DIM), matrices("wo", DIM, DIM)
  local w1, w2, w3 = matrices("w1", HIDDEN, DIM), matrices("w2", DIM, HIDDEN), matrices("w3", HIDDEN, DIM)
  local rms_att, rms_ffn = vectors("rms_att"), vectors("rms_ffn")
  local tensors = {
    ["model.embed_tokens.weight"] = ane.tensor.from_bytes(fields.token_embedding, { VOCAB, DIM }, "fp32"),
    ["model.norm.weight"] = ane.tensor.from_bytes(fields.rms_final, { DIM }, "fp32"),
    ["lm_head.weight"] = ane.tensor.from_bytes(fields.wcls, { VOCAB, DIM }, "fp32"),
  }
  for l = 1, LAYERS do
    local p = "model.layers." .. (l - 1) .. "."
    tensors[p .. "input_layernorm.weight"], tensors[p .. "post_attention_layernorm.weight"] = rms_att[l], rms_ffn[l]
    tensors[p .. "self_attn.q_proj.weight"] = to_rotate_half(wq[l], HEADS)
    tensors[p .. "self_attn.k_proj.weight"] = to_rotate_half(wk[l], HEADS)
    tensors[p .. "self_attn.v_proj.weight"], tensors[p .. "self_attn.o_proj.weight"] = wv[l], wo[l]
    tensors[p .. "mlp.gate_proj.weight"], tensors[p .. "mlp.down_proj.weight"] = w1[l], w2[l]
    tensors[p .. "mlp.up_proj.weight"] = w3[l]
  end
  assert(ane.io.save_safetensors(dir .. "/model.safetensors", tensors))
  local config = { model_type = "llama", hidden_size = DIM, intermediate_size = HIDDEN, num_hidden_layers = LAYERS,
    num_attention_heads = HEADS, num_key_value_heads = HEADS, vocab_size = VOCAB, max_position_embeddings = SEQ,
    rms_norm_eps = 1e-5, rope_theta = 10000.0, tie_word_embeddings = false, hidden_act = "silu" }
  for key, value in pairs(extra_config or {}) do config[key] = value end
  helpers.write_file(dir .. "/config.json", cjson.encode(config))
  return tensors
end

describe("Hugging Face Llama directories" .. label, function()
  it("give PyTorch's logits and gradients, in Hugging Face names and row order", function()
    local dir, expected = llama_reference()
    local hf = helpers.tmpdir()
    write_hf_llama(hf, v0_fields(helpers.read_file(dir .. "/model.bin")))
    local model = assert(llama.load(hf, { precision = "fp32" }))
    assert.are.equal("half", model.config.rope)
    -- the same fp32 arithmetic as the llama2.c file up to the order of a head's columns
    -- (~1e-6 from PyTorch; bar 1e-4)
    local logits = model:logits(expected.input_ids:totable())
    assert.is_true(logits:max_abs_diff(expected.logits) < 1e-4)
    local loss, grads = model:loss(expected.input_ids:totable(), expected.targets:totable())
    assert.is_true(math.abs(loss - expected.loss:get(1)) < 1e-4)
    -- The gradients carry Hugging Face names; q/k ones come in the rotate-half row order.
    -- fp32 throughout, as in llama_spec: differences ~2e-7 (bar 1e-5)
    local checks = {
      { "model.layers.0.self_attn.q_proj.weight", "grad.wq.0", true },
      { "model.layers.1.self_attn.k_proj.weight", "grad.wk.1", true },
      { "model.layers.1.self_attn.v_proj.weight", "grad.wv.1" },
      { "model.layers.0.mlp.gate_proj.weight", "grad.w1.0" },
      { "model.layers.0.mlp.down_proj.weight", "grad.w2.0" },
      { "model.layers.1.post_attention_layernorm.weight", "grad.rms_ffn.1" },
      { "model.norm.weight", "grad.rms_final" },
      { "model.embed_tokens.weight", "grad.token_embedding" },
      { "lm_head.weight", "grad.wcls" },
    }
    for _, check in ipairs(checks) do
      local want = expected[check[2]]
      if check[3] then want = to_rotate_half(want, HEADS) end
      assert.is_truthy(grads[check[1]], check[1])
      local diff = grads[check[1]]:max_abs_diff(want)
      assert.is_true(diff < 1e-5, check[1] .. ": " .. diff)
    end
  end)

  it("refuse what they cannot run, naming the file and the field", function()
    local dir = llama_reference()
    local fields = v0_fields(helpers.read_file(dir .. "/model.bin"))
    local hf = helpers.tmpdir()
    write_hf_llama(hf, fields, { rope_scaling = { type = "yarn", factor = 2 } })
    local ok, err = llama.load(hf)
    assert.is_nil(ok)
    assert.matches("config%.json: rope_scaling%.rope_type 'yarn' is not supported", err)
    write_hf_llama(hf, fields, { num_hidden_layers = 3 })
    ok, err = llama.load(hf)
    assert.is_nil(ok)
    assert.matches("tensor 'model%.layers%.2%.input_layernorm%.weight' is missing", err)
    write_hf_llama(hf, fields, { intermediate_size = 128 })
    ok, err = llama.load(hf)
    assert.matches("tensor 'model%.layers%.0%.mlp%.gate_proj%.weight' has shape %[192, 64%], expected %[128, 64%]", err)
    write_hf_llama(hf, fields, { model_type = "falcon" })
    ok, err = llama.load(hf)
    assert.matches("model_type 'falcon'; the Llama loader reads", err)
    write_hf_llama(hf, fields, { model_type = "gemma3_text" }) -- a Llama's config lacks Gemma's fields
    ok, err = llama.load(hf)
    assert.matches("hidden_activation 'silu'; Gemma 3 runs GELU's tanh form", err)
  end)

  -- config.json was trusted until first use: rope_theta {} ended in nn.lua's arithmetic on a
  -- table, rms_norm_eps [] in a graph builder; each field is now checked as it is read
  it("refuse a config.json field of the wrong type or range when loading, naming the field", function()
    local fields = v0_fields(helpers.read_file(llama_reference() .. "/model.bin"))
    local hf = helpers.tmpdir()
    for _, case in ipairs({
      { { rope_theta = {} }, "'rope_theta' is a JSON array or object, expected a positive number" },
      { { rope_theta = -1 }, "'rope_theta' is %-1, expected a positive number" },
      { { rms_norm_eps = { 1 } }, "'rms_norm_eps' is a JSON array or object, expected a positive number" },
      { { rms_norm_eps = "1e-6" }, "'rms_norm_eps' is the string \"1e%-6\", expected a positive number" },
      { { num_hidden_layers = -1 }, "'n_layer' is %-1, expected a positive integer" },
      { { eos_token_id = "x" }, "'eos_token_id' is \"x\", expected a token id below vocab_size" },
      { { eos_token_id = { -7, 2 } }, "'eos_token_id' is %-7, expected a token id below vocab_size" },
      { { tie_word_embeddings = "yes" }, "'tie_word_embeddings' is \"yes\", expected true or false" },
    }) do
      write_hf_llama(hf, fields, case[1])
      local model, err = llama.load(hf, { precision = "fp32", profile = "cpu" })
      assert.is_nil(model, case[2])
      assert.matches(hf:gsub("%p", "%%%0") .. "/config%.json: .*" .. case[2], err)
    end
  end)

  -- a checkpoint's config reaches the model unchecked by any reader: n_layer -2 was a traceback
  it("refuse a configuration from parameters whose numbers cannot build the model", function()
    local model = assert(llama.load(llama_reference() .. "/model.bin", { precision = "fp32", profile = "cpu" }))
    for _, case in ipairs({ { "n_layer", -2, "'n_layer' is %-2, expected a positive integer" },
      { "norm_eps", 0 / 0, "'norm_eps' is [%-]?nan, expected a positive number" },
      { "dim", 2.5, "'dim' is 2%.5, expected a positive integer" } }) do
      local config = {}
      for k, v in pairs(model.config) do config[k] = v end
      config[case[1]] = case[2]
      local built, err = llama.from_weights(llama.weights_from_parameters(config, model:parameters(), "ckpt.safetensors"),
        { precision = "fp32", profile = "cpu" })
      assert.is_nil(built, case[1])
      assert.matches("^ckpt%.safetensors: the model's configuration: " .. case[3], err)
    end
  end)

  it("model:save writes an fp16 model that loads as views of its file and decodes bit for bit as before", function()
    local dir = llama_reference()
    local model = assert(llama.load(dir .. "/model.bin", { precision = "fp16", profile = "cpu" }))
    local saved = helpers.tmpdir() .. "/fp16"
    assert(model:save(saved))
    local config = assert(ane.io.read_json(saved .. "/config.json"))
    assert.are.equal("float16", config.torch_dtype)
    assert.is_nil(config.quantization_config)
    local tensors = assert(ane.io.load_safetensors(saved .. "/model.safetensors"))
    assert.are.equal("fp16", tensors["model.layers.1.mlp.down_proj.weight"]:dtype())
    assert.are.equal("fp16", tensors["lm_head.weight"]:dtype()) -- llama-tiny's classifier is its own
    assert.are.equal("fp32", tensors["model.norm.weight"]:dtype())
    tensors = nil
    local loaded = assert(llama.load(saved, { precision = "fp16", profile = "cpu" }))
    -- nothing converted: the programs' weights and the CPU's tables are the file's bytes
    assert.is_true(loaded.P.layers[2].down:is_readonly())
    assert.are.equal("fp16", loaded.P.token_embedding:dtype())
    assert.are.equal("fp16", loaded.P.classifier:dtype())
    -- the same fp16 weights and the same programs: every step's logits equal, bit for bit
    local a, b = model:session(), loaded:session()
    local ids = { 1, 5, 9, 2, 7 }
    assert.are.equal(0.0, a:feed(ids):max_abs_diff(b:feed(ids)))
    for _, id in ipairs({ 3, 11, 4, 8 }) do assert.are.equal(0.0, a:feed({ id }):max_abs_diff(b:feed({ id }))) end
    -- in fp32 the file's fp16 weights are converted where the model reads them: the same
    -- logits, bit for bit, as from every weight converted to fp32 before the model is built
    local W = assert(require("ane.formats.hf_llama").read(saved))
    assert.are.equal("fp16", W.layers[1].q:dtype()) -- (read as the file holds it)
    local wide = assert(llama.load(saved, { precision = "fp32", profile = "cpu" }))
    W.token_embedding, W.final_norm, W.classifier = W.token_embedding:to("fp32"), W.final_norm:to("fp32"), W.classifier:to("fp32")
    for _, L in ipairs(W.layers) do
      for role, t in pairs(L) do L[role] = t:to("fp32") end
    end
    local converted = llama.from_weights(W, { precision = "fp32", profile = "cpu" })
    assert.are.equal("fp32", wide.P.token_embedding:dtype())
    assert.are.equal(0.0, wide:logits(ids):max_abs_diff(converted:logits(ids)))
  end)

  it("model:save writes the latest parameters, and refuses to drop LoRA adapters", function()
    local dir = llama_reference()
    local model = assert(llama.load(dir .. "/model.bin", { precision = "fp32", profile = "cpu" }))
    local ids = { 1, 5, 9, 2, 7 }
    local before = model:logits(ids)
    local params = model:parameters()
    for _, name in ipairs({ "wq.0", "w2.1", "token_embedding" }) do -- (llama2.c names)
      local p = assert(params[name], name)
      p:copy_from(p:add(0.01))
    end
    model:load_parameters(params) -- (the programs are patched; the weights for new ones refresh lazily)
    local saved = helpers.tmpdir() .. "/trained"
    assert(model:save(saved))
    local loaded = assert(llama.load(saved, { precision = "fp32", profile = "cpu" }))
    local after = model:logits(ids)
    assert.is_true(after:max_abs_diff(before) > 1e-3, "the update changed the logits")
    assert.are.equal(0.0, loaded:logits(ids):max_abs_diff(after)) -- fp32 file, the same weights, bit for bit
    local adapted = assert(llama.load(dir .. "/model.bin", { precision = "fp32", profile = "cpu", lora = { rank = 2 } }))
    local ok, err = adapted:save(helpers.tmpdir() .. "/adapted")
    assert.is_nil(ok)
    assert.matches("has LoRA adapters, which this directory would leave out; save them with model:save_adapters", err)
  end)

  it("refuse bf16 weights beyond the fp16 range in fp16, naming the tensor", function()
    local dir = llama_reference()
    local hf = helpers.tmpdir()
    local tensors = write_hf_llama(hf, v0_fields(helpers.read_file(dir .. "/model.bin")))
    local name = "model.layers.1.mlp.up_proj.weight"
    tensors[name] = tensors[name]:to("bf16")
    tensors[name]:set(1e5, 3, 7) -- representable in bf16, infinite in fp16
    assert(ane.io.save_safetensors(hf .. "/model.safetensors", tensors))
    local model, err = llama.load(hf, { precision = "fp16" })
    assert.is_nil(model)
    local columns = tensors[name]:shape()[2]
    local bf16_value = tensors[name]:get(3, 7) -- 1e5 rounded to bf16's 8 bits
    assert.are.equal(hf .. ": tensor 'model.layers.1.mlp.up_proj.weight' holds " .. string.format("%.9g", bf16_value) ..
      " at element " .. (2 * columns + 6) .. ", outside the fp16 range (|x| > 65504); use precision 'fp32'", err)
    assert.is_truthy(llama.load(hf, { precision = "fp32" })) -- fp32 holds it
  end)
end)

describe("Qwen3 (Hugging Face, bf16, GQA, q/k norms)" .. label, function()
  it("saves as an fp16 directory with its tied embedding written once, decoding bit for bit as before", function()
    local dir, expected = qwen3_reference()
    local ids = expected.input_ids:totable()[1]
    local model = assert(llama.load(dir, { precision = "fp16", profile = "cpu" }))
    local saved = helpers.tmpdir() .. "/qwen3-fp16"
    assert(model:save(saved))
    local config = assert(ane.io.read_json(saved .. "/config.json"))
    assert.is_true(config.tie_word_embeddings)
    assert.are.equal("qwen3", config.model_type)
    local tensors = assert(ane.io.load_safetensors(saved .. "/model.safetensors"))
    assert.is_nil(tensors["lm_head.weight"])
    assert.are.equal("fp16", tensors["model.embed_tokens.weight"]:dtype())
    assert.is_truthy(tensors["model.layers.0.self_attn.q_norm.weight"])
    tensors = nil
    local loaded = assert(llama.load(saved, { precision = "fp16", profile = "cpu" }))
    local a, b = model:session(), loaded:session()
    assert.are.equal(0.0, a:feed(ids):max_abs_diff(b:feed(ids)))
    assert.are.equal(0.0, a:feed({ 3 }):max_abs_diff(b:feed({ 3 })))
  end)

  it("reads its bf16 weights as the file holds them, the same model as from fp32 masters", function()
    local dir, expected = qwen3_reference()
    local ids = expected.input_ids:totable()[1]
    local W = assert(require("ane.formats.hf_llama").read(dir))
    assert.are.equal("bf16", W.layers[1].gate:dtype()) -- a view of the file, nothing converted yet
    local masters = assert(require("ane.formats.hf_llama").read(dir))
    masters.token_embedding, masters.final_norm = masters.token_embedding:to("fp32"), masters.final_norm:to("fp32")
    for _, L in ipairs(masters.layers) do
      for role, t in pairs(L) do L[role] = t:to("fp32") end
    end
    -- bf16 -> fp16 directly rounds as bf16 -> fp32 (exact) -> fp16 does: the same programs,
    -- and decode steps read the same classifier (fp16 from the file's bf16, or from the
    -- masters), so every step's logits are equal, bit for bit
    for _, precision in ipairs({ "fp16", "fp32" }) do
      local opts = { precision = precision, profile = "cpu" }
      local a, b = llama.from_weights(W, opts), llama.from_weights(masters, opts)
      if precision == "fp16" then assert.are.equal("fp16", a.P.token_embedding:dtype()) end -- (not an fp32 copy)
      local sa, sb = a:session(), b:session()
      assert.are.equal(0.0, sa:feed(ids):max_abs_diff(sb:feed(ids)), precision)
      assert.are.equal(0.0, sa:feed({ 7 }):max_abs_diff(sb:feed({ 7 })), precision)
    end
  end)

  it("gives PyTorch's logits and loss in fp32", function()
    local dir, expected, V = qwen3_reference()
    local model = assert(llama.load(dir, { precision = "fp32" }))
    assert.are.same({ 4, 2, 32, "half", 1e6 }, { model.config.n_head, model.config.n_kv_head, model.config.head_dim,
      model.config.rope, model.config.rope_theta })
    local ids, targets = expected.input_ids:totable()[1], expected.targets:totable()[1]
    local logits = model:logits(ids)
    -- The reference ran in fp32 from the same bf16 weights (bf16 -> fp32 is exact): only
    -- summation order differs, ~2e-6 here (bar 1e-4, logits up to ~10).
    local diff = logits:max_abs_diff(expected.logits:reshape(#ids, V))
    assert.is_true(diff < 1e-4, "max |diff| = " .. diff)
    local loss = model:loss(ids, targets)
    assert.is_true(math.abs(loss - expected.loss:get(1)) < 1e-4, "loss " .. loss)
  end)

  it("stays within the derived fp16 bound", function()
    local dir, expected, V = qwen3_reference()
    local ids = expected.input_ids:totable()[1]
    local m16 = assert(llama.load(dir, { precision = "fp16" }))
    local m32 = assert(llama.load(dir, { precision = "fp32" }))
    -- Bound on the final RMSNorm's outputs h: the norm rounds ~5 times (scaled, squared,
    -- sum, inv_rms, normalized, weight: 2^-11 relative each); each of the 2 layers adds ~15
    -- roundings to the residual stream (projections, two per-head norms, rotations,
    -- softmax, SwiGLU), which the norm passes on with gain max|w| / rms(x) ~ 1: ~35
    -- roundings of 2^-11, rounded up to 2^-5 of max|h|. The classifier is exact fp32.
    helpers.assert_fp16_logits_bound(m16, m32, ids, "norm", m32.P.classifier, 2 ^ -5)
  end)

  for _, setup in ipairs({ { "fp32", "cpu" }, { "fp16", "ane" } }) do
    it("decodes with the KV cache like a full prefill (" .. setup[1] .. ", profile " .. setup[2] .. ")", function()
      local dir, _, V = qwen3_reference()
      local model = assert(llama.load(dir, { precision = setup[1], profile = setup[2] }))
      -- Qwen3 ids of "The quick brown fox" (folded into a small vocabulary)
      helpers.assert_decode_matches_prefill(model, { 785 % V, 3974 % V, 13876 % V, 38835 % V }, 16)
    end)
  end

  it("differentiates through GQA and the q/k norms (directional finite differences, fp32)", function()
    local dir, expected, V = qwen3_reference()
    local ids, targets = expected.input_ids:totable()[1], expected.targets:totable()[1]
    local model = assert(llama.load(dir, { precision = "fp32" }))
    local _, grads = model:loss(ids, targets)
    local params = model:parameters()
    -- Along d = g / |g| the loss changes at rate |g|. Central differences with step 1e-2:
    -- truncation ~ h^2 |third derivative| and the fp32 loss's rounding (~1e-6 / h) stay
    -- within 0.1% of the slopes here (|g| ~ 0.06 - 1.9): a 2% bar leaves room and still fails
    -- a gradient that misses a kv copy (half the slope) or the norm's weight path.
    for _, name in ipairs({ "model.layers.0.self_attn.k_proj.weight", "model.layers.1.self_attn.v_proj.weight",
      "model.layers.0.self_attn.q_norm.weight", "model.layers.1.self_attn.k_norm.weight" }) do
      local g, w = grads[name], params[name]
      assert.are.same(w:shape(), g:shape())
      local norm = math.sqrt(g:sum_of_squares())
      local direction = g:scale(1 / norm)
      local saved, h = w:copy(), 1e-2
      local function loss_at(t)
        w:copy_from(saved:add(direction:scale(t)))
        model:load_parameters()
        return (model:loss(ids, targets))
      end
      local slope = (loss_at(h) - loss_at(-h)) / (2 * h)
      w:copy_from(saved)
      model:load_parameters()
      assert.is_true(math.abs(slope - norm) < 0.02 * norm, string.format("%s: |g| %.6g, finite differences %.6g", name, norm, slope))
    end
  end)
end)

describe("Qwen3 weight updates" .. label, function()
  it("reach programs compiled after the update (GQA's repeated k/v rows included)", function()
    local dir, expected, V = qwen3_reference()
    local ids, targets = expected.input_ids:totable()[1], expected.targets:totable()[1]
    local long = {}
    for i = 1, 40 do long[i] = (i * 7919) % V end -- a bucket not compiled before the update
    local model = assert(llama.load(dir, { precision = "fp32" }))
    local opt = require("ane.optim").adamw(model:parameters(), { lr = 1e-2 })
    local _, grads = model:loss(ids, targets)
    opt:step(grads)
    model:load_parameters()
    local fresh = llama.from_weights(llama.weights_from_parameters(model.config, model:parameters(), "copy"), { precision = "fp32" })
    assert.are.equal("hf", fresh.config.naming)
    assert.are.equal(0, model:logits(long):max_abs_diff(fresh:logits(long)))
    -- and updates written before any program exists are the ones the first programs use
    local unused = assert(llama.load(dir, { precision = "fp32" }))
    for name, t in pairs(unused:parameters()) do t:copy_from(model:parameters()[name]) end
    unused:load_parameters()
    assert.are.equal(0, unused:logits(long):max_abs_diff(fresh:logits(long)))
  end)
end)

-- A Hugging Face directory as users have them: qwen3-tiny's config and weights with a
-- tokenizer.json beside them (links in a fresh directory): the fixture's own cut-down Qwen3
-- tokenizer in spec/data, the full one for the shared data's full-vocabulary model.
local function qwen3_directory()
  local dir = qwen3_reference()
  local tokenizer_json = dir .. "/tokenizer.json"
  if not io.open(tokenizer_json) then tokenizer_json = data:tokenizer("qwen3") .. "/tokenizer.json" end
  local model_dir = helpers.tmpdir()
  for _, file in ipairs({ dir .. "/config.json", dir .. "/model.safetensors", tokenizer_json }) do
    assert(os.execute("ln -s " .. helpers.quote(file) .. " " .. helpers.quote(model_dir)))
  end
  return model_dir
end

describe("examples on a Hugging Face directory" .. label, function()
  it("train_stories.lua fine-tunes it with its tokenizer.json and resumes bit for bit", function()
    local model_dir = qwen3_directory()
    local script = helpers.quote(helpers.root .. "/examples/train_stories.lua") .. " --init " .. helpers.quote(model_dir) ..
        " --steps 4 --batch 2 --seq 32"
    local straight, split = helpers.tmpdir(), helpers.tmpdir()
    local out, err, code = helpers.run_anelua(script .. " --ckpt-dir " .. straight)
    assert.are.equal(0, code, err)
    -- ids beyond uint16 stay in memory; a small vocabulary's go to a shard
    local vocab = assert(require("ane.tokenizer").load(model_dir)).vocab_size
    assert.matches("SYNTHETIC corpus of 2000 template stories %(%d+ tokens, " ..
      (vocab > 65536 and "in memory" or "[^)]*synthetic%.bin") .. "%)", out)
    _, err, code = helpers.run_anelua(script .. " --stop-after 2 --ckpt-every 2 --ckpt-dir " .. split)
    assert.are.equal(0, code, err)
    _, err, code = helpers.run_anelua(script .. " --resume latest --ckpt-dir " .. split)
    assert.are.equal(0, code, err)
    local function losses(path)
      local list = {}
      for line in io.lines(path .. "/metrics.jsonl") do list[#list + 1] = cjson.decode(line).loss_hex end
      return list
    end
    assert.are.same(losses(straight), losses(split))
    assert.are.equal(4, #losses(split))
  end)

  it("stories.lua generates with the directory's tokenizer.json and stops at config.json's eos", function()
    local model_dir = qwen3_directory()
    local config = assert(ane.io.read_json(model_dir .. "/config.json"))
    assert.are.equal(config.eos_token_id, assert(llama.load(model_dir)).stop_token) -- <|im_end|>
    local out, err, code = helpers.run_anelua(helpers.quote(helpers.root .. "/examples/stories.lua") .. " " ..
      helpers.quote(model_dir) .. " --max-tokens 8 --profile cpu --prompt 'Hello there'")
    assert.are.equal(0, code, err)
    assert.matches("heads of 32", err)                       -- the Qwen3 model (notices on stderr)
    assert.matches("^Hello there", out)                      -- the prompt, then generated text
    assert.matches("decode%s+%d+ tokens, [%d.]+ tokens/s", err)
  end)
end)
end

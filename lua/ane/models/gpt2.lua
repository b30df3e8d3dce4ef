-- ane.models.gpt2: GPT-2 inference on anelua programs.
--
--   local gpt2 = require("ane.models.gpt2")
--   local model = assert(gpt2.load("models/gpt2", { precision = "fp16", profile = "ane" }))
--   local logits = model:logits({ 15496, 995 })          -- tensor [T, V] (fp32)
--   for id in model:generate(prompt_ids, { max_tokens = 32, temperature = 0 }) do ... end
--
-- Each layer runs as two programs, attention and MLP, built with ane.graph / ane.nn and
-- compiled once per shape bucket (and cached); embeddings, the final LayerNorm's logits
-- against the tied 50,257-row wte and sampling stay on the CPU (ANE-16: the classifier is
-- too wide; ANE-25: no gather). Prefill pads the prompt to a power-of-two bucket under a
-- causal mask. Decode keeps the KV cache in CPU-written buffers passed to the programs as
-- inputs (the device has no state ops, ANE-24); the attention of one new token combines
-- the cached keys (masked to the filled length by an input) with its own key in one softmax.
--
-- Precision: "fp16" builds fp16 programs run with the device's rounding; "fp32" builds fp32
-- programs from fp32 weights (the CPU reference), which the device cannot run (ANE-26), so
-- it uses the cpu profile's rules. Profiles: "ane" (default: the device's constraints, e.g.
-- I/O at least 32 wide, so one decoded token is padded to 32) or "cpu" (same programs, but
-- shapes only the device refuses are allowed: single-token decode without padding).
local ane = require("ane")
local nn = require("ane.nn")
local decoder = require("ane.models.decoder")
local lfs = require("lfs")

local M = {}
local Model = decoder.mixin({})
Model.__index = Model

local MASK = decoder.MASK

-- ------------------------------------------------------------------ loading
-- (the file formats: ane.formats.hf_gpt2 and ane.formats.llmc)

-- A randomly initialized GPT-2-shaped model (for demos and benchmarks; the text is noise).
function M.random_weights(config, seed)
  local C, V, T = config.n_embd, config.vocab_size, config.n_positions
  seed = seed or 1
  local draw = decoder.seeded_randn(seed)
  local function randn(shape, std) return draw(shape, std or 0.02) end
  local function ones(size) return ane.tensor({ size }):fill(1) end
  local W = { config = config, layers = {}, wte = randn({ V, C }), wpe = randn({ T, C }, 0.01), ln_f_g = ones(C),
    ln_f_b = ane.tensor({ C }), source = "random weights (seed " .. seed .. ")" }
  for l = 1, config.n_layer do
    W.layers[l] = {
      ln1_g = ones(C), ln1_b = ane.tensor({ C }), ln2_g = ones(C), ln2_b = ane.tensor({ C }),
      qkv = randn({ 3 * C, C }), qkv_b = ane.tensor({ 3 * C }), wo = randn({ C, C }), bo = ane.tensor({ C }),
      fc = randn({ 4 * C, C }),
      fc_b = ane.tensor({ 4 * C }), proj = randn({ C, 4 * C }), proj_b = ane.tensor({ C }),
    }
  end
  return W
end

-- ------------------------------------------------------------------ programs

-- Weights converted once to the programs' layout: linear [out, in, 1, 1], vectors [C].
local function prepare(W, dtype)
  local P = { layers = {} }
  local function matrix(t) return decoder.conv_weight(t, dtype) end
  local function vector(t) return decoder.in_dtype(t, dtype) end
  for l, L in ipairs(W.layers) do
    P.layers[l] = {
      ln1_g = vector(L.ln1_g), ln1_b = vector(L.ln1_b), ln2_g = vector(L.ln2_g), ln2_b = vector(L.ln2_b),
      qkv = matrix(L.qkv), qkv_b = vector(L.qkv_b), wo = matrix(L.wo), bo = vector(L.bo), fc = matrix(L.fc), fc_b = vector(L.fc_b), proj = matrix(L.proj),
      proj_b = vector(L.proj_b),
    }
  end
  P.ln_f_g, P.ln_f_b = vector(W.ln_f_g), vector(W.ln_f_b)
  P.wte = decoder.in_dtype(W.wte, "fp32") -- [V, C] for embeddings and the CPU classifier
  P.wcls = P.wte            -- tied
  P.wpe = decoder.in_dtype(W.wpe, "fp32")
  return P
end

-- ln_1 and the q, k, v projections shared by both attention programs: one product by
-- c_attn's [3C, C] weight (decoding reads it as one matrix), then q, k, v sliced off.
local function project_qkv(self, g, L, x)
  local C = self.config.n_embd
  local h = nn.layer_norm(g, x, L.ln1_g, L.ln1_b, { name = "ln_1", eps = self.config.eps })
  local qkv = nn.linear(g, h, L.qkv, L.qkv_b, { name = "c_attn" })                -- [1, 3C, 1, S]
  local function part(i, name) return g:slice_by_size(qkv, { 0, i * C, 0, 0 }, { -1, C, -1, -1 }, { name = name }) end
  return part(0, "q"), part(1, "k"), part(2, "v")
end

-- The end of both attention programs: output projection, residual, and the outputs y, k, v.
local function finish_attention(g, L, x, attended, k, v)
  local out = nn.linear(g, nn.merge_heads(g, attended, { name = "merged" }), L.wo, L.bo, { name = "attn_c_proj" })
  g:output("y", g:add(x, out))
  g:output("k", k)
  g:output("v", v)
  return g
end

-- Attention over a full (padded) sequence: y = x + attn(ln_1(x)); also returns k and v.
local function attention_prefill_graph(self, L, S)
  local C, H, dtype = self.config.n_embd, self.config.n_head, self.dtype
  local g = self:graph("gpt2_attn_prefill")
  local x = g:input("x", { 1, C, 1, S }, dtype)
  local q, k, v = project_qkv(self, g, L, x)
  local attended = nn.causal_attention(g, nn.split_heads(g, q, H, { name = "q_heads" }),
    nn.split_heads(g, k, H, { name = "k_heads" }), nn.split_heads(g, v, H, { name = "v_heads" }),
    { name = "attn", mask_value = MASK, clip = self.softmax_clip })
  return finish_attention(g, L, x, attended, k, v)
end

-- One decoding block of W positions (only the first is real when W > 1) against a cache of
-- Smax positions: softmax over [cached keys (masked by the `mask` input) | own keys].
local function attention_decode_graph(self, L, W, Smax)
  local C, H, dtype = self.config.n_embd, self.config.n_head, self.dtype
  local D = C // H
  local g = self:graph("gpt2_attn_decode")
  local x = g:input("x", { 1, C, 1, W }, dtype)
  local k_cache = g:input("k_cache", { 1, C, 1, Smax }, dtype)
  local v_cache = g:input("v_cache", { 1, C, 1, Smax }, dtype)
  local mask = g:input("mask", { 1, 1, 1, Smax }, dtype)
  local q_flat, k, v = project_qkv(self, g, L, x)
  local q = nn.split_heads(g, q_flat, H, { name = "q_heads" }) -- [1, H, W, D]
  -- the cache read per head as [1, H, D, Smax] straight from its layout; the block's own
  -- keys and values as [1, H, D, W]
  local kc = g:reshape(k_cache, { 1, H, D, Smax }, { name = "k_cache_heads" })
  local vc = g:reshape(v_cache, { 1, H, D, Smax }, { name = "v_cache_heads" })
  local kn = g:reshape(k, { 1, H, D, W }, { name = "k_new_heads" })
  local vn = g:reshape(v, { 1, H, D, W }, { name = "v_new_heads" })
  local attended = nn.cached_attention(g, q, kc, vc, mask, kn, vn, { own_layout = "DW", mask_value = MASK,
    clip = self.softmax_clip, name = "attended" }) -- [1, H, W, D]
  return finish_attention(g, L, x, attended, k, v)
end

local function mlp_graph(self, L, S)
  local C, dtype = self.config.n_embd, self.dtype
  local g = self:graph("gpt2_mlp")
  local x = g:input("x", { 1, C, 1, S }, dtype)
  local h = nn.layer_norm(g, x, L.ln2_g, L.ln2_b, { name = "ln_2", eps = self.config.eps })
  local up = nn.gelu(g, nn.linear(g, h, L.fc, L.fc_b, { name = "c_fc" }), { name = "gelu" })
  g:output("y", g:add(x, nn.linear(g, up, L.proj, L.proj_b, { name = "mlp_c_proj" })))
  return g
end

local function final_norm_graph(self, _, S)
  local C = self.config.n_embd
  local g = self:graph("gpt2_ln_f")
  local x = g:input("x", { 1, C, 1, S }, self.dtype)
  g:output("y", nn.layer_norm(g, x, self.P.ln_f_g, self.P.ln_f_b, { name = "ln_f", eps = self.config.eps }))
  return g
end

-- The program kinds (decoder.lua builds, compiles and caches them).
Model.graphs = { attn_prefill = attention_prefill_graph, attn_decode = attention_decode_graph, mlp = mlp_graph,
  ln_f = final_norm_graph }

-- Weights updated by load_parameters reach programs compiled later: converted here, once.
function Model:refresh_weights()
  local W = self.stale_weights
  if not W then return end
  self.P = prepare(W, self.dtype)
  self.P.wte, self.P.wcls, self.P.wpe = W.wte, W.wte, W.wpe
  self.stale_weights = nil
end

-- ------------------------------------------------------------------ the model

--- Loads a model: a Hugging Face directory (config.json + model.safetensors, or sharded) or
--- an llm.c gpt2_124M.bin. opts: backend, precision ("fp16" | "fp32"), profile ("ane" | "cpu").
--- Returns the model, or nil and a message naming the file and tensor at fault.
function M.load(path, opts)
  if type(path) ~= "string" then error("gpt2.load: path must be a string", 2) end
  local W, err = require(lfs.attributes(path, "mode") == "directory" and "ane.formats.hf_gpt2" or "ane.formats.llmc").read(path)
  if not W then return nil, err end
  return M.from_weights(W, opts)
end

--- Builds a model from weights in the loaders' layout (see M.random_weights).
function M.from_weights(W, opts)
  opts = opts or {}
  local precision, profile = decoder.check_options(opts, 2)
  local self = setmetatable(decoder.new_state("gpt2", opts, precision, profile), Model)
  W.config.model_type = "gpt2" -- kept in checkpoints, which then know what they hold
  self.config, self.source, self.vocab_size = W.config, W.source, W.config.vocab_size
  self.context_length, self.width, self.n_layer = W.config.n_positions, W.config.n_embd, W.config.n_layer
  self.ffn_kind, self.norm_kind, self.stop_token = "mlp", "ln_f", W.config.vocab_size - 1 -- <|endoftext|>
  self.weight_consts = {
    attn_prefill = { "attn_c_proj_bias", "attn_c_proj_weight", "c_attn_bias", "c_attn_weight", "ln_1_beta", "ln_1_gamma" },
    mlp = { "c_fc_bias", "c_fc_weight", "ln_2_beta", "ln_2_gamma", "mlp_c_proj_bias", "mlp_c_proj_weight" },
    ln_f = { "ln_f_beta", "ln_f_gamma" },
  }
  -- activations the training forward outputs for the backward: the projections' outputs
  self.saved = { attn_prefill = { "q", "k", "v" }, mlp = { "c_fc" } }
  self.weights = W
  self.P = prepare(W, self.dtype)
  return self
end

--- [1, C, 1, S] input: token + position embeddings for ids at positions start.., zero padding.
function Model:embed(ids, start, S)
  local C = self.config.n_embd
  local token_rows = self.P.wte:gather(ids)                                -- [T, C]
  local positions = {}
  for i = 1, #ids do positions[i] = start + i - 1 end
  local rows = token_rows:add(self.P.wpe:gather(positions))               -- [T, C]
  local x = ane.tensor({ 1, C, 1, S }, self.dtype)
  x:slice(4, 1, #ids):copy_from(rows:transpose():reshape(1, C, 1, #ids))
  return x
end

-- logits [T, V] (fp32) of the first T columns of a final-norm input.
function Model:classify(x, T, S, first) -- logits of positions first (default 1) .. T
  first = first or 1
  local h = self:eval(self:program(self:kind_for("ln_f", T, S), nil, S), "norm", 0, { x = x }).y -- [1, C, 1, S]
  local C, n = self.config.n_embd, T - first + 1
  local columns = h:slice(4, first, T):reshape(C, n)                       -- [C, n]
  return decoder.classifier_logits(self.P.wte, columns:to("fp32"))          -- [n, V]
end

-- Runs all layers over a padded sequence; returns the residual stream and per-layer k, v.
function Model:forward(ids)
  self:check_ids(ids, self.config.vocab_size, self.config.n_positions, 3)
  local S = self:bucket(#ids, self.config.n_positions)
  local x = self:embed(ids, 0, S)
  local caches = {}
  for l = 1, self.config.n_layer do
    local r = self:eval(self:program("attn_prefill", l, S), "attn", l, { x = x })
    caches[l] = { k = r.k, v = r.v }
    x = self:eval(self:program("mlp", l, S), "ffn", l, { x = r.y }).y
  end
  return x, caches, S
end

-- Hooks of decoder's loss: GPT-2's gradients in Hugging Face names and Conv1D [in, out] layout.
function Model:embed_sequence(ids, S) return self:embed(ids, 0, S) end

function Model:embedding_gradients(ids, dx, raw) -- dx [T, C]: token rows of wte, position rows of wpe
  local C = self.config.n_embd
  raw.wte = raw.wte or ane.tensor({ self.config.vocab_size, C })
  raw.wpe = raw.wpe or ane.tensor({ self.config.n_positions, C })
  for t, id in ipairs(ids) do
    local column = dx:slice(1, t, t)
    local row = raw.wte:slice(1, id + 1, id + 1)
    row:copy_from(row:add(column))
    local position = raw.wpe:slice(1, t, t)
    position:copy_from(position:add(column))
  end
end

function Model:checkpoint_gradients(raw)
  local C, grads = self.config.n_embd, {}
  local function vector(t) return t:reshape(-1) end
  -- program layout [out, in, 1, 1] (or the device's [1, out, 1, in]) -> Conv1D [in, out]
  local function conv1d(t, out, inputs) return t:reshape(out, inputs or C):transpose():copy() end
  for l = 1, self.config.n_layer do
    local r, p = raw.layers[l], "h." .. (l - 1) .. "."
    grads[p .. "ln_1.weight"], grads[p .. "ln_1.bias"] = vector(r.ln_1_gamma), vector(r.ln_1_beta)
    grads[p .. "attn.c_attn.weight"], grads[p .. "attn.c_attn.bias"] = conv1d(r.c_attn_weight, 3 * C), vector(r.c_attn_bias)
    grads[p .. "attn.c_proj.weight"], grads[p .. "attn.c_proj.bias"] = conv1d(r.attn_c_proj_weight, C), vector(r.attn_c_proj_bias)
    grads[p .. "ln_2.weight"], grads[p .. "ln_2.bias"] = vector(r.ln_2_gamma), vector(r.ln_2_beta)
    grads[p .. "mlp.c_fc.weight"], grads[p .. "mlp.c_fc.bias"] = conv1d(r.c_fc_weight, 4 * C), vector(r.c_fc_bias)
    grads[p .. "mlp.c_proj.weight"], grads[p .. "mlp.c_proj.bias"] = conv1d(r.mlp_c_proj_weight, C, 4 * C), vector(r.mlp_c_proj_bias)
  end
  grads["ln_f.weight"], grads["ln_f.bias"] = vector(raw.norm.ln_f_gamma), vector(raw.norm.ln_f_beta)
  grads["wte.weight"] = raw.wte:add(raw.classifier) -- tied: embedding and classifier
  grads["wpe.weight"] = raw.wpe
  return grads
end

-- ------------------------------------------------------------------ training

--- The fp32 master weights in checkpoint layout: Hugging Face names, Conv1D [in, out]
--- matrices, c_attn holding q, k, v side by side. Created once; the optimizer updates them
--- in place and load_parameters writes them into the programs.
function Model:parameters()
  if self.master then return self.master end
  local W, master = self.weights, {}
  local function conv1d(t) return t:to("fp32"):transpose():copy() end -- [out, in] -> [in, out]
  for l, L in ipairs(W.layers) do
    local p = "h." .. (l - 1) .. "."
    master[p .. "ln_1.weight"], master[p .. "ln_1.bias"] = L.ln1_g:to("fp32"), L.ln1_b:to("fp32")
    master[p .. "attn.c_attn.weight"], master[p .. "attn.c_attn.bias"] = conv1d(L.qkv), L.qkv_b:to("fp32")
    master[p .. "attn.c_proj.weight"], master[p .. "attn.c_proj.bias"] = conv1d(L.wo), L.bo:to("fp32")
    master[p .. "ln_2.weight"], master[p .. "ln_2.bias"] = L.ln2_g:to("fp32"), L.ln2_b:to("fp32")
    master[p .. "mlp.c_fc.weight"], master[p .. "mlp.c_fc.bias"] = conv1d(L.fc), L.fc_b:to("fp32")
    master[p .. "mlp.c_proj.weight"], master[p .. "mlp.c_proj.bias"] = conv1d(L.proj), L.proj_b:to("fp32")
  end
  master["ln_f.weight"], master["ln_f.bias"] = W.ln_f_g:to("fp32"), W.ln_f_b:to("fp32")
  master["wte.weight"], master["wpe.weight"] = W.wte:to("fp32"), W.wpe:to("fp32")
  self.master = master
  return master
end

-- Checkpoint-layout parameters -> the loaders' per-layer layout ([out, in] matrices).
local function layer_weights(params, l)
  local p = "h." .. (l - 1) .. "."
  local function linear(t) return t:transpose():copy() end -- [in, out] -> [out, in]
  local L = {
    qkv = linear(params[p .. "attn.c_attn.weight"]), qkv_b = params[p .. "attn.c_attn.bias"],
    ln1_g = params[p .. "ln_1.weight"], ln1_b = params[p .. "ln_1.bias"],
    ln2_g = params[p .. "ln_2.weight"], ln2_b = params[p .. "ln_2.bias"],
    wo = linear(params[p .. "attn.c_proj.weight"]), bo = params[p .. "attn.c_proj.bias"],
    fc = linear(params[p .. "mlp.c_fc.weight"]), fc_b = params[p .. "mlp.c_fc.bias"],
    proj = linear(params[p .. "mlp.c_proj.weight"]), proj_b = params[p .. "mlp.c_proj.bias"],
  }
  return L
end

-- Program const name -> field of the per-layer weights, by program kind.
local LAYER_CONSTS = {
  attn = { c_attn_weight = "qkv", c_attn_bias = "qkv_b", attn_c_proj_weight = "wo", attn_c_proj_bias = "bo", ln_1_gamma = "ln1_g", ln_1_beta = "ln1_b" },
  mlp = { c_fc_weight = "fc", c_fc_bias = "fc_b", mlp_c_proj_weight = "proj", mlp_c_proj_bias = "proj_b",
    ln_2_gamma = "ln2_g", ln_2_beta = "ln2_b" },
}

--- Writes parameters (default: the master weights) into every loaded program by patching,
--- and into the weights later programs are built from. No compiling.
--- Weights in the loaders' layout from parameters in checkpoint layout (Hugging Face names,
--- Conv1D [in, out]; what model:parameters() returns and checkpoints store), for from_weights.
function M.weights_from_parameters(config, params, source)
  local W = { config = config, layers = {}, wte = params["wte.weight"], wpe = params["wpe.weight"],
    ln_f_g = params["ln_f.weight"], ln_f_b = params["ln_f.bias"], source = source }
  for l = 1, config.n_layer do W.layers[l] = layer_weights(params, l) end
  return W
end

function Model:load_parameters(params)
  params = params or self.master
  local layers = {}
  for l = 1, self.config.n_layer do layers[l] = layer_weights(params, l) end
  for program, kind, layer in self:each_program() do
    local patch = {}
    local consts = kind:match("^attn") and LAYER_CONSTS.attn or kind:match("^mlp") and LAYER_CONSTS.mlp
    if consts then
      for const, field in pairs(consts) do patch[const] = layers[layer][field] end
    else
      patch.ln_f_gamma, patch.ln_f_beta = params["ln_f.weight"], params["ln_f.bias"]
    end
    decoder.patch_present(program, patch)
  end
  -- Programs compiled later start from these weights: converted when one is built.
  self.stale_weights = { config = self.config, layers = layers, wte = params["wte.weight"], wpe = params["wpe.weight"],
    ln_f_g = params["ln_f.weight"], ln_f_b = params["ln_f.bias"] }
  self.P.wte, self.P.wcls, self.P.wpe = params["wte.weight"], params["wte.weight"], params["wpe.weight"]
end

-- Hooks of decoder.generate: GPT-2 caches keys as projected; positions come from wpe.
function Model:embed_token(id, position, W) return self:embed({ id }, position, W) end
function Model:cache_keys(k, T) return k:slice(4, 1, T) end
function Model:decode_inputs() return {} end

function Model:__tostring()
  local c = self.config
  return string.format("gpt2 (%d layers, %d heads, %d channels, vocab %d; %s, %s, profile %s) from %s", c.n_layer,
    c.n_head, c.n_embd, c.vocab_size, self.backend, self.precision, self.profile, self.source)
end

return M

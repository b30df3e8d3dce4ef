-- ane.models.llama: Llama-2-architecture inference (Stories15M/42M/110M) from llama2.c
-- checkpoints, on anelua programs.
--
--   local llama = require("ane.models.llama")
--   local model = assert(llama.load("stories110M.bin", { precision = "fp16" }))
--   model:logits(ids) -> [T, V]; model:generate(prompt_ids, opts) -> iterator of ids
--
-- Per layer an attention program (RMSNorm, q/k/v, interleaved rotary embedding as in
-- llama2.c, causal attention, wo, residual) and an FFN program (RMSNorm, SwiGLU, residual);
-- embeddings and the classifier on the CPU (ANE-16/25). Decoding keeps the KV cache in
-- buffers passed as inputs, like the GPT-2 model, with the rotary angles of the decoded
-- position passed as inputs too. Precision and profiles as in ane.models.gpt2.
local ane = require("ane")
local nn = require("ane.nn")
local decoder = require("ane.models.decoder")
local arch = require("ane.models.llama_config")
local lfs = require("lfs")

local M = {}
local Model = decoder.mixin({})
Model.__index = Model

local MASK = decoder.MASK

-- ------------------------------------------------------------------ loading

-- The family's configuration and names (ane.models.llama_config); its file formats are read
-- by ane.formats.llama2c and ane.formats.hf_llama.
local NAMINGS = arch.NAMINGS
local layer_fields, complete_config = arch.layer_fields, arch.complete_config

-- ------------------------------------------------------------------ programs

-- Grouped-query attention: query head h reads kv head h // group. The device has neither
-- tile nor concat (ANE-01), so the programs get wk and wv with each kv head's rows repeated
-- group times ([n_head * head_dim, dim]): k and v then come out with one head per query
-- head, exactly, for group x the k/v projection work and cache. The checkpoint keeps the
-- [n_kv_head * head_dim, dim] originals; their gradients sum over the copies.
-- Calls visit(kv rows, query-head rows) for every query head h, kv = h // group: the row
-- views of kv head kv in `kv_side` [KV * head, dim] and of head h in `head_side` [H * head, dim].
local function for_each_copy(config, kv_side, head_side, visit)
  local group, head = config.n_head // config.n_kv_head, config.head_dim
  for h = 0, config.n_head - 1 do
    local kv = h // group
    visit(kv_side:slice(1, kv * head + 1, (kv + 1) * head), head_side:slice(1, h * head + 1, (h + 1) * head))
  end
end

local function repeat_kv_rows(t, config) -- [KV * head, dim] -> [H * head, dim]
  if config.n_kv_head == config.n_head then return t end
  if ane.quantized.is(t) then -- the same for its codes and its per-row table
    local shape, rows = t:shape(), t:shape()[1]
    local codes, per_row = t:data(), t:table()
    shape[1] = config.n_head * config.head_dim
    return ane.quantized { encoding = t:encoding(), dtype = t:dtype(), shape = shape,
      data = repeat_kv_rows(codes:reshape(rows, codes:numel() // rows), config),
      table = repeat_kv_rows(per_row:reshape(rows, per_row:numel() // rows), config) }
  end
  local out = ane.tensor({ config.n_head * config.head_dim, t:shape()[2] }, t:dtype())
  for_each_copy(config, t, out, function(rows, copy) copy:copy_from(rows) end)
  return out
end

local function sum_kv_rows(grad, config) -- [H * head, dim] -> [KV * head, dim]
  if config.n_kv_head == config.n_head then return grad end
  local out = ane.tensor({ config.n_kv_head * config.head_dim, grad:shape()[2] })
  for_each_copy(config, out, grad, function(sum, copy) sum:copy_from(sum:add(copy)) end)
  return out
end

local KV_FIELDS = { wk = true, wv = true }

-- One layer's weights in program layout: conv weights [out, in, 1, 1] (wk/wv repeated for
-- GQA), norm vectors, in dtype. quantize ("int8" | "int4" | nil): the conv weights become
-- quantized weights (per output row, after the GQA repeat), which the programs carry
-- compressed; weights that come quantized (a quantized checkpoint) stay as they are.
-- `stored` (a table, when quantizing) receives the quantized weights in checkpoint layout,
-- for saving. Rows quantize independently, so quantizing before the GQA repeat is exact.
local function program_layer(L, config, dtype, quantize, layer_name, stored)
  local P = {}
  for field, t in pairs(L) do
    if quantize and not ane.quantized.is(t) and t:ndim() == 2 then
      t = ane.quantize(t, quantize, { dtype = dtype, name = layer_name(field) })
    end
    if stored and ane.quantized.is(t) then stored[field] = t end
    local rows = KV_FIELDS[field] and repeat_kv_rows(t, config) or t
    if ane.quantized.is(rows) then
      P[field] = decoder.quantized_conv_weight(rows, dtype)
    elseif rows:ndim() == 2 then
      P[field] = decoder.conv_weight(rows, dtype)
    else
      P[field] = decoder.in_dtype(t, dtype)
    end
  end
  return P
end

local function prepare(W, dtype, quantize, name)
  local P = { layers = {}, stored_layers = {} }
  for l, L in ipairs(W.layers) do
    P.stored_layers[l] = {}
    P.layers[l] = program_layer(L, W.config, dtype, quantize, function(field) return name(field, l - 1) end,
      P.stored_layers[l])
  end
  P.rms_final = decoder.in_dtype(W.rms_final, dtype)
  P.token_embedding = decoder.in_dtype(W.token_embedding, "fp32") -- [V, dim] for lookups
  P.wcls = ane.quantized.is(W.wcls) and W.wcls or decoder.in_dtype(W.wcls, "fp32") -- [V, dim], the CPU classifier
  return P
end

-- Norm weights applied per head (over head_dim, on [1, H, S, head]) rather than per channel.
local PER_HEAD = { q_norm = true, k_norm = true }

-- With weights_as_inputs the weights are graph inputs named as their consts would be:
-- matrices [1, out, 1, in] and norm weights [1, 1, 1, C] (device I/O is [1, C, 1, S], ANE-20,
-- with the wide axis last, ANE-21), reshaped inside the graph for the conv and the
-- per-channel multiply (per-head norm weights are used as they come). Returns the table of
-- nodes to build with, or L itself when weights are consts.
local function weights_for(self, g, L, fields)
  if not self.weights_as_inputs then return L end
  local nodes = {}
  for field, const in pairs(fields) do
    local shape = L[field]:shape()
    if #shape == 4 then -- [out, in, 1, 1]
      nodes[field] = g:reshape(g:input(const, { 1, shape[1], 1, shape[2] }, self.dtype), shape, { name = const .. "_conv" })
    elseif PER_HEAD[field] then
      nodes[field] = g:input(const, { 1, 1, 1, shape[1] }, self.dtype)
    else
      nodes[field] = g:reshape(g:input(const, { 1, 1, 1, shape[1] }, self.dtype), { 1, shape[1], 1, 1 },
        { name = const .. "_channels" })
    end
  end
  return nodes
end

-- The tensors fed for weights_for's inputs, by program group and layer (0 = final norm).
local function weight_feed(self, attention_fields, ffn_fields)
  local function feed(L, fields)
    local inputs = {}
    for field, const in pairs(fields) do
      local shape = L[field]:shape()
      inputs[const] = #shape == 4 and L[field]:reshape(1, shape[1], 1, shape[2]) or L[field]:reshape(1, 1, 1, shape[1])
    end
    return inputs
  end
  local result = { attn = {}, ffn = {}, norm = { [0] = feed(self.P, { rms_final = "norm_weight" }) } }
  for l, L in ipairs(self.P.layers) do
    result.attn[l], result.ffn[l] = feed(L, attention_fields), feed(L, ffn_fields)
  end
  return result
end

-- LoRA on projection `which` ("q" or "v"): nn.lora_delta with A [1, rank, 1, dim] and
-- B^T [1, rank, 1, width] as the program's inputs lora_a_<which>, lora_b_<which>.
local function lora_delta(self, g, h, which, S)
  local rank, width = self.lora.rank, self.cache_width
  local a = g:input("lora_a_" .. which, { 1, rank, 1, self.config.dim }, self.dtype)
  local b_t = g:input("lora_b_" .. which, { 1, rank, 1, width }, self.dtype)
  return nn.lora_delta(g, h, a, b_t, width, self.lora.alpha, { name = "lora_" .. which })
end

-- RMSNorm, q/k/v projections (with LoRA deltas), heads split [1, H, S, head], q/k norms
-- per head (Qwen3) and rotary embedding with the given cos/sin tables [S, head].
-- Returns q and k heads (rotated) and v [1, H * head, 1, S].
local function project(self, g, L, x, S, cos, sin)
  local c = self.config
  local h = nn.rms_norm(g, x, L.rms_att, { name = "attention_norm", eps = c.norm_eps })
  local q = nn.linear(g, h, L.wq, nil, { name = "wq" })
  local k = nn.linear(g, h, L.wk, nil, { name = "wk" })
  local v = nn.linear(g, h, L.wv, nil, { name = "wv" })
  if self.lora then
    q = g:add(q, lora_delta(self, g, h, "q", S), { name = "wq_adapted" })
    v = g:add(v, lora_delta(self, g, h, "v", S), { name = "wv_adapted" })
  end
  local qh, kh = nn.split_heads(g, q, c.n_head, { name = "q_heads" }), nn.split_heads(g, k, c.n_head, { name = "k_heads" })
  if c.qk_norm then
    qh = nn.rms_norm(g, qh, L.q_norm, { name = "q_norm", eps = c.norm_eps, axis = 3 })
    kh = nn.rms_norm(g, kh, L.k_norm, { name = "k_norm", eps = c.norm_eps, axis = 3 })
  end
  qh = nn.rope(g, qh, cos, sin, { name = "q_rope", convention = c.rope })
  kh = nn.rope(g, kh, cos, sin, { name = "k_rope", convention = c.rope })
  return qh, kh, v
end

-- wo and the residual; outputs y, the block's rotated keys k and its values v, as cached.
local function finish(g, L, x, attended, kh, v)
  local out = nn.linear(g, nn.merge_heads(g, attended, { name = "merged" }), L.wo, nil, { name = "wo" })
  g:output("y", g:add(x, out))
  g:output("k", nn.merge_heads(g, kh, { name = "k_rot" })) -- [1, H * head, 1, S]
  g:output("v", v)
  return g
end

-- Prefill over S positions from 0: rotary tables as consts.
local function attention_prefill_graph(self, L, S)
  local c, dtype = self.config, self.dtype
  local g = self:graph("llama_attn_prefill")
  L = weights_for(self, g, L, self.attention_fields)
  local x = g:input("x", { 1, c.dim, 1, S }, dtype)
  local cos, sin = nn.rope_tables(S, c.head_dim, { convention = c.rope, theta = c.rope_theta, dtype = dtype })
  local q, kh, v = project(self, g, L, x, S, g:const("rope_cos", cos), g:const("rope_sin", sin))
  local attended = nn.causal_attention(g, q, kh, nn.split_heads(g, v, c.n_head, { name = "v_heads" }),
    { name = "attn", mask_value = MASK, clip = self.softmax_clip })
  return finish(g, L, x, attended, kh, v)
end

-- Decode W positions (the first real) against Smax cached positions. The cache holds
-- rotated keys so old positions are not rotated again; the new position's angles come in
-- as inputs.
local function attention_decode_graph(self, L, W, Smax)
  local c, dtype = self.config, self.dtype
  local H, head, width = c.n_head, c.head_dim, self.cache_width
  local g = self:graph("llama_attn_decode")
  L = weights_for(self, g, L, self.attention_fields)
  local x = g:input("x", { 1, c.dim, 1, W }, dtype)
  local k_cache = g:input("k_cache", { 1, width, 1, Smax }, dtype)
  local v_cache = g:input("v_cache", { 1, width, 1, Smax }, dtype)
  local mask = g:input("mask", { 1, 1, 1, Smax }, dtype)
  local cos_in = g:input("rope_cos", { 1, head, 1, W }, dtype)
  local sin_in = g:input("rope_sin", { 1, head, 1, W }, dtype)
  local cos = g:transpose(g:reshape(cos_in, { head, W }), { 1, 0 }, { name = "cos_rows" }) -- [W, head]
  local sin = g:transpose(g:reshape(sin_in, { head, W }), { 1, 0 }, { name = "sin_rows" })
  local q, kh, v = project(self, g, L, x, W, cos, sin)                            -- [1, H, W, head]
  local kc = g:reshape(k_cache, { 1, H, head, Smax })
  local vc = g:reshape(v_cache, { 1, H, head, Smax })
  local attended = nn.cached_attention(g, q, kc, vc, mask, kh, nn.split_heads(g, v, H, { name = "v_heads" }),
    { mask_value = MASK, clip = self.softmax_clip })
  return finish(g, L, x, attended, kh, v)
end

local function ffn_graph(self, L, S)
  local g = self:graph("llama_ffn")
  L = weights_for(self, g, L, self.ffn_fields)
  local x = g:input("x", { 1, self.config.dim, 1, S }, self.dtype)
  local h = nn.rms_norm(g, x, L.rms_ffn, { name = "ffn_norm", eps = self.config.norm_eps })
  g:output("y", g:add(x, nn.swiglu(g, h, L.w1, L.w3, L.w2, { name = "ffn" })))
  return g
end

local function final_norm_graph(self, _, S)
  local g = self:graph("llama_final_norm")
  local x = g:input("x", { 1, self.config.dim, 1, S }, self.dtype)
  local weights = weights_for(self, g, self.P, { rms_final = "norm_weight" })
  g:output("y", nn.rms_norm(g, x, weights.rms_final, { name = "norm", eps = self.config.norm_eps }))
  return g
end

-- Layer field -> the const it became in each program (nn names consts <name>_weight).
local ATTENTION_WEIGHTS = { rms_att = "attention_norm_weight", wq = "wq_weight", wk = "wk_weight", wv = "wv_weight",
  wo = "wo_weight" }
local QK_NORM_WEIGHTS = { q_norm = "q_norm_weight", k_norm = "k_norm_weight" }
local FFN_WEIGHTS = { rms_ffn = "ffn_norm_weight", w1 = "ffn_gate_weight", w3 = "ffn_up_weight", w2 = "ffn_down_weight" }

local function attention_weights(config)
  if not config.qk_norm then return ATTENTION_WEIGHTS end
  local fields = {}
  for field, const in pairs(ATTENTION_WEIGHTS) do fields[field] = const end
  for field, const in pairs(QK_NORM_WEIGHTS) do fields[field] = const end
  return fields
end

local function const_names(fields)
  local list = {}
  for _, const in pairs(fields) do list[#list + 1] = const end
  table.sort(list)
  return list
end

-- The program kinds (decoder.lua builds, compiles and caches them, and derives the
-- "<kind>_grad" backward graphs from these).
Model.graphs = { attn_prefill = attention_prefill_graph, attn_decode = attention_decode_graph, ffn = ffn_graph,
  norm = final_norm_graph }

-- ------------------------------------------------------------------ the model

--- Loads a llama2.c checkpoint (v0 or v1 .bin) or a Hugging Face Llama / Qwen3 directory.
--- opts: backend, precision ("fp16" | "fp32"), profile, weights_as_inputs, lora.
function M.load(path, opts)
  if type(path) ~= "string" then error("llama.load: path must be a string", 2) end
  local is_directory = lfs.attributes(path, "mode") == "directory"
  local W, err = require(is_directory and "ane.formats.hf_llama" or "ane.formats.llama2c").read(path)
  if not W then return nil, err end
  return M.from_weights(W, opts)
end

--- Weights in checkpoint layout (name -> fp32 tensor, named as `naming` (or config.naming)
--- says: "llama2c", the default, for token_embedding, wq.0, ..., optional wcls; "hf" for
--- Hugging Face names)
--- as the W table of from_weights; `source` says where they came from.
function M.weights_from_parameters(config, params, source, naming)
  naming = naming or config.naming or "llama2c" -- checkpoints keep the naming in their config
  config = complete_config(config)
  local name = NAMINGS[naming]
  local function get(field, l)
    local t = params[name(field, l)]
    if not t then error(string.format("%s: no parameter '%s'", tostring(source), name(field, l)), 3) end
    return t
  end
  local wcls = params[name("wcls")]
  local W = { config = config, layers = {}, token_embedding = get("token_embedding"), rms_final = get("rms_final"),
    shared_classifier = wcls == nil, source = source, naming = naming }
  W.wcls = wcls or W.token_embedding
  for l = 1, config.n_layer do
    W.layers[l] = {}
    for _, field in ipairs(layer_fields(config)) do W.layers[l][field] = get(field, l - 1) end
  end
  return W
end

--- A freshly initialized Llama (for training from scratch): normal(0, 0.02) matrices, the
--- residual projections wo and w2 scaled down by sqrt(2 * n_layer), unit RMSNorm weights,
--- a shared classifier. config: dim, hidden, n_layer, n_head, vocab_size, seq_len.
function M.random_weights(config, seed)
  seed = seed or 1
  local randn = decoder.seeded_randn(seed)
  local dim, hidden = config.dim, config.hidden
  local residual_std = 0.02 / math.sqrt(2 * config.n_layer)
  local params = { token_embedding = randn({ config.vocab_size, dim }, 0.02), rms_final = ane.tensor({ dim }):fill(1) }
  for l = 0, config.n_layer - 1 do
    params["rms_att." .. l], params["rms_ffn." .. l] = ane.tensor({ dim }):fill(1), ane.tensor({ dim }):fill(1)
    for _, field in ipairs({ "wq", "wk", "wv" }) do params[field .. "." .. l] = randn({ dim, dim }, 0.02) end
    params["wo." .. l] = randn({ dim, dim }, residual_std)
    params["w1." .. l], params["w3." .. l] = randn({ hidden, dim }, 0.02), randn({ hidden, dim }, 0.02)
    params["w2." .. l] = randn({ dim, hidden }, residual_std)
  end
  config = { dim = dim, hidden = hidden, n_layer = config.n_layer, n_head = config.n_head,
    n_kv_head = config.n_head, vocab_size = config.vocab_size, seq_len = config.seq_len }
  return M.weights_from_parameters(config, params, "random weights (seed " .. seed .. ")")
end

-- fp16 programs hold weights in fp16: a value past its range (bf16 files can hold them)
-- would become infinite. Each converted weight is checked; the error names the tensor.
local function check_fp16_range(self)
  local function check(t, field, l)
    local sum = t:sum_of_squares()
    if sum ~= sum or sum == math.huge then
      error(string.format("%s: tensor '%s' holds values outside the fp16 range (|x| > 65504) or NaN; use precision 'fp32'",
        self.source, self.name(field, l)), 4)
    end
  end
  for l, L in ipairs(self.P.layers) do
    for field, t in pairs(L) do
      if not ane.quantized.is(t) then check(t, field, l - 1) end -- (quantizing refuses non-finite weights)
    end
  end
  check(self.P.rms_final, "rms_final")
end

function M.from_weights(W, opts)
  opts = opts or {}
  local precision, profile = decoder.check_options(opts, 2)
  local self = setmetatable(decoder.new_state("llama", opts, precision, profile), Model)
  self.config, self.source, self.vocab_size = W.config, W.source, W.config.vocab_size
  self.context_length, self.width, self.n_layer = W.config.seq_len, W.config.dim, W.config.n_layer
  self.ffn_kind, self.norm_kind = "ffn", "norm"
  self.stop_token = W.stop_token or 2 -- config.json's eos_token_id, or llama2.c's </s>
  self.cache_width = W.config.n_head * W.config.head_dim -- q, k, v (GQA-repeated) and the caches
  self.attention_fields, self.ffn_fields = attention_weights(W.config), FFN_WEIGHTS
  self.weight_consts = { attn_prefill = const_names(self.attention_fields), ffn = const_names(FFN_WEIGHTS),
    norm = { "norm_weight" } }
  -- activations the training forward outputs for the backward: the projections' outputs
  self.saved = { attn_prefill = { "wk", "wq", "wv" }, ffn = { "ffn_gate", "ffn_up" } }
  self.shared_classifier = W.shared_classifier
  self.weights = W
  self.name = NAMINGS[W.naming or "llama2c"]
  self.quantize, self.quantize_classifier = decoder.check_quantize_options(opts, W, 2)
  self.P = prepare(W, self.dtype, self.quantize, self.name)
  if self.quantize_classifier and not ane.quantized.is(self.P.wcls) then
    self.P.wcls = ane.quantize(self.P.wcls, self.quantize_classifier, { dtype = "fp32", name = self.name("wcls") })
  end
  self.quantized = self.quantize or decoder.holds_quantized(self.P.layers)
  if self.quantized then self.weights = nil end -- the quantized copies are the model: no masters kept
  if self.dtype == "fp16" then check_fp16_range(self) end
  if opts.weights_as_inputs then
    self.weights_as_inputs = true
    self.weight_feed = weight_feed(self, self.attention_fields, FFN_WEIGHTS)
  end
  if opts.lora then self:enable_lora(opts.lora) end
  return self
end

-- ------------------------------------------------------------------ LoRA

--- Low-rank adapters on wq and wv, fed to the attention programs as inputs: the base weights
--- stay frozen and adapters swap with no compile and no patch. lora: rank, alpha (default
--- rank), seed. A starts normal(0, 1/sqrt(dim)), B at zero, so the model starts unchanged.
function Model:enable_lora(lora)
  if next(self.programs) then error("enable_lora: must come before the first program is compiled", 2) end
  local rank = math.tointeger(lora.rank)
  if not rank or rank < 1 or rank > self.config.dim then error("enable_lora: rank must be an integer in 1.." .. self.config.dim, 2) end
  self.lora = { rank = rank, alpha = lora.alpha or rank }
  self.adapters = {}
  local n, seed = 0, lora.seed or 1
  for l = 0, self.config.n_layer - 1 do
    for _, which in ipairs({ "q", "v" }) do
      n = n + 1
      self.adapters["lora_a_" .. which .. "." .. l] = ane.tensor.randn({ 1, rank, 1, self.config.dim },
        { seed = seed * 1000 + n, std = 1 / math.sqrt(self.config.dim) })
      self.adapters["lora_b_" .. which .. "." .. l] = ane.tensor({ 1, rank, 1, self.cache_width })
    end
  end
end

--- Writes the adapters (fp32, names lora_a_q.0 ...; B stored transposed, [rank, dim]) with
--- rank and alpha in the metadata, atomically.
function Model:save_adapters(path)
  if not self.lora then error("save_adapters: LoRA is not enabled on this model", 2) end
  local tensors = {}
  for name, t in pairs(self.adapters) do tensors[name] = t:reshape(self.lora.rank, t:numel() // self.lora.rank) end
  return ane.io.save_safetensors(path, tensors, { format = "anelua-lora-1", rank = tostring(self.lora.rank),
    alpha = tostring(self.lora.alpha) })
end

--- Replaces the adapters by those of a file (same rank); takes effect at the next eval, with
--- no compile. Returns true or nil, message.
function Model:load_adapters(path)
  if not self.lora then error("load_adapters: LoRA is not enabled on this model", 2) end
  local tensors, metadata = ane.io.load_safetensors(path)
  if not tensors then return nil, metadata end
  if metadata.format ~= "anelua-lora-1" then return nil, path .. ": not an anelua LoRA file" end
  if tonumber(metadata.rank) ~= self.lora.rank then
    return nil, string.format("%s: adapters of rank %s, the model uses rank %d", path, tostring(metadata.rank), self.lora.rank)
  end
  for name, t in pairs(self.adapters) do
    local saved = tensors[name]
    if not saved then return nil, path .. ": no tensor '" .. name .. "'" end
    if saved:numel() ~= t:numel() then return nil, string.format("%s: '%s' has %d elements, expected %d", path, name, saved:numel(), t:numel()) end
  end
  if tonumber(metadata.alpha) ~= self.lora.alpha then -- alpha / rank is a const of the compiled programs
    return nil, string.format("%s: adapters trained with alpha %s, the model uses alpha %s", path, tostring(metadata.alpha),
      tostring(self.lora.alpha))
  end
  for name, t in pairs(self.adapters) do t:copy_from(tensors[name]:to("fp32"):reshape(table.unpack(t:shape()))) end
  return true
end

function Model:embed(ids, S)
  local dim = self.config.dim
  local rows = self.P.token_embedding:gather(ids)                        -- [T, dim]
  local x = ane.tensor({ 1, dim, 1, S }, self.dtype)
  x:slice(4, 1, #ids):copy_from(rows:transpose():reshape(1, dim, 1, #ids))
  return x
end

function Model:classify(x, T, S, first) -- logits of positions first (default 1) .. T
  first = first or 1
  local h = self:eval(self:program(self:kind_for("norm", T, S), nil, S), "norm", 0, { x = x }).y
  local n = T - first + 1
  return decoder.classifier_logits(self.P.wcls, h:slice(4, first, T):reshape(self.config.dim, n):to("fp32")) -- [n, V]
end

function Model:forward(ids)
  self:check_ids(ids, self.config.vocab_size, self.config.seq_len, 3)
  local S = self:bucket(#ids, self.config.seq_len)
  local x = self:embed(ids, S)
  local caches = {}
  for l = 1, self.config.n_layer do
    local r = self:eval(self:program("attn_prefill", l, S), "attn", l, { x = x })
    caches[l] = r
    x = self:eval(self:program("ffn", l, S), "ffn", l, { x = r.y }).y
  end
  return x, caches, S
end

-- Hooks of decoder's loss.
function Model:embed_sequence(ids, S) return self:embed(ids, S) end

function Model:embedding_gradients(ids, dx, raw) -- dx [T, dim]: each position adds to its token's row
  raw.embedding = raw.embedding or ane.tensor({ self.config.vocab_size, self.config.dim })
  for t, id in ipairs(ids) do
    local row = raw.embedding:slice(1, id + 1, id + 1)
    row:copy_from(row:add(dx:slice(1, t, t)))
  end
end

function Model:checkpoint_gradients(raw)
  local c, grads, name = self.config, {}, self.name
  for l = 1, c.n_layer do
    -- each gradient in its weight's checkpoint shape (programs hold [out, in, 1, 1] consts, or
    -- [1, 1, out, in] inputs with weights_as_inputs; GQA's repeated k/v rows are summed)
    local weights = self.weights.layers[l]
    for _, fields in ipairs({ self.attention_fields, FFN_WEIGHTS }) do
      for field, const in pairs(fields) do
        local grad = raw.layers[l][const]
        if KV_FIELDS[field] then grad = sum_kv_rows(grad:reshape(self.cache_width, c.dim), c) end
        grads[name(field, l - 1)] = grad:reshape(table.unpack(weights[field]:shape()))
      end
    end
  end
  grads[name("rms_final")] = raw.norm.norm_weight:reshape(c.dim)
  if self.shared_classifier then
    grads[name("token_embedding")] = raw.embedding:add(raw.classifier)
  else
    grads[name("token_embedding")], grads[name("wcls")] = raw.embedding, raw.classifier
  end
  return grads
end

--- The weights as fp32 master copies in the checkpoint's layout and naming ("wq.0",
--- "token_embedding", "wcls" when not shared, "rms_final", ... for llama2.c files; Hugging
--- Face names for those), for an optimizer to update in place.
function Model:parameters()
  if self.lora then return self.adapters end -- LoRA trains the adapters only
  if self.quantized then decoder.refuse_quantized_training(self, 2) end
  if self.master then return self.master end
  local W, master, name = self.weights, {}, self.name
  master[name("token_embedding")] = W.token_embedding:to("fp32")
  if not self.shared_classifier then master[name("wcls")] = W.wcls:to("fp32") end
  master[name("rms_final")] = W.rms_final:to("fp32")
  for l, L in ipairs(W.layers) do
    for field, t in pairs(L) do master[name(field, l - 1)] = t:to("fp32") end
  end
  self.master = master
  return master
end

-- The layer-l (1-based) fields of a parameter table, in checkpoint layout.
local function layer_parameters(self, params, l)
  local L = {}
  for _, field in ipairs(layer_fields(self.config)) do L[field] = params[self.name(field, l - 1)] end
  return L
end

--- Writes the master weights into every loaded program by patching (no compile) and into
--- the CPU-side embedding and classifier.
function Model:load_parameters(params)
  if self.lora then return end -- adapters are program inputs: nothing to write
  if self.quantized then decoder.refuse_quantized_training(self, 2) end
  params = params or self.master
  local name = self.name
  self.P.token_embedding = params[name("token_embedding")]
  self.P.wcls = params[name("wcls")] or self.P.token_embedding
  for program, kind, layer in self:each_program() do
    if self.weights_as_inputs then break end -- (fed as inputs: nothing to patch)
    local consts = kind:match("^attn") and self.attention_fields or kind:match("^ffn") and FFN_WEIGHTS or nil
    local patch = {}
    if consts then
      local L = layer_parameters(self, params, layer)
      for field, const in pairs(consts) do -- (GQA: the programs hold k/v rows repeated per query head)
        patch[const] = KV_FIELDS[field] and repeat_kv_rows(L[field], self.config) or L[field]
      end
    else
      patch.norm_weight = params[name("rms_final")]
    end
    decoder.patch_present(program, patch)
  end
  -- Programs compiled later start from these weights too: converted when one is built (or
  -- now, when the weights are fed as inputs), not at every step.
  self.stale_params = params
  if self.weights_as_inputs then self:refresh_weights() end -- the inputs are fed from self.P
end

-- The program-layout weights (self.P) from the latest parameters; views when the dtype
-- already matches (fp32), conversions otherwise.
function Model:refresh_weights()
  local params = self.stale_params
  if not params then return end
  self.stale_params = nil
  for l = 1, self.config.n_layer do
    self.P.layers[l] = program_layer(layer_parameters(self, params, l), self.config, self.dtype)
  end
  self.P.rms_final = decoder.in_dtype(params[self.name("rms_final")], self.dtype)
  if self.weights_as_inputs then self.weight_feed = weight_feed(self, self.attention_fields, FFN_WEIGHTS) end
end

-- Hooks of decoder.generate: the cache holds the rotated keys the prefill and decode
-- programs output; the decoded position's rotary angles go in as inputs.
function Model:embed_token(id, _, W) return self:embed({ id }, W) end
function Model:cache_keys(k, T) return k:slice(4, 1, T) end

function Model:decode_inputs(position, W)
  local c = self.config
  local head = c.head_dim
  local cos_t, sin_t = nn.rope_tables(1, head, { convention = c.rope, theta = c.rope_theta, offset = position,
    dtype = self.dtype })
  local cos, sin = ane.tensor({ 1, head, 1, W }, self.dtype), ane.tensor({ 1, head, 1, W }, self.dtype)
  cos:slice(4, 1, 1):copy_from(cos_t:reshape(1, head, 1, 1))
  sin:slice(4, 1, 1):copy_from(sin_t:reshape(1, head, 1, 1))
  return { rope_cos = cos, rope_sin = sin }
end

--- Writes a quantized model as a directory that M.load reads back without re-quantizing
--- (ane.formats.hf_llama.write_quantized). Returns true or nil and a message.
function Model:save_quantized(dir)
  if type(dir) ~= "string" then error("save_quantized: dir must be a string", 2) end
  return require("ane.formats.hf_llama").write_quantized(dir, self)
end

function Model:__tostring()
  local c = self.config
  local lora = self.lora and string.format(", LoRA rank %d alpha %g on wq/wv", self.lora.rank, self.lora.alpha) or ""
  local heads = c.n_kv_head == c.n_head and tostring(c.n_head) or string.format("%d (%d kv)", c.n_head, c.n_kv_head)
  return string.format("%s (%d layers, %s heads of %d, dim %d, hidden %d, vocab %d; %s, %s%s, profile %s%s) from %s",
    c.model_type or "llama", c.n_layer, heads, c.head_dim, c.dim, c.hidden, c.vocab_size, self.backend, self.precision,
    decoder.quantization_label(self), self.profile, lora, self.source)
end

return M

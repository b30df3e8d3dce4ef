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

local M = {}
local Model = decoder.mixin({})
Model.__index = Model

local MASK = decoder.MASK
local EPS = 1e-5

local function fail(format, ...) return nil, string.format(format, ...) end

-- ------------------------------------------------------------------ loading

--- llama2.c legacy (v0) checkpoint: 7 int32 header fields, then fp32 tensors; a negative
--- vocab_size means an unshared classifier follows the (unused) freq_cis tables.
local function load_llama2c(path)
  local mapping, size = ane._io.map_file(path)
  if not mapping then return nil, size end
  local header = ane.io.read_file(path)
  if not header or #header < 28 then return fail("%s: too short for the 28-byte header", path) end
  local dim, hidden, L, H, KV, V, T = string.unpack("<i4i4i4i4i4i4i4", header)
  if dim == 0x616b3432 then return fail("%s: a llama2.c v1+ export (magic 'ak42'); only the legacy v0 format is read", path) end
  local shared = V > 0
  V = math.abs(V)
  if dim <= 0 or hidden <= 0 or L <= 0 or H <= 0 or KV <= 0 or V <= 0 or T <= 0 or dim % H ~= 0 or H % KV ~= 0 then
    return fail("%s: header holds an impossible configuration (dim %d, hidden %d, layers %d, heads %d, kv heads %d, vocab %d, seq %d)",
      path, dim, hidden, L, H, KV, V, T)
  end
  local head = dim // H
  local kv_dim = KV * head
  local fields = {
    { "token_embedding", { V, dim } }, { "rms_att", { L, dim } }, { "wq", { L, dim, dim } }, { "wk", { L, kv_dim, dim } },
    { "wv", { L, kv_dim, dim } }, { "wo", { L, dim, dim } }, { "rms_ffn", { L, dim } }, { "w1", { L, hidden, dim } },
    { "w2", { L, dim, hidden } }, { "w3", { L, hidden, dim } }, { "rms_final", { dim } },
    { "freq_cis_real", { T, head // 2 } }, { "freq_cis_imag", { T, head // 2 } },
  }
  if not shared then fields[#fields + 1] = { "wcls", { V, dim } } end
  local t, offset = {}, 28
  for _, field in ipairs(fields) do
    local n = 1
    for _, d in ipairs(field[2]) do n = n * d end
    local tensor, err = mapping:tensor(path, field[1], "F32", field[2], offset, offset + n * 4)
    if not tensor then return nil, err end
    t[field[1]] = tensor
    offset = offset + n * 4
  end
  if offset ~= size then return fail("%s: the tensors end at byte %d but the file has %d bytes", path, offset, size) end
  local W = {
    config = { dim = dim, hidden = hidden, n_layer = L, n_head = H, n_kv_head = KV, vocab_size = V, seq_len = T },
    layers = {}, token_embedding = t.token_embedding, rms_final = t.rms_final, wcls = t.wcls or t.token_embedding,
    source = path, shared_classifier = shared,
  }
  local function layer(tensor, l) return tensor:slice(1, l, l):reshape(table.unpack(tensor:shape(), 2)) end
  for l = 1, L do
    W.layers[l] = {
      rms_att = layer(t.rms_att, l), wq = layer(t.wq, l), wk = layer(t.wk, l), wv = layer(t.wv, l), wo = layer(t.wo, l),
      rms_ffn = layer(t.rms_ffn, l), w1 = layer(t.w1, l), w2 = layer(t.w2, l), w3 = layer(t.w3, l),
    }
  end
  return W
end

-- ------------------------------------------------------------------ programs

local function prepare(W, dtype)
  local P = { layers = {} }
  local function matrix(t) return decoder.conv_weight(t, dtype) end
  for l, L in ipairs(W.layers) do
    P.layers[l] = { rms_att = decoder.in_dtype(L.rms_att, dtype), rms_ffn = decoder.in_dtype(L.rms_ffn, dtype),
      wq = matrix(L.wq), wk = matrix(L.wk), wv = matrix(L.wv), wo = matrix(L.wo), w1 = matrix(L.w1), w2 = matrix(L.w2),
      w3 = matrix(L.w3) }
  end
  P.rms_final = decoder.in_dtype(W.rms_final, dtype)
  P.token_embedding = decoder.in_dtype(W.token_embedding, "fp32") -- [V, dim] for lookups
  P.wcls = decoder.in_dtype(W.wcls, "fp32")                        -- [V, dim] for the CPU classifier
  return P
end

-- With weights_as_inputs the weights are graph inputs named as their consts would be:
-- matrices [1, out, 1, in] and norm weights [1, 1, 1, C] (device I/O is [1, C, 1, S], ANE-20,
-- with the wide axis last, ANE-21), reshaped inside the graph for the conv and the per-channel multiply. Returns the table of
-- nodes to build with, or L itself when weights are consts.
local function weights_for(self, g, L, fields)
  if not self.weights_as_inputs then return L end
  local nodes = {}
  for field, const in pairs(fields) do
    local shape = L[field]:shape()
    if #shape == 4 then -- [out, in, 1, 1]
      nodes[field] = g:reshape(g:input(const, { 1, shape[1], 1, shape[2] }, self.dtype), shape, { name = const .. "_conv" })
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

-- LoRA on projection `which` ("q" or "v"): (alpha / rank) * B (A h), with A [rank, dim] and
-- B^T [rank, dim] graph inputs laid out [1, rank, 1, dim] (device I/O, ANE-20; the wide axis
-- last, ANE-21) and viewed as [1, 1, rank, dim] for the matmuls.
local function lora_delta(self, g, h, which, S)
  local rank, dim = self.lora.rank, self.config.dim
  local function adapter(name)
    return g:reshape(g:input(name, { 1, rank, 1, dim }, self.dtype), { 1, 1, rank, dim }, { name = name .. "_matrix" })
  end
  local a, b_t = adapter("lora_a_" .. which), adapter("lora_b_" .. which)
  local columns = g:reshape(h, { 1, 1, dim, S }, { name = "lora_in_" .. which })
  local down = g:matmul(a, columns, { name = "lora_down_" .. which })                      -- [1, 1, rank, S]
  local up = g:matmul(b_t, down, { transpose_x = true, name = "lora_up_" .. which })       -- [1, 1, dim, S]
  local scaled = g:mul(up, self.lora.alpha / rank, { name = "lora_scaled_" .. which })
  return g:reshape(scaled, { 1, dim, 1, S }, { name = "lora_" .. which })
end

local function project(self, g, L, x, W)
  local H, head = self.config.n_head, self.config.dim // self.config.n_head
  local h = nn.rms_norm(g, x, L.rms_att, { name = "attention_norm", eps = EPS })
  local q = nn.linear(g, h, L.wq, nil, { name = "wq" })
  local k = nn.linear(g, h, L.wk, nil, { name = "wk" })
  local v = nn.linear(g, h, L.wv, nil, { name = "wv" })
  if self.lora then
    q = g:add(q, lora_delta(self, g, h, "q", W), { name = "wq_adapted" })
    v = g:add(v, lora_delta(self, g, h, "v", W), { name = "wv_adapted" })
  end
  return nn.split_heads(g, q, H, { name = "q_heads" }), nn.split_heads(g, k, H, { name = "k_heads" }), k, v, head, W
end

local function finish(g, L, x, attended, k, v)
  local out = nn.linear(g, nn.merge_heads(g, attended, { name = "merged" }), L.wo, nil, { name = "wo" })
  g:output("y", g:add(x, out))
  g:output("k", k) -- the un-rotated projections are cached; rotation happens per use
  g:output("v", v)
  return g
end

-- Prefill over S positions from 0: rotary tables as consts.
local function attention_prefill_graph(self, L, S)
  local dim, H, dtype = self.config.dim, self.config.n_head, self.dtype
  local g = ane.graph("llama_attn_prefill")
  L = weights_for(self, g, L, self.attention_fields)
  local x = g:input("x", { 1, dim, 1, S }, dtype)
  local q, kh, k, v, head = project(self, g, L, x, S)
  local cos, sin = nn.rope_tables(S, head, { convention = "interleaved", dtype = dtype })
  local cos_node, sin_node = g:const("rope_cos", cos), g:const("rope_sin", sin)
  q = nn.rope(g, q, cos_node, sin_node, { name = "q_rope" })
  kh = nn.rope(g, kh, cos_node, sin_node, { name = "k_rope" })
  local attended = nn.causal_attention(g, q, kh, nn.split_heads(g, v, H, { name = "v_heads" }),
    { name = "attn", mask_value = MASK })
  return finish(g, L, x, attended, k, v)
end

-- Decode W positions (the first real) against Smax cached positions. The cache holds
-- rotated keys (`k_rot` output) so old positions are not rotated again; the new position's
-- angles come in as inputs.
local function attention_decode_graph(self, L, W, Smax)
  local dim, H, dtype = self.config.dim, self.config.n_head, self.dtype
  local head = dim // H
  local g = ane.graph("llama_attn_decode")
  L = weights_for(self, g, L, self.attention_fields)
  local x = g:input("x", { 1, dim, 1, W }, dtype)
  local k_cache = g:input("k_cache", { 1, dim, 1, Smax }, dtype)
  local v_cache = g:input("v_cache", { 1, dim, 1, Smax }, dtype)
  local mask = g:input("mask", { 1, 1, 1, Smax }, dtype)
  local cos_in = g:input("rope_cos", { 1, head, 1, W }, dtype)
  local sin_in = g:input("rope_sin", { 1, head, 1, W }, dtype)
  local cos = g:transpose(g:reshape(cos_in, { head, W }), { 1, 0 }, { name = "cos_rows" }) -- [W, head]
  local sin = g:transpose(g:reshape(sin_in, { head, W }), { 1, 0 }, { name = "sin_rows" })
  local q, kh, _, v = project(self, g, L, x, W)
  q = nn.rope(g, q, cos, sin, { name = "q_rope" })
  kh = nn.rope(g, kh, cos, sin, { name = "k_rope" })                               -- [1, H, W, head]
  local scale = 1 / math.sqrt(head)
  local kc = g:reshape(k_cache, { 1, H, head, Smax })
  local vc = g:reshape(v_cache, { 1, H, head, Smax })
  local cached = g:add(g:mul(g:matmul(q, kc), scale), mask)
  local own = g:add(g:mul(g:matmul(q, kh, { transpose_y = true }), scale), g:const("own_mask", nn.causal_mask(W, MASK, dtype)))
  local peak = g:maximum(g:reduce_max(cached, { 3 }, { keep_dims = true }), g:reduce_max(own, { 3 }, { keep_dims = true }))
  local e_cached, e_own = g:exp(g:sub(cached, peak)), g:exp(g:sub(own, peak))
  local total = g:add(g:reduce_sum(e_cached, { 3 }, { keep_dims = true }), g:reduce_sum(e_own, { 3 }, { keep_dims = true }))
  local vn = nn.split_heads(g, v, H, { name = "v_heads" })                           -- [1, H, W, head]
  local weighted = g:add(g:matmul(e_cached, vc, { transpose_y = true }), g:matmul(e_own, vn))
  local attended = g:real_div(weighted, total)
  -- the rotated keys of the block, back in the cache layout [1, dim, 1, W]
  local k_rot = nn.merge_heads(g, kh, { name = "k_rot" })
  return finish(g, L, x, attended, k_rot, v)
end

local function ffn_graph(self, L, S)
  local g = ane.graph("llama_ffn")
  L = weights_for(self, g, L, self.ffn_fields)
  local x = g:input("x", { 1, self.config.dim, 1, S }, self.dtype)
  local h = nn.rms_norm(g, x, L.rms_ffn, { name = "ffn_norm", eps = EPS })
  g:output("y", g:add(x, nn.swiglu(g, h, L.w1, L.w3, L.w2, { name = "ffn" })))
  return g
end

local function final_norm_graph(self, _, S)
  local g = ane.graph("llama_final_norm")
  local x = g:input("x", { 1, self.config.dim, 1, S }, self.dtype)
  local weights = weights_for(self, g, self.P, { rms_final = "norm_weight" })
  g:output("y", nn.rms_norm(g, x, weights.rms_final, { name = "norm", eps = EPS }))
  return g
end

-- Checkpoint field -> the const it became in each program (nn names consts <name>_weight).
local ATTENTION_WEIGHTS = { rms_att = "attention_norm_weight", wq = "wq_weight", wk = "wk_weight", wv = "wv_weight",
  wo = "wo_weight" }
local FFN_WEIGHTS = { rms_ffn = "ffn_norm_weight", w1 = "ffn_gate_weight", w3 = "ffn_up_weight", w2 = "ffn_down_weight" }

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

--- Loads a llama2.c checkpoint. opts: backend, precision ("fp16" | "fp32"), profile.
function M.load(path, opts)
  if type(path) ~= "string" then error("llama.load: path must be a string", 2) end
  local W, err = load_llama2c(path)
  if not W then return nil, err end
  return M.from_weights(W, opts)
end

--- Weights in checkpoint layout (name -> fp32 tensor: token_embedding, wq.0, ..., optional
--- wcls) as the W table of from_weights; `source` says where they came from.
function M.weights_from_parameters(config, params, source)
  local W = { config = config, layers = {}, token_embedding = params.token_embedding, rms_final = params.rms_final,
    wcls = params.wcls or params.token_embedding, shared_classifier = params.wcls == nil, source = source }
  for l = 1, config.n_layer do
    W.layers[l] = {}
    for _, field in ipairs({ "rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3" }) do
      local t = params[field .. "." .. (l - 1)]
      if not t then error(string.format("%s: no parameter '%s.%d'", tostring(source), field, l - 1), 2) end
      W.layers[l][field] = t
    end
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

function M.from_weights(W, opts)
  opts = opts or {}
  local precision, profile = decoder.check_options(opts, 2)
  if W.config.n_kv_head ~= W.config.n_head then
    error("grouped-query attention (n_kv_heads < n_heads) is not supported yet", 2)
  end
  local self = setmetatable(decoder.new_state("llama", opts, precision, profile), Model)
  self.config, self.source, self.vocab_size = W.config, W.source, W.config.vocab_size
  self.context_length, self.width, self.n_layer = W.config.seq_len, W.config.dim, W.config.n_layer
  self.ffn_kind, self.norm_kind, self.stop_token = "ffn", "norm", 2 -- </s>
  self.weight_consts = { attn_prefill = const_names(ATTENTION_WEIGHTS), ffn = const_names(FFN_WEIGHTS),
    norm = { "norm_weight" } }
  self.shared_classifier = W.shared_classifier
  self.weights = W
  self.P = prepare(W, self.dtype)
  self.attention_fields, self.ffn_fields = ATTENTION_WEIGHTS, FFN_WEIGHTS
  if opts.weights_as_inputs then
    self.weights_as_inputs = true
    self.weight_feed = weight_feed(self, ATTENTION_WEIGHTS, FFN_WEIGHTS)
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
      self.adapters["lora_b_" .. which .. "." .. l] = ane.tensor({ 1, rank, 1, self.config.dim })
    end
  end
end

--- Writes the adapters (fp32, names lora_a_q.0 ...; B stored transposed, [rank, dim]) with
--- rank and alpha in the metadata, atomically.
function Model:save_adapters(path)
  if not self.lora then error("save_adapters: LoRA is not enabled on this model", 2) end
  local tensors = {}
  for name, t in pairs(self.adapters) do tensors[name] = t:reshape(self.lora.rank, self.config.dim) end
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

function Model:classify(x, T, S)
  local h = self:eval(self:program("norm", nil, S), "norm", 0, { x = x }).y
  return self.P.wcls:matmul(h:slice(4, 1, T):reshape(self.config.dim, T):to("fp32")):transpose():copy() -- [T, V]
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

-- The rotated keys of the prefilled positions, for the cache: rope applied to k in fp32 on
-- the CPU side would duplicate the graph; instead run k through the same rotation as the
-- prefill program did, position by position, with host tensor ops.
local function rotate_columns(k, T, head, dtype)
  local dim = k:shape()[2]
  local cos, sin = nn.rope_tables(T, head, { convention = "interleaved", dtype = "fp32" })
  local R = nn.rope_rotation(head, "interleaved", "fp32")                -- [head, head]
  local out = ane.tensor({ 1, dim, 1, T }, dtype)
  local rows = k:slice(4, 1, T):reshape(dim // head, head, T):to("fp32")  -- [H, head, T]
  for t = 1, T do
    local column = rows:slice(3, t, t):reshape(dim // head, head)          -- [H, head]
    local c, s = cos:slice(1, t, t):reshape(1, head), sin:slice(1, t, t):reshape(1, head)
    local rotated = column:mul(c):add(column:matmul(R):mul(s))             -- [H, head]
    out:slice(4, t, t):copy_from(rotated:reshape(1, dim, 1, 1))
  end
  return out
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
  local c, grads = self.config, {}
  for l = 1, c.n_layer do
    -- each gradient in its weight's checkpoint shape (programs hold [out, in, 1, 1] consts, or
    -- [1, 1, out, in] inputs with weights_as_inputs)
    local weights = self.weights.layers[l]
    for _, fields in ipairs({ ATTENTION_WEIGHTS, FFN_WEIGHTS }) do
      for field, const in pairs(fields) do
        grads[field .. "." .. (l - 1)] = raw.layers[l][const]:reshape(table.unpack(weights[field]:shape()))
      end
    end
  end
  grads.rms_final = raw.norm.norm_weight:reshape(c.dim)
  if self.shared_classifier then
    grads.token_embedding = raw.embedding:add(raw.classifier)
  else
    grads.token_embedding, grads.wcls = raw.embedding, raw.classifier
  end
  return grads
end

--- The weights as fp32 master copies in the checkpoint's layout ("wq.0", "token_embedding",
--- "wcls" when not shared, "rms_final", ...), for an optimizer to update in place.
function Model:parameters()
  if self.lora then return self.adapters end -- LoRA trains the adapters only
  if self.master then return self.master end
  local W, master = self.weights, {}
  master.token_embedding = W.token_embedding:to("fp32")
  if not self.shared_classifier then master.wcls = W.wcls:to("fp32") end
  master.rms_final = W.rms_final:to("fp32")
  for l, L in ipairs(W.layers) do
    for _, field in ipairs({ "rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3" }) do
      master[field .. "." .. (l - 1)] = L[field]:to("fp32")
    end
  end
  self.master = master
  return master
end

--- Writes the master weights into every loaded program by patching (no compile) and into
--- the CPU-side embedding and classifier.
function Model:load_parameters(params)
  if self.lora then return end -- adapters are program inputs: nothing to write
  params = params or self.master
  self.P.token_embedding = params.token_embedding
  self.P.wcls = params.wcls or params.token_embedding
  for key, program in pairs(self.weights_as_inputs and {} or self.programs) do
    local kind, layer = key:match("^([%w_]+):L(%d+):")
    layer = tonumber(layer)
    local consts = kind:match("^attn") and ATTENTION_WEIGHTS or kind:match("^ffn") and FFN_WEIGHTS or nil
    local patch = {}
    if consts then
      for field, const in pairs(consts) do patch[const] = params[field .. "." .. (layer - 1)] end
    else
      patch.norm_weight = params.rms_final
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
  local params, dtype = self.stale_params, self.dtype
  if not params then return end
  self.stale_params = nil
  for l, L in ipairs(self.P.layers) do
    L.rms_att = decoder.in_dtype(params["rms_att." .. (l - 1)], dtype)
    L.rms_ffn = decoder.in_dtype(params["rms_ffn." .. (l - 1)], dtype)
    for _, field in ipairs({ "wq", "wk", "wv", "wo", "w1", "w2", "w3" }) do
      L[field] = decoder.conv_weight(params[field .. "." .. (l - 1)], dtype)
    end
  end
  self.P.rms_final = decoder.in_dtype(params.rms_final, dtype)
  if self.weights_as_inputs then self.weight_feed = weight_feed(self, ATTENTION_WEIGHTS, FFN_WEIGHTS) end
end

-- Hooks of decoder.generate: the cache holds rotated keys; the decoded position's rotary
-- angles go in as inputs.
function Model:embed_token(id, _, W) return self:embed({ id }, W) end
function Model:cache_keys(k, T) return rotate_columns(k, T, self.config.dim // self.config.n_head, self.dtype) end

function Model:decode_inputs(position, W)
  local head = self.config.dim // self.config.n_head
  local cos_t, sin_t = nn.rope_tables(1, head, { convention = "interleaved", offset = position, dtype = self.dtype })
  local cos, sin = ane.tensor({ 1, head, 1, W }, self.dtype), ane.tensor({ 1, head, 1, W }, self.dtype)
  cos:slice(4, 1, 1):copy_from(cos_t:reshape(1, head, 1, 1))
  sin:slice(4, 1, 1):copy_from(sin_t:reshape(1, head, 1, 1))
  return { rope_cos = cos, rope_sin = sin }
end

function Model:__tostring()
  local c = self.config
  local lora = self.lora and string.format(", LoRA rank %d alpha %g on wq/wv", self.lora.rank, self.lora.alpha) or ""
  return string.format("llama (%d layers, %d heads, dim %d, hidden %d, vocab %d; %s, %s, profile %s%s) from %s", c.n_layer,
    c.n_head, c.dim, c.hidden, c.vocab_size, self.backend, self.precision, self.profile, lora, self.source)
end

return M

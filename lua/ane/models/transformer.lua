-- ane.models.transformer: the decoder-only transformer of every model, built from an
-- architecture table. A model file (gpt2.lua, llama.lua, qwen3.lua) says what its network
-- is (the table below) and how its checkpoints name the weights (a naming); the programs,
-- the weights' layouts, embedding, the forward pass, the classifier and the parameter and
-- gradient bookkeeping for training are all here, once.
--
-- The architecture table (model.arch):
--   name                  program names: "<name>_attn_prefill", ...
--   dim, hidden, n_layer, n_head, n_kv_head, head_dim, vocab_size, context_length
--   norm, norm_eps        "layer" (LayerNorm, with a bias) or "rms" (RMSNorm)
--   qkv                   "fused" (one [3 dim, dim] product, q k v sliced off it) or "separate"
--   bias                  whether the projections (qkv, out, up, down) carry biases
--   positions             "learned" (a position embedding added to the token's) or "rope"
--   rope, rope_theta      RoPE's pairing, "interleaved" (llama2.c) or "half" (Hugging Face)
--   rope_scaling          nil, or the frequencies' rescaling (nn.rope_frequencies: linear, llama3)
--   qkv_bias              separate q, k and v projections carry biases (Qwen2), the others not
--   qk_norm               RMSNorm over head_dim on the q and k heads before RoPE (Qwen3)
--   ffn                   "gelu" (up, GELU, down), "swiglu" (down(silu(gate) * up)) or "geglu"
--                         (down(gelu(gate) * up), GELU's tanh form: Gemma 3)
--   tied                  the classifier is the token embedding
--   post_norms            the attention's and the FFN's outputs are normed before the residual
--                         adds them (roles post_attn_norm, post_ffn_norm: Gemma 3)
--   attn_scale            the scores' scale (default 1/sqrt(head_dim); Gemma 3's query_pre_attn_scalar)
--   embed_scale           the token embeddings are multiplied by it (Gemma 3: sqrt(dim))
--   sliding_window        keys more than this many positions back are not attended to, in the
--   sliding               layers of the set sliding ({[l] = true}; all of them when nil)
--   rope_local_theta      the sliding layers' RoPE base (Gemma 3: rope_local_base_freq; no scaling)
--   attn_softcap,         scores and logits soft-capped: cap * tanh(x / cap) (where a Gemma
--   final_softcap         config sets them)
--
-- Roles name the weights: one layer has attn_norm (+ attn_norm_bias), qkv (+ qkv_bias) or
-- q, k, v (+ q_bias, k_bias, v_bias), q_norm, k_norm, out (+ out_bias), ffn_norm (+ ffn_norm_bias), gate, up (+ up_bias),
-- down (+ down_bias); the model has token_embedding, position_embedding, final_norm
-- (+ final_norm_bias) and classifier (absent when tied). Checkpoint readers return weights
-- by role (W.layers[l][role], matrices [out, in], vectors [n]); a naming maps each role to
-- the name its checkpoint format gives it (naming.name(role, 0-based layer)), and the
-- programs hold each role as the const M.const_name(role). So there is one name map:
-- checkpoint name <-> role -> program const.
--
-- Grouped-query attention runs without repeated k/v rows: k, v and their caches have the kv
-- heads only, and each kv head's keys and values multiply its group of query heads in one
-- batched product (nn.group_heads).
--
-- Each layer runs as two programs, attention and FFN, compiled per sequence bucket by
-- ane.models.decoder; embeddings, the classifier (too wide for the device, ANE-16) and
-- sampling run on the CPU (no gather on the device, ANE-25). Prefill runs a causal
-- attention over a padded bucket; a decode step attends to the KV cache (program inputs
-- the CPU writes one row of, ANE-24: no state on the device) and to its own key in one
-- softmax. Keys are cached as the programs output them: rotated, for RoPE models.
local ane = require("ane")
local nn = require("ane.nn")
local decoder = require("ane.models.decoder")

local M = {}
local MASK = decoder.MASK

-- ------------------------------------------------------------------ roles

-- The roles of each program group, in the order the programs use them, and which
-- architectures have them.
local GROUP_ROLES = {
  attn = { "attn_norm", "attn_norm_bias", "qkv", "qkv_bias", "q", "q_bias", "k", "k_bias", "v", "v_bias", "q_norm",
    "k_norm", "out", "out_bias", "post_attn_norm" },
  ffn = { "ffn_norm", "ffn_norm_bias", "gate", "gate_bias", "up", "up_bias", "down", "down_bias", "post_ffn_norm" },
  norm = { "final_norm", "final_norm_bias" },
}

local function layer_norm(a) return a.norm == "layer" end
local function fused(a) return a.qkv == "fused" end
local function separate(a) return a.qkv ~= "fused" end
local PRESENT = {
  attn_norm_bias = layer_norm, ffn_norm_bias = layer_norm, final_norm_bias = layer_norm,
  qkv = fused, qkv_bias = function(a) return fused(a) and a.bias end, q = separate, k = separate, v = separate,
  q_bias = function(a) return separate(a) and a.qkv_bias end,
  k_bias = function(a) return separate(a) and a.qkv_bias end,
  v_bias = function(a) return separate(a) and a.qkv_bias end,
  q_norm = function(a) return a.qk_norm end, k_norm = function(a) return a.qk_norm end,
  out_bias = function(a) return a.bias end, up_bias = function(a) return a.bias end,
  down_bias = function(a) return a.bias end, gate = function(a) return a.ffn ~= "gelu" end,
  gate_bias = function(a) return a.ffn ~= "gelu" and a.bias end,
  post_attn_norm = function(a) return a.post_norms end, post_ffn_norm = function(a) return a.post_norms end,
}

--- Whether layer l (1-based) of architecture a attends within a sliding window.
function M.is_sliding(a, l)
  return a.sliding_window ~= nil and (a.sliding == nil or a.sliding[l] == true)
end

--- The roles architecture `arch` has in a program group ("attn", "ffn" or "norm").
function M.roles(arch, group)
  local list = {}
  for _, role in ipairs(GROUP_ROLES[group]) do
    if not PRESENT[role] or PRESENT[role](arch) then list[#list + 1] = role end
  end
  return list
end

--- The roles of one layer (attention's, then the FFN's).
function M.layer_roles(arch)
  local list = M.roles(arch, "attn")
  for _, role in ipairs(M.roles(arch, "ffn")) do list[#list + 1] = role end
  return list
end

--- The const a role becomes in the programs: "<role>_weight", or the bias's own name.
function M.const_name(role) return role:match("_bias$") and role or role .. "_weight" end

-- Vectors applied per head ([1, H, S, head] activations: axis 3) rather than per channel.
local PER_HEAD = { q_norm = true, k_norm = true }

-- ------------------------------------------------------------------ weights in program layout

-- One layer's weights in program layout: matrices as [out, in, 1, 1] conv weights, vectors
-- as they are, in dtype. quantize ("int8" | "int4" | nil): the matrices become quantized
-- weights (per output row), which the programs carry compressed; weights that come
-- quantized (a quantized checkpoint) stay as they are, but for Q8_0 / Q4_0 blocks (a GGUF file's)
-- on the device, which are dequantized (blocks_on_device false: the device runs per-row int8 and
-- palettes; sim reads the blocks). `stored` (a table) receives the quantized weights in
-- checkpoint layout, for saving.
local function program_layer(L, dtype, quantize, label, stored, blocks_on_device)
  local P = {}
  for role, t in pairs(L) do
    if ane.quantized.is(t) and decoder.BLOCK_ENCODINGS[t:encoding()] and not blocks_on_device then t = t:dequantize() end
    if not ane.quantized.is(t) and not t:is_contiguous() then t = t:copy() end -- (transposed parameters)
    if quantize and not ane.quantized.is(t) and t:ndim() == 2 then
      t = ane.quantize(t, quantize, { dtype = dtype, name = label(role) })
    end
    if stored and ane.quantized.is(t) then stored[role] = t end
    if ane.quantized.is(t) then
      P[role] = decoder.quantized_conv_weight(t, dtype)
    else
      P[role] = t:ndim() == 2 and decoder.conv_weight(t, dtype) or decoder.in_dtype(t, dtype)
      -- The programs share these bytes instead of copying them: a conversion (read-only from
      -- now on: new parameters replace P, never write it) or a view of a file mapping. A
      -- view of writable weights (masters an optimizer updates in place) is not shared:
      -- programs change only when patched. A converted checkpoint tensor gives back the file
      -- pages it was read from (the master copy reads them again when training).
      local converted = t:dtype() ~= dtype
      if converted or t:is_readonly() then P[role]:intern() end
      if converted then t:release_pages() end
    end
  end
  return P
end

--- The program-layout weights (model.P) of loader-layout weights W: layers by role, the
--- final norm in dtype, the embeddings and the classifier in fp32 for the CPU (or the
--- classifier quantized). P.stored_layers keeps quantized weights in checkpoint layout.
function M.prepare(self, W, quantize)
  local P = { layers = {}, stored_layers = {} }
  for l, L in ipairs(W.layers) do
    P.stored_layers[l] = {}
    P.layers[l] = program_layer(L, self.dtype, quantize, function(role) return self:checkpoint_name(role, l - 1) end,
      P.stored_layers[l], self.backend == "sim")
  end
  P.final_norm = decoder.in_dtype(W.final_norm, self.dtype)
  P.final_norm_bias = W.final_norm_bias and decoder.in_dtype(W.final_norm_bias, self.dtype)
  -- the CPU's tables: fp32, or in an fp16 model fp16 where the file holds them so (views of
  -- it) or in bf16 (converted: bf16's 8 significant bits fit fp16's 11, so a decode step reads
  -- the same values as from fp32, at half the memory), or in blocks a GGUF file dequantized
  -- (W.from_blocks: rounded to fp16, 2^-11 of each weight, far below the blocks' own steps;
  -- a Q6_K classifier read as fp32 was most of a Q4_0 file's decode step)
  local from_blocks = W.from_blocks or {}
  local function for_cpu(t, role)
    if self.dtype == "fp16" and (t:dtype() == "fp16" or t:dtype() == "bf16" or from_blocks[role]) then
      return decoder.in_dtype(t, "fp16")
    end
    return decoder.in_dtype(t, "fp32")
  end
  P.token_embedding = ane.quantized.is(W.token_embedding) and W.token_embedding -- [V, dim], for lookups (a GGUF
      or for_cpu(W.token_embedding, "token_embedding")                          -- file's blocks: a row at a time)
  P.position_embedding = W.position_embedding and decoder.in_dtype(W.position_embedding, "fp32") -- [T, dim]
  P.classifier = W.classifier == nil and P.token_embedding                     -- [V, dim], the CPU classifier
      or ane.quantized.is(W.classifier) and W.classifier or for_cpu(W.classifier, "classifier")
  return P
end

-- ------------------------------------------------------------------ the programs

-- Whether keys change between projection and cache (per-head norms, rotation): then they
-- are cached as heads merged back, else as projected.
local function keys_transformed(a) return a.positions == "rope" or a.qk_norm end

--- The names of the q, k, v projections' nodes: "q", "k", "v" when the programs output the
--- projected k and v as they are (they are the outputs k and v), else "q_proj", ...
function M.projection_names(arch)
  if keys_transformed(arch) then return { "q_proj", "k_proj", "v_proj" } end
  return { "q", "k", "v" }
end

-- The node of role `role` in a program: a const (its tensor shaped for its use: conv weight,
-- [1, C, 1, 1] per channel, [1, 1, 1, head] per head), or with weights_as_inputs a graph
-- input named as the const would be, in the device's I/O layout ([1, out, 1, in] matrices,
-- [1, 1, 1, n] vectors: ANE-20/21) and reshaped inside the graph. nil when L lacks the role.
local function weight(self, g, L, role)
  local t = L[role]
  if t == nil then return nil end
  local const, shape = M.const_name(role), t:shape()
  if self.weights_as_inputs then
    if #shape == 4 then -- [out, in, 1, 1]
      return g:reshape(g:input(const, { 1, shape[1], 1, shape[2] }, self.dtype), shape, { name = const .. "_conv" })
    elseif PER_HEAD[role] then
      return g:input(const, { 1, 1, 1, shape[1] }, self.dtype)
    end
    return g:reshape(g:input(const, { 1, 1, 1, shape[1] }, self.dtype), { 1, shape[1], 1, 1 }, { name = const .. "_channels" })
  end
  if #shape == 4 then return g:const(const, t) end
  return g:const(const, PER_HEAD[role] and t:reshape(1, 1, 1, shape[1]) or t:reshape(1, shape[1], 1, 1))
end

--- The tensors fed for weight()'s inputs: feed[group][layer][const] (group "norm": layer 0).
function M.weight_feed(self)
  local function feed(source, group)
    local inputs = {}
    for _, role in ipairs(self.roles[group]) do
      local t = source[role]
      local shape = t:shape()
      inputs[M.const_name(role)] = #shape == 4 and t:reshape(1, shape[1], 1, shape[2]) or t:reshape(1, 1, 1, shape[1])
    end
    return inputs
  end
  local result = { attn = {}, ffn = {}, norm = { [0] = feed(self.P, "norm") } }
  for l, L in ipairs(self.P.layers) do result.attn[l], result.ffn[l] = feed(L, "attn"), feed(L, "ffn") end
  return result
end

-- The architecture's norm of x with the weights of `role` (and its bias, for LayerNorm).
local function norm(self, g, x, L, role)
  local a = self.arch
  if a.norm == "layer" then
    return nn.layer_norm(g, x, weight(self, g, L, role), weight(self, g, L, role .. "_bias"), { name = role, eps = a.norm_eps })
  end
  return nn.rms_norm(g, x, weight(self, g, L, role), { name = role, eps = a.norm_eps })
end

local function linear(self, g, x, L, role, name)
  return nn.linear(g, x, weight(self, g, L, role), weight(self, g, L, role .. "_bias"), { name = name })
end

-- The attention norm and the q, k, v projections [1, H * head, 1, S] (LoRA deltas added to
-- q and v when enabled). Fused: one product by the [3 dim, dim] weight, which decoding reads
-- as one matrix, then q, k, v sliced off.
local function project(self, g, L, x)
  local a = self.arch
  local h = norm(self, g, x, L, "attn_norm")
  local names = M.projection_names(a)
  if a.qkv == "fused" then -- rows: q [H * head], k and v [KV * head] each
    local q_width, kv_width = a.n_head * a.head_dim, self.cache_width
    local qkv = linear(self, g, h, L, "qkv", "qkv")                             -- [1, q + 2 kv, 1, S]
    local function part(first, width, name)
      return g:slice_by_size(qkv, { 0, first, 0, 0 }, { -1, width, -1, -1 }, { name = name })
    end
    return part(0, q_width, names[1]), part(q_width, kv_width, names[2]), part(q_width + kv_width, kv_width, names[3])
  end
  local q, k, v = linear(self, g, h, L, "q", names[1]), linear(self, g, h, L, "k", names[2]), linear(self, g, h, L, "v", names[3])
  if self.lora then
    local lora = require("ane.models.lora")
    q = g:add(q, lora.delta(self, g, h, "q"), { name = "q_adapted" })
    v = g:add(v, lora.delta(self, g, h, "v"), { name = "v_adapted" })
  end
  return q, k, v
end


-- q and k as heads, [1, H, S, head] and [1, KV, S, head], normed per head (qk_norm) and
-- rotated by the cos/sin tables [S, head] (RoPE) as the architecture says.
local function query_key_heads(self, g, L, q, k, cos, sin)
  local a = self.arch
  local qh = nn.split_heads(g, q, a.n_head, { name = "q_heads" })
  local kh = nn.split_heads(g, k, a.n_kv_head, { name = "k_heads" })
  if a.qk_norm then
    qh = nn.rms_norm(g, qh, weight(self, g, L, "q_norm"), { name = "q_norm", eps = a.norm_eps, axis = 3 })
    kh = nn.rms_norm(g, kh, weight(self, g, L, "k_norm"), { name = "k_norm", eps = a.norm_eps, axis = 3 })
  end
  if a.positions == "rope" then
    qh = nn.rope(g, qh, cos, sin, { name = "q_rope", convention = a.rope })
    kh = nn.rope(g, kh, cos, sin, { name = "k_rope", convention = a.rope })
  end
  return qh, kh
end

-- The FFN with its norm and residual: x + ffn(norm(x)).
local function ffn_block(self, g, L, x)
  local a = self.arch
  local h = norm(self, g, x, L, "ffn_norm")
  local y
  if a.ffn == "gelu" then
    y = linear(self, g, nn.gelu(g, linear(self, g, h, L, "up", "ffn_up"), { name = "gelu" }), L, "down", "ffn_down")
  else -- gated: swiglu or geglu
    y = nn.gated_ffn(g, h, weight(self, g, L, "gate"), weight(self, g, L, "up"), weight(self, g, L, "down"), {
      name = "ffn", activation = a.ffn == "geglu" and "gelu" or "silu",
      biases = { gate = weight(self, g, L, "gate_bias"), up = weight(self, g, L, "up_bias"),
        down = weight(self, g, L, "down_bias") } })
  end
  if a.post_norms then y = norm(self, g, y, L, "post_ffn_norm") end
  return g:add(x, y)
end

-- The end of the attention programs: the heads back from their kv groups, out projection
-- and residual, the outputs y and the block's k and v as cached ([1, KV * head, 1, S]).
-- with_ffn: y is the whole layer's output, the FFN after the attention in the same program
-- (layer_decode_graph), the attention's output clipped at the model's clamp limit between.
local function finish_attention(self, g, L, x, attended, k, kh, v, with_ffn)
  attended = nn.ungroup_heads(g, attended, self.arch.n_head, { name = "attended_heads" }) -- [1, H, S, head]
  local out = linear(self, g, nn.merge_heads(g, attended, { name = "merged" }), L, "out", "out_proj")
  if self.arch.post_norms then out = norm(self, g, out, L, "post_attn_norm") end
  local y = g:add(x, out)
  if with_ffn then
    if self.clamp_limit then y = g:clip(y, -self.clamp_limit, self.clamp_limit, { name = "attn_clamped" }) end
    y = ffn_block(self, g, L, y)
  end
  g:output("y", y)
  g:output("k", keys_transformed(self.arch) and nn.merge_heads(g, kh, { name = "k_rot" }) or k)
  g:output("v", v)
  return g
end

-- Attention over a full (padded) sequence of S positions from 0: y = x + attn(norm(x)),
-- with k and v for the cache; the rotary tables are consts.
-- The rotary tables' options of layer l: a sliding layer's own base where the model has one.
local function rope_options(a, l, dtype)
  if a.rope_local_theta and M.is_sliding(a, l) then
    return { convention = a.rope, theta = a.rope_local_theta, dtype = dtype }
  end
  return { convention = a.rope, theta = a.rope_theta, scaling = a.rope_scaling, dtype = dtype }
end

local function attention_prefill_graph(self, L, S, _, l)
  local a, dtype = self.arch, self.dtype
  local g = self:graph(a.name .. "_attn_prefill")
  local x = g:input("x", { 1, a.dim, 1, S }, dtype)
  local cos, sin
  if a.positions == "rope" then
    local cos_t, sin_t = nn.rope_tables(S, a.head_dim, rope_options(a, l, dtype))
    cos, sin = g:const("rope_cos", cos_t), g:const("rope_sin", sin_t)
  end
  local q, k, v = project(self, g, L, x)
  local qh, kh = query_key_heads(self, g, L, q, k, cos, sin)
  -- grouped-query attention: each kv head's keys serve its group of query heads in one product
  local attended = nn.causal_attention(g, nn.group_heads(g, qh, a.n_kv_head, { name = "q_grouped" }), kh,
    nn.split_heads(g, v, a.n_kv_head, { name = "v_heads" }), { name = "attn", mask_value = MASK, clip = self.softmax_clip,
      scale = a.attn_scale, softcap = a.attn_softcap, window = M.is_sliding(a, l) and a.sliding_window or nil })
  return finish_attention(self, g, L, x, attended, k, kh, v)
end

-- A decode program's rotary angles as inputs rope_cos / rope_sin [1, head, 1, S] (a position a
-- column), turned into the [S, head] tables nn.rope takes; nil for a model without RoPE.
local function rotary_inputs(self, g, S)
  local head, dtype = self.arch.head_dim, self.dtype
  if self.arch.positions ~= "rope" then return nil end
  local cos_in = g:input("rope_cos", { 1, head, 1, S }, dtype)
  local sin_in = g:input("rope_sin", { 1, head, 1, S }, dtype)
  return g:transpose(g:reshape(cos_in, { head, S }), { 1, 0 }, { name = "cos_rows" }),
    g:transpose(g:reshape(sin_in, { head, S }), { 1, 0 }, { name = "sin_rows" })
end

-- One decoding block of W positions (only the first is real when W > 1) against a cache of
-- Smax positions: one softmax over [cached keys (masked by the `mask` input) | own keys].
-- The cache is read per head as [1, H, head, Smax] straight from its layout; RoPE models
-- take the block's rotary angles as inputs (cached keys are rotated already).
-- with_ffn: the layer's FFN too (layer_decode_graph).
local function decode_graph(self, L, W, Smax, with_ffn)
  local a, dtype = self.arch, self.dtype
  local H, KV, head, width = a.n_head, a.n_kv_head, a.head_dim, self.cache_width
  local g = self:graph(a.name .. (with_ffn and "_layer_decode" or "_attn_decode"))
  local x = g:input("x", { 1, a.dim, 1, W }, dtype)
  local k_cache = g:input("k_cache", { 1, width, 1, Smax }, dtype)
  local v_cache = g:input("v_cache", { 1, width, 1, Smax }, dtype)
  local mask = g:input("mask", { 1, 1, 1, Smax }, dtype)
  local cos, sin = rotary_inputs(self, g, W)
  local q, k, v = project(self, g, L, x)
  local kc = g:reshape(k_cache, { 1, KV, head, Smax }, { name = "k_cache_heads" })
  local vc = g:reshape(v_cache, { 1, KV, head, Smax }, { name = "v_cache_heads" })
  local options = { mask_value = MASK, clip = self.softmax_clip, name = "attended", scale = a.attn_scale,
    softcap = a.attn_softcap }
  local attended, kh
  if keys_transformed(a) then -- own keys and values as heads [1, KV, W, head]
    local qh
    qh, kh = query_key_heads(self, g, L, q, k, cos, sin)
    attended = nn.cached_attention(g, nn.group_heads(g, qh, KV, { name = "q_grouped" }), kc, vc, mask, kh,
      nn.split_heads(g, v, KV, { name = "v_heads" }), options)
  else -- as [1, KV, head, W], straight from the projections' layout
    options.own_layout = "DW"
    local qh = nn.group_heads(g, nn.split_heads(g, q, H, { name = "q_heads" }), KV, { name = "q_grouped" })
    attended = nn.cached_attention(g, qh, kc, vc, mask, g:reshape(k, { 1, KV, head, W }, { name = "k_new_heads" }),
      g:reshape(v, { 1, KV, head, W }, { name = "v_new_heads" }), options)
  end
  return finish_attention(self, g, L, x, attended, k, kh, v, with_ffn)
end

local function attention_decode_graph(self, L, W, Smax) return decode_graph(self, L, W, Smax, false) end

-- A whole layer's decode step in one program (ane.models.generation, on the cpu profile): the
-- attention as attention_decode_graph's, then the FFN; outputs y (the layer's output), k and v.
-- A Stories110M token runs 13 programs instead of 25, each eval's bindings and rounds saved;
-- the attention's output is clipped at the clamp limit inside the program, as the softmax's
-- scores are, where the split programs clamp it between them (and count it).
local function layer_decode_graph(self, L, W, Smax) return decode_graph(self, L, W, Smax, true) end

-- B sessions' decode steps of one layer in one program (ane.models.generation's step_together):
-- x [1, dim, 1, B], a column a session, with session i's caches k_cache_<i>, v_cache_<i> and
-- mask_<i> (every session's at the capacity Smax) and its rotary angles in column i. The norm and
-- the q, k, v projections run over the B columns, so each weight is read once a step for all the
-- sessions; each column attends over its own session's cache as attention_decode_graph's one
-- position does; the out projection runs over the columns again. Outputs y [1, dim, 1, B] and
-- each session's k_<i>, v_<i> [1, KV * head, 1, 1] for its caches.
local function attention_batch_graph(self, L, B, Smax)
  local a, dtype = self.arch, self.dtype
  local H, KV, head, width = a.n_head, a.n_kv_head, a.head_dim, self.cache_width
  local g = self:graph(a.name .. "_attn_batch")
  local x = g:input("x", { 1, a.dim, 1, B }, dtype)
  local cos, sin = rotary_inputs(self, g, B)
  local q, k, v = project(self, g, L, x)                                                  -- [1, H * head | width, 1, B]
  local qh, kh
  if keys_transformed(a) then qh, kh = query_key_heads(self, g, L, q, k, cos, sin) end -- [1, H | KV, B, head]
  local merged = {}
  for i = 1, B do
    local function named(name) return { name = name .. "_" .. i } end
    local function column(t, name) return g:slice_by_size(t, { 0, 0, 0, i - 1 }, { -1, -1, -1, 1 }, named(name)) end
    local function row(t, name) return g:slice_by_size(t, { 0, 0, i - 1, 0 }, { -1, -1, 1, -1 }, named(name)) end
    local kc = g:reshape(g:input("k_cache_" .. i, { 1, width, 1, Smax }, dtype), { 1, KV, head, Smax }, named("k_cache_heads"))
    local vc = g:reshape(g:input("v_cache_" .. i, { 1, width, 1, Smax }, dtype), { 1, KV, head, Smax }, named("v_cache_heads"))
    local mask = g:input("mask_" .. i, { 1, 1, 1, Smax }, dtype)
    local options = { mask_value = MASK, clip = self.softmax_clip, name = "attended_" .. i, scale = a.attn_scale,
      softcap = a.attn_softcap }
    local v_i, attended = column(v, "v_own"), nil
    if keys_transformed(a) then
      local k_i = row(kh, "k_own")
      attended = nn.cached_attention(g, nn.group_heads(g, row(qh, "q_own"), KV, named("q_grouped")), kc, vc, mask, k_i,
        nn.split_heads(g, v_i, KV, named("v_heads")), options)
      g:output("k_" .. i, nn.merge_heads(g, k_i, named("k_rot")))
    else
      options.own_layout = "DW"
      local k_i = column(k, "k_own")
      local q_i = nn.group_heads(g, nn.split_heads(g, column(q, "q_own"), H, named("q_heads")), KV, named("q_grouped"))
      attended = nn.cached_attention(g, q_i, kc, vc, mask, g:reshape(k_i, { 1, KV, head, 1 }, named("k_new_heads")),
        g:reshape(v_i, { 1, KV, head, 1 }, named("v_new_heads")), options)
      g:output("k_" .. i, k_i)
    end
    g:output("v_" .. i, v_i)
    merged[i] = nn.merge_heads(g, nn.ungroup_heads(g, attended, H, named("attended_heads")), named("merged"))
  end
  local out = linear(self, g, B > 1 and g:concat(merged, 3, { name = "merged" }) or merged[1], L, "out", "out_proj")
  if a.post_norms then out = norm(self, g, out, L, "post_attn_norm") end
  g:output("y", g:add(x, out))
  return g
end

-- The FFN's own program: ffn_block over x [1, dim, 1, S].
local function ffn_graph(self, L, S)
  local g = self:graph(self.arch.name .. "_ffn")
  g:output("y", ffn_block(self, g, L, g:input("x", { 1, self.arch.dim, 1, S }, self.dtype)))
  return g
end

local function final_norm_graph(self, _, S)
  local g = self:graph(self.arch.name .. "_final_norm")
  local x = g:input("x", { 1, self.arch.dim, 1, S }, self.dtype)
  g:output("y", norm(self, g, x, self.P, "final_norm"))
  return g
end

--- What a training forward saves for the backward (node names): the projections' outputs,
--- so the backward redoes only cheap elementwise work.
function M.saved(arch)
  return {
    attn_prefill = M.projection_names(arch),
    ffn = arch.ffn == "gelu" and { "ffn_up" } or { "ffn_gate", "ffn_up" },
  }
end

-- ------------------------------------------------------------------ the model

local Methods = {}

-- The program kinds (ane.models.decoder builds, compiles and caches them, and derives the
-- "<kind>_grad" backward graphs from these).
Methods.graphs = { attn_prefill = attention_prefill_graph, attn_decode = attention_decode_graph,
  attn_batch = attention_batch_graph, ffn = ffn_graph, norm = final_norm_graph, layer_decode = layer_decode_graph }

--- The checkpoint name of a role (l: 0-based layer, nil for the model's own weights).
function Methods:checkpoint_name(role, l) return self.naming.name(role, l) end

-- The architecture's numbers, whatever file or checkpoint they came from (the readers name
-- the file's own keys; a checkpoint's config arrives here unchecked): sizes positive
-- integers that divide as the layers need, epsilons and RoPE's theta positive and finite.
local function check_architecture(a, source)
  local function fail(format, ...)
    return nil, string.format("%s: the model's configuration: " .. format, tostring(source), ...)
  end
  if a.head_dim == nil and math.type(a.dim) == "integer" and math.type(a.n_head) == "integer" and a.n_head > 0 then
    return fail("a width of %d does not split into %d heads", a.dim, a.n_head)
  end
  for _, key in ipairs({ "dim", "hidden", "n_layer", "n_head", "n_kv_head", "head_dim", "vocab_size", "context_length" }) do
    if math.type(a[key]) ~= "integer" or a[key] <= 0 then
      return fail("'%s' is %s, expected a positive integer", key, tostring(a[key]))
    end
  end
  if a.n_head % a.n_kv_head ~= 0 then return fail("%d query heads cannot share %d kv heads evenly", a.n_head, a.n_kv_head) end
  if a.sliding_window ~= nil and (math.type(a.sliding_window) ~= "integer" or a.sliding_window <= 0) then
    return fail("'sliding_window' is %s, expected a positive integer", tostring(a.sliding_window))
  end
  for _, key in ipairs({ "norm_eps", "rope_theta" }) do
    local value = a[key]
    if (key == "norm_eps" or a.positions == "rope") and not (type(value) == "number" and value > 0 and value < math.huge) then
      return fail("'%s' is %s, expected a positive number", key, tostring(value))
    end
  end
  return true
end

-- Every weight finite, and in fp16 models every weight that becomes fp16 (the layers' and the
-- final norm's; the tables when the file holds them in fp16 or bf16) within fp16's range:
-- a NaN or an infinity would come out of every product as NaN logits, in silence. Returns
-- nil and a message naming the file, the tensor and the element, else true.
-- opts.allow_nonfinite = true loads such weights anyway, to inspect a broken file.
local FP16_LIMIT = 65520 -- the least magnitude fp16's round-to-nearest takes to infinity
local function check_weights(self, W, opts)
  if opts.allow_nonfinite then return true end
  local function check(t, role, l, fp16)
    if t == nil or ane.quantized.is(t) then return true end -- (quantizing refuses non-finite weights)
    if self.naming.transposed and self.naming.transposed[role] then t = t:transpose() end -- the file's layout
    local index, value = t:first_outside(fp16 and FP16_LIMIT or math.huge)
    if not index then return true end
    local name = self:checkpoint_name(role, l)
    if value ~= value or value == math.huge or value == -math.huge then
      return nil, string.format("%s: tensor '%s' holds %s at element %d (of %d); a model with non-finite weights " ..
        "computes NaN (opts.allow_nonfinite = true loads it to inspect)", tostring(self.source), name,
        value ~= value and "NaN" or tostring(value), index, t:numel())
    end
    return nil, string.format("%s: tensor '%s' holds %.9g at element %d, outside the fp16 range (|x| > 65504); " ..
      "use precision 'fp32'", tostring(self.source), name, value, index)
  end
  local fp16 = self.dtype == "fp16"
  for l, L in ipairs(W.layers) do
    for role, t in pairs(L) do
      local ok, why = check(t, role, l - 1, fp16)
      if not ok then return nil, why end
    end
  end
  local function table_in_fp16(t) return fp16 and t ~= nil and not ane.quantized.is(t) and t:dtype() ~= "fp32" end
  for _, entry in ipairs({ { "final_norm", fp16 }, { "final_norm_bias", fp16 },
    { "token_embedding", table_in_fp16(W.token_embedding) }, { "position_embedding", false },
    { "classifier", table_in_fp16(W.classifier) } }) do
    local ok, why = check(W[entry[1]], entry[1], nil, entry[2])
    if not ok then return nil, why end
  end
  return true
end

local function const_names(roles)
  local list = {}
  for _, role in ipairs(roles) do list[#list + 1] = M.const_name(role) end
  table.sort(list)
  return list
end

--- Builds a model on `self` (a fresh decoder.new_state with the model's metatable) from
--- loader-layout weights W. arch: the architecture table; naming: { name = function(role, l) }
--- and optionally transposed = { [role] = true } for matrices the checkpoint stores [in, out].
--- opts: quantize, quantize_classifier, activations, weights_as_inputs, lora (as
--- ane.models.llama says), allow_nonfinite (load NaN / infinite weights, to inspect them).
--- Returns self, or nil and a message when a weight is not finite (or, in fp16 models, not
--- within fp16's range); misused options raise.
function M.init(self, W, arch, naming, opts, level)
  if W.problem then return nil, W.problem end -- (M.weights_from_parameters could not build them)
  local sound, problem = check_architecture(arch, W.source)
  if not sound then return nil, problem end
  self.arch, self.naming, self.config, self.source = arch, naming, W.config, W.source
  for l = 1, arch.n_layer do -- every weight the table implies, by the name its checkpoint gives it
    for _, role in ipairs(M.layer_roles(arch)) do
      if not (W.layers[l] and W.layers[l][role]) then
        error(string.format("%s: no weight '%s' (role %s of layer %d, which a %s model has)", tostring(W.source),
          naming.name(role, l - 1), role, l - 1, arch.name), level + 1)
      end
    end
  end
  self.vocab_size, self.context_length, self.width, self.n_layer = arch.vocab_size, arch.context_length, arch.dim, arch.n_layer
  self.cache_width = arch.n_kv_head * arch.head_dim -- k, v and their caches (kv heads: no repeats)
  self.roles = { attn = M.roles(arch, "attn"), ffn = M.roles(arch, "ffn"), norm = M.roles(arch, "norm"),
    layer = M.layer_roles(arch) }
  self.weight_consts = { attn_prefill = const_names(self.roles.attn), ffn = const_names(self.roles.ffn),
    norm = const_names(self.roles.norm) }
  self.saved = M.saved(arch)
  self.shared_classifier = W.classifier == nil
  local finite, why = check_weights(self, W, opts)
  if not finite then return nil, why end
  self.weights = W
  self.quantize, self.quantize_classifier = decoder.check_quantize_options(opts, W, level + 1, self.backend)
  self.P = M.prepare(self, W, self.quantize)
  if self.quantize_classifier and not ane.quantized.is(self.P.classifier) then
    self.P.classifier = ane.quantize(self.P.classifier, self.quantize_classifier,
      { dtype = "fp32", name = self:checkpoint_name(self.shared_classifier and "token_embedding" or "classifier") })
  end
  self.quantized = self.quantize or decoder.holds_quantized(self.P.layers) or ane.quantized.is(self.P.token_embedding)
  self.activations = decoder.check_activations(opts, self, level + 1, tostring(W.format):match("^GGUF") ~= nil)
  if self.quantized then self.weights = nil end -- the quantized copies are the model: no masters kept
  if opts.weights_as_inputs then
    self.weights_as_inputs = true
    self.weight_feed = M.weight_feed(self)
  end
  if opts.lora then self:enable_lora(opts.lora) end
  return self
end

--- [1, dim, 1, S] input: the token embeddings of ids at positions start.. (plus their
--- position embeddings, for learned positions), zero padding after them.
function Methods:embed(ids, start, S)
  local rows = self.P.token_embedding:gather(ids)                            -- [T, dim]
  if self.arch.embed_scale then rows = rows:scale(self.arch.embed_scale) end
  if self.P.position_embedding then
    local positions = {}
    for i = 1, #ids do positions[i] = start + i - 1 end
    rows = rows:add(self.P.position_embedding:gather(positions))
  end
  local x = ane.tensor({ 1, self.width, 1, S }, self.dtype)
  x:slice(4, 1, #ids):copy_from(rows:transpose():reshape(1, self.width, 1, #ids))
  return x
end

--- Runs all layers over ids padded to their bucket; returns the residual stream, the
--- per-layer outputs (k, v for the cache) and the bucket S.
function Methods:forward(ids)
  self:check_ids(ids, self.vocab_size, self.context_length, 3)
  local S = self:bucket(#ids, self.context_length)
  local x = self:embed(ids, 0, S)
  local caches = {}
  for l = 1, self.n_layer do
    local r = self:eval(self:program("attn_prefill", l, S), "attn", l, { x = x })
    caches[l] = r
    x = self:eval(self:program("ffn", l, S), "ffn", l, { x = r.y }).y
  end
  return x, caches, S
end

-- The classifier that reads one position (a decode step, a prefill's last position): in fp16
-- models an fp16 copy, made once, as their layers' weights are, so the largest matrix streams
-- half the bytes (the fp32 one stays for whole sequences: logits() and the training loss).
local function one_position_classifier(self)
  local P = self.P
  if self.dtype ~= "fp16" or ane.quantized.is(P.classifier) or P.classifier:dtype() ~= "fp32" then return P.classifier end
  if not P.classifier_fp16 then
    P.classifier_fp16 = P.classifier:to("fp16") -- [V, dim]
    P.classifier:release_pages() -- when it maps a file: the embedding lookups read a few rows a token
  end
  return P.classifier_fp16
end

--- Logits [T - first + 1, V] (fp32) of positions first (default 1) .. T of a final-norm input.
function Methods:classify(x, T, S, first)
  first = first or 1
  local h = self:eval(self:program(self:kind_for("norm", T, S), nil, S), "norm", 0, { x = x }).y -- [1, dim, 1, S]
  local n = T - first + 1
  local classifier = n == 1 and one_position_classifier(self) or self.P.classifier
  local logits = decoder.classifier_logits(classifier, h:slice(4, first, T):reshape(self.width, n):to("fp32"), self.activations)
  return self.arch.final_softcap and decoder.softcap(logits, self.arch.final_softcap) or logits
end

--- Logits [B, V] (fp32) of B decode steps' final-norm inputs x [1, dim, 1, B] (one column a
--- session, ane.models.generation.step_together), each column through the classifier a
--- one-position step reads, so each is that step's logits.
function Methods:classify_steps(x, B)
  local h = self:eval(self:program("norm", nil, B), "norm", 0, { x = x }).y -- [1, dim, 1, B]
  local classifier, columns = one_position_classifier(self), h:reshape(self.width, B):to("fp32")
  -- up to 16 columns, each the one-column product's sums (tensor/gemv.h): fp16 weights as
  -- [B, dim] x [dim, V], the logits made in their rows; others [V, dim] x [dim, B], turned
  local logits -- [B, V]
  if ane.quantized.is(classifier) then
    logits = classifier:matmul(columns, self.activations):transpose():copy()
  elseif classifier:dtype() == "fp16" then
    logits = columns:transpose():matmul(classifier:transpose())
  else
    logits = classifier:matmul(columns):transpose():copy()
  end
  return self.arch.final_softcap and decoder.softcap(logits, self.arch.final_softcap) or logits
end

-- Hooks of ane.models.generation: the cache holds the k the programs output; RoPE models
-- take the decoded position's rotary angles as inputs.
function Methods:embed_token(id, position, W) return self:embed({ id }, position, W) end
function Methods:is_sliding(l) return M.is_sliding(self.arch, l) end
function Methods:cache_keys(k, T) return k:slice(4, 1, T) end

-- Rotary tables are made ROPE_BLOCK positions at a time, once a model (each position's angles
-- are (s + offset) * inv whichever block makes them, so a step's columns are the values a
-- table of its position alone would hold): a decode step copies its columns out of them.
local ROPE_BLOCK = 64

-- Block b's tables (positions b * ROPE_BLOCK on) of layer l's options, [head, ROPE_BLOCK] each.
local function rope_block(self, l, b)
  local kind = l and "sliding" or "full"
  self.rope_blocks = self.rope_blocks or { full = {}, sliding = {} }
  local block = self.rope_blocks[kind][b]
  if not block then
    local options = rope_options(self.arch, l, self.dtype)
    options.offset = b * ROPE_BLOCK
    local cos_t, sin_t = nn.rope_tables(ROPE_BLOCK, self.arch.head_dim, options) -- [ROPE_BLOCK, head]
    block = { cos = cos_t:transpose():copy(), sin = sin_t:transpose():copy() }
    self.rope_blocks[kind][b] = block
  end
  return block
end

-- The decode attention's rotary inputs for `count` positions from `position`, [1, head, 1, W]
-- (a position a column, from the first), with the tables of layer l's options.
local function rope_inputs(self, l, position, W, count)
  local head = self.arch.head_dim
  local cos, sin = ane.tensor({ 1, head, 1, W }, self.dtype), ane.tensor({ 1, head, 1, W }, self.dtype)
  local column = 1
  while column <= count do -- (a run of columns from one block at a time)
    local p = position + column - 1
    local b, within = p // ROPE_BLOCK, p % ROPE_BLOCK
    local n = math.min(count - column + 1, ROPE_BLOCK - within)
    local block = rope_block(self, l, b)
    cos:slice(4, column, column + n - 1):copy_from(block.cos:slice(2, within + 1, within + n):reshape(1, head, 1, n))
    sin:slice(4, column, column + n - 1):copy_from(block.sin:slice(2, within + 1, within + n):reshape(1, head, 1, n))
    column = column + n
  end
  return { rope_cos = cos, rope_sin = sin }
end

--- The extra inputs of the decode attention programs at `position` (and the count - 1
--- positions after it, default none): the layers' (and, for a model whose sliding layers
--- rotate by their own base, a second table for those layers).
function Methods:decode_inputs(position, W, count)
  local a = self.arch
  count = count or 1
  if a.positions ~= "rope" then return {} end
  local full = rope_inputs(self, nil, position, W, count)
  if not a.rope_local_theta then return full end
  local first_sliding
  for l = 1, a.n_layer do
    if M.is_sliding(a, l) then first_sliding = l break end
  end
  return full, first_sliding and rope_inputs(self, first_sliding, position, W, count)
end

-- ------------------------------------------------------------------ parameters and gradients

-- A loader-layout tensor of `role` in checkpoint layout (fp32, a copy) and back.
local function to_checkpoint(self, role, t)
  if self.naming.transposed and self.naming.transposed[role] then return t:to("fp32"):transpose():copy() end
  local offset = self.naming.offsets and self.naming.offsets[role]
  if offset then return t:to("fp32"):add(-offset) end -- (a new tensor: the model's keeps its 1 + weight)
  return t:to("fp32")
end

--- Loader-layout weights (W) from parameters in checkpoint naming and layout (what
--- model:parameters() returns and checkpoints store); views where no transpose is needed,
--- and with `views` the transposed matrices too (not contiguous).
--- A configuration that cannot build the model, or a missing parameter (a checkpoint is a
--- user's file), gives weights that hold only `problem`, which M.init returns as its message.
function M.weights_from_parameters(arch, naming, config, params, source, views)
  local sound, problem = check_architecture(arch, source)
  if not sound then return { config = config, layers = {}, source = source, problem = problem } end
  local function get(role, l)
    local t = params[naming.name(role, l)]
    if t == nil then
      problem = problem or string.format("%s: no parameter '%s'", tostring(source), naming.name(role, l))
      return nil
    end
    if naming.transposed and naming.transposed[role] then -- [in, out] -> [out, in]
      return views and t:transpose() or t:transpose():copy()
    end
    local offset = naming.offsets and naming.offsets[role]
    if offset then return t:to("fp32"):add(offset) end
    return t
  end
  local W = { config = config, layers = {}, source = source, naming = config.naming, token_embedding = get("token_embedding"),
    final_norm = get("final_norm") }
  if arch.norm == "layer" then W.final_norm_bias = get("final_norm_bias") end
  if arch.positions == "learned" then W.position_embedding = get("position_embedding") end
  if not arch.tied and params[naming.name("classifier")] then W.classifier = get("classifier") end
  for l = 1, arch.n_layer do
    if problem then break end -- (n_layer may be any count: stop at the first missing parameter)
    W.layers[l] = {}
    for _, role in ipairs(M.layer_roles(arch)) do W.layers[l][role] = get(role, l - 1) end
  end
  if problem then return { config = config, layers = {}, source = source, problem = problem } end
  return W
end

--- The weights as fp32 master copies in the checkpoint's naming and layout, for an
--- optimizer to update in place (LoRA: the adapters). Created once.
function Methods:parameters()
  if self.lora then return self.adapters end -- LoRA trains the adapters only
  if self.quantized then decoder.refuse_quantized_training(self, 2) end
  if self.master then return self.master end
  local W, master = self.weights, {}
  for _, role in ipairs({ "token_embedding", "position_embedding", "classifier", "final_norm", "final_norm_bias" }) do
    if W[role] then master[self:checkpoint_name(role)] = to_checkpoint(self, role, W[role]) end
  end
  for l, L in ipairs(W.layers) do
    for role, t in pairs(L) do master[self:checkpoint_name(role, l - 1)] = to_checkpoint(self, role, t) end
  end
  self.master = master
  return master
end

--- Writes parameters (default: the master weights) into every compiled program by
--- patching (no compile), into the CPU's embeddings and classifier, and into the weights
--- programs compiled later are built from.
function Methods:load_parameters(params)
  if self.lora then return end -- adapters are program inputs: nothing to write
  if self.quantized then decoder.refuse_quantized_training(self, 2) end
  params = params or self.master
  -- (transposed matrices as views: a patch writes them straight into the programs' layout)
  local W = M.weights_from_parameters(self.arch, self.naming, self.config, params, self.source, true)
  self.P.token_embedding, self.P.position_embedding = W.token_embedding, W.position_embedding
  self.P.classifier, self.P.classifier_fp16 = W.classifier or W.token_embedding, nil
  if not self.weights_as_inputs then -- (fed as inputs: nothing to patch)
    local patches = {}
    for program, kind, layer in self:each_program() do
      local group = kind:match("^attn") and "attn" or kind:match("^ffn") and "ffn" or kind:match("^layer") and "layer"
        or "norm"
      local source, patch = layer and W.layers[layer] or W, {}
      for _, role in ipairs(self.roles[group]) do patch[M.const_name(role)] = source[role] end
      patches[#patches + 1] = { program, patch }
    end
    decoder.patch_programs(patches) -- a layer's programs share each patched weight
  end
  -- Programs compiled later start from these weights too: converted when one is built (or
  -- now, when the weights are fed as inputs), not at every step.
  self.stale_weights = W
  if self.weights_as_inputs then self:refresh_weights() end
end

--- Brings the program-layout weights (self.P) up to date with the latest parameters (views
--- when the dtype already matches, conversions otherwise); called before a graph is built.
function Methods:refresh_weights()
  local W = self.stale_weights
  if not W then return end
  self.stale_weights = nil
  self.P = M.prepare(self, W)
  if self.weights_as_inputs then self.weight_feed = M.weight_feed(self) end
end

-- Hooks of ane.models.training.
function Methods:embed_sequence(ids, S) return self:embed(ids, 0, S) end

--- dx [T, dim]: each position adds to its token's embedding row (and its position's).
function Methods:embedding_gradients(ids, dx, raw)
  if self.arch.embed_scale then dx = dx:scale(self.arch.embed_scale) end -- (the lookup was scaled)
  if not raw.embedding then
    -- tied: the rows go straight into the classifier's gradient (the same matrix), rather than
    -- into a second [V, C] of zeros added to it afterwards
    local classifier = self.shared_classifier and raw.classifier
    local own = classifier and classifier:dtype() == "fp32" and classifier:is_contiguous()
    raw.embedding = own and classifier or ane.tensor({ self.vocab_size, self.width })
  end
  if self.P.position_embedding then raw.positions = raw.positions or ane.tensor({ self.context_length, self.width }) end
  for t, id in ipairs(ids) do
    local column = dx:slice(1, t, t)
    local row = raw.embedding:slice(1, id + 1, id + 1)
    row:copy_from(row:add(column))
    if raw.positions then
      local position = raw.positions:slice(1, t, t)
      position:copy_from(position:add(column))
    end
  end
end

--- The gradients of the programs' consts (raw) as the checkpoint names and lays them out:
--- each in its weight's checkpoint shape (programs hold [out, in, 1, 1] consts, or the
--- device's [1, out, 1, in] with weights_as_inputs).
function Methods:checkpoint_gradients(raw)
  local grads = {}
  for l = 1, self.n_layer do
    local weights = self.weights.layers[l]
    for _, group in ipairs({ "attn", "ffn" }) do
      for _, role in ipairs(self.roles[group]) do
        local grad, shape = raw.layers[l][M.const_name(role)], weights[role]:shape() -- shape: [out, in] or [n]
        grad = grad:reshape(table.unpack(shape))
        if self.naming.transposed and self.naming.transposed[role] then grad = grad:transpose():copy() end -- [in, out]
        grads[self:checkpoint_name(role, l - 1)] = grad
      end
    end
  end
  for _, role in ipairs(self.roles.norm) do
    grads[self:checkpoint_name(role)] = raw.norm[M.const_name(role)]:reshape(self.width)
  end
  if self.shared_classifier then
    grads[self:checkpoint_name("token_embedding")] =
        rawequal(raw.embedding, raw.classifier) and raw.embedding or raw.embedding:add(raw.classifier)
  else
    grads[self:checkpoint_name("token_embedding")], grads[self:checkpoint_name("classifier")] = raw.embedding, raw.classifier
  end
  if raw.positions then grads[self:checkpoint_name("position_embedding")] = raw.positions end
  return grads
end

--- Copies the shared methods into a model's method table: the block's here, the program
--- cache, generation and training of ane.models.decoder, LoRA of ane.models.lora.
function M.mixin(methods)
  decoder.mixin(methods)
  decoder.add_methods(methods, Methods, "ane.models.transformer")
  decoder.add_methods(methods, require("ane.models.lora").methods, "ane.models.lora")
  return methods
end

return M

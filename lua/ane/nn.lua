-- ane.nn: composite layers built from the graph primitives, in the forms the ANE accepts.
--
-- Activations are [1, C, 1, S] (channels, sequence); linear weights are [out, in, 1, 1]
-- conv weights; per-head tensors are [1, H, S, D]. Every function takes the graph first,
-- then nodes, and an optional options table whose `name` prefixes the nodes it creates.
-- Weights may be given as tensors (they become consts named `<name>_weight` ...) or as
-- nodes (inputs, for weights that change without recompiling).
local ane = require("ane")

local nn = {}

local function prefixed(opts, suffix)
  local base = opts and opts.name
  return base and (base .. "_" .. suffix) or nil
end

-- A node for `value`: nodes pass through, tensors become consts.
local function as_node(g, value, name)
  if ane.tensor.is(value) or ane.quantized.is(value) then return g:const(name, value) end
  return value
end

local function channels(node) return node:shape()[2] end

--- y = W x + b as a 1x1 conv plus a separate add (the device takes no conv bias, ANE-13).
--- weight: [out, in, 1, 1] (or [out, in], reshaped), a tensor or a quantized weight
--- (ane.quantize: the program carries it compressed); bias: [out] or nil.
function nn.linear(g, x, weight, bias, opts)
  if (ane.tensor.is(weight) or ane.quantized.is(weight)) and #weight:shape() == 2 then
    local shape = weight:shape()
    weight = weight:reshape(shape[1], shape[2], 1, 1)
  end
  local w = as_node(g, weight, prefixed(opts, "weight"))
  local y = g:conv(x, w, { name = bias == nil and opts and opts.name or prefixed(opts, "conv") })
  if bias == nil then return y end
  if ane.tensor.is(bias) then bias = bias:reshape(1, bias:numel(), 1, 1) end
  return g:add(y, as_node(g, bias, prefixed(opts, "bias")), { name = opts and opts.name })
end

--- Mean over the channel axis without overflow: sum(x * (1/N)).
local function channel_mean(g, x, opts, suffix)
  local n = channels(x)
  local scaled = g:mul(x, 1 / n, { name = prefixed(opts, suffix .. "_scaled") })
  return g:reduce_sum(scaled, { 1 }, { keep_dims = true, name = prefixed(opts, suffix) })
end

--- Mean of squares over channels, scaled before squaring so fp16 does not overflow:
--- sum((x / sqrt(N))^2) instead of sum(x^2) / N (see docs/reference/numerics.md).
--- (axis: the 0-based axis to reduce, 1 = channels by default.)
local function channel_mean_square(g, x, opts, suffix, axis)
  axis = axis or 1
  local n = x:shape()[axis + 1]
  local scaled = g:mul(x, 1 / math.sqrt(n), { name = prefixed(opts, suffix .. "_scaled") })
  local squared = g:mul(scaled, scaled, { name = prefixed(opts, suffix .. "_squared") })
  return g:reduce_sum(squared, { axis }, { keep_dims = true, name = prefixed(opts, suffix) })
end

--- A weight vector broadcast along `axis` (0-based, default 1: [1, C, 1, 1]).
local function per_channel(g, value, name, axis)
  if ane.tensor.is(value) then
    local shape = { 1, 1, 1, 1 }
    shape[(axis or 1) + 1] = value:numel()
    value = value:reshape(table.unpack(shape))
  end
  return as_node(g, value, name)
end

--- LayerNorm over channels: (x - mean) / sqrt(var + eps) * gamma + beta.
--- opts.eps defaults to 1e-5 (eps below ~1e-7 underflows in fp16).
function nn.layer_norm(g, x, gamma, beta, opts)
  local eps = opts and opts.eps or 1e-5
  local mean = channel_mean(g, x, opts, "mean")
  local centered = g:sub(x, mean, { name = prefixed(opts, "centered") })
  local variance = channel_mean_square(g, centered, opts, "variance")
  local shifted = g:add(variance, eps, { name = prefixed(opts, "variance_eps") })
  local inv_std = g:pow(shifted, -0.5, { name = prefixed(opts, "inv_std") })
  local normalized = g:mul(centered, inv_std, { name = prefixed(opts, "normalized") })
  local scaled = g:mul(normalized, per_channel(g, gamma, prefixed(opts, "gamma")), { name = prefixed(opts, "scaled") })
  if beta == nil then return scaled end
  return g:add(scaled, per_channel(g, beta, prefixed(opts, "beta")), { name = opts and opts.name })
end

--- RMSNorm over channels: x / sqrt(mean(x^2) + eps) * weight. opts.axis normalizes another
--- (0-based) axis instead, e.g. 3 for the per-head q/k norms on [1, H, S, D].
function nn.rms_norm(g, x, weight, opts)
  local eps = opts and opts.eps or 1e-5
  local axis = opts and opts.axis or 1
  local mean_square = channel_mean_square(g, x, opts, "mean_square", axis)
  local shifted = g:add(mean_square, eps, { name = prefixed(opts, "mean_square_eps") })
  local inv_rms = g:pow(shifted, -0.5, { name = prefixed(opts, "inv_rms") })
  local normalized = g:mul(x, inv_rms, { name = prefixed(opts, "normalized") })
  return g:mul(normalized, per_channel(g, weight, prefixed(opts, "weight"), axis), { name = opts and opts.name })
end

--- GELU, tanh form (gelu is not an ANE op, ANE-10):
--- 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
function nn.gelu(g, x, opts)
  local squared = g:mul(x, x, { name = prefixed(opts, "squared") })
  local cubed = g:mul(squared, x, { name = prefixed(opts, "cubed") })
  local inner = g:add(x, g:mul(cubed, 0.044715, { name = prefixed(opts, "cubic_term") }), { name = prefixed(opts, "inner") })
  local t = g:tanh(g:mul(inner, math.sqrt(2 / math.pi), { name = prefixed(opts, "tanh_arg") }), { name = prefixed(opts, "tanh") })
  local gate = g:mul(g:add(t, 1, { name = prefixed(opts, "one_plus") }), 0.5, { name = prefixed(opts, "gate") })
  return g:mul(x, gate, { name = opts and opts.name })
end

--- SiLU: x * sigmoid(x).
function nn.silu(g, x, opts)
  return g:mul(x, g:sigmoid(x, { name = prefixed(opts, "sigmoid") }), { name = opts and opts.name })
end

--- A gated feed-forward: down(act(gate(x)) * up(x)), weights [hidden, dim] / [dim, hidden];
--- opts.activation "silu" (SwiGLU, the default) or "gelu" (GeGLU, GELU's tanh form: Gemma 3);
--- opts.biases = {gate =, up =, down =} (each optional).
function nn.gated_ffn(g, x, w_gate, w_up, w_down, opts)
  local biases = opts and opts.biases or {}
  local activation = opts and opts.activation or "silu"
  local gate = nn.linear(g, x, w_gate, biases.gate, { name = prefixed(opts, "gate") })
  local up = nn.linear(g, x, w_up, biases.up, { name = prefixed(opts, "up") })
  local activated = activation == "gelu" and nn.gelu(g, gate, { name = prefixed(opts, "gate_gelu") })
    or nn.silu(g, gate, { name = prefixed(opts, "gate_silu") })
  local hidden = g:mul(activated, up, { name = prefixed(opts, "hidden") })
  return nn.linear(g, hidden, w_down, biases.down, { name = prefixed(opts, "down") })
end

--- SwiGLU feed-forward: down(silu(gate(x)) * up(x)) (nn.gated_ffn's default).
function nn.swiglu(g, x, w_gate, w_up, w_down, opts) return nn.gated_ffn(g, x, w_gate, w_up, w_down, opts) end

--- [1, C, 1, S] -> [1, H, S, D] (D = C / H) by reshape + transpose.
function nn.split_heads(g, x, heads, opts)
  local shape = x:shape()
  local c, s = shape[2], shape[4]
  assert(c % heads == 0, "split_heads: channels must divide by heads")
  local grouped = g:reshape(x, { 1, heads, c // heads, s }, { name = prefixed(opts, "grouped") })
  return g:transpose(grouped, { 0, 1, 3, 2 }, { name = opts and opts.name })
end

--- [1, H, S, D] -> [1, C, 1, S], the inverse of split_heads.
function nn.merge_heads(g, x, opts)
  local shape = x:shape()
  local h, s, d = shape[2], shape[3], shape[4]
  local grouped = g:transpose(x, { 0, 1, 3, 2 }, { name = prefixed(opts, "grouped") })
  return g:reshape(grouped, { 1, h * d, 1, s }, { name = opts and opts.name })
end

--- The rotary frequencies of a head of `dim` elements: inv[i] = theta^(-2i / dim) for the
--- dim / 2 pairs, rescaled as a Hugging Face `rope_scaling` says (nil: none):
---   { type = "linear", factor = f }: every frequency / f (positions interpolated);
---   { type = "llama3", factor = f, low_freq_factor = lo, high_freq_factor = hi,
---     original_max_position_embeddings = n }: wavelengths 2 pi / inv longer than n / lo divided
---     by f, shorter than n / hi kept, those between interpolated with s = (n / wavelength - lo)
---     / (hi - lo) as (1 - s) inv / f + s inv (Llama 3.1's, as transformers' modeling_rope_utils
---     computes it);
---   { type = "longrope", short_factor = {...} }: frequency i / short_factor[i] (Phi-3's LongRoPE within
---     its original context; rope_tables scales cos and sin by scaling.attention_factor);
---   { type = "factors", factors = {...} }: frequency i / factors[i] (a GGUF file's rope_freqs).
function nn.rope_frequencies(dim, theta, scaling)
  local inv = {}
  for i = 0, dim // 2 - 1 do inv[i + 1] = theta ^ (-2 * i / dim) end
  if scaling == nil then return inv end
  local factor = scaling.factor
  if scaling.type == "linear" then
    for i = 1, #inv do inv[i] = inv[i] / factor end
  elseif scaling.type == "longrope" or scaling.type == "factors" then -- each frequency / its own factor
    local factors = scaling.short_factor or scaling.factors -- (Phi-3 within its original context: the short ones)
    for i = 1, #inv do inv[i] = inv[i] / factors[i] end
  elseif scaling.type == "llama3" then
    local n, lo, hi = scaling.original_max_position_embeddings, scaling.low_freq_factor, scaling.high_freq_factor
    for i = 1, #inv do
      local wavelength = 2 * math.pi / inv[i]
      if wavelength > n / lo then
        inv[i] = inv[i] / factor
      elseif wavelength >= n / hi then
        local smooth = (n / wavelength - lo) / (hi - lo)
        inv[i] = (1 - smooth) * inv[i] / factor + smooth * inv[i]
      end
    end
  else
    error("nn.rope_frequencies: scaling type '" .. tostring(scaling.type) .. "' is not linear, llama3, longrope or factors", 2)
  end
  return inv
end

--- Rotary embedding tables for positions offset .. offset + seq - 1: cos and sin tensors of
--- shape [seq, dim], laid out for the convention: "interleaved" (pairs (0,1), (2,3), ... as
--- in llama2.c) or "half" (pairs (i, i + dim/2), rotate-half as in Hugging Face). opts: theta,
--- offset, convention, dtype, scaling (nn.rope_frequencies; LongRoPE's attention_factor scales cos
--- and sin).
function nn.rope_tables(seq, dim, opts)
  opts = opts or {}
  local offset = opts.offset or 0
  local convention = opts.convention or "interleaved"
  local inv = nn.rope_frequencies(dim, opts.theta or 10000, opts.scaling)
  local scale = opts.scaling and opts.scaling.attention_factor or 1
  local cos, sin = {}, {}
  for s = 0, seq - 1 do
    for j = 0, dim - 1 do
      local pair = convention == "interleaved" and j // 2 or j % (dim // 2)
      local angle = (s + offset) * inv[pair + 1]
      cos[#cos + 1], sin[#sin + 1] = scale * math.cos(angle), scale * math.sin(angle)
    end
  end
  local dtype = opts.dtype or "fp16"
  return ane.tensor.from(cos, { seq, dim }, dtype), ane.tensor.from(sin, { seq, dim }, dtype)
end

--- The [dim, dim] matrix R with x R = the "rotated" partner of every element:
--- interleaved: (x0, x1) -> (-x1, x0); half: (a, b) -> (-b, a).
function nn.rope_rotation(dim, convention, dtype)
  local r = ane.tensor({ dim, dim }, "fp32")
  for j = 0, dim - 1 do
    local partner, sign
    if convention == "half" then
      local half = dim // 2
      if j < half then partner, sign = j + half, -1 else partner, sign = j - half, 1 end
    else
      if j % 2 == 0 then partner, sign = j + 1, -1 else partner, sign = j - 1, 1 end
    end
    -- out[j] = sign * x[partner]  =>  R[partner, j] = sign
    r:set(sign, partner + 1, j + 1)
  end
  return r:to(dtype or "fp16")
end

--- Rotary embedding of x [1, H, S, D]: x * cos + (x R) * sin, with cos/sin [S, D] (nodes or
--- tensors) and R from nn.rope_rotation (a matmul, since the device has no concat, ANE-01).
function nn.rope(g, x, cos, sin, opts)
  local d = x:shape()[4]
  local convention = opts and opts.convention or "interleaved"
  local rotation = as_node(g, nn.rope_rotation(d, convention, x:dtype()), prefixed(opts, "rotation"))
  local rotated = g:matmul(x, rotation, { name = prefixed(opts, "rotated") })
  local a = g:mul(x, as_node(g, cos, prefixed(opts, "cos")), { name = prefixed(opts, "x_cos") })
  local b = g:mul(rotated, as_node(g, sin, prefixed(opts, "sin")), { name = prefixed(opts, "rotated_sin") })
  return g:add(a, b, { name = opts and opts.name })
end

--- An additive causal mask [S, S]: 0 on and below the diagonal, mask_value above. With
--- `group` (default 1) it is [group * S, S]: the rows of `group` query heads sharing one kv
--- head stacked (grouped-query attention, nn.group_heads), row r for position r % S. With
--- `window` (sliding-window attention) a row sees only the last `window` keys up to its own.
function nn.causal_mask(seq, mask_value, dtype, group, window)
  dtype = dtype or "fp16"
  local zero = ane.tensor({ 1 }, dtype):bytes()
  local masked = ane.tensor.from({ mask_value }, { 1 }, dtype):bytes()
  local rows = {}
  for i = 1, seq do -- row i: keys 1..i visible, or the last `window` of them
    local hidden = window and math.max(0, i - window) or 0
    rows[i] = masked:rep(hidden) .. zero:rep(i - hidden) .. masked:rep(seq - i)
  end
  local block = table.concat(rows)
  return ane.tensor.from_bytes(block:rep(group or 1), { (group or 1) * seq, seq }, dtype)
end

--- Grouped-query attention without repeating keys: q heads [1, H, S, D] as [1, KV, group * S, D]
--- (H = KV * group; query head h = kv * group + j reads kv head kv, as Hugging Face repeats
--- them), so each kv head's keys and values [1, KV, ., D] multiply its group's queries in one
--- batched product. A reshape: the heads' memory order is already kv-major. Returns q when
--- group is 1.
function nn.group_heads(g, q, kv_heads, opts)
  local shape = q:shape()
  if shape[2] == kv_heads then return q end
  return g:reshape(q, { 1, kv_heads, shape[2] // kv_heads * shape[3], shape[4] }, { name = opts and opts.name })
end

--- The inverse of nn.group_heads: [1, KV, group * S, D] -> [1, H, S, D].
function nn.ungroup_heads(g, x, heads, opts)
  local shape = x:shape()
  if shape[2] == heads then return x end
  return g:reshape(x, { 1, heads, shape[3] * shape[2] // heads, shape[4] }, { name = opts and opts.name })
end

--- Causal attention on q, k, v [1, H, S, D] (or q [1, KV, group * S, D] against KV heads of
--- k and v: nn.group_heads), decomposed as the device needs it (its
--- scaled_dot_product_attention ignores masks, ANE-06): scale q -> matmul -> additive mask
--- const -> softmax -> matmul. opts.mask_value defaults to -65504; opts.scale to 1/sqrt(D);
--- opts.window limits each query to the last `window` keys (nn.causal_mask); opts.softcap caps
--- the scaled scores before the mask (nn.softcap).
--- The scale multiplies q ([S, D]) rather than the scores ([S, S]): S/D times fewer
--- multiplies, and for D = 64 the scale 1/8 is exact, so nothing rounds differently.
--- opts.clip = L saturates the masked scores to [-L, L] before the softmax (fp16 models pass
--- 65504: an overflow to +-inf then stays finite instead of turning the softmax into NaN).
--- Soft-capping (Gemma 2's, and Gemma 3's when its config sets it): cap * tanh(x / cap).
function nn.softcap(g, x, cap, opts)
  local squashed = g:tanh(g:mul(x, 1 / cap, { name = prefixed(opts, "over_cap") }), { name = prefixed(opts, "tanh") })
  return g:mul(squashed, cap, { name = opts and opts.name })
end

function nn.causal_attention(g, q, k, v, opts)
  local shape = q:shape()
  local s, d = k:shape()[3], shape[4] -- q may hold a group of heads' rows per kv head (nn.group_heads)
  local mask_value = opts and opts.mask_value or -65504
  local q_scaled = g:mul(q, opts and opts.scale or 1 / math.sqrt(d), { name = prefixed(opts, "q_scaled") })
  local scaled = g:matmul(q_scaled, k, { transpose_y = true, name = prefixed(opts, "scores") })
  if opts and opts.softcap then scaled = nn.softcap(g, scaled, opts.softcap, { name = prefixed(opts, "capped") }) end
  local mask = g:const(prefixed(opts, "mask"), nn.causal_mask(s, mask_value, q:dtype(), shape[3] // s, opts and opts.window))
  local masked = g:add(scaled, mask, { name = prefixed(opts, "masked") })
  if opts and opts.clip then masked = g:clip(masked, -opts.clip, opts.clip, { name = prefixed(opts, "clipped") }) end
  local probs = g:softmax(masked, -1, { name = prefixed(opts, "probs") })
  return g:matmul(probs, v, { name = opts and opts.name })
end

--- Attention of a decoded block of W positions over a KV cache and over itself, in one
--- softmax whose two halves are never concatenated (the device has no concat, ANE-01): a
--- shared peak and a summed denominator combine them. q [1, H, W, D]; k_cache and v_cache
--- [1, H, D, Smax] (the cache's [1, H * D, 1, Smax] reshaped); mask [1, 1, 1, Smax] (0 where
--- the cache is filled, mask_value elsewhere); own_k and own_v the block's keys and values,
--- [1, H, W, D], or [1, H, D, W] with opts.own_layout = "DW". The block is causal inside.
--- opts.scale (1/sqrt(D)), opts.mask_value (-65504), opts.clip (saturate the scores to
--- [-clip, clip], as in causal_attention), opts.softcap (as there). Returns [1, H, W, D]. For grouped-query
--- attention q is [1, KV, group * W, D] (nn.group_heads) against KV heads of keys and values.
function nn.cached_attention(g, q, k_cache, v_cache, mask, own_k, own_v, opts)
  opts = opts or {}
  local shape = q:shape()
  local D = shape[4]
  local scale = opts.scale or 1 / math.sqrt(D)
  local by_rows = opts.own_layout ~= "DW" -- own keys [W, D]: multiplied transposed
  local W = by_rows and own_k:shape()[3] or own_k:shape()[4] -- q's rows: W, or a group's W each (nn.group_heads)
  local function clipped(scores, name)
    if not opts.clip then return scores end
    return g:clip(scores, -opts.clip, opts.clip, { name = name })
  end
  local function capped(scores, name)
    if not opts.softcap then return scores end
    return nn.softcap(g, scores, opts.softcap, { name = name })
  end
  local cached = clipped(g:add(capped(g:mul(g:matmul(q, k_cache, { name = prefixed(opts, "cached_scores") }), scale),
    prefixed(opts, "cached_capped")), mask, { name = prefixed(opts, "cached_masked") }), prefixed(opts, "cached_clipped"))
  local own_mask = g:const(prefixed(opts, "own_mask"), nn.causal_mask(W, opts.mask_value or -65504, q:dtype(), shape[3] // W))
  local own = clipped(g:add(capped(g:mul(g:matmul(q, own_k, { transpose_y = by_rows, name = prefixed(opts, "own_scores") }),
    scale), prefixed(opts, "own_capped")), own_mask, { name = prefixed(opts, "own_masked") }), prefixed(opts, "own_clipped"))
  local peak = g:maximum(g:reduce_max(cached, { 3 }, { keep_dims = true }), g:reduce_max(own, { 3 }, { keep_dims = true }),
    { name = prefixed(opts, "peak") })
  local e_cached = g:exp(g:sub(cached, peak), { name = prefixed(opts, "e_cached") })
  local e_own = g:exp(g:sub(own, peak), { name = prefixed(opts, "e_own") })
  local total = g:add(g:reduce_sum(e_cached, { 3 }, { keep_dims = true }), g:reduce_sum(e_own, { 3 }, { keep_dims = true }),
    { name = prefixed(opts, "total") })
  local weighted = g:add(g:matmul(e_cached, v_cache, { transpose_y = true }),
    g:matmul(e_own, own_v, { transpose_y = not by_rows }), { name = prefixed(opts, "weighted") })
  return g:real_div(weighted, total, { name = opts.name })
end

--- The LoRA update (alpha / r) * B (A x) of a linear layer with `cout` outputs, with the
--- adapters as graph inputs, so they can change without recompiling: a [1, r, 1, in] (A) and
--- b_t [1, r, 1, out] (B transposed, so both are at least 32 wide, ANE-21). x [1, in, 1, S];
--- returns [1, out, 1, S].
function nn.lora_delta(g, x, a, b_t, cout, alpha, opts)
  local shape = x:shape()
  local cin, s = shape[2], shape[4]
  local r = a:shape()[2]
  local x2 = g:reshape(x, { cin, s }, { name = prefixed(opts, "x2d") })
  local a2 = g:reshape(a, { r, cin }, { name = prefixed(opts, "a2d") })
  local b2 = g:reshape(b_t, { r, cout }, { name = prefixed(opts, "b2d") })
  local down = g:matmul(a2, x2, { name = prefixed(opts, "down") })                       -- [r, S]
  local up = g:matmul(b2, down, { transpose_x = true, name = prefixed(opts, "up") })     -- [out, S]
  local scaled = g:mul(up, (alpha or r) / r, { name = prefixed(opts, "scaled") })
  return g:reshape(scaled, { 1, cout, 1, s }, { name = prefixed(opts, "delta") })
end

--- LoRA linear: y = W x + nn.lora_delta(...), W [out, in, 1, 1]; opts.alpha (default r).
function nn.lora_linear(g, x, weight, a, b_t, opts)
  local base = nn.linear(g, x, weight, nil, { name = prefixed(opts, "base") })
  local delta = nn.lora_delta(g, x, a, b_t, base:shape()[2], opts and opts.alpha, opts)
  return g:add(base, delta, { name = opts and opts.name })
end

return nn

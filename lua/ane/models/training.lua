-- ane.models.training: the loss of the decoder models and its gradients: forward programs
-- that also output their saved activations, the classifier and cross-entropy on the CPU
-- over the whole batch, and the backward programs ane.grad derives, layer by layer in
-- reverse (see the hooks ane.models.decoder lists for training).
local ane = require("ane")
local decoder = require("ane.models.decoder") -- classifier_logits
local LORA_INPUTS = require("ane.models.lora").INPUTS

local M = { methods = {} }
local Methods = M.methods

-- The backward program's inputs from a training forward's outputs: `inputs` plus each
-- saved activation under its node name.
local function saved_inputs(names, outputs, inputs)
  for _, name in ipairs(names) do inputs[name] = outputs[name] end
  return inputs
end

-- Sums gradients. Program outputs are fresh tensors, so the first contribution is kept as
-- it comes (an fp16 one too: AdamW and the norm read fp16 gradients directly); a second one
-- is added into it in place (into an fp32 copy first when the first is fp16).
local function accumulate(into, name, value)
  if into[name] then
    local sum = into[name]
    if sum:dtype() ~= "fp32" or sum:is_readonly() then sum = sum:to("fp32") end
    into[name] = sum:add_from(value) -- in place: no new [out, in] tensor per sequence
  else
    into[name] = value
  end
end

-- The width at which the batch's FFN programs run side by side: B x S when there are
-- several sequences, all in the same bucket S, and B x S is a bucket of its own (no padding
-- beyond the sequences' own); else nil.
local function side_by_side_width(self, runs)
  if #runs < 2 then return nil end
  local S = runs[1].S
  for _, run in ipairs(runs) do
    if run.S ~= S then return nil end
  end
  local width = #runs * S
  return self:bucket(width, self.context_length) == width and width or nil
end

-- Sequences' [1, C, 1, S] tensors side by side along positions: [1, C, 1, width].
local function side_by_side(tensors, C, width)
  local wide = ane.tensor({ 1, C, 1, width }, tensors[1]:dtype())
  local at = 1
  for _, t in ipairs(tensors) do
    local S = t:shape()[4]
    wide:slice(4, at, at + S - 1):copy_from(t)
    at = at + S
  end
  return wide
end

-- Sequence b's positions of a side-by-side tensor (a view).
local function sequence_of(wide, b, S) return wide:slice(4, (b - 1) * S + 1, b * S) end

--- loss(ids, targets) -> mean cross-entropy over all positions and the gradient of every
--- checkpoint tensor (named and laid out by self:checkpoint_gradients). ids/targets: one
--- sequence or an array of them. Forward and backward run as programs (the backward ones
--- derived by ane.grad, with this model's current weights); embeddings, the classifier and
--- the cross-entropy run on the CPU, over the whole batch at once (one wide product instead
--- of one per sequence). opts.loss_scale multiplies the gradient that enters the backward
--- programs (against fp16 underflow); the returned gradients carry it (divide by it before
--- use), the returned loss does not. The batch's saved activations are kept until its
--- backward: memory grows with the batch (accumulate micro-batches for large ones).
--- Sequences of one bucket run their FFN programs side by side (B x S positions at once).
function Methods:loss(ids, targets, opts)
  if type(ids) ~= "table" or type(targets) ~= "table" or #ids == 0 or #ids ~= #targets then
    error("loss: ids and targets must be arrays of the same length", 2)
  end
  local batch = type(ids[1]) == "table" and ids or { ids }
  local batch_targets = type(ids[1]) == "table" and targets or { targets }
  local C, total = self.width, 0
  local all_targets = {}
  for b, seq in ipairs(batch) do
    if #batch_targets[b] ~= #seq then error("loss: targets of sequence " .. b .. " do not match its length", 2) end
    self:check_ids(seq, self.vocab_size, self.context_length, 2)
    for _, target in ipairs(batch_targets[b]) do all_targets[#all_targets + 1] = target end
    total = total + #seq
  end
  -- raw gradients by program const: layers[l][const], norm[const], classifier [V, C]
  local raw = { layers = {}, norm = {}, adapters = {} }
  for l = 1, self.n_layer do raw.layers[l] = {} end

  -- Forward, layer by layer: attention sequence by sequence (positions attend within their
  -- own sequence), the FFN over the whole batch side by side when the sequences share a
  -- bucket (it is position-wise: one product with B x S columns instead of B thin ones);
  -- per layer the backward programs' inputs (x and the saved activations).
  local forward_start, compiling = ane.clock(), self.counters.compile_seconds
  local runs, columns, first = {}, ane.tensor({ C, total }), 1
  for b, seq in ipairs(batch) do
    local T = #seq
    local S = self:bucket(T, self.context_length)
    runs[b] = { T = T, S = S, first = first, x = self:embed_sequence(seq, S), attention = {}, ffn = {} }
    first = first + T
  end
  local wide = side_by_side_width(self, runs) -- nil: the FFN runs per sequence
  local ffn_saved = {} -- [l]: the batch's FFN inputs for its backward (wide only)
  for l = 1, self.n_layer do
    local ys = {}
    for b, run in ipairs(runs) do
      local attention = self:eval(self:program("attn_prefill_train", l, run.S), "attn", l, { x = run.x })
      run.attention[l] = saved_inputs(self.saved.attn_prefill, attention, { x = run.x })
      ys[b] = attention.y
    end
    if wide then
      local x = side_by_side(ys, C, wide)
      local ffn = self:eval(self:program("ffn_train", l, wide), "ffn", l, { x = x })
      ffn_saved[l] = saved_inputs(self.saved.ffn, ffn, { x = x })
      for b, run in ipairs(runs) do run.x = sequence_of(ffn.y, b, run.S) end
    else
      for b, run in ipairs(runs) do
        local ffn = self:eval(self:program("ffn_train", l, run.S), "ffn", l, { x = ys[b] })
        run.ffn[l] = saved_inputs(self.saved.ffn, ffn, { x = ys[b] })
        run.x = ffn.y
      end
    end
  end
  for _, run in ipairs(runs) do
    local h = self:eval(self:program("norm", nil, run.S), "norm", 0, { x = run.x }).y
    columns:slice(2, run.first, run.first + run.T - 1):copy_from(h:slice(4, 1, run.T):reshape(C, run.T))
  end
  local logits = decoder.classifier_logits(self.P.classifier, columns)                       -- [total, V]
  local cap = self.arch and self.arch.final_softcap
  if cap then logits = decoder.softcap(logits, cap) end
  local mean, dlogits = ane.tensor.cross_entropy(logits, all_targets, (opts and opts.loss_scale or 1) / total)
  if cap then dlogits = decoder.softcap_backward(dlogits, logits, cap) end
  logits = nil -- [total, V]: freed before the backward
  self.counters.loss_forward_seconds = self.counters.loss_forward_seconds +
      self:elapsed_without_compiling(forward_start, compiling)

  -- Backward: the classifier for the whole batch, each sequence's final norm, then the
  -- layers in reverse, each as the forward ran it.
  local backward_start, compiling_then = ane.clock(), self.counters.compile_seconds
  if not self.lora then accumulate(raw, "classifier", dlogits:transpose():matmul(columns:transpose())) end -- [V, C]
  local grad_columns = dlogits:matmul(self.P.classifier)                                -- [total, C]
  local dxs = {}
  for b, run in ipairs(runs) do
    local T, S = run.T, run.S
    local grad_h = ane.tensor({ 1, C, 1, S }, self.dtype)
    grad_h:slice(4, 1, T):copy_from(grad_columns:slice(1, run.first, run.first + T - 1):transpose():reshape(1, C, 1, T))
    local r = self:eval_unclamped(self:program("norm_grad", nil, S), "norm", 0, { x = run.x, grad_y = grad_h })
    if not self.lora then
      for _, const in ipairs(self.weight_consts.norm) do accumulate(raw.norm, const, r["grad_" .. const]) end
    end
    dxs[b] = r.grad_x
    run.zeros = ane.tensor({ 1, self.cache_width, 1, S }, self.dtype) -- cotangents of the unused k, v outputs
  end
  for l = self.n_layer, 1, -1 do
    local grads_x = {} -- d loss / d (attention output), per sequence
    local function ffn_backward(inputs, grad_y, S)
      inputs.grad_y = grad_y
      local f = self:eval_unclamped(self:program("ffn_grad", l, S), "ffn", l, inputs)
      if not self.lora then
        for _, const in ipairs(self.weight_consts.ffn) do accumulate(raw.layers[l], const, f["grad_" .. const]) end
      end
      return f.grad_x
    end
    if wide then
      local grad_x = ffn_backward(ffn_saved[l], side_by_side(dxs, C, wide), wide)
      for b, run in ipairs(runs) do grads_x[b] = sequence_of(grad_x, b, run.S) end
      ffn_saved[l] = nil
    else
      for b, run in ipairs(runs) do grads_x[b] = ffn_backward(run.ffn[l], dxs[b], run.S) end
    end
    for b, run in ipairs(runs) do
      local inputs = run.attention[l]
      inputs.grad_y, inputs.grad_k, inputs.grad_v = grads_x[b], run.zeros, run.zeros
      local a = self:eval_unclamped(self:program("attn_prefill_grad", l, run.S), "attn", l, inputs)
      if self.lora then
        for _, name in ipairs(LORA_INPUTS) do accumulate(raw.adapters, name .. "." .. (l - 1), a["grad_" .. name]) end
      else
        for _, const in ipairs(self.weight_consts.attn_prefill) do accumulate(raw.layers[l], const, a["grad_" .. const]) end
      end
      run.ffn[l], run.attention[l] = nil, nil -- this layer's saved activations are done with
      dxs[b] = a.grad_x
    end
  end
  if not self.lora then
    for b, run in ipairs(runs) do
      self:embedding_gradients(batch[b], dxs[b]:slice(4, 1, run.T):reshape(C, run.T):transpose():to("fp32"), raw)
    end
  end
  self.counters.loss_backward_seconds = self.counters.loss_backward_seconds +
      self:elapsed_without_compiling(backward_start, compiling_then)
  return mean, self.lora and raw.adapters or self:checkpoint_gradients(raw)
end

return M

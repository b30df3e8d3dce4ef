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
-- makes an fp32 sum.
local function accumulate(into, name, value)
  if into[name] then
    local sum = into[name]
    if sum:dtype() ~= "fp32" or sum:is_readonly() then sum = sum:to("fp32") end
    into[name] = sum:add_from(value) -- in place: no new [out, in] tensor per sequence
  else
    into[name] = value
  end
end

--- loss(ids, targets) -> mean cross-entropy over all positions and the gradient of every
--- checkpoint tensor (named and laid out by self:checkpoint_gradients). ids/targets: one
--- sequence or an array of them. Forward and backward run as programs (the backward ones
--- derived by ane.grad, with this model's current weights); embeddings, the classifier and
--- the cross-entropy run on the CPU, over the whole batch at once (one wide product instead
--- of one per sequence). opts.loss_scale multiplies the gradient that enters the backward
--- programs (against fp16 underflow); the returned gradients carry it (divide by it before
--- use), the returned loss does not. The batch's saved activations are kept until its
--- backward: memory grows with the batch (accumulate micro-batches for large ones).
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

  -- Forward, sequence by sequence: per layer the backward programs' inputs (x and the saved
  -- activations); the final norm's outputs side by side in columns [C, total].
  local forward_start, compiling = ane.clock(), self.counters.compile_seconds
  local runs, columns, first = {}, ane.tensor({ C, total }), 1
  for b, seq in ipairs(batch) do
    local T = #seq
    local S = self:bucket(T, self.context_length)
    local x = self:embed_sequence(seq, S)
    local run = { T = T, S = S, first = first, attention = {}, ffn = {} }
    for l = 1, self.n_layer do
      local attention = self:eval(self:program("attn_prefill_train", l, S), "attn", l, { x = x })
      run.attention[l] = saved_inputs(self.saved.attn_prefill, attention, { x = x })
      local ffn = self:eval(self:program("ffn_train", l, S), "ffn", l, { x = attention.y })
      run.ffn[l] = saved_inputs(self.saved.ffn, ffn, { x = attention.y })
      x = ffn.y
    end
    run.x = x
    local h = self:eval(self:program("norm", nil, S), "norm", 0, { x = x }).y
    columns:slice(2, first, first + T - 1):copy_from(h:slice(4, 1, T):reshape(C, T))
    runs[b], first = run, first + T
  end
  local logits = decoder.classifier_logits(self.P.classifier, columns)                       -- [total, V]
  local mean, dlogits = ane.tensor.cross_entropy(logits, all_targets, (opts and opts.loss_scale or 1) / total)
  logits = nil -- [total, V]: freed before the backward
  self.counters.loss_forward_seconds = self.counters.loss_forward_seconds +
      self:elapsed_without_compiling(forward_start, compiling)

  -- Backward: the classifier for the whole batch, then each sequence's programs.
  local backward_start, compiling_then = ane.clock(), self.counters.compile_seconds
  if not self.lora then accumulate(raw, "classifier", dlogits:transpose():matmul(columns:transpose())) end -- [V, C]
  local grad_columns = dlogits:matmul(self.P.classifier)                                -- [total, C]
  for b, run in ipairs(runs) do
    local T, S = run.T, run.S
    local grad_h = ane.tensor({ 1, C, 1, S }, self.dtype)
    grad_h:slice(4, 1, T):copy_from(grad_columns:slice(1, run.first, run.first + T - 1):transpose():reshape(1, C, 1, T))
    local r = self:eval_unclamped(self:program("norm_grad", nil, S), "norm", 0, { x = run.x, grad_y = grad_h })
    if not self.lora then
      for _, const in ipairs(self.weight_consts.norm) do accumulate(raw.norm, const, r["grad_" .. const]) end
    end
    local dx = r.grad_x
    local zeros = ane.tensor({ 1, self.cache_width, 1, S }, self.dtype) -- cotangents of the unused k, v outputs
    for l = self.n_layer, 1, -1 do
      local ffn_inputs, attention_inputs = run.ffn[l], run.attention[l]
      ffn_inputs.grad_y = dx
      local f = self:eval_unclamped(self:program("ffn_grad", l, S), "ffn", l, ffn_inputs)
      attention_inputs.grad_y, attention_inputs.grad_k, attention_inputs.grad_v = f.grad_x, zeros, zeros
      local a = self:eval_unclamped(self:program("attn_prefill_grad", l, S), "attn", l, attention_inputs)
      if self.lora then
        for _, name in ipairs(LORA_INPUTS) do accumulate(raw.adapters, name .. "." .. (l - 1), a["grad_" .. name]) end
      else
        for _, const in ipairs(self.weight_consts.ffn) do accumulate(raw.layers[l], const, f["grad_" .. const]) end
        for _, const in ipairs(self.weight_consts.attn_prefill) do accumulate(raw.layers[l], const, a["grad_" .. const]) end
      end
      run.ffn[l], run.attention[l] = nil, nil -- this layer's saved activations are done with
      dx = a.grad_x
    end
    if not self.lora then
      self:embedding_gradients(batch[b], dx:slice(4, 1, T):reshape(C, T):transpose():to("fp32"), raw)
    end
  end
  self.counters.loss_backward_seconds = self.counters.loss_backward_seconds +
      self:elapsed_without_compiling(backward_start, compiling_then)
  return mean, self.lora and raw.adapters or self:checkpoint_gradients(raw)
end

return M

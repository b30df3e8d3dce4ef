-- ane.optim: optimizers over named fp32 master weights on the CPU (C kernels in
-- ane_core/tensor/optim.c), global-norm clipping and a learning-rate schedule.
--
--   local opt = require("ane.optim").adamw(params, { lr = 1e-3, weight_decay = 0.1, clip = 1.0 })
--   local norm = opt:step(grads)          -- updates params in place; returns the gradient norm
local ane = require("ane")

local M = {}
local AdamW = {}
AdamW.__index = AdamW

--- params: name -> contiguous fp32 tensor (updated in place). opts: lr, beta1, beta2, eps,
--- weight_decay, clip (global norm; nil = none), schedule (function(step) -> lr).
function M.adamw(params, opts)
  opts = opts or {}
  local self = setmetatable({ params = params, opts = opts, steps = 0, m = {}, v = {} }, AdamW)
  for name, p in pairs(params) do
    if not ane.tensor.is(p) or p:dtype() ~= "fp32" or not p:is_contiguous() then
      error("adamw: parameter '" .. tostring(name) .. "' must be a contiguous fp32 tensor", 2)
    end
    self.m[name] = ane.tensor(p:shape())
    self.v[name] = ane.tensor(p:shape())
  end
  return self
end

--- One step with grads (name -> tensor, each parameter's shape), each multiplied by
--- grad_scale (default 1; unscaling after loss scaling costs no copy this way). Returns the
--- global norm of the (scaled) gradients before clipping and the learning rate used. Sanitizing before weights are
--- written: if any gradient holds NaN or Inf (the norm is not finite) nothing is updated,
--- the step is not counted, and the third result is true (skipped).
function AdamW:step(grads, grad_scale)
  local o = self.opts
  grad_scale = grad_scale or 1
  local sum = 0
  for name in pairs(self.params) do
    local g = grads[name]
    if not g then error("adamw: no gradient for parameter '" .. name .. "'", 2) end
    sum = sum + g:sum_of_squares()
  end
  local norm = math.sqrt(sum) * math.abs(grad_scale)
  if norm ~= norm or norm == math.huge then return norm, 0, true end
  self.steps = self.steps + 1
  local scale = ((o.clip and norm > o.clip) and o.clip / norm or 1) * grad_scale
  local lr = o.schedule and o.schedule(self.steps) or (o.lr or 1e-3)
  local settings = { lr = lr, beta1 = o.beta1 or 0.9, beta2 = o.beta2 or 0.999, eps = o.eps or 1e-8,
    weight_decay = o.weight_decay or 0, step = self.steps, grad_scale = scale }
  for name, p in pairs(self.params) do
    ane.tensor.adamw(p, grads[name], self.m[name], self.v[name], settings)
  end
  return norm, lr, false
end

--- Linear warmup over `warmup` steps, then cosine decay to min_lr at `total` steps.
function M.cosine_schedule(base_lr, warmup, total, min_lr)
  min_lr = min_lr or 0
  return function(step)
    if step <= warmup then return base_lr * step / math.max(1, warmup) end
    local progress = math.min(1, (step - warmup) / math.max(1, total - warmup))
    return min_lr + 0.5 * (base_lr - min_lr) * (1 + math.cos(math.pi * progress))
  end
end

return M

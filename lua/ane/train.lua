-- ane.train: the training loop of a decoder model (Llama or GPT-2): gradient accumulation,
-- AdamW with warmup + cosine schedule, the sanitize-before-write rule, weights written into
-- the loaded programs by patching (never by compiling), checkpoints with resume.
--
--   local trainer = require("ane.train").new(model, { lr = 1e-3, warmup = 10, steps = 100, accum = 1 })
--   local record = trainer:step(batches)      -- batches from ane.data.batches
--   trainer:save(dir, batches, { keep = 3 })   -- and later: trainer:restore(checkpoint.load(path), batches)
-- A record holds step, loss, lr, grad_norm, tokens, tokens_per_s, ms = {forward, backward,
-- optimizer, patch, total}, nonfinite (steps skipped because a gradient was NaN/Inf),
-- clamped and nans (program outputs clamped / NaNs zeroed in this step, see decoder.eval)
-- and compiles (the runtime's compile count after the step).
local ane = require("ane")
local optim = require("ane.optim")
local checkpoint = require("ane.checkpoint")

local M = {}
local Trainer = {}
Trainer.__index = Trainer

--- opts: lr, min_lr, warmup, steps (for the cosine schedule), weight_decay, clip, accum,
--- beta1, beta2, eps, loss_scale (dynamic loss scaling against fp16 underflow: the initial
--- scale, default 1024 for fp16 models and none for fp32; halved on a non-finite step, doubled
--- after loss_scale_interval (default 200) good steps).
function M.new(model, opts)
  opts = opts or {}
  local steps = opts.steps or 100
  local lr = opts.lr or 1e-3
  local optimizer = optim.adamw(model:parameters(), {
    lr = lr, weight_decay = opts.weight_decay or 0.0, clip = opts.clip or 1.0,
    beta1 = opts.beta1 or 0.9, beta2 = opts.beta2 or 0.95, eps = opts.eps or 1e-8,
    schedule = optim.cosine_schedule(lr, opts.warmup or 0, steps, opts.min_lr or lr / 10),
  })
  local loss_scale = opts.loss_scale
  if loss_scale == nil and model.precision == "fp16" then loss_scale = 1024 end
  return setmetatable({ model = model, optimizer = optimizer, accum = opts.accum or 1, nonfinite = 0, step_count = 0,
    loss_scale = loss_scale or nil, scale_interval = opts.loss_scale_interval or 200, good_steps = 0 }, Trainer)
end

-- Adds b * scale into the accumulator a (name -> fp32 tensor); a starts empty.
local function accumulate(into, grads, scale)
  for name, g in pairs(grads) do
    local scaled = scale == 1 and g or g:scale(scale)
    if into[name] and not into[name]:is_readonly() then
      into[name]:add_from(scaled) -- in place: no new tensor per batch
    else
      into[name] = into[name] and into[name]:add(scaled) or scaled
    end
  end
end

--- One optimizer step over `accum` batches. Returns the step's record.
function Trainer:step(batches)
  local model, counters = self.model, self.model.counters
  local forward_then, backward_then = counters.loss_forward_seconds, counters.loss_backward_seconds
  local clamped_then, nans_then = counters.clamped, counters.nans
  local start = ane.clock()
  local grads, loss, tokens = {}, 0, 0
  for _ = 1, self.accum do
    local ids, targets = batches:next()
    local batch_loss, batch_grads = model:loss(ids, targets, self.loss_scale and { loss_scale = self.loss_scale })
    loss = loss + batch_loss / self.accum
    accumulate(grads, batch_grads, 1 / self.accum)
    for _, seq in ipairs(ids) do tokens = tokens + #seq end
  end
  self.step_count = self.step_count + 1
  local record = { step = self.step_count, loss = loss, tokens = tokens, ms = {} }

  -- Sanitize before writing: a NaN/Inf anywhere in the gradients (or the loss) skips the
  -- update (weights and moments untouched); skipped steps are counted.
  local optimizer_start = ane.clock()
  local skipped
  if loss == loss and math.abs(loss) ~= math.huge then
    record.grad_norm, record.lr, skipped = self.optimizer:step(grads, 1 / (self.loss_scale or 1)) -- unscaled in the kernel
  else
    record.grad_norm, record.lr, skipped = 0 / 0, 0, true
  end
  if skipped then self.nonfinite = self.nonfinite + 1 end
  record.loss_scale = self.loss_scale
  if self.loss_scale then -- dynamic loss scaling: back off on overflow, grow after a good run
    if skipped then
      self.loss_scale, self.good_steps = math.max(1, self.loss_scale / 2), 0
    else
      self.good_steps = self.good_steps + 1
      if self.good_steps >= self.scale_interval then self.loss_scale, self.good_steps = self.loss_scale * 2, 0 end
    end
  end
  local patch_start = ane.clock()
  model:load_parameters()
  local finish = ane.clock()

  record.ms.forward = (counters.loss_forward_seconds - forward_then) * 1000
  record.ms.backward = (counters.loss_backward_seconds - backward_then) * 1000
  record.ms.optimizer = (patch_start - optimizer_start) * 1000
  record.ms.patch = (finish - patch_start) * 1000
  record.ms.total = (finish - start) * 1000
  record.tokens_per_s = tokens / (finish - start)
  record.nonfinite = self.nonfinite
  record.clamped, record.nans = counters.clamped - clamped_then, counters.nans - nans_then -- in this step's programs
  record.compiles = ane.stats().compiles
  record.position = batches.position
  return record
end

--- Writes a checkpoint of this step (weights, AdamW moments, data position, config).
function Trainer:save(dir, batches, opts)
  return checkpoint.save(dir, self.step_count, { params = self.model:parameters(), m = self.optimizer.m,
    v = self.optimizer.v }, { data_position = batches.position, config = self.model.config, trainer = {
      optimizer_steps = self.optimizer.steps, loss_scale = self.loss_scale, good_steps = self.good_steps,
      nonfinite = self.nonfinite } }, opts)
end

--- Continues from a loaded checkpoint state: weights (patched into the programs), moments,
--- step count and data position.
function Trainer:restore(state, batches)
  local params = self.model:parameters()
  for name, t in pairs(params) do
    local saved = state.params[name]
    if not saved then error("restore: the checkpoint has no parameter '" .. name .. "'", 2) end
    t:copy_from(saved)
  end
  self.model:load_parameters()
  for name in pairs(params) do
    self.optimizer.m[name]:copy_from(state.m[name] or error("restore: the checkpoint has no AdamW moment for '" .. name .. "'"))
    self.optimizer.v[name]:copy_from(state.v[name] or error("restore: the checkpoint has no AdamW moment for '" .. name .. "'"))
  end
  local saved = state.trainer or {}
  self.step_count = state.step
  self.optimizer.steps = math.tointeger(saved.optimizer_steps) or state.step
  self.loss_scale = saved.loss_scale or self.loss_scale
  self.good_steps, self.nonfinite = math.tointeger(saved.good_steps) or 0, math.tointeger(saved.nonfinite) or 0
  batches.position = state.data_position
end

return M

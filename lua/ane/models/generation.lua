-- ane.models.generation: KV-cached generation for the decoder models, and the sampler: a
-- seeded generator and greedy / top-k / top-p choice from a row of logits. The model
-- provides the hooks ane.models.decoder lists (forward, classify, embed_token, cache_keys,
-- decode_inputs, program).
local ane = require("ane")
local MASK = require("ane.models.decoder").MASK -- the additive attention mask

local M = { methods = {} }
local Methods = M.methods

--- xorshift64*: a small deterministic generator for sampling; returns uniforms in [0, 1).
function M.rng(seed)
  local state = (seed or 1) ~ 0x9E3779B97F4A7C15
  if state == 0 then state = 1 end
  return function()
    state = state ~ (state >> 12)
    state = state ~ (state << 25)
    state = state ~ (state >> 27)
    return ((state * 0x2545F4914F6CDD1D) >> 11) / 9007199254740992.0
  end
end

--- One id from a [V] row of logits: greedy at temperature 0, else top-k / top-p sampling.
function M.sample(row, opts, random)
  local temperature = opts.temperature or 1.0
  if temperature <= 0 then return row:argmax() - 1 end
  local V = row:numel()
  local k = opts.top_k and math.min(opts.top_k, V) or V
  local values, positions = row:topk(k)
  local probs, total = {}, 0
  for i = 1, k do
    probs[i] = math.exp((values[i] - values[1]) / temperature)
    total = total + probs[i]
  end
  local keep = k
  if opts.top_p and opts.top_p < 1 then
    local mass = 0
    for i = 1, k do
      mass = mass + probs[i] / total
      if mass >= opts.top_p then keep = i; break end
    end
    total = 0
    for i = 1, keep do total = total + probs[i] end
  end
  local u = random() * total
  for i = 1, keep do
    u = u - probs[i]
    if u <= 0 then return positions[i] - 1 end
  end
  return positions[keep] - 1
end

--- generate(prompt_ids, {max_tokens =, temperature =, top_k =, top_p =, seed =, stop_at_end =})
--- -> an iterator of new ids: one prefill, then one KV-cached decode step per id. Stops after
--- the model's end token unless stop_at_end (or stop_at_eot / stop_at_eos) is false.
function Methods:generate(prompt, opts)
  opts = opts or {}
  if type(prompt) ~= "table" or #prompt == 0 then error("generate: the prompt must be a non-empty array of ids", 2) end
  local budget = math.min(opts.max_tokens or 32, self.context_length - #prompt)
  if budget < 1 then error("generate: the prompt fills all " .. self.context_length .. " positions", 2) end
  local stop = opts.stop_at_end ~= false and opts.stop_at_eot ~= false and opts.stop_at_eos ~= false
  local Smax, W, C = self:bucket(#prompt + budget, self.context_length), self.min_width, self.cache_width or self.width
  local random = M.rng(opts.seed)
  -- submit/wait overlaps device work with the CPU's; on sim both are CPU work and the
  -- hand-off costs more than it saves (scripts/bench/async_decode.lua), so it is the device's default
  local asynchronous = opts.asynchronous == nil and self.backend == "ane" or opts.asynchronous == true

  -- Prefill: run the prompt, keep its keys and values in the caches.
  local start, compiling = ane.clock(), self.counters.compile_seconds
  local x, prefill, S = self:forward(prompt)
  local T = #prompt
  local caches = {}
  for l = 1, self.n_layer do
    local k, v = ane.tensor({ 1, C, 1, Smax }, self.dtype), ane.tensor({ 1, C, 1, Smax }, self.dtype)
    k:slice(4, 1, T):copy_from(self:cache_keys(prefill[l].k, T))
    v:slice(4, 1, T):copy_from(prefill[l].v:slice(4, 1, T))
    caches[l] = { k = k, v = v }
  end
  local logits = self:classify(x, T, S)
  self.counters.prefill_tokens = self.counters.prefill_tokens + T
  self.counters.prefill_seconds = self.counters.prefill_seconds + self:elapsed_without_compiling(start, compiling)
  local next_id = M.sample(logits:slice(1, T, T):reshape(-1), opts, random)
  local mask = ane.tensor({ 1, 1, 1, Smax }, self.dtype):fill(MASK) -- 0 where the cache is filled
  mask:slice(4, 1, T):fill(0)
  local attention, ffn = {}, {} -- looked up once: every step runs them
  for l = 1, self.n_layer do
    attention[l] = self:program("attn_decode", l, W, Smax)
    ffn[l] = self:program(self.ffn_kind, l, W)
  end

  local produced, position, finished = 0, T, false
  return function()
    if finished or produced >= budget then return nil end
    local id = next_id
    produced = produced + 1
    if (stop and id == self.stop_token) or produced >= budget then
      finished = true
      return id
    end
    -- Decode the token just produced, at `position` (0-based), to get the next one.
    local step_start, step_compiling = ane.clock(), self.counters.compile_seconds
    local h = self:embed_token(id, position, W)
    local inputs = self:decode_inputs(position, W)
    inputs.mask = mask
    for l = 1, self.n_layer do
      inputs.x, inputs.k_cache, inputs.v_cache = h, caches[l].k, caches[l].v
      local r = self:eval(attention[l], "attn", l, inputs)
      -- the FFN runs on a helper (the device, or sim's thread) while the cache takes this
      -- position's key and value (opts.asynchronous: true or false; default on the device)
      local ffn_outputs = asynchronous and self:submit(ffn[l], "ffn", l, { x = r.y })
      caches[l].k:slice(4, position + 1, position + 1):copy_from(r.k:slice(4, 1, 1))
      caches[l].v:slice(4, position + 1, position + 1):copy_from(r.v:slice(4, 1, 1))
      h = (ffn_outputs and ffn_outputs.wait() or self:eval(ffn[l], "ffn", l, { x = r.y })).y
    end
    mask:slice(4, position + 1, position + 1):fill(0)
    position = position + 1
    next_id = M.sample(self:classify(h, 1, W):reshape(-1), opts, random)
    self.counters.decode_tokens = self.counters.decode_tokens + 1
    self.counters.decode_seconds = self.counters.decode_seconds + self:elapsed_without_compiling(step_start, step_compiling)
    return id
  end
end

return M

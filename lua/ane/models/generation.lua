-- ane.models.generation: KV-cached generation for the decoder models (a session that is fed
-- ids and samples more, kept across a chat's turns; generate() is one session), and the
-- sampler: a seeded generator and greedy / top-k / top-p choice from a row of logits. The model
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

-- A KV-cached decoding session: the caches of `capacity` positions (rounded up to a bucket),
-- what has been fed so far, and the logits after it. generate() is one session; a chat keeps
-- one across turns, so earlier turns are never computed again.
local Session = {}
Session.__index = Session

--- session({capacity =, asynchronous =}) -> a session over at most `capacity` positions
--- (default: the model's context length).
function Methods:session(opts)
  opts = opts or {}
  local capacity = math.min(opts.capacity or self.context_length, self.context_length)
  local Smax = self:bucket(capacity, self.context_length)
  local session = setmetatable({ model = self, Smax = Smax, capacity = math.min(capacity, Smax), position = 0,
    C = self.cache_width or self.width, W = self.min_width }, Session)
  -- submit/wait overlaps device work with the CPU's; on sim both are CPU work and the
  -- hand-off costs more than it saves (scripts/bench/async_decode.lua), so it is the device's default
  session.asynchronous = opts.asynchronous == nil and self.backend == "ane" or opts.asynchronous == true
  return session
end

--- Positions left before the session's capacity.
function Session:room() return self.capacity - self.position end

-- The first feed: one prefill of the ids, their keys and values into the caches.
local function prefill(self, ids)
  local m, C, Smax = self.model, self.C, self.Smax
  local start, compiling = ane.clock(), m.counters.compile_seconds
  local x, outputs, S = m:forward(ids)
  local T = #ids
  self.caches = {}
  for l = 1, m.n_layer do
    local k, v = ane.tensor({ 1, C, 1, Smax }, m.dtype), ane.tensor({ 1, C, 1, Smax }, m.dtype)
    k:slice(4, 1, T):copy_from(m:cache_keys(outputs[l].k, T))
    v:slice(4, 1, T):copy_from(outputs[l].v:slice(4, 1, T))
    self.caches[l] = { k = k, v = v }
  end
  self.logits = m:classify(x, T, S, T):reshape(-1) -- the last position's only: generation needs no more
  m.counters.prefill_tokens = m.counters.prefill_tokens + T
  m.counters.prefill_seconds = m.counters.prefill_seconds + m:elapsed_without_compiling(start, compiling)
  self.mask = ane.tensor({ 1, 1, 1, Smax }, m.dtype):fill(MASK) -- 0 where the cache is filled
  self.mask:slice(4, 1, T):fill(0)
  self.attention, self.ffn = {}, {} -- looked up once: every step runs them
  for l = 1, m.n_layer do
    self.attention[l] = m:program("attn_decode", l, self.W, Smax)
    self.ffn[l] = m:program(m.ffn_kind, l, self.W)
  end
  self.position = T
end

-- One decode step: the id at the next position into the caches; the logits after it.
local function step(self, id)
  local m, position = self.model, self.position
  local step_start, step_compiling = ane.clock(), m.counters.compile_seconds
  local h = m:embed_token(id, position, self.W)
  local inputs = m:decode_inputs(position, self.W)
  inputs.mask = self.mask
  for l = 1, m.n_layer do
    local cache = self.caches[l]
    inputs.x, inputs.k_cache, inputs.v_cache = h, cache.k, cache.v
    local r = m:eval(self.attention[l], "attn", l, inputs)
    -- the FFN runs on a helper (the device, or sim's thread) while the cache takes this
    -- position's key and value (opts.asynchronous: true or false; default on the device)
    local ffn_outputs = self.asynchronous and m:submit(self.ffn[l], "ffn", l, { x = r.y })
    cache.k:slice(4, position + 1, position + 1):copy_from(r.k:slice(4, 1, 1))
    cache.v:slice(4, position + 1, position + 1):copy_from(r.v:slice(4, 1, 1))
    h = (ffn_outputs and ffn_outputs.wait() or m:eval(self.ffn[l], "ffn", l, { x = r.y })).y
  end
  self.mask:slice(4, position + 1, position + 1):fill(0)
  self.position = position + 1
  self.logits = m:classify(h, 1, self.W):reshape(-1)
  m.counters.decode_tokens = m.counters.decode_tokens + 1
  m.counters.decode_seconds = m.counters.decode_seconds + m:elapsed_without_compiling(step_start, step_compiling)
end

--- Appends ids to what the session holds (the first feed is one prefill, later ones one
--- decode step each); returns the logits [V] after the last. nil and a message when they do
--- not fit the capacity left.
function Session:feed(ids)
  if type(ids) ~= "table" or #ids == 0 then error("feed: give a non-empty array of ids", 2) end
  if #ids > self:room() then
    return nil, string.format("%d more tokens do not fit: %d of the session's %d positions are used", #ids, self.position,
      self.capacity)
  end
  local first = 1
  if not self.caches then
    prefill(self, ids)
    first = #ids + 1
  end
  for i = first, #ids do step(self, ids[i]) end
  return self.logits
end

--- An iterator of new ids sampled from the session's logits ({max_tokens =, temperature =,
--- top_k =, top_p =, seed =, stop = {[id] = true}}), each fed back before the next is drawn.
--- A stop id ends it and is returned, not fed (the caller decides what closes the turn); the
--- last id of an exhausted budget is fed too, unless feed_last is false (generate(), which
--- ends there, saves that step).
function Session:generate(opts)
  opts = opts or {}
  if not self.logits then error("generate: feed the session first", 2) end
  local budget = math.min(opts.max_tokens or 32, self:room())
  local random = self.random or M.rng(opts.seed)
  self.random = random
  local stop = opts.stop or {}
  local produced, finished = 0, false
  return function()
    if finished or produced >= budget then return nil end
    local id = M.sample(self.logits, opts, random)
    produced = produced + 1
    if stop[id] or produced >= budget then
      finished = true
      if not stop[id] and opts.feed_last ~= false then step(self, id) end
      return id
    end
    step(self, id)
    return id
  end
end

--- generate(prompt_ids, {max_tokens =, temperature =, top_k =, top_p =, seed =, stop_at_end =})
--- -> an iterator of new ids: one prefill, then one KV-cached decode step per id. Stops after
--- the model's end token unless stop_at_end (or stop_at_eot / stop_at_eos) is false.
function Methods:generate(prompt, opts)
  opts = opts or {}
  if type(prompt) ~= "table" or #prompt == 0 then error("generate: the prompt must be a non-empty array of ids", 2) end
  local budget = math.min(opts.max_tokens or 32, self.context_length - #prompt)
  if budget < 1 then error("generate: the prompt fills all " .. self.context_length .. " positions", 2) end
  local session = self:session({ capacity = #prompt + budget, asynchronous = opts.asynchronous })
  session:feed(prompt)
  local stop = {}
  if opts.stop_at_end ~= false and opts.stop_at_eot ~= false and opts.stop_at_eos ~= false and self.stop_token then
    stop[self.stop_token] = true
  end
  return session:generate({ max_tokens = budget, temperature = opts.temperature, top_k = opts.top_k, top_p = opts.top_p,
    seed = opts.seed, stop = stop, feed_last = false })
end

return M

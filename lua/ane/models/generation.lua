-- ane.models.generation: KV-cached generation for the decoder models (a session that is fed
-- ids and samples more, kept across a chat's turns; generate() is one session), and the
-- sampler: a seeded generator and greedy / top-k / top-p choice from a row of logits. The model
-- provides the hooks ane.models.decoder lists (forward, classify, embed_token, cache_keys,
-- decode_inputs, program).
local ane = require("ane")
local MASK = require("ane.models.decoder").MASK -- the additive attention mask

-- On sim, the smallest cache a session starts with (positions): a size costs one program per
-- layer, compiled in ~4 ms for Qwen3-0.6B at this size.
local FIRST_CACHE = 64
-- Sessions of at most this many positions start at their capacity's size, larger ones at this
-- size, growing from there: attention's products read the positions written, whatever the
-- size, and its element-wise work over so few costs less than growing in steps costs in
-- compiles (a 260-position Stories110M run: 24 attention programs fewer, ~0.1 s of its ~3 s).
local WHOLE_UP_TO = 256

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

--- One id from a [V] row of logits: greedy at temperature 0, else top-k / top-p sampling
--- (row:sample, in C: a top-k through one pass, a nucleus without sorting the whole row).
--- opts.vocab: draw only ids below it (the tokenizer's; a model's classifier may have more
--- rows than its tokenizer has tokens, as Qwen3's 151,936 for 151,669 tokens).
function M.sample(row, opts, random)
  if opts.vocab and opts.vocab < row:numel() then row = row:slice(1, 1, opts.vocab) end
  local temperature = opts.temperature or 1.0
  if temperature <= 0 then return row:argmax() - 1 end
  return row:sample(temperature, opts.top_k, opts.top_p, random()) - 1
end

-- A KV-cached decoding session: what has been fed so far, the logits after it, and the
-- caches of up to `capacity` positions. generate() is one session; a chat keeps one across
-- turns, so earlier turns are never computed again.
--
-- The caches live in the decode attention programs themselves, as resident inputs
-- (prog:write_input): each step writes one position of k, v and the mask, and no eval copies
-- a whole cache in; sim's attention products leave out the positions not written yet (zeros),
-- its element-wise work does not. In sim's cpu profile a session of at most WHOLE_UP_TO
-- positions takes its whole size at once (at least FIRST_CACHE), and a larger one (a chat)
-- starts at WHOLE_UP_TO and grows as it fills (to 512, then every 256), so its caches hold
-- about the memory it uses. On the device every
-- size costs a compile per layer (ANE-05: a 28-layer model's second size would spend the
-- budget), so a session there, and in sim's ane profile, which keeps the device's rules,
-- keeps the size of its capacity. Sessions of one model share the programs of a size, and
-- take turns: the one about to run first saves the caches of the one that ran last (and gets
-- its own back).
local Session = {}
Session.__index = Session

-- Whether a model's session caches grow as they fill (see above): sim's cpu profile only.
local function grows(m) return m.backend ~= "ane" and m.profile == "cpu" end

--- session({capacity =, asynchronous =}) -> a session over at most `capacity` positions
--- (default: the model's context length).
function Methods:session(opts)
  opts = opts or {}
  local capacity = math.min(opts.capacity or self.context_length, self.context_length)
  local Smax = self:bucket(capacity, self.context_length)
  if grows(self) then -- caches start at FIRST_CACHE positions: short sessions share those programs
    Smax = math.max(Smax, math.min(FIRST_CACHE, self:bucket(self.context_length, self.context_length)))
  end
  local session = setmetatable({ model = self, Smax = Smax, capacity = math.min(capacity, Smax), position = 0,
    step_outputs = {}, -- a decode step's output tensors, by program group (advance)
    W = self.min_width }, Session)
  -- submit/wait overlaps device work with the CPU's; on sim both are CPU work and the
  -- hand-off costs more than it saves (scripts/bench/async_decode.lua), so it is the device's default
  session.asynchronous = opts.asynchronous == nil and self.backend == "ane" or opts.asynchronous == true
  self.cache_owners = self.cache_owners or setmetatable({}, { __mode = "kv" }) -- program -> session
  return session
end

--- Positions left before the session's capacity.
function Session:room() return self.capacity - self.position end

-- The cache size that holds `positions`: see above (the model's bucket, at least WHOLE_UP_TO
-- in a session larger than that).
local function cache_size(self, positions)
  local m = self.model
  if not grows(m) or self.Smax <= WHOLE_UP_TO then return self.Smax end
  return math.min(math.max(m:bucket(positions, m.context_length), WHOLE_UP_TO), self.Smax)
end

local KEYS_AND_VALUES = { "k_cache", "v_cache" }

-- The caches as tensors, read out of the session's programs: the keys and values of its
-- filled positions, the whole mask.
local function read_caches(self)
  local saved = {}
  for l, attention in ipairs(self.attention) do
    saved[l] = { mask = attention:read_input("mask") }
    for _, name in ipairs(KEYS_AND_VALUES) do saved[l][name] = attention:read_input(name):slice(4, 1, self.position) end
  end
  return saved
end

-- Writes caches into a layer's attention program: keys and values from position 1 over zeros
-- (what another session left there is cleared, so sim's attention products read the filled
-- positions only), the mask (whole, or from position 1; when given) over what it holds.
local function write_caches(attention, caches)
  for _, name in ipairs(KEYS_AND_VALUES) do attention:reset_input(name):write_input(name, caches[name]) end
  if caches.mask then attention:write_input("mask", caches.mask) end
end

-- Makes the session's programs hold its caches: the session that used them last saves its own.
local function hold(self)
  local owners, token = self.model.cache_owners, self.attention[1]
  local owner = owners[token]
  if owner == self then return end
  if owner then owner.saved = read_caches(owner) end
  owners[token] = self
  if self.saved then
    for l, attention in ipairs(self.attention) do write_caches(attention, self.saved[l]) end
    self.saved = nil
  end
end

-- The programs of cache size `size`, each layer's caches empty but for the mask, which holds
-- off every position (positions are let in as they are written).
local function use_size(self, size)
  local m = self.model
  self.size, self.attention, self.ffn = size, {}, {} -- looked up once: every step runs them
  for l = 1, m.n_layer do -- one position computed of the W the device's rows hold (kind_for)
    self.attention[l] = m:program(m:kind_for("attn_decode", 1, self.W), l, self.W, size)
    self.ffn[l] = m:program(m:kind_for("ffn", 1, self.W), l, self.W)
  end
  hold(self)
  local closed = ane.tensor({ 1, 1, 1, size }, m.dtype):fill(MASK)
  for _, attention in ipairs(self.attention) do attention:write_input("mask", closed) end
end

-- A larger cache once the next position does not fit: the filled positions move over. The
-- model lets go of the programs of a size left behind above WHOLE_UP_TO (their caches are
-- this session's alone unless another long session reached the same size, which keeps them):
-- a long chat would otherwise hold the caches of every size it passed (Qwen3-0.6B int4 at
-- 1,500 positions: 2.47 GB resident, 2.14 GB with this). Smaller sizes stay for the sessions
-- that start with them.
local function grow(self)
  hold(self)
  local filled = read_caches(self)
  local left = self.size
  use_size(self, cache_size(self, self.position + 1))
  for l, attention in ipairs(self.attention) do write_caches(attention, filled[l]) end
  if left > WHOLE_UP_TO then
    local m = self.model
    for l = 1, m.n_layer do m:forget_program(m:kind_for("attn_decode", 1, self.W), l, self.W, left) end
  end
end

-- Prompts of at most this many tokens, where the programs' rows are wider than one position
-- (the device's 32: ANE-21), go through the decode programs a position at a time: a prefill
-- program would compute all 32 positions, and cost the device a compile per layer and group,
-- where the steps compute the prompt's alone. GPT-2's 4-token demo prompt, a process's first,
-- on sim: ~0.2 s through a prefill program, ~0.1 s through the steps.
local SHORT_PROMPT = 8

local advance

-- The first feed: one prefill of the ids; their keys and values wait in `pending` for the
-- first decode step (settle), so the first token comes before any decode program is compiled.
-- A short prompt in a wide profile (SHORT_PROMPT) goes through the decode programs instead.
local function prefill(self, ids)
  local m = self.model
  local start, compiling = ane.clock(), m.counters.compile_seconds
  local T = #ids
  if self.W > 1 and T <= SHORT_PROMPT then
    use_size(self, cache_size(self, T + 1))
    local nothing = ane.tensor({ 1, m.cache_width, 1, 0 }, m.dtype) -- empty caches: no position written yet
    for _, attention in ipairs(self.attention) do write_caches(attention, { k_cache = nothing, v_cache = nothing }) end
    local h
    for _, id in ipairs(ids) do h = advance(self, id) end
    self.logits = m:classify(h, 1, self.W):reshape(-1)
  else
    local x, outputs, S = m:forward(ids)
    self.pending = { T = T }
    for l = 1, m.n_layer do self.pending[l] = { k = m:cache_keys(outputs[l].k, T), v = outputs[l].v:slice(4, 1, T) } end
    self.logits = m:classify(x, T, S, T):reshape(-1) -- the last position's only: generation needs no more
    self.position = T
  end
  m.counters.prefill_tokens = m.counters.prefill_tokens + T
  m.counters.prefill_seconds = m.counters.prefill_seconds + m:elapsed_without_compiling(start, compiling)
end

-- The prefill's keys and values into the decode programs' caches.
local function settle(self)
  local m, pending = self.model, self.pending
  use_size(self, cache_size(self, pending.T + 1))
  local open = ane.tensor({ 1, 1, 1, pending.T }, m.dtype):fill(0)
  for l, attention in ipairs(self.attention) do
    write_caches(attention, { k_cache = pending[l].k, v_cache = pending[l].v, mask = open })
  end
  self.pending = nil
end

local OPEN = {} -- one position's mask value that lets it in, per dtype
local function open_position(dtype)
  OPEN[dtype] = OPEN[dtype] or ane.tensor({ 1, 1, 1, 1 }, dtype):fill(0)
  return OPEN[dtype]
end

-- The id at the next position through every layer, its key and value into the caches;
-- returns the last layer's output (one position of W).
function advance(self, id)
  local m, position = self.model, self.position
  if self.pending then settle(self) end
  if position + 1 > self.size then grow(self) end
  hold(self)
  local h = m:embed_token(id, position, self.W)
  local inputs = m:decode_inputs(position, self.W)
  local open = open_position(m.dtype)
  -- the layers write their outputs into this session's tensors, those of its first layer
  -- evaluated (an eval reads its inputs before it writes its outputs), not into new ones
  -- each eval: Stories110M int4 and Qwen3-0.6B int4 decode 2-3% faster
  local outputs = self.step_outputs
  for l = 1, m.n_layer do
    local attention = self.attention[l]
    inputs.x = h
    local r = m:eval(attention, "attn", l, inputs, outputs.attn)
    -- the FFN runs on a helper (the device, or sim's thread) while the cache takes this
    -- position's key and value (opts.asynchronous: true or false; default on the device)
    local ffn_outputs = self.asynchronous and m:submit(self.ffn[l], "ffn", l, { x = r.y }, outputs.ffn)
    attention:write_input("k_cache", r.k:slice(4, 1, 1), position + 1)
    attention:write_input("v_cache", r.v:slice(4, 1, 1), position + 1)
    attention:write_input("mask", open, position + 1)
    local f = ffn_outputs and ffn_outputs.wait() or m:eval(self.ffn[l], "ffn", l, { x = r.y }, outputs.ffn)
    outputs.attn, outputs.ffn = outputs.attn or r, outputs.ffn or f
    h = f.y
  end
  self.position = position + 1
  return h
end

-- One decode step: the id at the next position into the caches; the logits after it.
local function step(self, id)
  local m = self.model
  local step_start, step_compiling = ane.clock(), m.counters.compile_seconds
  self.logits = m:classify(advance(self, id), 1, self.W):reshape(-1)
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
  if self.position == 0 then
    prefill(self, ids)
    first = #ids + 1
  end
  for i = first, #ids do step(self, ids[i]) end
  return self.logits
end

--- An iterator of new ids sampled from the session's logits ({max_tokens =, temperature =,
--- top_k =, top_p =, seed =, vocab =, stop = {[id] = true}}; vocab: M.sample's), each fed back
--- before the next is drawn.
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

--- generate(prompt_ids, {max_tokens =, temperature =, top_k =, top_p =, seed =, vocab =, stop_at_end =})
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
    seed = opts.seed, vocab = opts.vocab, stop = stop, feed_last = false })
end

return M

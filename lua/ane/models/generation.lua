-- ane.models.generation: KV-cached generation for the decoder models (a session that is fed
-- ids and samples more, kept across a chat's turns; generate() is one session), and the
-- sampler: a seeded generator and greedy / top-k / top-p choice from a row of logits. The model
-- provides the hooks ane.models.decoder lists (forward, classify, embed_token, cache_keys,
-- decode_inputs, program).
local ane = require("ane")
local MASK = require("ane.models.decoder").MASK -- the additive attention mask

-- On sim, the smallest cache a session starts with (positions), and the step of the sizes a
-- session takes at once: a size costs one program per layer, compiled in ~4 ms for Qwen3-0.6B
-- at this size. The attention reads only the positions written, but each cache row from its
-- start, and the memory brings in more of a row than was asked, so a step's reading of the
-- caches costs by their size too: Stories110M Q4_0 at positions 5-131 (scripts/bench/
-- cache_sizes.lua, two sessions stepping in turn), caches of 192 positions 1.019x the tokens/s
-- of 256 (1.016-1.034); at positions 6-62, 64 against 256 1.054x, 64 against 128 1.027x; 160
-- against 192 0.999x (rows of 320 and 384 bytes read alike).
local FIRST_CACHE = 64
-- Sessions of at most this many positions start at their capacity's size (the multiple of
-- FIRST_CACHE that holds it), larger ones at this size, growing from there: growing in steps
-- costs a compile a layer and a copy of the caches each time (a 260-position Stories110M run:
-- 24 attention programs fewer, ~0.1 s of its ~3 s).
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

--- The logits of the ids in `recent` (the last repeat_last_n ids, default 64) penalized as
--- llama.cpp's sampler does: repeat_penalty p divides a positive logit by p and multiplies a
--- negative one; presence_penalty a and frequency_penalty f subtract a + f x (times the id
--- occurred). Returns the row (a copy when anything changed).
function M.penalize(row, opts, recent)
  local repeat_penalty, presence, frequency = opts.repeat_penalty or 1, opts.presence_penalty or 0, opts.frequency_penalty or 0
  if (repeat_penalty == 1 and presence == 0 and frequency == 0) or not recent or #recent == 0 then return row end
  local window, counts = opts.repeat_last_n or 64, {}
  for i = math.max(1, #recent - window + 1), #recent do counts[recent[i]] = (counts[recent[i]] or 0) + 1 end
  row = row:copy()
  local n = row:numel()
  for id, count in pairs(counts) do
    if id >= 0 and id < n then
      local value = row:get(id + 1)
      if repeat_penalty ~= 1 then value = value > 0 and value / repeat_penalty or value * repeat_penalty end
      row:set(value - presence - frequency * count, id + 1)
    end
  end
  return row
end

--- One id from a [V] row of logits: penalties first (M.penalize, over `recent` ids), then greedy
--- at temperature 0, else min-p / top-k / top-p sampling (row:sample, in C: a top-k through one
--- pass, a nucleus without sorting the whole row). opts.vocab: draw only ids below it (the
--- tokenizer's; a model's classifier may have more rows than its tokenizer has tokens, as
--- Qwen3's 151,936 for 151,669 tokens).
function M.sample(row, opts, random, recent)
  if opts.vocab and opts.vocab < row:numel() then row = row:slice(1, 1, opts.vocab) end
  row = M.penalize(row, opts, recent)
  local temperature = opts.temperature or 1.0
  if temperature <= 0 then return row:argmax() - 1 end
  return row:sample(temperature, opts.top_k, opts.top_p, random(), opts.min_p) - 1
end

-- A KV-cached decoding session: what has been fed so far, the logits after it, and the
-- caches of up to `capacity` positions. generate() is one session; a chat keeps one across
-- turns, so earlier turns are never computed again.
--
-- The session owns its caches: per layer a key cache and a value cache [1, KV * head, 1, size]
-- and the attention mask [1, 1, 1, size], passed to the decode attention program as ordinary
-- inputs (tensors in the cpu profile, which sim reads in place; surfaces of one allocation size
-- in the ane profile, which the device reads as they are: ANE-18). Each step's key and value
-- are appended to them by the runtime, in C, at the step's position (prog:eval's `append`), and
-- the mask opens that position: they never travel to Lua. Positions not written yet hold zeros,
-- which sim's attention products leave out; its element-wise work does not. In sim's cpu
-- profile a session of at most WHOLE_UP_TO positions takes its whole size at once (its
-- capacity rounded up to a multiple of FIRST_CACHE), and a larger one (a chat) starts at
-- WHOLE_UP_TO and grows as it fills (to 512, then every 256, at most its capacity so rounded),
-- so its caches hold about the memory it uses. On the device every size costs
-- a compile per layer (ANE-05: a 28-layer model's second size would spend the budget), so a
-- session there, and in sim's ane profile, which keeps the device's rules, keeps the size of its
-- capacity. Sessions of one model share the programs of a size and need nothing from each other.
local Session = {}
Session.__index = Session

-- Whether a model's session caches grow as they fill (see above): sim's cpu profile only.
local function grows(m) return m.backend ~= "ane" and m.profile == "cpu" end

--- session({capacity =, asynchronous =, one_program_a_layer =}) -> a session over at most
--- `capacity` positions (default: the model's context length). one_program_a_layer (default
--- true; the cpu profile, synchronous, without LoRA or fed weights): each decode step runs a
--- layer's attention and FFN as one program (layer_decode) instead of two; false keeps them
--- apart, each output clamped and counted (model:stats()) between them.
function Methods:session(opts)
  opts = opts or {}
  local capacity = math.min(opts.capacity or self.context_length, self.context_length)
  local Smax = self:bucket(capacity, self.context_length)
  if grows(self) then -- the capacity's multiple of FIRST_CACHE (at most the context's size)
    local whole = FIRST_CACHE * math.ceil(capacity / FIRST_CACHE)
    Smax = math.min(whole, math.max(Smax, math.min(FIRST_CACHE, self:bucket(self.context_length, self.context_length))))
  end
  local session = setmetatable({ model = self, Smax = Smax, capacity = math.min(capacity, Smax), position = 0,
    W = self.min_width }, Session)
  -- submit/wait overlaps device work with the CPU's; on sim both are CPU work and the
  -- hand-off costs more than it saves (scripts/bench/async_decode.lua), so it is the device's default
  session.asynchronous = opts.asynchronous == nil and self.backend == "ane" or opts.asynchronous == true
  -- a program a layer: 13 evaluations a Stories110M token instead of 25, 12 programs fewer
  -- (scripts/bench/layer_programs.lua, the sessions stepping in turn: its GGUF Q4_0 1.009-1.019x
  -- tokens/s, Q4_K_M 1.019x, F16 1.010x; a 2-layer llama-tiny 1.075x). The ane profile's
  -- steps are the device's (its asynchronous FFN overlaps the CPU's work); LoRA adapters and
  -- fed weights are inputs of the attention's or the FFN's program alone.
  session.one_program_a_layer = opts.one_program_a_layer ~= false and self.profile == "cpu" and not session.asynchronous
    and self.graphs.layer_decode ~= nil and not self.lora and not self.weights_as_inputs
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

--- The cache size a new session of `capacity` positions of model m starts with (the size of
--- the batched attention programs step_together first runs: a server compiles them ahead).
function M.first_cache_size(m, capacity)
  return cache_size(m:session({ capacity = capacity }), 1) -- (a session holds no caches until fed)
end

-- A session's buffer's values as a [1, C, 1, size] tensor to read and write (a surface's memory).
local function values_of(m, buffer) return m.profile == "ane" and buffer:tensor() or buffer end

-- One buffer a session owns, [1, channels, 1, size], holding `fill`: a tensor, or in the ane
-- profile a surface of `alloc_size` bytes (every input of a program shares one size: ANE-18).
local function cache_buffer(m, channels, size, fill, alloc_size)
  local buffer = m.profile == "ane" and ane.surface { channels = channels, seq = size, dtype = m.dtype, alloc_size = alloc_size }
    or ane.tensor({ 1, channels, 1, size }, m.dtype)
  if fill ~= 0 then values_of(m, buffer):fill(fill) end -- (a new tensor or surface holds zeros)
  return buffer
end

-- The caches of `size` positions, one per layer: keys and values zero, the mask holding off
-- every position (positions are let in as they are written).
local function new_caches(self, size)
  local m = self.model
  local alloc_size = 0
  if m.profile == "ane" then -- the largest buffer's allocation, for all of them
    local _, cache_bytes = ane.surface.layout { channels = m.cache_width, seq = size, dtype = m.dtype }
    local _, mask_bytes = ane.surface.layout { channels = 1, seq = size, dtype = m.dtype }
    alloc_size = math.max(cache_bytes, mask_bytes)
  end
  local caches = {}
  for l = 1, m.n_layer do
    caches[l] = { k_cache = cache_buffer(m, m.cache_width, size, 0, alloc_size),
      v_cache = cache_buffer(m, m.cache_width, size, 0, alloc_size), mask = cache_buffer(m, 1, size, MASK, alloc_size) }
  end
  return caches, alloc_size
end

-- Where a step's programs write their outputs (advance), by group, every layer the same
-- buffers (an eval reads its inputs before it writes its outputs): in the ane profile the
-- session's surfaces, of its caches' allocation size, so one program's output is the next
-- one's input as it is, in the device's layout (nothing staged, nothing copied out); tensors
-- in the cpu profile. The appends read k and v from there.
local function step_outputs(self, alloc_size)
  local m = self.model
  local function buffer(channels) return cache_buffer(m, channels, self.W, 0, alloc_size) end
  local attn = { y = buffer(m.width), k = buffer(m.cache_width), v = buffer(m.cache_width) }
  local ffn = { y = buffer(m.width) }
  -- one program a layer: the layers write y into the two y buffers in turn (a program's output
  -- never in the buffer of its input x), k and v into attn's
  return { attn = attn, ffn = ffn, layer = { attn, { y = ffn.y, k = attn.k, v = attn.v } } }
end

local CACHED = { "k_cache", "v_cache", "mask" }

-- Writes `count` positions after the first `held` into a layer's caches: keys and values from
-- the leading positions of k and v ([1, KV * head, 1, >= count]), the mask opened.
local function fill_caches(m, cache, held, count, k, v)
  if count == 0 then return end
  values_of(m, cache.k_cache):slice(4, held + 1, held + count):copy_from(k:slice(4, 1, count))
  values_of(m, cache.v_cache):slice(4, held + 1, held + count):copy_from(v:slice(4, 1, count))
  values_of(m, cache.mask):slice(4, held + 1, held + count):fill(0)
end

-- The programs and caches of size `size`; the positions the session holds move over.
local function use_size(self, size)
  local m = self.model
  local left, held = self.size, self.caches
  self.size, self.attention, self.ffn, self.layers = size, {}, {}, {} -- looked up once: every step runs them
  for l = 1, m.n_layer do -- one position computed of the W the device's rows hold (kind_for)
    if self.one_program_a_layer then
      self.layers[l] = m:program("layer_decode", l, self.W, size)
    else
      self.attention[l] = m:program(m:kind_for("attn_decode", 1, self.W), l, self.W, size)
      self.ffn[l] = m:program(m:kind_for("ffn", 1, self.W), l, self.W)
    end
  end
  local alloc_size
  self.caches, alloc_size = new_caches(self, size)
  self.step_outputs = step_outputs(self, alloc_size)
  self.window_closed = 0 -- (the positions moved over open: slide_windows closes them again)
  if held then
    for l, cache in ipairs(self.caches) do
      fill_caches(m, cache, 0, self.position, values_of(m, held[l].k_cache), values_of(m, held[l].v_cache))
    end
  end
  -- the model lets go of the programs of a size left behind above WHOLE_UP_TO (another long
  -- session at that size keeps them): a long chat would otherwise hold the programs of every
  -- size it passed. Smaller sizes stay for the sessions that start with them.
  if left and left > WHOLE_UP_TO then
    local kind = self.one_program_a_layer and "layer_decode" or m:kind_for("attn_decode", 1, self.W)
    for l = 1, m.n_layer do m:forget_program(kind, l, self.W, left) end
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

-- The prefill's keys and values into the session's caches.
local function settle(self)
  local pending = self.pending
  self.position = 0 -- (use_size moves the positions held: none yet)
  use_size(self, cache_size(self, pending.T + 1))
  for l, cache in ipairs(self.caches) do fill_caches(self.model, cache, 0, pending.T, pending[l].k, pending[l].v) end
  self.position, self.pending = pending.T, nil
end

-- Sliding-window layers attend to the last `window` positions, their own included: before the
-- step at `position` (0-based) the cache positions further back are closed in those layers'
-- masks. self.window_closed counts the leading positions closed so far.
local function slide_windows(self, position)
  local m = self.model
  local window = m.arch.sliding_window
  if not window then return end
  local want = math.max(0, position - window + 1)
  local closed = self.window_closed or 0
  if want <= closed then return end
  for l = 1, m.n_layer do
    if m:is_sliding(l) then values_of(m, self.caches[l].mask):slice(4, closed + 1, want):fill(MASK) end
  end
  self.window_closed = want
end

-- What each step appends to a layer's caches at its position: the attention program's k and
-- v outputs (their first position), and a mask value that lets the position in.
local APPENDS = { k_cache = "k", v_cache = "v", mask = 0 }

-- The start of a decode step at the session's next position: caches grown and windows slid
-- as needed, the id embedded. Returns the step: h (one position of W) and what each layer's
-- attention takes besides.
local function begin_step(self, id)
  local m, position = self.model, self.position
  if self.pending then settle(self) end
  if position + 1 > self.size then use_size(self, cache_size(self, position + 1)) end
  slide_windows(self, position)
  -- the layers' extra inputs (rotary angles), and a sliding layer's own where they differ
  local inputs, sliding_inputs = m:decode_inputs(position, self.W)
  -- (a one-position program's outputs past the first are its padding: neither written nor clamped)
  local wide = self.W > 1 and 1 or nil
  return { h = m:embed_token(id, position, self.W), inputs = inputs, sliding_inputs = sliding_inputs,
    appending = { append = APPENDS, at = position + 1, positions = wide }, one = { positions = wide } }
end

-- Layer l's attention of a step over the session's own caches (program: its attn_decode, or
-- its layer_decode, the FFN after it): the output y, written into `destinations`, the
-- session's step buffers (step_outputs).
local function attend(self, l, step, program, destinations)
  local m = self.model
  local layer_inputs = step.sliding_inputs and m:is_sliding(l) and step.sliding_inputs or step.inputs
  layer_inputs.x = step.h
  for _, name in ipairs(CACHED) do layer_inputs[name] = self.caches[l][name] end
  return m:eval(program, "attn", l, layer_inputs, destinations, step.appending).y
end

-- The id at the next position through every layer, its key and value into the caches;
-- returns the last layer's output (one position of W).
function advance(self, id)
  local m = self.model
  local step = begin_step(self, id)
  -- the layers write their outputs into the session's buffers (step_outputs): Stories110M
  -- int4 and Qwen3-0.6B int4 decode 2-3% faster than into new tensors each eval
  local outputs = self.step_outputs
  if self.one_program_a_layer then
    for l = 1, m.n_layer do step.h = attend(self, l, step, self.layers[l], outputs.layer[2 - l % 2]) end
    self.position = self.position + 1
    return step.h
  end
  for l = 1, m.n_layer do
    local y = attend(self, l, step, self.attention[l], outputs.attn)
    -- the FFN runs on a helper (the device, or sim's thread) while the CPU goes on
    -- (opts.asynchronous: true or false; default on the device)
    local ffn_outputs = self.asynchronous and m:submit(self.ffn[l], "ffn", l, { x = y }, outputs.ffn, step.one)
    local f = ffn_outputs and ffn_outputs.wait() or m:eval(self.ffn[l], "ffn", l, { x = y }, outputs.ffn, step.one)
    step.h = f.y
  end
  self.position = self.position + 1
  return step.h
end

-- Blocks of positions run at a multiple of this width: a few programs serve every length.
local BLOCK_WIDTH = 32

-- Several ids after the first feed (a conversation's next turn, a server's prompt in parts) in
-- one pass of the decode programs, `#ids` positions wide (padded to BLOCK_WIDTH): each layer's
-- attention over the caches and over the block, causal inside (nn.cached_attention), then its
-- keys and values written into the caches after the positions held; the logits of the last id.
-- Each weight is read once for the block, not once an id.
local function advance_block(self, ids)
  local m, T = self.model, #ids
  local start, compiling = ane.clock(), m.counters.compile_seconds
  if self.pending then settle(self) end
  local position = self.position
  if position + T > self.size then use_size(self, cache_size(self, position + T)) end
  local W = math.max(self.W, (T + BLOCK_WIDTH - 1) // BLOCK_WIDTH * BLOCK_WIDTH)
  local inputs = m:decode_inputs(position, W, T)
  local h = m:embed(ids, position, W)
  local real = { positions = T }
  for l = 1, m.n_layer do
    local layer_inputs = { x = h }
    for name, value in pairs(inputs) do layer_inputs[name] = value end
    for _, name in ipairs(CACHED) do layer_inputs[name] = self.caches[l][name] end
    local r = m:eval(m:program("attn_decode", l, W, self.size), "attn", l, layer_inputs, nil, real)
    fill_caches(m, self.caches[l], position, T, r.k, r.v)
    h = m:eval(m:program("ffn", l, W), "ffn", l, { x = r.y }, nil, real).y
  end
  self.position = position + T
  self.logits = m:classify(h, T, W, T):reshape(-1)
  m.counters.prefill_tokens = m.counters.prefill_tokens + T
  m.counters.prefill_seconds = m.counters.prefill_seconds + m:elapsed_without_compiling(start, compiling)
end

-- One decode step: the id at the next position into the caches; the logits after it.
local function step(self, id)
  local m = self.model
  local step_start, step_compiling = ane.clock(), m.counters.compile_seconds
  self.logits = m:classify(advance(self, id), 1, self.W):reshape(-1)
  m.counters.decode_tokens = m.counters.decode_tokens + 1
  m.counters.decode_seconds = m.counters.decode_seconds + m:elapsed_without_compiling(step_start, step_compiling)
end

-- Session i's cache inputs in a batched attention program: CACHED's names with "_i" (made once).
local BATCH_INPUTS = setmetatable({}, { __index = function(names, i)
  local of_session = {}
  for _, name in ipairs(CACHED) do of_session[name] = name .. "_" .. i end
  names[i] = of_session
  return of_session
end })

-- The steps' extra inputs (steps[i][field]: each [1, n, 1, 1], the rotary angles) as columns of
-- [1, n, 1, B], session i's in column i.
local function batched_angles(steps, field, B, dtype)
  local columns = {}
  for name, t in pairs(steps[1][field]) do columns[name] = ane.tensor({ 1, t:shape()[2], 1, B }, dtype) end
  for i, step in ipairs(steps) do
    for name, t in pairs(step[field]) do columns[name]:slice(4, i, i):copy_from(t:slice(4, 1, 1)) end
  end
  return columns
end

--- One decode step of several sessions of one model, each at its own position with its own
--- caches, feeding ids[i] to sessions[i]; afterwards each session's logits are those after
--- its id. Each layer runs as two programs over all the sessions' positions as columns: the
--- attention (its projections over the columns, each column's attention over its own
--- session's caches, which take their keys and values at their own positions) and the FFN,
--- then the classifier likewise, so every weight is read once per step for all of them (the
--- sessions' caches are brought to one capacity first). Up to 16 sessions (ANE_FEW_COLUMNS) a
--- column's products are the one-position step's sums (tensor/gemv.h): every session's logits
--- are bit for bit what step() gives it alone. Where the model's programs are wider than one
--- position (the ane profile) the sessions step one after another.
function M.step_together(sessions, ids)
  local B = #sessions
  if B == 0 then return end
  local m = sessions[1].model
  if B == 1 or sessions[1].W > 1 or not m.classify_steps or not m.graphs.attn_batch then
    for i, session in ipairs(sessions) do step(session, ids[i]) end
    return
  end
  local start, compiling = ane.clock(), m.counters.compile_seconds
  local steps = {}
  for i, session in ipairs(sessions) do
    if session.model ~= m then error("step_together: the sessions must be of one model", 2) end
    steps[i] = begin_step(session, ids[i])
  end
  local size = 0 -- (one capacity for the batched attention: the largest, the others' caches grown to it)
  for _, session in ipairs(sessions) do size = math.max(size, session.size) end
  for _, session in ipairs(sessions) do
    if session.size < size then
      use_size(session, size)
      slide_windows(session, session.position)
    end
  end
  local columns = ane.tensor({ 1, m.width, 1, B }, m.dtype) -- [1, C, 1, B]: one column a session
  for i = 1, B do columns:slice(4, i, i):copy_from(steps[i].h:slice(4, 1, 1)) end
  -- what every layer takes besides its caches, gathered once a step: the rotary angles as
  -- columns (a sliding layer's own, where they differ), where each session's caches append
  local angles = batched_angles(steps, "inputs", B, m.dtype)
  local sliding_angles = steps[1].sliding_inputs and batched_angles(steps, "sliding_inputs", B, m.dtype)
  local appending = { append = {}, at = sessions[1].position + 1, at_of = {} }
  for i, session in ipairs(sessions) do
    for name, input in pairs(BATCH_INPUTS[i]) do
      appending.append[input] = APPENDS[name] == 0 and 0 or APPENDS[name] .. "_" .. i
      appending.at_of[input] = session.position + 1
    end
  end
  for l = 1, m.n_layer do
    local inputs = sliding_angles and m:is_sliding(l) and sliding_angles or angles
    inputs.x = columns
    for i, session in ipairs(sessions) do
      for name, input in pairs(BATCH_INPUTS[i]) do inputs[input] = session.caches[l][name] end
    end
    local y = m:eval(m:program("attn_batch", l, B, size), "attn", l, inputs, nil, appending).y
    columns = m:eval(m:program("ffn", l, B), "ffn", l, { x = y }).y
  end
  for _, session in ipairs(sessions) do session.position = session.position + 1 end
  local logits = m:classify_steps(columns, B) -- [B, V]
  for i, session in ipairs(sessions) do session.logits = logits:slice(1, i, i):reshape(-1) end -- (each its row, in place)
  m.counters.decode_tokens = m.counters.decode_tokens + B
  m.counters.decode_seconds = m.counters.decode_seconds + m:elapsed_without_compiling(start, compiling)
end

--- Appends ids to what the session holds (the first feed is one prefill, a later one of
--- several ids one pass of the decode programs as wide as the ids (advance_block; a model with
--- sliding windows: a decode step each), a single id one decode step); returns the logits [V]
--- after the last. nil and a message when they do not fit the capacity left.
function Session:feed(ids)
  if type(ids) ~= "table" or #ids == 0 then error("feed: give a non-empty array of ids", 2) end
  if #ids > self:room() then
    return nil, string.format("%d more tokens do not fit: %d of the session's %d positions are used", #ids, self.position,
      self.capacity)
  end
  if self.position == 0 then
    prefill(self, ids)
  elseif #ids > 1 and not self.model.arch.sliding_window then -- (sliding windows move inside a block)
    advance_block(self, ids)
  else
    for _, id in ipairs(ids) do step(self, id) end
  end
  return self.logits
end

--- Goes back to holding the first `position` positions (0 <= position <= what it holds): the
--- later ones are let go (their mask closed again), so the next feed continues from there. A
--- chat uses it where a re-rendered conversation departs from what the cache holds. The
--- logits are gone until the next feed.
function Session:rewind(position)
  if math.type(position) ~= "integer" or position < 0 or position > self.position then
    error(string.format("rewind: position must be an integer from 0 to %d (the positions held)", self.position), 2)
  end
  if position == self.position then return end
  local m = self.model
  if position == 0 then
    self.pending, self.position = nil, 0 -- the next feed is a prefill again
  elseif self.pending then
    self.pending.T = position -- (settle copies the first T of the prefill's keys and values)
    self.position = position
  else
    for _, cache in ipairs(self.caches) do values_of(m, cache.mask):slice(4, position + 1, self.position):fill(MASK) end
    -- positions a sliding window had closed that are back inside it open again
    local window, closed = m.arch.sliding_window, self.window_closed or 0
    local want = window and math.max(0, position - window + 1) or 0
    local last = math.min(closed, position)
    if last > want then
      for l = 1, m.n_layer do
        if m:is_sliding(l) then values_of(m, self.caches[l].mask):slice(4, want + 1, last):fill(0) end
      end
    end
    self.window_closed = math.min(closed, want)
    self.position = position
  end
  self.logits = nil
end

--- An iterator of new ids sampled from the session's logits ({max_tokens =, temperature =,
--- top_k =, top_p =, min_p =, repeat_penalty =, presence_penalty =, frequency_penalty =,
--- repeat_last_n =, recent = ids already there (the prompt's), seed =, vocab =,
--- stop = {[id] = true}}; M.sample's), each fed back before the next is drawn.
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
  local recent = opts.recent or {} -- ids the penalties count: the caller's (a prompt's), then these
  return function()
    if finished or produced >= budget then return nil end
    local id = M.sample(self.logits, opts, random, recent)
    recent[#recent + 1] = id
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
    min_p = opts.min_p, repeat_penalty = opts.repeat_penalty, presence_penalty = opts.presence_penalty,
    frequency_penalty = opts.frequency_penalty, repeat_last_n = opts.repeat_last_n, recent = { table.unpack(prompt) },
    seed = opts.seed, vocab = opts.vocab, stop = stop, feed_last = false })
end

return M

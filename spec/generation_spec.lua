-- KV-cached generation (ane.models.generation): sessions keep their caches inside the decode
-- attention programs (resident inputs), grow them as positions fill, and take turns when two
-- sessions of one model share programs. Each is checked against an independent path: one
-- prefill of the whole sequence (no cache at all), or a session that ran alone.
local ane = require("ane")
local llama = require("ane.models.llama")
local helpers = require("spec.helpers")

local function tiny_llama(precision, seq_len)
  local W = llama.random_weights({ dim = 64, hidden = 128, n_layer = 2, n_head = 4, vocab_size = 256, seq_len = seq_len }, 3)
  return llama.from_weights(W, { precision = precision })
end

local function random_ids(n, seed)
  local random, ids = require("ane.models.generation").rng(seed), {}
  for i = 1, n do ids[i] = math.floor(random() * 256) end
  return ids
end

-- Whether a program kind is a decode step's attention over a session's caches: its own
-- program, or with the FFN after it (a session's one program a layer, the cpu profile's).
local function decodes(kind) return kind:match("^attn_decode") or kind:match("^layer_decode") end

-- How many such programs m holds.
local function decode_programs(m)
  local count = 0
  for _, kind in m:each_program() do count = count + (decodes(kind) and 1 or 0) end
  return count
end

-- Two sessions of m for each prompt, each fed it: the ones that will step alone and together.
local function session_pairs(m, prompts, capacity)
  local alone, together = {}, {}
  for i, prompt in ipairs(prompts) do
    alone[i], together[i] = m:session({ capacity = capacity }), m:session({ capacity = capacity })
    alone[i]:feed(prompt)
    together[i]:feed(prompt)
  end
  return alone, together
end

describe("sampling", function()
  local generation = require("ane.models.generation")

  it("draws no id at or beyond opts.vocab, greedy or sampled (a classifier wider than its tokenizer)", function()
    -- logits favour the last 6 of 16 ids, which a 10-token tokenizer could not decode
    local values = { 0.1, 0.4, 2.0, 0.3, 1.5, 0.2, 0.9, 0.0, 1.1, 0.6, 9, 10, 11, 12, 13, 14 }
    local row = ane.tensor.from(values, { 16 })
    assert.are.equal(15, generation.sample(row, { temperature = 0 }, generation.rng(1))) -- without vocab: the top id
    assert.are.equal(2, generation.sample(row, { temperature = 0, vocab = 10 }, generation.rng(1))) -- the top of ids 0..9
    local random, drawn = generation.rng(5), {}
    for _ = 1, 400 do
      local id = generation.sample(row, { temperature = 2, top_k = 8, vocab = 10 }, random)
      assert.is_true(id >= 0 and id < 10, "id " .. id)
      drawn[id] = true
    end
    assert.is_true(drawn[2] and drawn[4] and drawn[1]) -- sampling still spreads over the allowed ids
  end)

  -- min-p as llama.cpp defines it: a token stays when its probability at temperature 1 is at
  -- least min_p times the likeliest's, i.e. its logit at least the best + ln(min_p). The row with
  -- the others set to -inf by hand (the definition) must draw the same id for the same u.
  it("leaves out the tokens min-p drops, drawing as the hand-masked row does", function()
    local values = { 3.0, 2.9, 1.0, 0.5, 2.2, -1, 2.71, 2.69 }
    local row = ane.tensor.from(values, { 8 })
    local floor = 3.0 + math.log(0.5) -- 2.3069: ids 0, 1, 6, 7 stay
    local masked = {}
    for i, v in ipairs(values) do masked[i] = v >= floor and v or -math.huge end
    local masked_row = ane.tensor.from(masked, { 8 })
    for i = 0, 99 do
      local u = (i + 0.5) / 100
      for _, temperature in ipairs({ 0.7, 1.0, 1.5 }) do
        local id = row:sample(temperature, nil, nil, u, 0.5)
        assert.are.equal(masked_row:sample(temperature, nil, nil, u), id)
        assert.is_true(values[id] >= floor)
      end
    end
    assert.has_error(function() row:sample(1, nil, nil, 0.5, 1.5) end)
  end)

  -- llama.cpp's penalties over the last repeat_last_n ids: a positive logit divided by the repeat
  -- penalty, a negative one multiplied; then presence (once) and frequency (per occurrence) subtracted
  it("penalizes recent ids as llama.cpp does, and only those", function()
    local row = ane.tensor.from({ 2.0, -1.0, 0.5, 3.0, 1.0 }, { 5 })
    local recent = { 0, 1, 1, 3, 0, 0 } -- id 0 three times, 1 twice, 3 once; 2 and 4 never
    local out = generation.penalize(row, { repeat_penalty = 2, presence_penalty = 0.25, frequency_penalty = 0.5 }, recent)
    local want = { 2.0 / 2 - 0.25 - 0.5 * 3, -1.0 * 2 - 0.25 - 0.5 * 2, 0.5, 3.0 / 2 - 0.25 - 0.5, 1.0 }
    for i, w in ipairs(want) do assert.is_true(math.abs(out:get(i) - w) < 1e-6, i .. ": " .. out:get(i) .. " vs " .. w) end
    assert.are.equal(2.0, row:get(1)) -- the session's logits are left as they were
    local windowed = generation.penalize(row, { presence_penalty = 1, repeat_last_n = 2 }, recent) -- the last two: 0, 0
    assert.are.equal(1.0, windowed:get(1))
    assert.are.equal(-1.0, windowed:get(2))
    assert.are.equal(row, generation.penalize(row, {}, recent)) -- no penalty: the row itself
  end)
end)

describe("decoding sessions", function()
  it("of different short lengths share the decode programs of 64 positions (on sim)", function()
    local m = tiny_llama("fp32", 1024)
    local prompt = random_ids(9, 7)
    local function tokens(n)
      local out = {}
      for id in m:generate(prompt, { max_tokens = n, temperature = 0, stop_at_end = false }) do out[#out + 1] = id end
      return out
    end
    local four = tokens(4)
    local programs = m:stats().programs
    local forty = tokens(40) -- capacity 49 instead of 13: the same programs, no compile
    assert.are.equal(programs, m:stats().programs)
    assert.are.same(four, { table.unpack(forty, 1, 4) })
  end)

  it("beyond 256 positions start at 256 and grow as positions fill (512, then every 256), logits equal to one prefill", function()
    local m = tiny_llama("fp32", 1024)
    local ids = random_ids(600, 5)
    local session = m:session()
    local prompt = {}
    for i = 1, 40 do prompt[i] = ids[i] end
    session:feed(prompt)
    -- the first token needs no decode program: they compile at the first step
    assert.are.equal(0, decode_programs(m))
    assert.is_nil(session.size)
    local want = m:logits(ids) -- [600, V]: no cache, every position computed at once
    local sizes = {}
    for p = 41, 600 do
      local row = session:feed({ ids[p] })
      sizes[session.size] = sizes[session.size] or p
      if p == 64 or p == 65 or p == 129 or p == 256 or p == 257 or p == 512 or p == 513 or p == 600 then
        -- fp32 on both paths; they differ only in the order of sums (blocked matmuls, the
        -- softmax over a cache vs a causal row), a few fp32 ulps of logits of size ~1
        local diff = row:max_abs_diff(want:slice(1, p, p):reshape(-1))
        assert.is_true(diff < 1e-4, string.format("position %d: logits differ by %.3g", p, diff))
      end
    end
    -- 256 positions first, not the 1,024 of the capacity (the caches hold about what is used);
    -- the cache grew when positions 257 and 513 arrived
    assert.are.same({ [256] = 41, [512] = 257, [768] = 513 }, sizes)
    -- the model keeps the sizes sessions start with (up to 256) and the one in use; it let
    -- go of 512's programs when the cache grew past them (a long chat held every size it passed)
    local kept = {}
    for program, kind in m:each_program() do
      if decodes(kind) then
        for _, port in ipairs(program:inputs()) do
          if port.name == "k_cache" then kept[port.shape[4]] = true end
        end
      end
    end
    assert.are.same({ [256] = true, [768] = true }, kept)
    assert.are.equal(2 * 2, decode_programs(m)) -- two sizes, two layers
    -- prefill sizes follow the same steps on sim: 480 -> 512, 520 -> 768, 900 -> 1024
    assert.are.same({ 512, 768, 1024 }, { m:bucket(480, 1024), m:bucket(520, 1024), m:bucket(900, 1024) })
  end)

  -- A session of `capacity` fed `prompt_length` of `ids` at once, then the rest a step each:
  -- its caches hold `size` positions from the first step on, and its first and last steps'
  -- logits are one prefill's of the ids. Returns the session.
  local function steps_at_size(m, capacity, ids, prompt_length, size)
    local session = m:session({ capacity = capacity })
    session:feed({ table.unpack(ids, 1, prompt_length) })
    local want = m:logits(ids)
    for p = prompt_length + 1, #ids do
      local row = session:feed({ ids[p] })
      assert.are.equal(size, session.size, "position " .. p)
      if p == prompt_length + 1 or p == #ids then
        -- fp32 on both paths, sums in other orders (as in the growth test above)
        assert.is_true(row:max_abs_diff(want:slice(1, p, p):reshape(-1)) < 1e-4, "position " .. p)
      end
    end
    return session
  end

  it("of at most 256 positions take their capacity's size at once (growing would cost compiles)", function()
    local m = tiny_llama("fp32", 1024) -- fp32: the cpu profile, whose caches grow
    steps_at_size(m, 200, random_ids(150, 9), 10, 256)
    assert.are.equal(2, decode_programs(m)) -- one size, two layers
  end)

  it("take their capacity rounded up to a multiple of 64 positions, not to a power of two", function()
    local m = tiny_llama("fp32", 1024) -- the cpu profile
    -- (the caches' rows are read from their start: a shorter row is a cheaper step)
    local expected = { [10] = 64, [64] = 64, [65] = 128, [133] = 192, [200] = 256, [300] = 320, [600] = 640, [1024] = 1024 }
    for capacity, size in pairs(expected) do
      assert.are.equal(size, m:session({ capacity = capacity }).Smax, "capacity " .. capacity)
    end
    local session = steps_at_size(m, 133, random_ids(133, 4), 20, 192)
    assert.is_nil(session:feed({ 1 })) -- its 133 positions are its capacity, not the 192 it holds
  end)

  it("keep their capacity's cache size in the ane profile, as on the device (ANE-05)", function()
    local m = tiny_llama("fp16", 1024) -- fp16: the ane profile
    assert.are.equal("ane", m.profile)
    local session = m:session({ capacity = 300 })
    local ids = random_ids(140, 6)
    local prompt = {}
    for i = 1, 40 do prompt[i] = ids[i] end
    session:feed(prompt)
    for p = 41, 140 do session:feed({ ids[p] }) end -- past 64 and 128 positions
    assert.are.equal(m:bucket(300, 1024), session.size) -- one size from the start: no growth
    assert.are.equal(2, decode_programs(m)) -- one per layer: a new size would cost the device a compile per layer
  end)

  it("compute one position of the device's 32-wide rows per step in the ane profile", function()
    local m = tiny_llama("fp32", 512) -- profile ane: I/O at least 32 wide (ANE-21)
    assert.are.equal("attn_decode_step", m:kind_for("attn_decode", 1, 32))
    assert.are.equal("ffn", m:kind_for("ffn", 1, 1)) -- the cpu profile's width-1 programs compute 1 already
    local step = m:program("ffn_step", 1, 32)
    assert.are.same({ 1, 64, 1, 32 }, step:inputs()[1].shape) -- the device's layout is kept
    local x = ane.tensor.randn({ 1, 64, 1, 32 }, { seed = 3 })
    local y = step:eval({ x = x }).y
    -- position 1 as the full 32-position program computes it (fp32: only the order of sums differs)
    local full = m:program("ffn", 1, 32):eval({ x = x }).y
    assert.is_true(y:slice(4, 1, 1):max_abs_diff(full:slice(4, 1, 1)) < 1e-5)
    -- the other 31 positions are not computed: zeros
    assert.are.equal(0, y:slice(4, 2, 32):abs():max_abs_diff(ane.tensor({ 1, 64, 1, 31 }):fill(0)))
  end)

  it("feed prompts of up to 8 tokens in the ane profile through the decode steps, as accurate as a prefill", function()
    local W = llama.random_weights({ dim = 64, hidden = 128, n_layer = 2, n_head = 4, vocab_size = 256, seq_len = 512 }, 3)
    local m32 = llama.from_weights(W, { precision = "fp32", profile = "cpu" })
    local ids = random_ids(9, 12)
    local function prefill_programs(m)
      local count = 0
      for _, kind in m:each_program() do count = count + (kind:match("prefill") and 1 or 0) end
      return count
    end
    for _, T in ipairs({ 1, 3, 8, 9 }) do
      local m16 = llama.from_weights(W, { precision = "fp16" }) -- the ane profile: 32-wide programs
      assert.are.equal("ane", m16.profile)
      local prompt = { table.unpack(ids, 1, T) }
      local fed = m16:session():feed(prompt)
      -- up to 8 tokens through the steps: no prefill program; 9 through one per layer and group
      assert.are.equal(T <= 8, prefill_programs(m16) == 0, T .. " tokens")
      -- against fp32: both fp16 paths round the same ops to fp16, in another order; the steps'
      -- error may not exceed twice the prefill program's (here both are ~3e-4 of logits ~1)
      local want = m32:logits(prompt):slice(1, T, T):reshape(-1)
      local prefilled = m16:logits(prompt):slice(1, T, T):reshape(-1) -- the 32-position prefill programs
      assert.is_true(fed:max_abs_diff(want) <= 2 * prefilled:max_abs_diff(want),
        string.format("%d tokens: fed %.3g, prefill %.3g from fp32", T, fed:max_abs_diff(want), prefilled:max_abs_diff(want)))
    end
  end)

  it("share programs but own their caches: each session's logits are those it gets alone, bit for bit", function()
    for _, precision in ipairs({ "fp16", "fp32" }) do
      local m = tiny_llama(precision, 512)
      local first, second = random_ids(40, 7), random_ids(30, 8)
      local function alone(ids, extra)
        local session = m:session()
        session:feed(ids)
        local rows = {}
        for i, id in ipairs(extra) do rows[i] = session:feed({ id }):bytes() end
        return rows
      end
      local more_a, more_b = random_ids(5, 9), random_ids(5, 10)
      local want_a, want_b = alone(first, more_a), alone(second, more_b)
      local a, b = m:session(), m:session()
      a:feed(first)
      b:feed(second) -- the same programs: a's caches are saved
      for i = 1, 5 do
        assert.are.equal(want_a[i], a:feed({ more_a[i] }):bytes(), precision .. " session a, token " .. i)
        assert.are.equal(want_b[i], b:feed({ more_b[i] }):bytes(), precision .. " session b, token " .. i)
      end
      -- the caches are the sessions' own buffers, not inputs kept in the shared programs
      assert.are_not.equal(a.caches[1].k_cache, b.caches[1].k_cache)
      local programs = a.one_program_a_layer and a.layers or a.attention -- (the cpu profile's: a program a layer)
      assert.are.equal(2, #programs)
      for _, program in ipairs(programs) do
        assert.error_matches(function() program:read_input("k_cache") end, "was never written with write_input")
      end
    end
  end)

  -- step_together: the attention of each session on its caches, the FFN and the classifier
  -- once over all their positions. Up to 16 columns sim's products take each column's sums as
  -- the one-column product does (tensor/gemv.h), so in fp16 (the server's precision) every
  -- session's logits are the bytes it gets stepping alone; fp32's several-column products go
  -- through BLAS (other sums): within 1e-5 of logits of size ~1 (fp32 rounding of 64-term sums).
  it("step together as each steps alone: bit for bit in fp16, within 1e-5 in fp32", function()
    local generation = require("ane.models.generation")
    for _, setup in ipairs({ { "fp16", "cpu", 0 }, { "fp32", "cpu", 1e-5 }, { "fp16", "ane", 0 } }) do
      local W = llama.random_weights({ dim = 64, hidden = 128, n_layer = 2, n_head = 4, vocab_size = 256, seq_len = 128 }, 3)
      local m = llama.from_weights(W, { precision = setup[1], profile = setup[2] })
      local prompts = { random_ids(3, 1), random_ids(17, 2), random_ids(1, 3), random_ids(9, 4), random_ids(40, 5) }
      local alone, together = session_pairs(m, prompts, 64)
      for t = 1, 5 do
        local ids = random_ids(#prompts, 20 + t)
        generation.step_together(together, ids)
        for i, session in ipairs(alone) do
          local want = session:feed({ ids[i] })
          local label = string.format("%s %s: session %d, step %d", setup[1], setup[2], i, t)
          if setup[3] == 0 then assert.are.equal(want:bytes(), together[i].logits:bytes(), label)
          else assert.is_true(want:max_abs_diff(together[i].logits) < setup[3], label) end
          assert.are.equal(session.position, together[i].position)
        end
      end
    end
  end)

  -- Every family's attention batched the same way (one program per layer: the projections over
  -- the sessions' columns, each column over its own caches, brought to one capacity): GPT-2's
  -- learned positions, Qwen2's biases, Qwen3's q / k norms, Mistral's sliding window (16
  -- positions, slid past here), Gemma 3's post norms and local rotary base, Phi-3, a GGUF
  -- file's Q4_0 blocks on int8 activations; bit for bit each session alone, fp16, cpu profile.
  it("step together as each steps alone in every family, bit for bit", function()
    local generation = require("ane.models.generation")
    local models = require("ane.models")
    for _, path in ipairs({ "reference/gpt2-tiny", "reference/qwen2-tiny", "reference/qwen3-tiny", "reference/mistral-tiny",
      "reference/gemma3-tiny", "reference/phi3-tiny", "reference/llama3-tiny", "gguf/llama-tiny-q4_0.gguf" }) do
      local m = assert(models.load(helpers.root .. "/spec/data/" .. path, { precision = "fp16", profile = "cpu" }))
      local prompts = { random_ids(3, 1), random_ids(17, 2), random_ids(1, 3), random_ids(9, 4) }
      for _, prompt in ipairs(prompts) do
        for j, id in ipairs(prompt) do prompt[j] = id % m.vocab_size end
      end
      local alone, together = session_pairs(m, prompts, 32)
      for t = 1, 12 do
        local ids = random_ids(#prompts, 20 + t)
        for i = 1, #ids do ids[i] = ids[i] % m.vocab_size end
        generation.step_together(together, ids)
        for i, session in ipairs(alone) do
          assert.are.equal(session:feed({ ids[i] }):bytes(), together[i].logits:bytes(), string.format("%s: session %d, step %d",
            path, i, t))
        end
      end
    end
  end)
end)

-- On the cpu profile a session's decode step runs each layer as one program (layer_decode: the
-- attention, then the FFN) where one_program_a_layer = false runs two (attn_decode, ffn). The
-- same nodes in the same order: the split programs are the reference, bit for bit.
describe("one program a layer", function()
  local W = llama.random_weights({ dim = 64, hidden = 128, n_layer = 2, n_head = 4, vocab_size = 256, seq_len = 512 }, 4)

  -- The logits' bytes after each of `steps` single ids fed after `prompt`, by a session of m.
  local function decoded(m, options, prompt, steps)
    local session, rows = m:session(options), {}
    session:feed(prompt)
    for i, id in ipairs(steps) do rows[i] = session:feed({ id }):bytes() end
    return rows, session
  end

  local function kinds(m)
    local held = {}
    for _, kind in m:each_program() do held[kind] = true end
    return held
  end

  it("decodes bit for bit as the split programs, in fp16 and fp32", function()
    local prompt, steps = random_ids(12, 21), random_ids(20, 22)
    for _, precision in ipairs({ "fp16", "fp32" }) do
      local split_model = llama.from_weights(W, { precision = precision, profile = "cpu" })
      local want, split = decoded(split_model, { one_program_a_layer = false }, prompt, steps)
      assert.is_false(split.one_program_a_layer)
      assert.is_nil(kinds(split_model).layer_decode)
      local m = llama.from_weights(W, { precision = precision, profile = "cpu" })
      local got, session = decoded(m, nil, prompt, steps)
      assert.is_true(session.one_program_a_layer)
      assert.is_true(kinds(m).layer_decode)
      assert.is_nil(kinds(m).attn_decode) -- (and no split program compiled beside it)
      for i = 1, #steps do assert.are.equal(want[i], got[i], precision .. " step " .. i) end
    end
  end)

  -- sim writes a step's appends itself, mid-program, after the step computing the output and the
  -- last step reading the cache (the fused attention's scores step reads the keys; the value
  -- product the values): an append written before the cache's last read would be read back.
  -- The witness: the same program evaluated without appends on copies of the caches as they were.
  it("appends its key and value mid-program, as an eval without appends computes them", function()
    for _, precision in ipairs({ "fp16", "fp32" }) do -- (fp16: the fused attention; fp32: step by step)
      local m = llama.from_weights(W, { precision = precision, profile = "cpu" })
      local program = m:program("layer_decode", 1, 1, 64)
      local k_cache, v_cache = ane.tensor({ 1, 64, 1, 64 }, precision), ane.tensor({ 1, 64, 1, 64 }, precision)
      local mask = ane.tensor({ 1, 1, 1, 64 }, precision):fill(-65504)
      for position = 0, 40 do
        local inputs = m:decode_inputs(position, 1)
        inputs.x = ane.tensor.randn({ 1, 64, 1, 1 }, { seed = 50 + position }):to(precision)
        inputs.k_cache, inputs.v_cache, inputs.mask = k_cache:copy(), v_cache:copy(), mask:copy()
        local want = program:eval(inputs)
        inputs.k_cache, inputs.v_cache, inputs.mask = k_cache, v_cache, mask
        local got = program:eval(inputs, nil, { append = { k_cache = "k", v_cache = "v", mask = 0 }, at = position + 1 })
        local where = precision .. " position " .. position
        assert.are.equal(want.y:bytes(), got.y:bytes(), where)
        assert.are.equal(want.k:bytes(), k_cache:slice(4, position + 1, position + 1):copy():bytes(), where)
        assert.are.equal(want.v:bytes(), v_cache:slice(4, position + 1, position + 1):copy():bytes(), where)
        if position < 63 then -- the positions after it untouched
          assert.are.equal(0, k_cache:slice(4, position + 2, 64):abs():reshape(-1):topk(1)[1], where)
        end
      end
    end
  end)

  it("is left to the split programs where they differ: asynchronous, LoRA, fed weights, the ane profile", function()
    local m = llama.from_weights(W, { precision = "fp16", profile = "cpu" })
    assert.is_false(m:session({ asynchronous = true }).one_program_a_layer)
    assert.is_false(llama.from_weights(W, { precision = "fp16", profile = "cpu", weights_as_inputs = true }):session()
      .one_program_a_layer)
    assert.is_false(llama.from_weights(W, { precision = "fp16", profile = "cpu", lora = { rank = 2 } }):session()
      .one_program_a_layer)
    assert.is_false(llama.from_weights(W, { precision = "fp16" }):session().one_program_a_layer) -- (the ane profile)
  end)

  it("takes patched weights as the split programs do", function()
    local prompt, before, after = random_ids(10, 23), random_ids(4, 24), random_ids(4, 25)
    local m = llama.from_weights(W, { precision = "fp16", profile = "cpu" })
    local one, two = m:session(), m:session({ one_program_a_layer = false })
    one:feed(prompt)
    two:feed(prompt)
    for _, id in ipairs(before) do one:feed({ id }) end
    for _, id in ipairs(before) do two:feed({ id }) end
    local unpatched = one.logits:bytes()
    local params = m:parameters()
    params["w2.1"]:copy_from(params["w2.1"]:scale(0.5)) -- the last FFN's down projection, in both programs' kinds
    params["wq.0"]:copy_from(params["wq.0"]:scale(2))
    m:load_parameters()
    for _, id in ipairs(after) do
      local want = two:feed({ id }):bytes()
      assert.are.equal(want, one:feed({ id }):bytes())
    end
    -- against the same ids through a model built with those weights: the patch took
    local fresh = llama.from_weights(W, { precision = "fp16", profile = "cpu" })
    local fresh_params = fresh:parameters()
    for name, t in pairs(params) do fresh_params[name]:copy_from(t) end
    fresh:load_parameters()
    local ids = {}
    for _, list in ipairs({ prompt, before, after }) do for _, id in ipairs(list) do ids[#ids + 1] = id end end
    -- fp16 through a cache vs one prefill: the same ops rounded in other orders (a few fp16 ulps of logits ~1)
    local prefilled = fresh:logits(ids):slice(1, #ids, #ids):reshape(-1)
    assert.is_true(one.logits:max_abs_diff(prefilled) < 2e-2)
    assert.are_not.equal(unpatched, one.logits:bytes())
  end)

  -- A prefill's outputs are clamped before its keys and values fill the caches; a step's key and
  -- value are clamped as they are appended (the step's own attention read them as computed, as a
  -- prefill's does). Every profile: the cpu one's sim appends them mid-program, the ane one's
  -- runtime after the evaluation.
  it("clamps a step's key and value as they enter the caches, as a prefill's are", function()
    local prompt, steps = random_ids(6, 31), random_ids(3, 32)
    for _, case in ipairs({ { profile = "cpu", one = true }, { profile = "cpu", one = false }, { profile = "ane" } }) do
      local m = llama.from_weights(W, { precision = "fp16", profile = case.profile })
      local params = m:parameters()
      params["wk.0"]:copy_from(params["wk.0"]:scale(3e5)) -- the first layer's keys up to ~1e5: beyond fp16's 65504
      m:load_parameters()
      local session = m:session({ one_program_a_layer = case.one })
      session:feed(prompt)
      local after_prefill = m:stats().clamped
      for _, id in ipairs(steps) do session:feed({ id }) end
      local keys = session.caches[1].k_cache
      keys = (keys.tensor and keys:tensor() or keys):slice(4, 1, #prompt + #steps):to("fp32")
      local stepped = keys:slice(4, #prompt + 1, #prompt + #steps):copy()
      local what = string.format("%s profile%s", case.profile, case.one == false and ", split programs" or "")
      -- every position's keys finite, the largest at the limit (an infinity before this: NaN)
      assert.are.equal(65504, keys:max_abs_diff(keys:scale(0)), what)
      local at_limit = stepped:copy():clamp_activations(65503) -- (the steps' keys clamped to the limit)
      assert.is_true(at_limit > 0, what)
      assert.is_true(m:stats().clamped - after_prefill >= at_limit, what) -- counted
    end
  end)

  -- The split programs clamp the attention's output between them (values beyond the limit to
  -- the limit, counted in model:stats()); the one program clips it inside, as the softmax's
  -- scores are: the same values, uncounted. The layer's output is clamped and counted either way.
  it("clips an overflowing attention inside the program: the split programs' logits, the clamps uncounted", function()
    local prompt, steps = random_ids(6, 26), random_ids(3, 27)
    local function overflowing(options)
      local m = llama.from_weights(W, { precision = "fp16", profile = "cpu" })
      local params = m:parameters()
      -- the first attention's output beyond fp16's range: its values ~1e4x, its out projection too
      params["wv.0"]:copy_from(params["wv.0"]:scale(1e4))
      params["wo.0"]:copy_from(params["wo.0"]:scale(1e4))
      m:load_parameters()
      return decoded(m, options, prompt, steps), m
    end
    local want, split_model = overflowing({ one_program_a_layer = false })
    local got, m = overflowing(nil)
    for i = 1, #steps do assert.are.equal(want[i], got[i], "step " .. i) end
    -- both count the prefill's clamps (its programs are split); the split steps count theirs too
    assert.is_true(m:stats().clamped > 0)
    assert.is_true(split_model:stats().clamped > m:stats().clamped)
  end)
end)

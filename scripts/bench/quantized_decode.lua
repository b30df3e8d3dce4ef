-- Benchmark: decoding with quantized weights, in one run, two parts.
--   qwen3    Qwen3-0.6B shape (random weights, the real config): prefill of 256 tokens and
--            greedy decode after a prompt of --prompt tokens (its prefill outside the timing;
--            the bound counts weights only, so a long prompt shows what attention over the
--            cache costs) in fp16, int8 and int4 (cpu profile; /a8 and /a16: the same
--            weights with activations = "int8" / "int16", integer products), each decode round right
--            after a measurement of the memory read bandwidth: the bound of a round is
--            bandwidth / bytes read per token (the layers' weights and the classifier as
--            stored); prints tok/s, the bound and the median ratio with its range.
--   stories  the same random Stories110M-shaped llama2.c checkpoint in anelua fp32 / fp16 /
--            int8 / int4 and in llama.cpp F32 / F16 / Q8_0 / Q4_0 (converted to GGUF by
--            ../shared/peers/llama.cpp/make_models.sh), plus run.c fp32, alternating the
--            programs round by round; prints the median ratio of each pair and its range, and
--            each mode's drift from fp32: on a fixed text, anelua's mode and llama.cpp's
--            weights of the matching format (dequantized, scripts/bench/gguf_to_llama2c.py) in
--            anelua's fp32 forward (mean KL, top-1 agreement; and the layers' weights' squared
--            error relative to the checkpoint's), and each engine's greedy text against its own
--            full-precision one.
-- Without run.c and the checkpoint the stories part says so and is skipped; without llama.cpp
-- (its binaries need the CPU they were built for) it says so and compares with run.c alone.
--   build/anelua scripts/bench/quantized_decode.lua [--part qwen3|stories|both] [--tokens N] [--rounds R]
--                                                   [--modes fp16,int8,...] (default: all) [--prompt N]
--                                                   [--drift-positions N]
local ane = require("ane")
local llama = require("ane.models.llama")
local qwen3 = require("ane.models.qwen3")

local root = (arg[0]:match("^(.*)/scripts/bench/[^/]*$") or ".")
local common = dofile(root .. "/scripts/bench/common.lua")
local command = require("ane.cli").command {
  name = "scripts/bench/quantized_decode.lua",
  summary = "Quantized decode against the bandwidth bound (Qwen3-0.6B shape) and llama.cpp (Stories110M shape).",
  options = common.peer_options(root, {
    { "part", "choice", "both", "which part to run", choices = { "qwen3", "stories", "both" } },
    { "tokens", "integer", 128, "tokens decoded per round", min = 8 },
    { "rounds", "integer", 3, "alternating rounds", min = 1 },
    { "modes", "string", "", "comma-separated modes to run (default: all; fp32 in the stories part only)" },
    { "prompt", "integer", 4, "prompt tokens before the decode (qwen3 part; with --tokens within its 40,960 positions)",
      min = 1, max = 32768 },
    { "drift-positions", "integer", 505, "positions of the fixed text the drift is scored on (stories part; at most "
      .. "the text's 505)", min = 8, max = 505 },
  }),
}
local opts = command:parse(arg)
ane.set_compile_budget(1000000)
local WEIGHTS = { fp32 = "fp32", fp16 = "fp16", int8 = "int8", int4 = "int4", ["int8/a8"] = "int8", ["int4/a8"] = "int4",
  ["int8/a16"] = "int8", ["int4/a16"] = "int4" }
local QUANTIZED_AND_FP16 = "fp16,int8,int4,int8/a8,int4/a8,int8/a16,int4/a16"
local function modes(default)
  local list = {}
  for mode in (opts.modes ~= "" and opts.modes or default):gmatch("[^,]+") do
    if not WEIGHTS[mode] then
      command:fail("--modes: unknown mode '" .. mode .. "' (fp32, fp16, int8, int4, int8/a8, int4/a8, int8/a16, int4/a16)")
    end
    list[#list + 1] = mode
  end
  return list
end
local QWEN3_MODES, STORIES_MODES = modes(QUANTIZED_AND_FP16), modes("fp32," .. QUANTIZED_AND_FP16)
local ACTIVATIONS = { a8 = "int8", a16 = "int16" }

local function model_options(mode)
  local weights = WEIGHTS[mode]
  local dense = weights == "fp16" or weights == "fp32"
  return { precision = dense and weights or "fp16", profile = "cpu", quantize = not dense and weights or nil,
    quantize_classifier = not dense and "int8" or nil, activations = ACTIVATIONS[mode:match("/(a%d+)$")] }
end

local bytes_per_token, decode_rate = common.bytes_per_token, common.decode_rate

-- ------------------------------------------------------------------ Qwen3-0.6B shape

local function qwen3_part()
  print(string.format("Qwen3-0.6B shape (random weights, seed 1), cpu profile, greedy: %d tokens decoded after a %d-token prompt; bound = read bandwidth / bytes per token", opts.tokens, opts.prompt))
  local weights = qwen3.random_weights(qwen3.CONFIGS["0.6B"], 1)
  local probe = common.bandwidth_probe()
  local prompt = {}
  for i = 1, 256 do prompt[i] = (i * 7919) % 151000 + 1 end
  local decode_prompt = {}
  for i = 1, opts.prompt do decode_prompt[i] = i <= 4 and i or (i * 7919) % 151000 + 1 end
  print("| mode | weights + classifier read per token | prefill 256 tok/s | decode tok/s | bound tok/s | of bound (median, range) |")
  print("|---|---|---|---|---|---|")
  for _, mode in ipairs(QWEN3_MODES) do
    local model = qwen3.from_weights(weights, model_options(mode))
    decode_rate(model, decode_prompt, 4) -- compile the decode programs outside the timing
    assert(model:session({ capacity = 512 }):feed(prompt)) -- compiles the prefill programs
    local session = model:session({ capacity = 512 })
    local start = ane.clock()
    assert(session:feed(prompt))
    local prefill = #prompt / (ane.clock() - start)
    local bytes = bytes_per_token(model)
    local median, low, high = common.paired_decode_rounds(probe, opts.rounds, bytes,
      function() return decode_rate(model, decode_prompt, opts.tokens) end)
    print(string.format("| %s | %.0f MB | %.1f | %.1f | %.1f | %.0f%% (%.0f-%.0f%%) |", mode, bytes / 1e6, prefill,
      median.rate, median.bound, 100 * median.ratio, 100 * low, 100 * high))
    io.stdout:flush()
    model, session = nil, nil
    collectgarbage()
  end
end

-- ------------------------------------------------------------------ Stories110M vs llama.cpp

local function llama_cpp_text(bin, gguf, prompt, tokens)
  local command = string.format("%s -m %s -p %s -n %d -t 2 -c 512 --temp 0 -no-cnv -s 1 2>/dev/null",
    common.quote(bin .. "/llama-cli"), common.quote(gguf), common.quote(prompt), tokens)
  local pipe = io.popen(command)
  local text = pipe:read("a")
  pipe:close()
  return text
end

local function agreeing_characters(a, b)
  local n = 0
  while n < #a and n < #b and a:sub(n + 1, n + 1) == b:sub(n + 1, n + 1) do n = n + 1 end
  return n
end

local function stories_part()
  local paths, why = common.stories_peers(opts.peers, opts.work)
  local tokenizer_bin = root .. "/data/tokenizers/llama2/tokenizer.bin"
  if not paths then
    print("stories: peer not available: " .. why .. "; skipped")
    return
  end
  local bin, gguf = common.llama_cpp_models(opts.peers, opts.work, paths.checkpoint, tokenizer_bin)
  if not bin then print("stories: llama.cpp not available: " .. gguf .. "; anelua against run.c alone") end
  local peer_file = { fp32 = "model-f32.gguf", fp16 = "model-f16.gguf", int8 = "model-q8_0.gguf", int4 = "model-q4_0.gguf" }
  local peer_name = { fp32 = "F32", fp16 = "F16", int8 = "Q8_0", int4 = "Q4_0" }
  for mode, weights in pairs(WEIGHTS) do peer_file[mode], peer_name[mode] = peer_file[weights], peer_name[weights] end
  local tok = assert(require("ane.sentencepiece").load(tokenizer_bin, { vocab_size = 32000 }))
  local prompt = "Once upon a time"
  local models = {}
  for _, mode in ipairs(STORIES_MODES) do
    models[mode] = assert(llama.load(paths.checkpoint, model_options(mode)))
    common.anelua_greedy(models[mode], tok, prompt, 16) -- compile outside the rounds
  end
  print(string.format("Stories110M shape (random weights), %d positions per run, greedy, 2 threads; alternating; tok/s of "
    .. "decode steps (anelua's prompt prefill outside, as llama-bench's tg has no prompt; run.c's prompt tokens are steps)",
    opts.tokens))
  local header = { string.format("%-6s %9s", "round", "run.c") }
  for _, mode in ipairs(STORIES_MODES) do
    header[#header + 1] = string.format("%9s", "a." .. mode) .. (bin and string.format(" %9s", "cpp." .. peer_name[mode]) or "")
  end
  print(table.concat(header, " "))
  local ratios, runc_ratios = {}, {}
  for _, mode in ipairs(STORIES_MODES) do ratios[mode], runc_ratios[mode] = {}, {} end
  for round = 1, opts.rounds do
    local runc = common.run_runc(paths, tokenizer_bin, opts.tokens, prompt)
    local row = { string.format("%-6d %9.1f", round, runc) }
    for _, mode in ipairs(STORIES_MODES) do
      local _, _, ours = common.anelua_greedy(models[mode], tok, prompt, opts.tokens)
      local theirs = bin and common.llama_bench(bin, gguf .. "/" .. peer_file[mode], 0, opts.tokens)
      ratios[mode][round] = theirs and ours / theirs or 0 / 0
      runc_ratios[mode][round] = ours / runc
      row[#row + 1] = string.format("%9.1f", ours) .. (bin and string.format(" %9.1f", theirs or 0 / 0) or "")
    end
    print(table.concat(row, " "))
    io.stdout:flush()
  end
  print()
  local rows = {}
  if bin then
    for _, mode in ipairs(STORIES_MODES) do rows[#rows + 1] = { mode, "llama.cpp " .. peer_name[mode], ratios[mode] } end
  end
  for _, mode in ipairs(STORIES_MODES) do rows[#rows + 1] = { mode, "run.c (fp32)", runc_ratios[mode] } end
  common.print_ratios(rows)
  -- drift from full precision, two ways. (1) On a fixed text, teacher-forced: each mode's
  -- next-token distributions against anelua fp32's at the same positions, and llama.cpp's
  -- weights of the matching format (its GGUF dequantized by gguf_to_llama2c.py) in anelua's
  -- fp32 forward: their weight rounding alone (llama.cpp's Q8_0 / Q4_0 products also round the
  -- activations to 8 bits, as the /a8 modes do, so in llama.cpp it drifts that much or more).
  -- (2) Each engine's greedy text against its own full-precision one: the characters that
  -- agree before the first difference (on random weights a lottery of near-ties). (3) What
  -- each format loses before any forward: the layers' weights against the checkpoint's.
  print()
  local fp32 = assert(llama.load(paths.checkpoint, { precision = "fp32", profile = "cpu" }))
  local checkpoint_layers = fp32.P.layers
  -- Over every matrix of every layer: the sum of squared differences from the checkpoint's
  -- weights over the sum of the checkpoint's squares.
  local function relative_weight_error(layers)
    local squared_error, squares = 0, 0
    for i, L in ipairs(layers) do
      for key, w in pairs(L) do
        local original = checkpoint_layers[i][key]:to("fp32")
        if original:ndim() >= 2 then
          local dense = (ane.quantized.is(w) and w:dequantize() or w):to("fp32"):reshape(original:shape())
          squared_error = squared_error + (dense - original):sum_of_squares()
          squares = squares + original:sum_of_squares()
        end
      end
    end
    return squared_error / squares
  end
  local text = tok:encode(common.FIDELITY_TEXT, { bos = true })
  local input = { table.unpack(text, 1, math.min(#text - 1, opts.drift_positions)) }
  local function log_softmax_rows(model)
    local rows = {}
    for t, row in ipairs(model:logits(input):to("fp32"):totable()) do rows[t] = common.log_softmax(row) end
    return rows
  end
  local reference = log_softmax_rows(fp32)
  local _, our_reference = common.anelua_greedy(fp32, tok, prompt, 64)
  local their_reference = bin and llama_cpp_text(bin, gguf .. "/model-f32.gguf", prompt, 60)
  fp32 = nil
  local their_drift = {} -- per peer format: mean KL and top-1 agreement, or the reason there is none
  local function their_weights_drift(mode)
    local name = peer_name[mode]
    if not bin then return "llama.cpp not available" end
    if name == "F32" then return "(the reference)" end
    if not their_drift[name] then
      local path, why = common.llama_cpp_weights(opts.peers, gguf .. "/" .. peer_file[mode],
        opts.work .. "/llama-cpp-" .. name .. "-fp32.bin")
      local model = path and assert(llama.load(path, { precision = "fp32", profile = "cpu" }))
      if model then
        local kl, agree = common.divergence(reference, log_softmax_rows(model))
        their_drift[name] = string.format("%.5f, %.1f%%, %.2e", kl, 100 * agree, relative_weight_error(model.P.layers))
      else
        their_drift[name] = why
      end
      model = nil
      collectgarbage()
    end
    return their_drift[name]
  end
  print(string.format("| drift from fp32 | on the text (%d positions): anelua's mode, mean KL (nats), top-1 agreement, "
    .. "layer weights' relative squared error | llama.cpp's weights in anelua's fp32 forward: the same three | greedy "
    .. "text, 64 tokens: anelua vs its fp32 | llama.cpp vs its F32 |", #input))
  print("|---|---|---|---|---|")
  for _, mode in ipairs(STORIES_MODES) do
    local kl, agree = common.divergence(reference, log_softmax_rows(models[mode]))
    local _, ours = common.anelua_greedy(models[mode], tok, prompt, 64)
    local theirs = bin and llama_cpp_text(bin, gguf .. "/" .. peer_file[mode], prompt, 60)
    print(string.format("| %s / %s | %.5f, %.1f%%, %.2e | %s | %d of %d characters agree | %s |", mode, peer_name[mode],
      kl, 100 * agree, relative_weight_error(models[mode].P.layers), their_weights_drift(mode),
      agreeing_characters(ours, our_reference), #our_reference,
      bin and string.format("%d of %d characters agree", agreeing_characters(theirs, their_reference), #their_reference)
        or "not available"))
  end
end

if opts.part ~= "stories" then qwen3_part() end
if opts.part ~= "qwen3" then stories_part() end

-- Chat with a Qwen3 model (a Hugging Face directory: config.json, model.safetensors,
-- tokenizer.json, and generation_config.json when there is one) in the terminal.
--   anelua examples/chat.lua [MODEL_DIR] [--system TEXT] [--prompt TEXT] [--no-think]
--          [--show-thinking] [--max-tokens N] [--context N] [--temperature T] [--top-k K]
--          [--top-p P] [--seed S] [--quantize int8|int4] [--activations int8|int16]
--          [--backend sim|ane] [--precision fp16|fp32] [--profile ane|cpu]
-- Without MODEL_DIR it runs a demo: a small Qwen3-shaped model with random weights and the
-- Qwen3 tokenizer in data/tokenizers (the replies are noise; the chat machinery is real).
-- --quantize int8 | int4 quantizes every linear layer at load (ane.quantize); --activations
-- int8 | int16 multiplies them on integer activations (the cpu profile, chosen by it).
-- With --prompt it answers once and exits; otherwise it reads one user turn per line until
-- end of input (Ctrl-D); "/reset" starts a new conversation. The conversation stays in the
-- model's KV cache across turns (earlier turns are never computed again) until it fills
-- --context positions. Sampling defaults come from generation_config.json (Qwen3's: 0.6,
-- top-k 20, top-p 0.95); a turn ends at the end-of-turn ids of config.json and
-- generation_config.json. <think> blocks are hidden unless --show-thinking; --no-think
-- switches thinking off as the chat template does (an empty think block).
local ane = require("ane")
local chat = require("ane.chat")
local cli = require("ane.cli")
local lfs = require("lfs")

local command = cli.command{
  name = "examples/chat.lua",
  usage = "[MODEL_DIR] [options]",
  summary = "Chat with a Qwen3 model in the terminal (or answer one --prompt).",
  positional = { { "MODEL_DIR", "a Hugging Face Qwen3 directory (none: a random-weight demo)", optional = true } },
  options = cli.join({
    { "system", "string", nil, "a system message for the conversation" },
    { "prompt", "string", nil, "answer this one user turn and exit" },
    { "no-think", "flag", false, "switch thinking off (the template's empty think block)" },
    { "show-thinking", "flag", false, "print the <think> blocks as they stream" },
    { "max-tokens", "integer", 512, "tokens per answer at most", min = 1 },
    { "context", "integer", 2048, "positions the conversation may fill (at most the model's)", min = 16 },
    { "temperature", "number", nil, "0 = greedy (default: generation_config.json, else 0.6)", min = 0 },
    { "top-k", "integer", nil, "sample among the K most likely (default: generation_config.json, else 20)", min = 0 },
    { "top-p", "number", nil, "nucleus mass (default: generation_config.json, else 0.95)", min = 0, max = 1, open_min = true },
    { "seed", "integer", 1, "sampling seed" },
    { "backend", "choice", nil, "sim (CPU, everywhere) or ane (the device, macOS)", choices = { "sim", "ane" } },
    { "precision", "choice", "fp16", "fp16 (the device's numerics) or fp32 (the CPU reference)", choices = { "fp16", "fp32" } },
    { "profile", "choice", nil, "ane (the device's rules) or cpu", choices = { "ane", "cpu" } },
  }, cli.quantize_options()),
  epilog = "Ctrl-C ends the current answer; Ctrl-D ends the chat.",
}
local opts, positional = command:parse(arg)
local dir = positional[1]
command:use_backend(opts.backend)
command:check_activations(opts, dir)
local qwen3 = require("ane.models.qwen3")
local model_options = { precision = opts.precision, profile = opts.profile or (opts.activations and "cpu"),
  quantize = opts.quantize, activations = opts.activations }
local model, err, tokenizer_path, config, generation
if dir then
  if lfs.attributes(dir, "mode") ~= "directory" then command:fail(dir .. " is not a model directory") end
  model, err = command:call(qwen3.load, dir, model_options)
  if not model then command:fail(err) end
  tokenizer_path, config = dir .. "/tokenizer.json", assert(ane.io.read_json(dir .. "/config.json"))
  generation = lfs.attributes(dir .. "/generation_config.json") and ane.io.read_json(dir .. "/generation_config.json") or {}
else -- the demo: Qwen3's shape at a size that answers at once, its tokenizer, its end-of-turn ids
  local root = arg[0]:match("^(.*)/examples/[^/]*$") or "."
  model = command:call(qwen3.from_weights, qwen3.random_weights(qwen3.CONFIGS.demo, opts.seed), model_options)
  tokenizer_path, config, generation = root .. "/data/tokenizers/qwen3/tokenizer.json", qwen3.DEMO_IDS, {}
  io.stderr:write("demo: no MODEL_DIR given, so a small Qwen3-shaped model with random weights answers (noise);\n"
    .. "      pass a Hugging Face Qwen3 directory (e.g. Qwen3-0.6B) to chat for real\n")
end
local tok, terr = require("ane.tokenizer").load(tokenizer_path)
if not tok then command:fail(terr) end
local stop = chat.stop_ids(config, generation)
if next(stop) == nil then command:fail(dir .. ": config.json names no eos_token_id to end a turn at") end
local sampling = {
  temperature = opts.temperature or generation.temperature or 0.6,
  top_k = opts.top_k or generation.top_k or 20, top_p = opts.top_p or generation.top_p or 0.95, seed = opts.seed,
}
if generation.do_sample == false and not opts.temperature then sampling.temperature = 0 end
if sampling.top_k == 0 then sampling.top_k = nil end
if sampling.top_p >= 1 then sampling.top_p = nil end
command:graceful_interrupts()

local thinking = { enable_thinking = not opts.no_think }
local session, turns

local function reset()
  session, turns = model:session({ capacity = math.min(opts.context, model.context_length) }), 0
end

-- Streams one answer: feeds `text` (the user's turn, rendered), prints what the model says.
-- Returns false when the conversation no longer fits, and "refused" when this turn did not.
local function answer(text)
  local ok, why = session:feed(tok:encode(text))
  if not ok then
    io.stderr:write(string.format("(this turn does not fit the conversation's %d positions: %s)\n", session.capacity, why))
    return false, "refused"
  end
  local filter, ids, shown = chat.thinking_filter(opts.show_thinking), {}, ""
  local budget = math.min(opts.max_tokens, session:room())
  local ended = false
  for id in session:generate({ max_tokens = budget, temperature = sampling.temperature, top_k = sampling.top_k,
    top_p = sampling.top_p, seed = sampling.seed, vocab = tok.vocab_size, stop = stop }) do
    if stop[id] then ended = true break end
    ids[#ids + 1] = id
    local decoded = tok:decode(ids) -- a token may end inside a UTF-8 character: print what the text adds
    io.write(filter(decoded:sub(#shown + 1)))
    shown = decoded
    io.flush()
    if cli.stop_requested() then
      print("\n(interrupted)")
      ane.set_graceful_interrupts(true) -- the next Ctrl-C is a request again
      break
    end
  end
  io.write("\n")
  if not ended and session:room() == 0 then
    io.stderr:write(string.format("(the conversation filled its %d positions: the answer stops here)\n", session.capacity))
    return false
  end
  return true
end

-- The text of a user turn: the whole prompt for the first, the continuation after that
-- (the previous answer's end-of-turn id was sampled but not fed, so it closes that turn).
local function user_turn(content)
  turns = turns + 1
  if turns == 1 then
    local messages = {}
    if opts.system then messages[1] = { role = "system", content = opts.system } end
    messages[#messages + 1] = { role = "user", content = content }
    return chat.render(messages, { add_generation_prompt = true, enable_thinking = thinking.enable_thinking })
  end
  return "<|im_end|>" .. chat.next_turn(content, thinking)
end

reset()
io.stderr:write(string.format("%s; %d positions of context; temperature %g%s\n", tostring(model), session.capacity,
  sampling.temperature, opts.no_think and ", thinking off" or ""))
if opts.prompt then
  local _, refused = answer(user_turn(opts.prompt))
  if not refused then cli.report_stats(model) end
  os.exit(refused and 1 or 0) -- (a prompt that does not fit is a failure; one answer cut short is said above)
end
local interactive = os.execute("test -t 0") == true
while true do
  if interactive then io.write("you> ") io.flush() end
  local line = io.read("l")
  if not line then break end
  if line == "/reset" then
    reset()
    io.stderr:write("(a new conversation)\n")
  elseif line:match("%S") then
    if not answer(user_turn(line)) then
      reset()
      io.stderr:write("(starting a new conversation)\n")
    end
  end
end
cli.report_stats(model)

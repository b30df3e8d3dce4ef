-- Train a Llama-2-architecture model (Stories15M/42M/110M family, Hugging Face Llama /
-- Qwen3) or a GPT-2 (--arch gpt2, or an --init GPT-2 directory / llm.c file) on anelua.
--   anelua examples/train_stories.lua [--init MODEL.bin|CKPT.safetensors] [--data SHARD[,SHARD...]]
--          [--steps N] [--stop-after N] [--batch B] [--seq T] [--accum A] [--lr LR] [--warmup W] [--weight-decay D]
--          [--ckpt-dir DIR] [--ckpt-every N] [--keep N] [--resume latest|CKPT] [--metrics FILE]
--          [--export OUT.bin] [--backend sim|ane] [--precision fp32|fp16] [--weights-as-inputs] [--tokenizer FILE]
--          [--arch llama|gpt2] [--dim D] [--layers L] [--heads H] [--hidden F] [--seed S]
--          [--lora-rank R [--lora-alpha A] [--adapters FILE]]
-- With --lora-rank only low-rank adapters on wq and wv train (fed to the programs as inputs;
-- the base model from --init stays frozen); they are saved to <ckpt-dir>/adapters.safetensors.
-- Without --data it writes a small synthetic story corpus (deterministic, said on screen) as
-- a llama2.c shard and trains a tiny model from scratch on it. One line per step on stdout;
-- the same records as JSON lines in --metrics (default <ckpt-dir>/metrics.jsonl).
local ane = require("ane")
local llama = require("ane.models.llama")
local gpt2 = require("ane.models.gpt2")
local data = require("ane.data")
local train = require("ane.train")
local checkpoint = require("ane.checkpoint")
local sentencepiece = require("ane.sentencepiece")
local cjson = require("cjson")
local lfs = require("lfs")

local usage = [==[usage: anelua examples/train_stories.lua [--init MODEL.bin|CKPT.safetensors] [--data SHARD[,SHARD...]]
       [--steps N] [--stop-after N] [--batch B] [--seq T] [--accum A] [--lr LR] [--warmup W] [--weight-decay D]
       [--ckpt-dir DIR] [--ckpt-every N] [--keep N] [--resume latest|CKPT] [--metrics FILE]
       [--export OUT.bin] [--backend sim|ane] [--precision fp32|fp16] [--weights-as-inputs] [--tokenizer FILE]
       [--arch llama|gpt2] [--dim D] [--layers L] [--heads H] [--hidden F] [--seed S]
       [--lora-rank R [--lora-alpha A] [--adapters FILE]]
]==]
local opts = { steps = 100, batch = 4, seq = 64, accum = 1, lr = 3e-3, warmup = 10, ["weight-decay"] = 0.0,
  ["ckpt-dir"] = "runs/stories", ["ckpt-every"] = 50, keep = 3, precision = "fp32", dim = 64, layers = 2, heads = 4,
  hidden = 176, seed = 1, ["stop-after"] = 0, arch = "llama" }
local i = 1
while i <= #arg do
  local name = arg[i]:match("^%-%-([%w-]+)$")
  if arg[i] == "--help" then io.write(usage) os.exit(0) end
  if name == "weights-as-inputs" then -- a flag: weights fed as program inputs, never patched
    opts.weights_as_inputs, i = true, i + 1
    goto continue
  end
  if not name or arg[i + 1] == nil then io.stderr:write(usage) os.exit(1) end
  if opts[name] == nil and not ({ init = 1, data = 1, resume = 1, metrics = 1, export = 1, backend = 1, tokenizer = 1, ["lora-rank"] = 1,
    ["lora-alpha"] = 1, adapters = 1 })[name] then
    io.stderr:write("train_stories.lua: unknown option --" .. name .. "\n" .. usage) os.exit(1)
  end
  opts[name] = math.tointeger(tonumber(arg[i + 1])) or tonumber(arg[i + 1]) or arg[i + 1]
  i = i + 2
  ::continue::
end
local function die(message) io.stderr:write("train_stories.lua: " .. message .. "\n") os.exit(1) end
local here = (arg[0]:match("^(.*)/examples/[^/]*$")) or "."

-- A resumed run's checkpoint (its config says which architecture it is).
local resume_state
if opts.resume then
  local path = opts.resume == "latest" and checkpoint.latest(opts["ckpt-dir"]) or opts.resume
  if not path then die("--resume latest: no checkpoint in " .. opts["ckpt-dir"]) end
  resume_state = checkpoint.load(path) or die(select(2, checkpoint.load(path)))
  print("Resuming from " .. path .. " (step " .. resume_state.step .. ")")
end

-- The architecture: "gpt2" or "llama", from the checkpoint, the --init file (a GPT-2
-- directory's config.json, llm.c's magic) or --arch.
local LLMC_GPT2_MAGIC = 20240326
local function architecture_of(path)
  if lfs.attributes(path, "mode") == "directory" then
    local config = ane.io.read_json(path .. "/config.json")
    return config and config.model_type == "gpt2" and "gpt2" or "llama"
  end
  if path:match("%.safetensors$") then
    local state = checkpoint.load(path) or die(select(2, checkpoint.load(path)))
    return state.config.model_type == "gpt2" and "gpt2" or "llama"
  end
  local head = ane.io.read_file(path)
  return head and #head >= 4 and string.unpack("<i4", head) == LLMC_GPT2_MAGIC and "gpt2" or "llama"
end
local arch = resume_state and (resume_state.config.model_type == "gpt2" and "gpt2" or "llama")
    or opts.init and architecture_of(opts.init) or opts.arch
if arch ~= "llama" and arch ~= "gpt2" then die("--arch must be llama or gpt2") end
if arch == "gpt2" then
  for _, flag in ipairs({ "lora-rank", "export" }) do
    if opts[flag] then die("--" .. flag .. " is for Llama models; this run trains GPT-2") end
  end
  if opts.weights_as_inputs then die("--weights-as-inputs is for Llama models; this run trains GPT-2") end
end

-- The tokenizer: --tokenizer, else the one of an --init directory (tokenizer.json, or
-- GPT-2's vocab.json + merges.txt), else the shared data's (Llama-2's SentencePiece, or
-- GPT-2's BPE). Only needed to write the synthetic corpus and to show a sample. Byte-level
-- BPE takes no BOS.
local function byte_level(source)
  local bpe = require("ane.tokenizer").load(source) or die(select(2, require("ane.tokenizer").load(source)))
  return { vocab_size = bpe.vocab_size, encode = function(_, text) return bpe:encode(text) end,
    decode = function(_, ids) return bpe:decode(ids) end, byte_level = true }
end
local function find_tokenizer()
  local path = opts.tokenizer
  if not path and opts.init and lfs.attributes(opts.init, "mode") == "directory" then
    if lfs.attributes(opts.init .. "/tokenizer.json") or lfs.attributes(opts.init .. "/vocab.json") then
      return byte_level(opts.init)
    end
  end
  if path and (path:match("%.json$") or arch == "gpt2") then return byte_level(path) end
  if path then return sentencepiece.load(path) or die(select(2, sentencepiece.load(path))) end
  if arch == "gpt2" then
    local shared = here .. "/../shared/data/tokenizers/gpt2"
    return lfs.attributes(shared .. "/vocab.json") and byte_level(shared) or nil
  end
  for _, candidate in ipairs({ here .. "/../shared/data/tokenizers/llama2/tokenizer.bin", "tokenizer.bin" }) do
    if lfs.attributes(candidate) then return assert(sentencepiece.load(candidate)) end
  end
end
local tok = find_tokenizer()

lfs.mkdir(opts["ckpt-dir"]:match("^(.*)/[^/]*$") or ".")
lfs.mkdir(opts["ckpt-dir"])
local shard_paths, synthetic_shard = {}, nil
if opts.data then
  for path in tostring(opts.data):gmatch("[^,]+") do shard_paths[#shard_paths + 1] = path end
else
  if not tok then die("no --data and no tokenizer to write the synthetic corpus with (give --tokenizer tokenizer.bin)") end
  local path = opts["ckpt-dir"] .. "/synthetic.bin"
  local ids = {}
  for _, story in ipairs(data.synthetic_stories(2000, 1)) do
    for _, id in ipairs(tok:encode(story, { bos = true })) do ids[#ids + 1] = id end
  end
  if tok.vocab_size > 65536 then -- ids beyond uint16: kept in memory (it is regenerated the same on --resume)
    synthetic_shard, path = data.from_ids(ids, "synthetic corpus"), "in memory"
  else
    assert(data.write(path, ids))
    shard_paths[1] = path
  end
  print(string.format("No --data given: training on a SYNTHETIC corpus of 2000 template stories (%d tokens, %s).",
    #ids, path))
end
local shards = { synthetic_shard }
for _, path in ipairs(shard_paths) do shards[#shards + 1] = data.open(path) or die(select(2, data.open(path))) end

-- The model: resumed, initialized from a file, or fresh.
local model_opts = { backend = opts.backend, precision = opts.precision, weights_as_inputs = opts.weights_as_inputs }
if opts["lora-rank"] then
  model_opts.lora = { rank = opts["lora-rank"], alpha = opts["lora-alpha"] or opts["lora-rank"], seed = opts.seed }
  if opts.export then die("--export writes full weights; with --lora-rank the adapters are saved instead") end
elseif opts["lora-alpha"] or opts.adapters then
  die("--lora-alpha and --adapters need --lora-rank")
end
local model
local family = arch == "gpt2" and gpt2 or llama
if resume_state and not model_opts.lora then -- (a LoRA checkpoint holds adapters: the base comes from --init)
  model = family.from_weights(family.weights_from_parameters(resume_state.config, resume_state.params, opts.resume),
    model_opts)
elseif opts.init and opts.init:match("%.safetensors$") then
  local state = checkpoint.load(opts.init) or die(select(2, checkpoint.load(opts.init)))
  model = family.from_weights(family.weights_from_parameters(state.config, state.params, opts.init), model_opts)
elseif opts.init then
  model = family.load(opts.init, model_opts) or die(select(2, family.load(opts.init, model_opts)))
elseif arch == "gpt2" then
  model = gpt2.from_weights(gpt2.random_weights({ n_embd = opts.dim, n_layer = opts.layers, n_head = opts.heads,
    n_positions = opts.seq, vocab_size = tok and tok.vocab_size or 50257, eps = 1e-5 }, opts.seed), model_opts)
else
  local vocab = tok and tok.vocab_size or 32000
  model = llama.from_weights(llama.random_weights({ dim = opts.dim, hidden = opts.hidden, n_layer = opts.layers,
    n_head = opts.heads, vocab_size = vocab, seq_len = opts.seq }, opts.seed), model_opts)
end
if opts.seq > model.context_length then die(string.format("--seq %d exceeds the model's context of %d", opts.seq, model.context_length)) end
if opts.export and model.config.naming == "hf" then die("--export writes llama2.c files; this model uses Hugging Face names") end

local batches = data.batches(shards, { batch = opts.batch, seq = opts.seq })
local trainer = train.new(model, { lr = opts.lr, warmup = opts.warmup, steps = opts.steps, accum = opts.accum,
  weight_decay = opts["weight-decay"] })
if opts.adapters then
  local ok, err = model:load_adapters(opts.adapters)
  if not ok then die(err) end
end
if resume_state then trainer:restore(resume_state, batches) end
print(tostring(model))

local metrics_path = opts.metrics or (opts["ckpt-dir"] .. "/metrics.jsonl")
local metrics = assert(io.open(metrics_path, resume_state and "a" or "w"))
local first_step = trainer.step_count + 1
local started = ane.clock()
-- --stop-after N ends the run at step N (a checkpoint is written) while the learning-rate
-- schedule still plans for --steps; --resume continues it.
local last_step = opts["stop-after"] > 0 and math.min(opts["stop-after"], opts.steps) or opts.steps
for step = first_step, last_step do
  local r = trainer:step(batches)
  local elapsed = ane.clock() - started
  local eta = elapsed / (step - first_step + 1) * (opts.steps - step)
  print(string.format("step %4d/%d  loss %.4f  lr %.2e  |g| %.3f  %6.0f tok/s  ms fwd %.0f bwd %.0f opt %.0f patch %.0f" ..
    "  skipped %d clamped %d nan %d%s  compiles %d  eta %.0fs", step, opts.steps, r.loss, r.lr, r.grad_norm, r.tokens_per_s,
    r.ms.forward, r.ms.backward, r.ms.optimizer, r.ms.patch, r.nonfinite, r.clamped, r.nans, r.loss_scale and string.format("  scale %g", r.loss_scale) or "",
    r.compiles, eta))
  r.loss_hex = string.format("%a", r.loss) -- exact, for comparing runs bit for bit
  metrics:write(cjson.encode(r), "\n")
  metrics:flush()
  if step % opts["ckpt-every"] == 0 or step == last_step then
    local path = trainer:save(opts["ckpt-dir"], batches, { keep = opts.keep }) or die(select(2, trainer:save(opts["ckpt-dir"], batches)))
    print("checkpoint " .. path)
  end
end
metrics:close()
if model.lora then
  local path = opts["ckpt-dir"] .. "/adapters.safetensors"
  local ok, err = model:save_adapters(path)
  if not ok then die(err) end
  print(string.format("saved LoRA adapters (rank %d, alpha %g) to %s", model.lora.rank, model.lora.alpha, path))
end
if opts.export then
  local ok, err = checkpoint.export_llama2c(opts.export, model.config, model:parameters())
  if not ok then die(err) end
  print("exported llama2.c checkpoint " .. opts.export)
end
if tok then
  local prompt = tok:encode("Once upon a time", { bos = true })
  local pieces = {}
  for id in model:generate(prompt, { max_tokens = math.min(40, model.context_length - #prompt), temperature = 0 }) do
    pieces[#pieces + 1] = id
  end
  -- (SentencePiece: after a lone space piece the first token keeps its own leading space)
  print("sample: Once upon a time" .. (tok.byte_level and tok:decode(pieces) or tok:decode({ 29871, table.unpack(pieces) })))
end

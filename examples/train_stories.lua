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
local cli = require("ane.cli")
local lfs = require("lfs")
-- Metrics are JSON lines; a skipped step's NaN loss is written as null (never an error).
local json = require("cjson").new()
json.encode_invalid_numbers("null")

local command = cli.command{
  name = "examples/train_stories.lua",
  summary = "Train a Llama-2-architecture model (Stories family, Hugging Face Llama / Qwen3) or GPT-2.\n" ..
    "Without --data: a synthetic story corpus and a tiny model from scratch.",
  options = {
    { "init", "path", nil, "start from MODEL.bin, CKPT.safetensors, a Hugging Face directory or an llm.c file" },
    { "data", "string", nil, "token shards, comma-separated (llama2.c or llm.c format)", metavar = "SHARD[,SHARD...]" },
    { "steps", "integer", 100, "steps the learning-rate schedule plans for", min = 1 },
    { "stop-after", "integer", 0, "end the run at this step (0 = at --steps); --resume continues it", min = 0 },
    { "batch", "integer", 4, "sequences per step", min = 1 },
    { "seq", "integer", 64, "tokens per sequence", min = 2 },
    { "accum", "integer", 1, "gradient accumulation micro-steps", min = 1 },
    { "lr", "number", 3e-3, "peak learning rate", min = 0, open_min = true },
    { "warmup", "integer", 10, "warm-up steps", min = 0 },
    { "weight-decay", "number", 0.0, "AdamW weight decay", min = 0 },
    { "ckpt-dir", "string", "runs/stories", "checkpoint directory", metavar = "DIR" },
    { "ckpt-every", "integer", 50, "write a checkpoint every N steps", min = 1 },
    { "keep", "integer", 3, "checkpoints kept", min = 1 },
    { "resume", "string", nil, "latest, or a checkpoint file", metavar = "latest|CKPT" },
    { "metrics", "string", nil, "JSON-lines metrics file (default <ckpt-dir>/metrics.jsonl)", metavar = "FILE" },
    { "export", "string", nil, "write the trained model as a llama2.c file", metavar = "OUT.bin" },
    { "backend", "choice", nil, "sim or ane; default ane.default_backend()", choices = { "sim", "ane" } },
    { "precision", "choice", "fp32", "fp32 or fp16 (the device's numerics, with loss scaling)", choices = { "fp32", "fp16" } },
    { "weights-as-inputs", "flag", false, "feed weights to the programs as inputs instead of patching them" },
    { "tokenizer", "path", nil, "tokenizer for the synthetic corpus and the sample (default: the shipped one)" },
    { "arch", "choice", "llama", "architecture of a model trained from scratch", choices = { "llama", "gpt2" } },
    { "dim", "integer", 64, "model width (from scratch)", min = 1 },
    { "layers", "integer", 2, "layers (from scratch)", min = 1 },
    { "heads", "integer", 4, "attention heads (from scratch)", min = 1 },
    { "hidden", "integer", 176, "FFN width (from scratch, Llama)", min = 1 },
    { "seed", "integer", 1, "seed of the initial weights" },
    { "lora-rank", "integer", nil, "train only LoRA adapters of this rank on wq and wv", min = 1 },
    { "lora-alpha", "number", nil, "LoRA scale numerator (default: the rank)", min = 0, open_min = true },
    { "adapters", "path", nil, "start the LoRA adapters from this file" },
  },
  epilog = "Ctrl-C finishes the current step, writes a checkpoint and prints how to resume (exit 130);\n" ..
    "a second Ctrl-C stops at once without writing one.",
}
local opts = command:parse(arg)
local function die(message) command:fail(message) end
local function or_die(result, why) return result or die(why) end -- a loader's result, or its message
command:use_backend(opts.backend)
command:graceful_interrupts() -- from here on, Ctrl-C ends the run cleanly (see the epilog)

do -- partial checkpoints of runs killed mid-write
  local files, bytes = checkpoint.sweep(opts.ckpt_dir)
  if files > 0 then
    print(string.format("removed %d partial checkpoint file(s) (%.1f MB) left by killed runs in %s", files, bytes / 1e6,
      opts.ckpt_dir))
  end
end

-- A resumed run's checkpoint (its config says which architecture it is).
local resume_state
if opts.resume then
  local path = opts.resume
  if path == "latest" then
    path = checkpoint.latest(opts.ckpt_dir)
    if not path then die("--resume latest: no checkpoint in " .. opts.ckpt_dir .. " yet") end
  end
  resume_state = or_die(checkpoint.load(path))
  print("Resuming from " .. path .. " (step " .. resume_state.step .. ")")
end

-- The architecture: "gpt2" or "llama", from the checkpoint, the --init file (a GPT-2
-- directory's config.json, llm.c's magic) or --arch.
local LLMC_GPT2_MAGIC = require("ane.formats.llmc").MAGIC
local function architecture_of(path)
  if lfs.attributes(path, "mode") == "directory" then
    local config = ane.io.read_json(path .. "/config.json")
    return config and config.model_type == "gpt2" and "gpt2" or "llama"
  end
  if path:match("%.safetensors$") then
    local state = or_die(checkpoint.load(path))
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
    if opts[flag:gsub("-", "_")] then die("--" .. flag .. " is for Llama models; this run trains GPT-2") end
  end
  if opts.weights_as_inputs then die("--weights-as-inputs is for Llama models; this run trains GPT-2") end
end

-- The tokenizer: --tokenizer, else the one of an --init directory (tokenizer.json, or
-- GPT-2's vocab.json + merges.txt), else the shared data's (Llama-2's SentencePiece, or
-- GPT-2's BPE). Only needed to write the synthetic corpus and to show a sample. Byte-level
-- BPE takes no BOS.
local function byte_level(source)
  local bpe = or_die(require("ane.tokenizer").load(source))
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
  if path then return or_die(sentencepiece.load(path)) end
  -- the tokenizers shipped with anelua (data/tokenizers in a checkout, share/anelua/data when installed)
  local shipped = (ane.data_dir() or "data") .. "/tokenizers"
  if arch == "gpt2" then
    return lfs.attributes(shipped .. "/gpt2/vocab.json") and byte_level(shipped .. "/gpt2") or nil
  end
  local candidate = shipped .. "/llama2/tokenizer.bin"
  if lfs.attributes(candidate) then return or_die(sentencepiece.load(candidate)) end
end
local tok = find_tokenizer()

lfs.mkdir(opts.ckpt_dir:match("^(.*)/[^/]*$") or ".")
lfs.mkdir(opts.ckpt_dir)
local shard_paths, synthetic_shard = {}, nil
if opts.data then
  for path in tostring(opts.data):gmatch("[^,]+") do shard_paths[#shard_paths + 1] = path end
else
  if not tok then die("no --data and no tokenizer to write the synthetic corpus with (give --tokenizer tokenizer.bin)") end
  local path = opts.ckpt_dir .. "/synthetic.bin"
  local ids = {}
  for _, story in ipairs(data.synthetic_stories(2000, 1)) do
    for _, id in ipairs(tok:encode(story, { bos = true })) do ids[#ids + 1] = id end
  end
  if tok.vocab_size > 65536 then -- ids beyond uint16: kept in memory (it is regenerated the same on --resume)
    synthetic_shard, path = data.from_ids(ids, "synthetic corpus"), "in memory"
  else
    or_die(data.write(path, ids)) -- (a full disk: one line, not a traceback)
    shard_paths[1] = path
  end
  print(string.format("No --data given: training on a SYNTHETIC corpus of 2000 template stories (%d tokens, %s).",
    #ids, path))
end
local shards = { synthetic_shard }
for _, path in ipairs(shard_paths) do shards[#shards + 1] = or_die(data.open(path)) end

-- The model: resumed, initialized from a file, or fresh.
local model_opts = { backend = opts.backend, precision = opts.precision, weights_as_inputs = opts.weights_as_inputs }
if opts.lora_rank then
  model_opts.lora = { rank = opts.lora_rank, alpha = opts.lora_alpha or opts.lora_rank, seed = opts.seed }
  if opts.export then die("--export writes full weights; with --lora-rank the adapters are saved instead") end
elseif opts.lora_alpha or opts.adapters then
  die("--lora-alpha and --adapters need --lora-rank")
end
local model
local family = arch == "gpt2" and gpt2 or llama
if resume_state and not model_opts.lora then -- (a LoRA checkpoint holds adapters: the base comes from --init)
  model = or_die(family.from_weights(family.weights_from_parameters(resume_state.config, resume_state.params,
    opts.resume), model_opts))
elseif opts.init and opts.init:match("%.safetensors$") then
  local state = or_die(checkpoint.load(opts.init))
  model = or_die(family.from_weights(family.weights_from_parameters(state.config, state.params, opts.init), model_opts))
elseif opts.init then
  model = or_die(family.load(opts.init, model_opts))
elseif arch == "gpt2" then
  model = gpt2.from_weights(gpt2.random_weights({ n_embd = opts.dim, n_layer = opts.layers, n_head = opts.heads,
    n_positions = opts.seq, vocab_size = tok and tok.vocab_size or 50257, eps = 1e-5 }, opts.seed), model_opts)
else
  local vocab = tok and tok.vocab_size or 32000
  model = llama.from_weights(llama.random_weights({ dim = opts.dim, hidden = opts.hidden, n_layer = opts.layers,
    n_head = opts.heads, vocab_size = vocab, seq_len = opts.seq }, opts.seed), model_opts)
end
if opts.seq > model.context_length then die(string.format("--seq %d exceeds the model's context of %d", opts.seq, model.context_length)) end
if tok and tok.vocab_size > model.vocab_size then
  die(string.format("the tokenizer has %d tokens but the model's vocabulary %d: the text's ids beyond %d cannot be "
    .. "embedded (a model and a tokenizer of different vocabularies; give the model's own with --tokenizer)",
    tok.vocab_size, model.vocab_size, model.vocab_size - 1))
end
if opts.export and model.config.naming == "hf" then die("--export writes llama2.c files; this model uses Hugging Face names") end

local batches, batches_err = data.batches(shards, { batch = opts.batch, seq = opts.seq })
if not batches then die(batches_err) end
local trainer = train.new(model, { lr = opts.lr, warmup = opts.warmup, steps = opts.steps, accum = opts.accum,
  weight_decay = opts.weight_decay })
if opts.adapters then
  local ok, err = model:load_adapters(opts.adapters)
  if not ok then die(err) end
end
if resume_state then trainer:restore(resume_state, batches) end
print(tostring(model))

local metrics_path = opts.metrics or (opts.ckpt_dir .. "/metrics.jsonl")
-- A resumed run continues the metrics of the checkpoint's step: records of steps after it
-- (written before an interruption or a kill) are dropped, so no step appears twice.
local kept_records = {}
if resume_state then
  local old = io.open(metrics_path, "r")
  if old then
    for line in old:lines() do
      local ok, record = pcall(json.decode, line)
      if ok and type(record) == "table" and math.tointeger(record.step) and record.step <= resume_state.step then
        kept_records[#kept_records + 1] = line
      end
    end
    old:close()
  end
end
-- The kept records are written to a side file that then replaces the metrics at once: a kill
-- in between leaves the old file whole (truncating it in place lost the first steps' records
-- when scripts/kill_trials.sh killed a run right there).
do
  local rewrite_path = metrics_path .. ".rewrite"
  local rewrite, rewrite_err = io.open(rewrite_path, "w")
  if not rewrite then die("cannot write the metrics file: " .. tostring(rewrite_err)) end
  for _, line in ipairs(kept_records) do rewrite:write(line, "\n") end
  local written = rewrite:flush()
  rewrite:close()
  local renamed, rename_err = written and os.rename(rewrite_path, metrics_path)
  if not renamed then die("cannot write the metrics file " .. metrics_path .. ": " .. tostring(rename_err)) end
end
local metrics, metrics_err = io.open(metrics_path, "a")
if not metrics then die("cannot write the metrics file: " .. tostring(metrics_err)) end

-- The command that continues this run: the same arguments with --resume latest.
local function resume_command()
  local words = { ane.executable() or "anelua", arg[0] } -- (the host as started: build/anelua is on no PATH)
  local i = 1
  while i <= #arg do
    if arg[i] == "--resume" then i = i + 1
    elseif not arg[i]:match("^%-%-resume=") then
      words[#words + 1] = arg[i]:match("^[%w%-%./_,=:]+$") and arg[i] or ("'" .. arg[i]:gsub("'", "'\\''") .. "'")
    end
    i = i + 1
  end
  words[#words + 1] = "--resume latest"
  return table.concat(words, " ")
end

-- The device's compile budget (ANE-05): when the next step may need more compiles than the
-- process has left, checkpoint and restart this process with --resume (the paper's mechanism;
-- the cost of a restart, ANE-15, is measured and reported). `budget_need` is the most
-- compiles one step has needed so far (patches committed by recompiling count here).
local restarts = math.tointeger(tonumber(os.getenv("ANELUA_RESTARTS") or "")) or 0
local restart_ms -- this process's restart cost: exec() of the previous process to its first step
local budget_need = 0
local function budget_used()
  local s = ane.stats()
  return s.compile_budget - s.budget_left
end

-- Replaces this process with the same command resuming from `path` (nil: from scratch).
local function exec_resuming(path, env)
  metrics:close()
  local words, lowest = {}, 0
  while arg[lowest - 1] do lowest = lowest - 1 end
  for i = lowest, 0 do words[#words + 1] = arg[i] end -- the interpreter and the script
  words[1] = ane.executable() or words[1] -- the interpreter as it starts again (ANELUA_EXECUTABLE)
  local i = 1
  while i <= #arg do
    if arg[i] == "--resume" then i = i + 1
    elseif not arg[i]:match("^%-%-resume=") then words[#words + 1] = arg[i] end
    i = i + 1
  end
  if path then
    words[#words + 1] = "--resume"
    words[#words + 1] = path
  end
  env = env or {}
  env.ANELUA_RESTARTS, env.ANELUA_RESTART_STARTED = restarts + 1, string.format("%.6f", ane.clock())
  env.ANELUA_RESTART_FROM_STEP = trainer.step_count
  local _, err = ane.exec(words, env)
  die(err)
end

local function restart_with_resume(done_step)
  local path, save_err = trainer:save(opts.ckpt_dir, batches, { keep = opts.keep })
  if not path then die(save_err) end
  print(string.format("compile budget: %d left, a step needs up to %d (ANE-05): checkpoint %s after step %d, "
    .. "restarting this process with --resume", ane.stats().budget_left, budget_need, path, done_step))
  exec_resuming(path)
end

-- A device whose budget ran out sooner than the configured one fails a step with ANE-05: the
-- step's state is half updated, so the process restarts from the last checkpoint (or from
-- scratch) and recomputes; a restart that made no progress since the previous one gives up.
local function restart_after_budget_error(message)
  local previous = math.tointeger(tonumber(os.getenv("ANELUA_RESTART_FROM_STEP") or ""))
  if previous and previous >= trainer.step_count then
    die(message .. "\n(the restart before this one failed at the same step: giving up)")
  end
  local path = checkpoint.latest(opts.ckpt_dir)
  -- the device's budget is what this process managed: the next one plans with one less, so
  -- it checkpoints and restarts itself before running out
  local stats = ane.stats()
  local device_budget = math.max(1, stats.compile_budget - stats.budget_left - 1)
  print(string.format("compile budget ran out on the device at step %d after %d compiles (ANE-05): restarting this "
    .. "process from %s with a budget of %d", trainer.step_count + 1, device_budget + 1, path or "scratch", device_budget))
  exec_resuming(path, { ANELUA_COMPILE_BUDGET = device_budget })
end

-- This process's resident memory in MB (Linux; nil elsewhere), for the metrics and the plot.
local function resident_mb()
  local status = io.open("/proc/self/status", "r")
  if not status then return nil end
  local kb = status:read("a"):match("VmRSS:%s*(%d+) kB")
  status:close()
  return kb and tonumber(kb) / 1024 or nil
end

local first_step = trainer.step_count + 1
local started = ane.clock()
if os.getenv("ANELUA_RESTART_STARTED") then
  restart_ms = (ane.clock() - tonumber(os.getenv("ANELUA_RESTART_STARTED"))) * 1000
  print(string.format("restart %d after the compile budget: %.0f ms from exec() to here", restarts, restart_ms))
end
-- --stop-after N ends the run at step N (a checkpoint is written) while the learning-rate
-- schedule still plans for --steps; --resume continues it.
local last_step = opts.stop_after > 0 and math.min(opts.stop_after, opts.steps) or opts.steps
local interrupted_at
for step = first_step, last_step do
  if step > first_step and ane.stats().budget_left < budget_need then restart_with_resume(step - 1) end
  local used_before = budget_used()
  local stepped, r = pcall(trainer.step, trainer, batches)
  if not stepped then
    if tostring(r):match("ANE%-05") then restart_after_budget_error(tostring(r)) end
    error(r, 0)
  end
  budget_need = math.max(budget_need, budget_used() - used_before)
  r.restarts, r.restart_ms = restarts, restart_ms
  r.rss_mb = resident_mb()
  local elapsed = ane.clock() - started
  local eta = elapsed / (step - first_step + 1) * (opts.steps - step)
  print(string.format("step %4d/%d  loss %.4f  lr %.2e  |g| %.3f  %6.0f tok/s  ms fwd %.0f bwd %.0f opt %.0f patch %.0f" ..
    "  skipped %d clamped %d nan %d%s  compiles %d%s  eta %.0fs", step, opts.steps, r.loss, r.lr, r.grad_norm,
    r.tokens_per_s, r.ms.forward, r.ms.backward, r.ms.optimizer, r.ms.patch, r.nonfinite, r.clamped, r.nans,
    r.loss_scale and string.format("  scale %g", r.loss_scale) or "", r.compiles,
    restarts > 0 and string.format("  restarts %d (%.0f ms)", restarts, restart_ms or 0) or "", eta))
  r.loss_hex = string.format("%a", r.loss) -- exact, for comparing runs bit for bit
  r.skipped = r.loss ~= r.loss or r.grad_norm ~= r.grad_norm or nil -- a step the loss scaler or AdamW skipped
  metrics:write(json.encode(r), "\n")
  metrics:flush()
  if cli.stop_requested() then interrupted_at = step end
  if interrupted_at or step % opts.ckpt_every == 0 or step == last_step then
    local path, save_err = trainer:save(opts.ckpt_dir, batches, { keep = opts.keep })
    if not path then die(save_err) end
    print("checkpoint " .. path)
  end
  if interrupted_at then break end
end
metrics:close()
local device = ane.stats().device
if device then -- what the ane backend found out about this device (docs/device.md)
  print(string.format("device: patch strategy %s (%s), %d commits, %d reloads, %d donor loads, %d recompiles, "
    .. "%d backend compiles", device.patch_strategy, device.patch_check ~= "" and device.patch_check or "no patch checked",
    device.commits, device.reloads, device.donor_loads, device.recompiles, ane.stats().backend_compiles))
end
do -- the loss curve and tokens/s, for a browser
  local plot = require("ane.plot")
  local records = plot.read_metrics(metrics_path)
  local svg_path = metrics_path:gsub("%.jsonl?$", "") .. ".svg"
  local file = records and io.open(svg_path, "w")
  if file then
    file:write(plot.training_svg(records, { title = metrics_path }))
    file:close()
    print("loss curve " .. svg_path)
  end
end
if interrupted_at then
  print(string.format("interrupted: stopped after step %d of %d (%.1f s)", interrupted_at, last_step, ane.clock() - started))
  print("resume with: " .. resume_command())
  os.exit(cli.INTERRUPTED_EXIT)
end
if model.lora then
  local path = opts.ckpt_dir .. "/adapters.safetensors"
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
  local sampled, err = pcall(function()
    for id in model:generate(prompt, { max_tokens = math.min(40, model.context_length - #prompt), temperature = 0 }) do
      pieces[#pieces + 1] = id
    end
  end)
  if sampled then
    -- (SentencePiece: after a lone space piece the first token keeps its own leading space)
    print("sample: Once upon a time" .. (tok.byte_level and tok:decode(pieces) or tok:decode({ 29871, table.unpack(pieces) })))
  elseif tostring(err):match("ANE%-05") then -- the generation programs need compiles this process has no more of
    print("sample: skipped, this process's compile budget is spent (ANE-05); the checkpoint above generates in a new one")
  else
    error(err, 0)
  end
end

-- Benchmark: training steps (forward, backward, AdamW, weight update) of anelua against the
-- real peers in the same run, each in a fresh process, alternating round by round:
--   GPT-2 124M, batch 4 x 64: anelua (fp32, cpu profile) on llm.c's own random checkpoint
--     (gpt2_124M.bin) against llm.c's train_gpt2 on that file and PyTorch's GPT-2;
--   Stories110M shape, batch 1 x T for T = 64, 256, 512: anelua against PyTorch's Llama.
-- Per workload it prints each round, the median ratio of steady step times (anelua / peer,
-- below 1 is faster) with its range, each program's first step (the ratio of anelua's to the
-- peer's, paired by round), anelua's first step over its steady one, its minor
-- page faults per steady step, and the kernel's seconds in its first step and in a steady
-- one (on a virtual machine mostly the zeroing of memory touched for the first time, which
-- the first step pays for its buffers). A peer that cannot run here is named as not available.
--   build/anelua scripts/bench/train_vs_peers.lua [--rounds R] [--steps N] [--only gpt2|stories]
--     [--peers DIR] [--work DIR]
-- (internally, --child WORKLOAD runs anelua's side in its own process and prints one line.)
local ane = require("ane")
local lfs = require("lfs")

local root = (arg[0]:match("^(.*)/scripts/bench/[^/]*$") or ".")
local common = dofile(root .. "/scripts/bench/common.lua")
local opts = require("ane.cli").command{
  name = "scripts/bench/train_vs_peers.lua",
  summary = "Training step time against llm.c and PyTorch on the same shapes, alternating, in one run.",
  options = common.peer_options(root, {
    { "rounds", "integer", 3, "alternating rounds", min = 1 },
    { "steps", "integer", 4, "steady steps timed per process (after the first)", min = 1 },
    { "only", "choice", "all", "which workloads", choices = { "all", "gpt2", "stories" } },
    { "child", "string", "", "internal: run one anelua workload (gpt2 or stories:T) and print its line" },
  }),
}:parse(arg)

local GPT2_BATCH, GPT2_SEQ = 4, 64 -- llm.c's train_gpt2 hard-codes these

-- Minor page faults of this process so far and its seconds in the kernel (all threads;
-- Linux), or nil.
local ticks_per_second
local function minor_faults_and_system_seconds()
  local stat = io.open("/proc/self/stat")
  if not stat then return nil end
  local line = stat:read("l")
  stat:close()
  if not ticks_per_second then
    local pipe = io.popen("getconf CLK_TCK 2>/dev/null")
    ticks_per_second = tonumber(pipe:read("a")) or 100
    pipe:close()
  end
  -- fields after the parenthesised command: state ppid pgrp session tty tpgid flags minflt
  -- cminflt majflt cmajflt utime stime
  local faults, system = line:match("%) %S+ %S+ %S+ %S+ %S+ %S+ %S+ (%d+) %S+ %S+ %S+ %S+ (%d+)")
  return tonumber(faults), tonumber(system) / ticks_per_second
end

-- anelua's side of one workload, in this process: the first step (it compiles the programs)
-- and `steps` steady ones. Prints "first S steady S faults N kernel K K" (faults per steady
-- step; the kernel's seconds in the first step and in a steady one: on a virtual machine,
-- mostly zeroing memory the process touches for the first time).
local function child(workload)
  local train = require("ane.train")
  ane.set_compile_budget(1000000)
  local model, rows, next_rows
  if workload == "gpt2" then
    local gpt2, checkpoint = require("ane.models.gpt2"), opts.work .. "/gpt2_124M.bin"
    local options = { precision = "fp32", profile = "cpu" }
    model = lfs.attributes(checkpoint) and assert(gpt2.load(checkpoint, options)) or gpt2.from_weights(gpt2.random_weights({
      n_embd = 768, n_layer = 12, n_head = 12, n_positions = 1024, vocab_size = 50257, eps = 1e-5 }, 3), options)
    rows, next_rows = {}, {}
    for b = 1, GPT2_BATCH do
      rows[b], next_rows[b] = {}, {}
      for t = 1, GPT2_SEQ do rows[b][t], next_rows[b][t] = (b * 131 + t * 7919) % 50257, (b * 131 + (t + 1) * 7919) % 50257 end
    end
  else
    local seq = assert(tonumber(workload:match("^stories:(%d+)$")), "--child: gpt2 or stories:T")
    local llama = require("ane.models.llama")
    local config = { dim = 768, hidden = 2048, n_layer = 12, n_head = 12, vocab_size = 32000, seq_len = seq }
    model = llama.from_weights(llama.random_weights(config, 5), { precision = "fp32", profile = "cpu" })
    rows, next_rows = { {} }, { {} }
    for t = 1, seq do rows[1][t], next_rows[1][t] = (t * 7919) % 32000, ((t + 1) * 7919) % 32000 end
  end
  local trainer = train.new(model, { lr = 1e-4, warmup = 0, steps = 1000 })
  local batches = { position = 0, next = function(self) self.position = self.position + 1 return rows, next_rows end }
  local _, kernel_start = minor_faults_and_system_seconds()
  local first = trainer:step(batches).ms.total / 1000
  local faults_before, kernel_before = minor_faults_and_system_seconds()
  local times = {}
  for i = 1, opts.steps do times[i] = trainer:step(batches).ms.total / 1000 end
  local faults_after, kernel_after = minor_faults_and_system_seconds()
  local steady = common.median_and_range(times)
  if faults_before then
    print(string.format("first %.4f steady %.4f faults %.0f kernel %.2f %.2f", first, steady,
      (faults_after - faults_before) / opts.steps, kernel_before - kernel_start, (kernel_after - kernel_before) / opts.steps))
  else
    print(string.format("first %.4f steady %.4f faults n/a kernel n/a n/a", first, steady))
  end
end

if opts.child ~= "" then
  child(opts.child)
  return
end

-- The peers: llm.c's train_gpt2 and its checkpoint (../shared/peers/build.sh), PyTorch.
local have_llmc = lfs.attributes(opts.peers .. "/build.sh") ~= nil
if have_llmc and not (lfs.attributes(opts.work .. "/train_gpt2") and lfs.attributes(opts.work .. "/gpt2_124M.bin")) then
  print("building the peers into " .. opts.work .. " (run.c, train_gpt2, the random checkpoints) ...")
  have_llmc = os.execute("bash " .. common.quote(opts.peers .. "/build.sh") .. " " .. common.quote(opts.work) .. " > /dev/null")
end
local have_torch = os.execute("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1")
    and lfs.attributes(opts.peers .. "/pytorch/torch_models.py") ~= nil
if not have_llmc then print("llm.c not available: no " .. opts.peers .. "/build.sh, or it failed") end
if not have_torch then print("PyTorch not available: /usr/bin/python3 cannot import torch (Debian python3-torch)") end
if not have_llmc and not have_torch then
  print("no peer available: nothing to compare against")
  os.exit(0)
end
if not have_llmc and opts.only ~= "stories" then
  print("(GPT-2 runs on anelua's random weights: llm.c's checkpoint is not there)")
end

-- Runs a command and returns its standard output (nil if it failed).
local function capture(command)
  local pipe = io.popen(command)
  local out = pipe:read("a")
  local ok = pipe:close()
  return ok and out or nil, out
end

local function run_anelua(workload)
  local command = string.format("%s %s --child %s --steps %d --work %s 2>&1", common.quote(root .. "/build/anelua"),
    common.quote(root .. "/scripts/bench/train_vs_peers.lua"), workload, opts.steps, common.quote(opts.work))
  local out, text = capture(command)
  local first, steady, faults, kernel_first, kernel_steady =
    (out or ""):match("first ([%d.]+) steady ([%d.]+) faults (%S+) kernel (%S+) (%S+)")
  if not first then error("anelua's " .. workload .. " process failed:\n" .. text) end
  return { first = tonumber(first), steady = tonumber(steady), faults = faults, kernel_first = kernel_first,
    kernel_steady = kernel_steady }
end

local function run_torch(which, batch, seq)
  local out, text = capture(string.format("/usr/bin/python3 %s %s %s %d %d %d 2>&1",
    common.quote(root .. "/scripts/bench/torch_train_step.py"), common.quote(opts.peers .. "/pytorch"), which, batch, seq,
    opts.steps))
  local first, steady = (out or ""):match("first ([%d.]+) steady ([%d.]+)")
  if not first then error("PyTorch's " .. which .. " process failed:\n" .. text) end
  return { first = tonumber(first), steady = tonumber(steady) }
end

-- llm.c's train_gpt2 prints "step N: train loss L (took T ms)" per step; it runs 40 steps,
-- so the pipe stops it after the first 1 + steps (grep -m exits, the next write ends it).
local function run_llmc()
  local out, text = capture(string.format("cd %s && OMP_NUM_THREADS=2 ./train_gpt2 2>&1 | grep -m %d '^step'",
    common.quote(opts.work), opts.steps + 1))
  local times = {}
  for ms in (out or ""):gmatch("took ([%d.]+) ms") do times[#times + 1] = tonumber(ms) / 1000 end
  if #times < opts.steps + 1 then error("llm.c's train_gpt2 printed " .. #times .. " step times:\n" .. text) end
  return { first = table.remove(times, 1), steady = (common.median_and_range(times)) }
end

local workloads = {}
if opts.only ~= "stories" then
  local peers = {}
  if have_llmc then peers[#peers + 1] = { "llm.c", run_llmc } end
  if have_torch then
    peers[#peers + 1] = { "PyTorch", function() return run_torch("gpt2", GPT2_BATCH, GPT2_SEQ) end }
  end
  workloads[#workloads + 1] = { name = "GPT-2 124M 4x64", anelua = "gpt2", peers = peers }
end
if opts.only ~= "gpt2" and have_torch then
  for _, seq in ipairs({ 64, 256, 512 }) do
    workloads[#workloads + 1] = { name = "Stories110M 1x" .. seq, anelua = "stories:" .. seq,
      peers = { { "PyTorch", function() return run_torch("stories", 1, seq) end } } }
  end
end

print(string.format("training steps, fp32, 2 threads each; %d rounds, each process: a first step and %d steady ones (median)",
  opts.rounds, opts.steps))
local summary, first_summary = {}, {}
for _, w in ipairs(workloads) do
  print(string.format("\n%s%s", w.name, w.anelua == "gpt2" and have_llmc and " (llm.c's gpt2_124M.bin)" or ""))
  local header = string.format("%-6s %12s %12s %10s %14s", "round", "anelua s", "first s", "faults", "kernel s 1st/st")
  for _, peer in ipairs(w.peers) do
    header = header .. string.format(" %12s %8s %12s", peer[1] .. " s", "ratio", peer[1] .. " 1st s")
  end
  print(header)
  local ratios, first_ratios, firsts = {}, {}, {}
  for round = 1, opts.rounds do
    -- alternate which side goes first, so neither always runs on the warmer machine
    local results, ours = {}, nil
    if round % 2 == 1 then ours = run_anelua(w.anelua) end
    for i, peer in ipairs(w.peers) do results[i] = peer[2]() end
    if round % 2 == 0 then ours = run_anelua(w.anelua) end
    firsts[round] = ours.first / ours.steady
    local line = string.format("%-6d %12.3f %12.3f %10s %14s", round, ours.steady, ours.first, ours.faults,
      ours.kernel_first .. "/" .. ours.kernel_steady)
    for i, r in ipairs(results) do
      ratios[i], first_ratios[i] = ratios[i] or {}, first_ratios[i] or {}
      ratios[i][round], first_ratios[i][round] = ours.steady / r.steady, ours.first / r.first
      line = line .. string.format(" %12.3f %8.2f %12.3f", r.steady, ratios[i][round], r.first)
    end
    print(line)
  end
  local median, low, high = common.median_and_range(firsts)
  print(string.format("anelua first step / steady step: median %.2fx (range %.2f-%.2f)", median, low, high))
  for i, peer in ipairs(w.peers) do
    summary[#summary + 1] = { "anelua fp32, " .. w.name, peer[1], ratios[i] }
    first_summary[#first_summary + 1] = { "anelua fp32, " .. w.name, peer[1], first_ratios[i] }
  end
end
print("\nsteady step time, anelua / peer (below 1: anelua is faster)")
common.print_ratios(summary)
print("\nfirst step time (it compiles and touches its buffers for the first time), anelua / peer")
common.print_ratios(first_summary)

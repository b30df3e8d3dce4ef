-- Benchmark: one full training step (forward, backward, AdamW, patch) of a Stories110M-shaped
-- Llama (dim 768, 12 layers, 12 heads, hidden 2048, vocab 32000), batch 1, sequence 256, on
-- the sim backend in fp32 and fp16, against a bound measured in the same run: the step's
-- matmul FLOPs divided by the sgemm rate this script measures on the step's own shapes.
--   build/anelua scripts/bench/train_step.lua [--layers L] [--steps N]
local ane = require("ane")
local llama = require("ane.models.llama")
local train = require("ane.train")
local common = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/common.lua")

local opts = require("ane.cli").command{
  name = "scripts/bench/train_step.lua", summary = "One training step of a Stories110M-shaped Llama against its sgemm bound.",
  options = {
    { "layers", "integer", 12, "layers", min = 1 },
    { "steps", "integer", 3, "steps timed per mode", min = 1 },
  },
}:parse(arg)
local layers, steps = opts.layers, opts.steps
local config = { dim = 768, hidden = 2048, n_layer = layers, n_head = 12, vocab_size = 32000, seq_len = 256 }
local D, F, V, T = config.dim, config.hidden, config.vocab_size, config.seq_len

-- Matmul FLOPs of one step: forward 2*m*n*k per product; backward twice that (input and
-- weight gradients). Per layer: q, k, v, o projections (4 D*D), w1, w3 (2 F*D), w2 (D*F),
-- attention scores and weighted sum (2 T*T*D); plus the classifier (V*D).
local per_layer = 2 * T * (4 * D * D + 3 * F * D) + 2 * 2 * T * T * D
local forward_flops = layers * per_layer + 2 * T * V * D
local step_flops = 3 * forward_flops

-- sgemm rate on the step's largest shapes, best of 3 each.
local function rate(m, k, n)
  local a, b = ane.tensor.rand({ m, k }, { seed = 1 }), ane.tensor.rand({ k, n }, { seed = 2 })
  return 2 * m * k * n / common.best_of(3, function() a:matmul(b) end)
end
local sgemm = (rate(F, D, T) + rate(D, D, T) + rate(V, D, T)) / 3

print(string.format("Stories110M shape with %d layers: dim %d, hidden %d, vocab %d; batch 1, seq %d", layers, D, F, V, T))
print(string.format("step matmul work %.1f GFLOP; sgemm %.1f GFLOP/s (mean over [%dx%d]x[%dx%d], [%dx%d]x[%dx%d], [%dx%d]x[%dx%d])",
  step_flops / 1e9, sgemm / 1e9, F, D, D, T, D, D, D, T, V, D, D, T))
local bound = step_flops / sgemm
print(string.format("bound: %.2f s per step", bound))
print(string.format("%-8s %9s %9s %9s %9s %9s %9s %9s %8s %10s %s", "", "step s", "fwd", "bwd", "adamw", "patch", "of bound",
  "compiles", "skipped", "recompile", "  first step (compiling)"))

ane.set_compile_budget(1000000)
local ids, targets = {}, {}
for i = 1, T do ids[i], targets[i] = (i * 7919) % V, ((i + 1) * 7919) % V end
local batches = { position = 0, next = function(self) self.position = self.position + 1 return { ids }, { targets } end }
-- fp32 runs on the "cpu" profile (the device has no fp32, ANE-26); the fp16 rows run on the
-- device profile, with baked weights updated by patching ("fp16") or fed as inputs ("fp16-in").
local setups = {
  { "fp32", { precision = "fp32", profile = "cpu" } },
  { "fp16", { precision = "fp16", profile = "ane" } },
  { "fp16-in", { precision = "fp16", profile = "ane", weights_as_inputs = true } },
}
for _, setup in ipairs(setups) do
  local precision = setup[1]
  local model = llama.from_weights(llama.random_weights(config, 5), setup[2])
  local trainer = train.new(model, { lr = 1e-4, warmup = 0, steps = 1000 })
  local first_start = ane.clock()
  trainer:step(batches) -- compiles the programs
  local first = ane.clock() - first_start
  local compiles_after_first = ane.stats().compiles
  -- what updating the weights by recompiling would cost per step: building, emitting and
  -- loading every program of the step again (they all compiled once, at step 1)
  local recompile = model:stats().compile_ms / 1000
  local best = { ms = { total = 0 / 0, forward = 0 / 0, backward = 0 / 0, optimizer = 0 / 0, patch = 0 / 0 } }
  local timed = false
  for _ = 1, steps do
    local r = trainer:step(batches)
    local skipped = r.lr == 0 -- a non-finite step (loss scale backing off) does no AdamW work: not a timing
    if not skipped and (not timed or r.ms.total < best.ms.total) then best, timed = r, true end
  end
  -- (fed weights: every layer's programs are alike and come from the compile cache, and
  -- nothing is patched, so there is no recompile to compare with)
  local versus = setup[2].weights_as_inputs and "n/a (fed)"
      or string.format("%.2f s (%.0fx the patch)", recompile, recompile / (best.ms.patch / 1000))
  print(string.format("%-8s %9.2f %9.2f %9.2f %9.2f %9.2f %8.0f%% %9s %8d  %-20s  %.2f s (%.1fx the step)", precision,
    best.ms.total / 1000, best.ms.forward / 1000, best.ms.backward / 1000, best.ms.optimizer / 1000,
    best.ms.patch / 1000, 100 * bound / (best.ms.total / 1000),
    ane.stats().compiles == compiles_after_first and "+0" or "MOVED", trainer.nonfinite, versus, first,
    first / (best.ms.total / 1000))) -- skipped steps are left out of the timing (best of the others)
  model, trainer = nil, nil
  collectgarbage()
end

-- GPT-2 124M (12 layers, C 768, vocab 50257, random weights), batch 4 x 64 tokens, fp32,
-- against the same kind of bound (its matmul FLOPs over the sgemm rate above). (llm.c's
-- train_gpt2.c is not run here: no typed-in figure stands in for it.)
do
  local gpt2 = require("ane.models.gpt2")
  local C, L, GV, B, GT = 768, 12, 50257, 4, 64
  local gpt2_config = { n_embd = C, n_layer = L, n_head = 12, n_positions = 1024, vocab_size = GV, eps = 1e-5 }
  -- per token per layer: q, k, v, o (4 C^2), MLP (8 C^2); attention 2 * 2 * T * C; classifier V * C
  local gpt2_forward = B * (2 * GT * L * 12 * C * C + 2 * 2 * GT * GT * C * L + 2 * GT * GV * C)
  local gpt2_bound = 3 * gpt2_forward / sgemm
  local model = assert(gpt2.from_weights(gpt2.random_weights(gpt2_config, 3), { precision = "fp32", profile = "cpu" }))
  local trainer = train.new(model, { lr = 1e-4, warmup = 0, steps = 1000 })
  local rows, next_rows = {}, {}
  for b = 1, B do
    rows[b], next_rows[b] = {}, {}
    for t = 1, GT do rows[b][t], next_rows[b][t] = (b * 131 + t * 7919) % GV, (b * 131 + (t + 1) * 7919) % GV end
  end
  local gpt2_batches = { position = 0, next = function(self) self.position = self.position + 1 return rows, next_rows end }
  trainer:step(gpt2_batches)
  local compiles_after_first = ane.stats().compiles
  local best
  for _ = 1, steps do
    local r = trainer:step(gpt2_batches)
    if not best or r.ms.total < best.ms.total then best = r end
  end
  print(string.format("\nGPT-2 124M shape, batch %d x %d tokens, fp32: %.1f GFLOP, bound %.2f s", B, GT, 3 * gpt2_forward / 1e9,
    gpt2_bound))
  print(string.format("%-8s %9.2f %9.2f %9.2f %9.2f %9.2f %8.0f%% %9s", "fp32",
    best.ms.total / 1000, best.ms.forward / 1000, best.ms.backward / 1000, best.ms.optimizer / 1000, best.ms.patch / 1000,
    100 * gpt2_bound / (best.ms.total / 1000), ane.stats().compiles == compiles_after_first and "+0" or "MOVED"))
end

-- Benchmark: compiling one GPT-2 124M layer (C = 768, 12 heads, sequence 256) as its two
-- programs, attention and MLP: graph building, the pass pipeline and MIL + MILBlob emission,
-- each timed separately (best of several runs). The baseline is the device compiler's
-- reported ~70 ms per kernel (docs/reference/private-api.md, M4 Max: not measurable here, so no
-- ratio is printed against it); we aim for < 5 ms.
--   build/anelua scripts/bench/compile.lua [--seq S] [--runs N]
local ane = require("ane")
local nn = require("ane.nn")

local opts = require("ane.cli").command{
  name = "scripts/bench/compile.lua", summary = "Time graph building, passes and MIL emission of a GPT-2 124M layer.",
  options = {
    { "seq", "integer", 256, "sequence length", min = 1 },
    { "runs", "integer", 10, "runs per program (best taken)", min = 1 },
  },
}:parse(arg)
local seq, runs = opts.seq, opts.runs
local C, HEADS = 768, 12

local function weight(shape, seed) return ane.tensor.randn(shape, { seed = seed, std = 0.02, dtype = "fp16" }) end
local W = {
  ln_g = weight({ C }, 1), ln_b = weight({ C }, 2),
  wq = weight({ C, C, 1, 1 }, 3), wk = weight({ C, C, 1, 1 }, 4), wv = weight({ C, C, 1, 1 }, 5),
  wo = weight({ C, C, 1, 1 }, 6), bq = weight({ C }, 7), bk = weight({ C }, 8), bv = weight({ C }, 9),
  bo = weight({ C }, 10), fc = weight({ 4 * C, C, 1, 1 }, 11), fc_b = weight({ 4 * C }, 12),
  proj = weight({ C, 4 * C, 1, 1 }, 13), proj_b = weight({ C }, 14),
}

local programs = {
  attention = function()
    local g = ane.graph("attention")
    local x = g:input("x", { 1, C, 1, seq })
    local h = nn.layer_norm(g, x, W.ln_g, W.ln_b, { name = "ln_1" })
    local q = nn.split_heads(g, nn.linear(g, h, W.wq, W.bq, { name = "q" }), HEADS, { name = "qh" })
    local k = nn.split_heads(g, nn.linear(g, h, W.wk, W.bk, { name = "k" }), HEADS, { name = "kh" })
    local v = nn.split_heads(g, nn.linear(g, h, W.wv, W.bv, { name = "v" }), HEADS, { name = "vh" })
    local merged = nn.merge_heads(g, nn.causal_attention(g, q, k, v, { name = "attn" }), { name = "merged" })
    g:output("y", g:add(x, nn.linear(g, merged, W.wo, W.bo, { name = "c_proj" })))
    return g
  end,
  mlp = function()
    local g = ane.graph("mlp")
    local x = g:input("x", { 1, C, 1, seq })
    local h = nn.layer_norm(g, x, W.ln_g, W.ln_b, { name = "ln_2" })
    local up = nn.gelu(g, nn.linear(g, h, W.fc, W.fc_b, { name = "c_fc" }), { name = "gelu" })
    g:output("y", g:add(x, nn.linear(g, up, W.proj, W.proj_b, { name = "c_proj" })))
    return g
  end,
}

local clock = os.clock
local function best(f)
  local fastest = math.huge
  for _ = 1, runs do
    local start = clock()
    f()
    fastest = math.min(fastest, clock() - start)
  end
  return fastest * 1000
end

print(string.format("GPT-2 124M layer, C=%d, %d heads, seq %d; best of %d runs (CPU time)", C, HEADS, seq, runs))
print(string.format("%-10s %6s %9s %9s %9s %9s %10s", "program", "nodes", "build ms", "passes ms", "emit ms",
  "total ms", "weights"))
for _, name in ipairs({ "attention", "mlp" }) do
  local build = best(function() programs[name]() end)
  local passes = math.huge
  local emit = math.huge
  local nodes, weight_bytes
  for _ = 1, runs do
    local g = programs[name]()
    local start = clock()
    g:optimize()
    passes = math.min(passes, (clock() - start) * 1000)
    start = clock()
    local _, weights = g:mil()
    emit = math.min(emit, (clock() - start) * 1000)
    nodes = g:stats().nodes
    weight_bytes = #weights["@model_path/weights/weight.bin"]
  end
  local total = build + passes + emit
  print(string.format("%-10s %6d %9.2f %9.2f %9.2f %9.2f %8.1fMB", name, nodes, build, passes, emit, total,
    weight_bytes / 2 ^ 20))
end

-- Writes a GGUF F16 file of random weights at Qwen3-0.6B's shape (dim 1024, 28 layers, 16 query
-- and 8 key-value heads of 128, FFN 3072, vocabulary 151,936) with Qwen3's tokenizer, in
-- llama.cpp's llama architecture: the llama.cpp the peers were built from (c392e50) has no qwen3
-- architecture, and its qwen2 one takes heads of dim / heads only (64 here: "attn_q.weight has
-- wrong shape; expected 1024, 1024, got 1024, 2048"). Llama at this shape reads the same bytes a
-- token as Qwen3-0.6B and does the same products but its q/k norms (a few thousand weights). For
-- the benchmarks that need both engines on that shape (serve_load.sh --shape qwen3-0.6b).
--   build/anelua scripts/bench/qwen_shape_gguf.lua OUT.gguf [--seed 1]
local llama = require("ane.models.llama")
local gguf_export = require("ane.formats.gguf_export")

local root = (arg[0]:match("^(.*)/scripts/bench/[^/]*$") or ".")
local opts, positional = require("ane.cli").command {
  name = "scripts/bench/qwen_shape_gguf.lua",
  summary = "A random GGUF F16 model at Qwen3-0.6B's shape (llama architecture), with Qwen3's tokenizer.",
  positional = { { "OUT", "the GGUF file to write" } },
  options = {
    { "seed", "integer", 1, "the random weights' seed" },
    { "tokenizer", "path", root .. "/../shared/data/tokenizers/qwen3/tokenizer.json", "Qwen3's tokenizer.json" },
  },
}:parse(arg)
local out = positional[1]

local config = { model_type = "llama", dim = 1024, hidden = 3072, n_layer = 28, n_head = 16, n_kv_head = 8, head_dim = 128,
  vocab_size = 151936, seq_len = 4096, rope = "half", rope_theta = 1000000, norm_eps = 1e-6, naming = "hf" }
local weights = llama.random_hf_weights(config, opts.seed, "random weights at Qwen3-0.6B's shape (seed " .. opts.seed .. ")")
local model = assert(llama.from_weights(weights, { precision = "fp32", profile = "cpu" }))
local ok, err = gguf_export.write(out, model, { type = "F16", tokenizer = opts.tokenizer })
if not ok then
  io.stderr:write(err, "\n")
  os.exit(1)
end
print(out)

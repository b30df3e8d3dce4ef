-- ane.models.qwen3: Qwen3, the Llama architecture with grouped-query attention, per-head
-- q/k RMSNorms before rotate-half RoPE (theta 1e6), an explicit head_dim and tied
-- embeddings (docs/reference/model-formats.md): the Llama architecture table with those
-- switches (ane.models.llama builds it, ane.models.transformer runs it). This module is
-- Qwen3's own entry point: loading a Hugging Face Qwen3 directory (and refusing other model
-- types), its published configurations, and random Qwen3-shaped weights for demos and
-- benchmarks.
--
--   local qwen3 = require("ane.models.qwen3")
--   local model = assert(qwen3.load("models/qwen3-0.6b", { precision = "fp16" }))
--   local demo = qwen3.from_weights(qwen3.random_weights(qwen3.CONFIGS["0.6B"], 1))
local ane = require("ane")
local llama = require("ane.models.llama")

local M = {}

-- Published shapes (their config.json files); seq_len is max_position_embeddings.
M.CONFIGS = {
  ["0.6B"] = { dim = 1024, hidden = 3072, n_layer = 28, n_head = 16, n_kv_head = 8, head_dim = 128, vocab_size = 151936,
    seq_len = 40960 },
  -- the chat example's demo (no weights given): Qwen3's vocabulary and layout, tiny layers
  demo = { dim = 64, hidden = 128, n_layer = 2, n_head = 4, n_kv_head = 2, head_dim = 32, vocab_size = 151936,
    seq_len = 4096 },
}

-- Qwen3's end-of-text and end-of-turn ids (<|endoftext|>, <|im_end|>), as its config.json says.
M.DEMO_IDS = { eos_token_id = { 151645, 151643 } }
-- Qwen3's sampling defaults, as its generation_config.json gives them (the chat demo's).
M.DEMO_GENERATION = { temperature = 0.6, top_k = 20, top_p = 0.95 }

--- A Hugging Face Qwen3 directory as a model (opts as for ane.models.llama), or nil and a
--- message naming the file.
function M.load(dir, opts)
  if type(dir) ~= "string" then error("qwen3.load: dir must be a string", 2) end
  local config, err = ane.io.read_json(dir .. "/config.json")
  if not config then return nil, err end
  if config.model_type ~= "qwen3" then
    return nil, string.format("%s/config.json: model_type '%s', not 'qwen3' (ane.models.llama reads Llama directories)",
      dir, tostring(config.model_type))
  end
  return llama.load(dir, opts)
end

--- Random Qwen3-shaped weights (Hugging Face names): normal(0, 0.02) projections, the
--- residual ones (o_proj, down_proj) scaled by 1/sqrt(2 L), unit norms, tied embeddings.
--- config: dim, hidden, n_layer, n_head, n_kv_head, head_dim, vocab_size, seq_len.
function M.random_weights(config, seed)
  seed = seed or 1
  local c = { dim = config.dim, hidden = config.hidden, n_layer = config.n_layer, n_head = config.n_head,
    n_kv_head = config.n_kv_head, head_dim = config.head_dim, vocab_size = config.vocab_size, seq_len = config.seq_len,
    rope = "half", rope_theta = config.rope_theta or 1e6, norm_eps = config.norm_eps or 1e-6, qk_norm = true,
    naming = "hf", model_type = "qwen3" }
  return llama.random_hf_weights(c, seed, "random Qwen3 weights (seed " .. seed .. ")")
end

M.from_weights = llama.from_weights

return M

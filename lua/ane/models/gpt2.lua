-- ane.models.gpt2: GPT-2 on anelua programs: its architecture table and checkpoint names
-- for ane.models.transformer, which builds and runs it.
--
--   local gpt2 = require("ane.models.gpt2")
--   local model = assert(gpt2.load("models/gpt2", { precision = "fp16", profile = "ane" }))
--   local logits = model:logits({ 15496, 995 })          -- tensor [T, V] (fp32)
--   for id in model:generate(prompt_ids, { max_tokens = 32, temperature = 0 }) do ... end
--
-- GPT-2: LayerNorms, one fused qkv product with biases, learned position embeddings, a GELU
-- MLP four times as wide, the classifier tied to the token embedding. Its checkpoints are
-- Hugging Face directories (ane.formats.hf_gpt2, whose names the parameters keep: Conv1D
-- matrices [in, out]) and llm.c's gpt2_124M.bin (ane.formats.llmc).
--
-- Precision: "fp16" builds fp16 programs run with the device's rounding; "fp32" builds fp32
-- programs from fp32 weights (the CPU reference), which the device cannot run (ANE-26), so
-- it uses the cpu profile's rules. Profiles: "ane" (default: the device's constraints, e.g.
-- I/O at least 32 wide, so one decoded token is padded to 32) or "cpu" (same programs, but
-- shapes only the device refuses are allowed: single-token decode without padding).
local ane = require("ane")
local decoder = require("ane.models.decoder")
local transformer = require("ane.models.transformer")
local hf_gpt2 = require("ane.formats.hf_gpt2")
local lfs = require("lfs")

local M = {}
local Model = transformer.mixin({})
Model.__index = Model

--- The architecture of a GPT-2 configuration (n_embd, n_layer, n_head, n_positions,
--- vocab_size, eps).
function M.architecture(config)
  local C, heads = config.n_embd, config.n_head
  -- (a configuration that does not divide keeps head_dim nil, which transformer.init refuses)
  local divides = math.type(C) == "integer" and math.type(heads) == "integer" and heads > 0 and C % heads == 0
  return { name = "gpt2", dim = C, hidden = math.type(C) == "integer" and 4 * C or nil, n_layer = config.n_layer,
    n_head = heads, n_kv_head = heads, head_dim = divides and C // heads or nil,
    vocab_size = config.vocab_size, context_length = config.n_positions, norm = "layer", norm_eps = config.eps,
    qkv = "fused", bias = true, positions = "learned", ffn = "gelu", tied = true }
end

--- A randomly initialized GPT-2-shaped model's weights (for demos and benchmarks: the text
--- is noise): normal(0, 0.02) matrices and tokens, 0.01 positions, unit norms, zero biases.
function M.random_weights(config, seed)
  local C, V, T = config.n_embd, config.vocab_size, config.n_positions
  seed = seed or 1
  local draw = decoder.seeded_randn(seed)
  local function randn(shape, std) return draw(shape, std or 0.02) end
  local function ones(size) return ane.tensor({ size }):fill(1) end
  local W = { config = config, layers = {}, token_embedding = randn({ V, C }), position_embedding = randn({ T, C }, 0.01),
    final_norm = ones(C), final_norm_bias = ane.tensor({ C }), source = "random weights (seed " .. seed .. ")" }
  for l = 1, config.n_layer do
    W.layers[l] = {
      attn_norm = ones(C), attn_norm_bias = ane.tensor({ C }), ffn_norm = ones(C), ffn_norm_bias = ane.tensor({ C }),
      qkv = randn({ 3 * C, C }), qkv_bias = ane.tensor({ 3 * C }), out = randn({ C, C }), out_bias = ane.tensor({ C }),
      up = randn({ 4 * C, C }), up_bias = ane.tensor({ 4 * C }), down = randn({ C, 4 * C }), down_bias = ane.tensor({ C }),
    }
  end
  return W
end

--- Loads a model: a Hugging Face directory (config.json + model.safetensors, or sharded) or
--- an llm.c gpt2_124M.bin. opts: backend, precision ("fp16" | "fp32"), profile ("ane" |
--- "cpu"), quantize, activations (as ane.models.llama). Returns the model, or nil and a message naming the file and tensor at fault.
function M.load(path, opts)
  if type(path) ~= "string" then error("gpt2.load: path must be a string", 2) end
  local W, err = require(lfs.attributes(path, "mode") == "directory" and "ane.formats.hf_gpt2" or "ane.formats.llmc").read(path)
  if not W then return nil, err end
  return M.from_weights(W, opts)
end

--- Builds a model from weights by role (see M.random_weights and ane.models.transformer).
function M.from_weights(W, opts)
  opts = opts or {}
  local precision, profile = decoder.check_options(opts, 2)
  local self = setmetatable(decoder.new_state("gpt2", opts, precision, profile), Model)
  W.config.model_type = "gpt2" -- kept in checkpoints, which then know what they hold
  local built, why = transformer.init(self, W, M.architecture(W.config), hf_gpt2.naming, opts, 2)
  if not built then return nil, why end
  self.stop_token = W.config.vocab_size - 1 -- <|endoftext|>
  return self
end

--- Weights by role from parameters in checkpoint layout (Hugging Face names, Conv1D
--- [in, out]: what model:parameters() returns and checkpoints store), for from_weights.
function M.weights_from_parameters(config, params, source)
  return transformer.weights_from_parameters(M.architecture(config), hf_gpt2.naming, config, params, source)
end

function Model:__tostring()
  local c = self.config
  return string.format("gpt2 (%d layers, %d heads, %d channels, vocab %d; %s, %s%s, profile %s) from %s", c.n_layer,
    c.n_head, c.n_embd, c.vocab_size, self.backend, self.precision, decoder.quantization_label(self), self.profile,
    self.source)
end

return M

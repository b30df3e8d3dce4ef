-- ane.models.llama: the Llama-2 architecture (Stories15M/42M/110M, Hugging Face Llama) and
-- its family (Qwen3 through ane.models.qwen3) on anelua programs: the architecture table and
-- checkpoint names for ane.models.transformer, which builds and runs it.
--
--   local llama = require("ane.models.llama")
--   local model = assert(llama.load("stories110M.bin", { precision = "fp16" }))
--   model:logits(ids) -> [T, V]; model:generate(prompt_ids, opts) -> iterator of ids
--
-- Llama: RMSNorms, separate q, k, v projections without biases (k, v of fewer heads for
-- grouped-query attention), RoPE (llama2.c's interleaved pairs, Hugging Face's rotate-half),
-- per-head q/k norms for Qwen3, a SwiGLU FFN (GeGLU, post-norms and sliding-window layers for
-- Gemma 3: ane.formats.hf_llama.gemma3), a classifier of its own or tied. Checkpoints:
-- llama2.c's .bin (ane.formats.llama2c) and Hugging Face directories (ane.formats.hf_llama);
-- parameters keep the naming of the file they came from. Precision and profiles as in
-- ane.models.gpt2; quantize, weights_as_inputs and lora as M.from_weights says.
local ane = require("ane")
local decoder = require("ane.models.decoder")
local transformer = require("ane.models.transformer")
local family = require("ane.models.llama_config")
local lfs = require("lfs")

local M = {}
local Model = transformer.mixin({})
Model.__index = Model

--- The architecture of a (completed) Llama-family configuration.
function M.architecture(config)
  return { name = config.model_type or "llama", dim = config.dim, hidden = config.hidden, n_layer = config.n_layer,
    n_head = config.n_head, n_kv_head = config.n_kv_head, head_dim = config.head_dim, vocab_size = config.vocab_size,
    context_length = config.seq_len, norm = "rms", norm_eps = config.norm_eps, qkv = "separate", bias = false,
    positions = "rope", rope = config.rope, rope_theta = config.rope_theta, rope_scaling = config.rope_scaling,
    qk_norm = config.qk_norm, qkv_bias = config.qkv_bias, ffn = config.ffn or "swiglu", post_norms = config.post_norms,
    attn_scale = config.attn_scale, embed_scale = config.embed_scale, sliding_window = config.sliding_window,
    sliding = config.sliding, rope_local_theta = config.rope_local_theta, attn_softcap = config.attn_softcap,
    final_softcap = config.final_softcap }
end

--- Whether the file at path starts with GGUF's magic.
function M.is_gguf(path)
  local f = io.open(path, "rb")
  local head = f and f:read(4)
  if f then f:close() end
  return head == "GGUF"
end

--- Loads a llama2.c checkpoint (v0 or v1 .bin) or a Hugging Face Llama / Qwen3 directory.
--- opts: as for M.from_weights. Returns the model, or nil and a message naming the file.
function M.load(path, opts)
  if type(path) ~= "string" then error("llama.load: path must be a string", 2) end
  local is_directory = lfs.attributes(path, "mode") == "directory"
  local reader = is_directory and "ane.formats.hf_llama" or M.is_gguf(path) and "ane.formats.gguf" or "ane.formats.llama2c"
  -- (an fp16 model's dequantized blocks go straight to fp16; quantizing at load starts from fp32)
  local precision = opts and opts.precision or "fp16"
  local fp16 = precision == "fp16" and not (opts and opts.quantize)
  local W, err = require(reader).read(path, { dequantize_blocks = opts and opts.dequantize_blocks,
    dtype = fp16 and "fp16" or nil, precision = precision })
  if not W then return nil, err end
  local model, problem = M.from_weights(W, opts)
  if model then model.file_header, W.header = W.header, nil end -- (a GGUF file's: ane.models.load reads its tokenizer from it)
  return model, problem
end

--- Weights by role from parameters in checkpoint layout (name -> fp32 tensor, named as
--- `naming` (or config.naming) says: "llama2c", the default, for token_embedding, wq.0, ...,
--- optional wcls; "hf" for Hugging Face names); `source` says where they came from.
function M.weights_from_parameters(config, params, source, naming)
  naming = naming or config.naming or "llama2c" -- checkpoints keep the naming in their config
  if not family.NAMINGS[naming] then -- (weights that hold only the problem: from_weights returns it)
    return { config = config, layers = {}, source = source, problem = string.format(
      "%s: the configuration's naming '%s' is not one of llama2c, hf, hf_gemma, gguf", tostring(source), tostring(naming)) }
  end
  config = family.complete_config(config)
  local W = transformer.weights_from_parameters(M.architecture(config), family.NAMINGS[naming], config, params, source)
  W.naming = naming
  return W
end

--- A freshly initialized Llama (for training from scratch): normal(0, 0.02) matrices, the
--- residual projections wo and w2 scaled down by sqrt(2 * n_layer), unit RMSNorm weights,
--- a shared classifier. config: dim, hidden, n_layer, n_head, vocab_size, seq_len.
function M.random_weights(config, seed)
  seed = seed or 1
  local randn = decoder.seeded_randn(seed)
  local dim, hidden = config.dim, config.hidden
  local residual_std = 0.02 / math.sqrt(2 * config.n_layer)
  local params = { token_embedding = randn({ config.vocab_size, dim }, 0.02), rms_final = ane.tensor({ dim }):fill(1) }
  for l = 0, config.n_layer - 1 do
    params["rms_att." .. l], params["rms_ffn." .. l] = ane.tensor({ dim }):fill(1), ane.tensor({ dim }):fill(1)
    for _, field in ipairs({ "wq", "wk", "wv" }) do params[field .. "." .. l] = randn({ dim, dim }, 0.02) end
    params["wo." .. l] = randn({ dim, dim }, residual_std)
    params["w1." .. l], params["w3." .. l] = randn({ hidden, dim }, 0.02), randn({ hidden, dim }, 0.02)
    params["w2." .. l] = randn({ dim, hidden }, residual_std)
  end
  config = { dim = dim, hidden = hidden, n_layer = config.n_layer, n_head = config.n_head,
    n_kv_head = config.n_head, vocab_size = config.vocab_size, seq_len = config.seq_len }
  return M.weights_from_parameters(config, params, "random weights (seed " .. seed .. ")")
end

--- Random weights of a Hugging Face-named Llama-family configuration (config as
--- ane.formats.hf_llama reads one: dim, hidden, n_layer, n_head, n_kv_head, head_dim,
--- vocab_size, seq_len, naming "hf" or "hf_gemma", and the family's fields): normal(0, 0.02)
--- projections, the residual ones (o_proj, down_proj) scaled by 1/sqrt(2 L), norms 1 (as the
--- naming stores them), biases 0, tied embeddings. `source` says what they are.
function M.random_hf_weights(config, seed, source)
  local c = config
  local naming = family.NAMINGS[c.naming or "hf"]
  local name, offsets = naming.name, naming.offsets or {}
  local randn = decoder.seeded_randn(seed)
  local function norm(role, n) return ane.tensor({ n }):fill(1 - (offsets[role] or 0)) end
  local q_width, kv_width = c.n_head * c.head_dim, c.n_kv_head * c.head_dim
  local residual_std = 0.02 / math.sqrt(2 * c.n_layer)
  local params = { [name("token_embedding")] = randn({ c.vocab_size, c.dim }, 0.02),
    [name("final_norm")] = norm("final_norm", c.dim) }
  for l = 0, c.n_layer - 1 do
    local roles = family.layer_roles(c)
    for _, role in ipairs(roles) do
      if role:match("norm$") then params[name(role, l)] = norm(role, role:match("^[qk]_norm$") and c.head_dim or c.dim)
      elseif role:match("_bias$") then params[name(role, l)] = ane.tensor({ role == "q_bias" and q_width or kv_width }) end
    end
    params[name("q", l)] = randn({ q_width, c.dim }, 0.02)
    params[name("k", l)], params[name("v", l)] = randn({ kv_width, c.dim }, 0.02), randn({ kv_width, c.dim }, 0.02)
    params[name("out", l)] = randn({ c.dim, q_width }, residual_std)
    params[name("gate", l)], params[name("up", l)] = randn({ c.hidden, c.dim }, 0.02), randn({ c.hidden, c.dim }, 0.02)
    params[name("down", l)] = randn({ c.dim, c.hidden }, residual_std)
  end
  return M.weights_from_parameters(c, params, source, c.naming or "hf")
end

--- Builds a model from weights by role (ane.formats.llama2c / hf_llama, M.random_weights).
--- opts: backend, precision ("fp16" | "fp32"), profile ("ane" | "cpu"); quantize ("int8" |
--- "int4" | "q8_0" | "q4_0" (sim): every linear layer, the programs carry the codes) and
--- quantize_classifier; dequantize_blocks (M.load of a GGUF file: its Q8_0 / Q4_0 matrices
--- dequantized at load rather than read as stored);
--- activations ("int8" / "int16": products with the quantized weights on integer activations,
--- the cpu profile's fast paths, ane.models.decoder.check_activations); weights_as_inputs (the weights become program inputs, fed at each eval); lora ({ rank,
--- alpha, seed }: adapters on q and v, ane.models.lora).
function M.from_weights(W, opts)
  opts = opts or {}
  local precision, profile = decoder.check_options(opts, 2)
  local self = setmetatable(decoder.new_state(W.config.model_type or "llama", opts, precision, profile), Model)
  self.stop_token = W.stop_token or 2 -- config.json's eos_token_id, or llama2.c's </s>
  self.notes = W.notes -- (what the reader did otherwise than asked, e.g. a GGUF matrix dequantized)
  return transformer.init(self, W, M.architecture(W.config), family.NAMINGS[W.naming or "llama2c"], opts, 2)
end

--- Writes the model as a Hugging Face-layout directory that M.load reads back as it is: its
--- weights in the model's precision (an fp16 model's then load as views of the file, with
--- nothing to convert) or quantized (not re-quantized). ane.formats.hf_llama.write; returns
--- true or nil and a message.
function Model:save(dir)
  if type(dir) ~= "string" then error("save: dir must be a string", 2) end
  return require("ane.formats.hf_llama").write(dir, self)
end

--- Model:save for a quantized model (a message when it holds no quantized weights).
function Model:save_quantized(dir)
  if type(dir) ~= "string" then error("save_quantized: dir must be a string", 2) end
  return require("ane.formats.hf_llama").write_quantized(dir, self)
end

function Model:__tostring()
  local c = self.config
  local lora = self.lora and string.format(", LoRA rank %d alpha %g on wq/wv", self.lora.rank, self.lora.alpha) or ""
  local heads = c.n_kv_head == c.n_head and tostring(c.n_head) or string.format("%d (%d kv)", c.n_head, c.n_kv_head)
  return string.format("%s (%d layers, %s heads of %d, dim %d, hidden %d, vocab %d; %s, %s%s, profile %s%s) from %s%s",
    c.model_type or "llama", c.n_layer, heads, c.head_dim, c.dim, c.hidden, c.vocab_size, self.backend, self.precision,
    decoder.quantization_label(self), self.profile, lora, self.source,
    self.notes and "\nnote: " .. table.concat(self.notes, "\nnote: ") or "")
end

return M

-- ane.formats.gguf_export: a Llama-family model written as a GGUF file that llama.cpp opens
-- (scripts/quantize.lua OUT.gguf). The model's configuration becomes llama.cpp's metadata keys
-- (llama-arch.cpp's names, as ane.formats.gguf reads them), its weights tensors in llama.cpp's
-- names and layout, its tokenizer tokenizer.ggml.* (a SentencePiece vocabulary as "llama", a
-- byte-level BPE tokenizer.json as "gpt2" with its pre-tokenizer's name) and the chat template
-- of its tokenizer_config.json.
--
-- Tensor types: norms and biases F32; every matrix (the embedding and the classifier too, as
-- llama-quantize --pure writes them) in the file's type: F32, F16, or llama.cpp's Q8_0 / Q4_0
-- blocks (a model loaded with quantize = "q8_0" / "q4_0" is written as its own codes and
-- scales; the others are quantized here by ggml's reference rules, ane.quantize).
--
--   assert(require("ane.formats.gguf_export").write("out.gguf", model, { type = "Q8_0" }))
local ane = require("ane")
local gguf = require("ane.formats.gguf")
local decoder = require("ane.models.decoder")
local nn = require("ane.nn")
local names = require("ane.models.llama_config").NAMINGS.gguf.name

local M = {}

local function fail(format, ...) return nil, string.format(format, ...) end

-- llama.cpp's architecture for each model_type anelua loads (Mistral and Phi-3, written apart, are
-- Llama networks; llama.cpp's own converters write Mistral so), with its rotation: "llama" rotates
-- adjacent pairs (its converters permute q and k rows to that), Qwen2 / Qwen3 rotate halves.
local ARCHITECTURES = { llama = "llama", mistral = "llama", phi3 = "llama", qwen2 = "qwen2", qwen3 = "qwen3" }
local INTERLEAVED = { llama = true }

-- general.file_type (llama.h's llama_ftype): all F32, mostly F16, mostly Q4_0, mostly Q8_0.
local FILE_TYPES = { F32 = 0, F16 = 1, Q4_0 = 2, Q8_0 = 7 }
local ENCODINGS = { Q8_0 = "q8_0", Q4_0 = "q4_0" }

-- The rows of a [heads * head_dim, width] matrix reordered within each head from rotate-half
-- pairs (i, i + head_dim / 2) to adjacent ones (2i, 2i + 1): llama.cpp's permute in
-- convert_hf_to_gguf.py, on whole rows (a row of blocks moves as its bytes).
local function interleave_rows(rows, heads, head_dim)
  local width = rows:shape()[2]
  return rows:reshape(heads, 2, head_dim // 2, width):transpose(2, 3):reshape(heads * head_dim, width)
end

-- A matrix in GGUF's type: a contiguous tensor [rows, ...] whose memory is the file's bytes of
-- it (F32 / F16 values, or the blocks of a row as uint8), and the type; `w` a tensor ([out, in]
-- or the programs' [out, in, 1, 1]) or a quantized weight.
local function matrix_bytes(w, type, name)
  local shape = w:shape()
  local rows, k = shape[1], w:numel() // shape[1]
  if ane.quantized.is(w) and (w:encoding() == "q4_k" or w:encoding() == "q5_k") then -- (scale and offset pairs are not the file's blocks)
    w = w:dequantize()
  end
  if ane.quantized.is(w) then
    local encoding = w:encoding()
    if encoding ~= "q8_0" and encoding ~= "q4_0" and encoding ~= "q6_k" then
      return fail("tensor '%s' is quantized %s, which no GGUF type holds (per-row scales or palettes); "
        .. "quantize to q8_0 or q4_0 instead", name, encoding)
    end
    local blocks, err = w:blocks(name)
    if not blocks then return nil, err end
    return blocks:reshape(rows, blocks:numel() // rows), encoding:upper()
  end
  local values = w:reshape(rows, k)
  if ENCODINGS[type] then
    local quantized, err = ane.quantize(values:to("fp32"), ENCODINGS[type], { dtype = "fp32", name = name })
    if not quantized then return nil, err end
    return matrix_bytes(quantized, type, name)
  end
  if type == "F16" then -- (fp16's round-to-nearest takes |x| >= 65520 to infinity: a file of NaN logits)
    local index, value = values:first_outside(65520)
    if index then
      return fail("tensor '%s' holds %.9g at element %d, beyond fp16's range: write it F32 (--precision fp32)", name, value,
        index)
    end
  end
  return decoder.in_dtype(values, type == "F16" and "fp16" or "fp32"), type
end

-- The frequencies' rescaling as llama.cpp holds it: "linear" in metadata, or a factor per
-- frequency (rope_freqs.weight, which llama.cpp divides each frequency by: Llama 3.1's).
local function rope_scaling(c, architecture, metadata, tensors)
  local scaling = c.rope_scaling
  if not scaling then return true end
  if scaling.type == "linear" then
    metadata[#metadata + 1] = { architecture .. ".rope.scaling.type", "string", "linear" }
    metadata[#metadata + 1] = { architecture .. ".rope.scaling.factor", "f32", scaling.factor }
    return true
  end
  if scaling.type ~= "llama3" and scaling.type ~= "factors" then
    return fail("its rotary scaling '%s' has no GGUF form llama.cpp's %s architecture reads (linear, llama3 and "
      .. "per-frequency factors do)", tostring(scaling.type), architecture)
  end
  local plain = nn.rope_frequencies(c.head_dim, c.rope_theta, nil)
  local scaled = nn.rope_frequencies(c.head_dim, c.rope_theta, scaling)
  local factors = {}
  for i = 1, #plain do factors[i] = plain[i] / scaled[i] end
  tensors[#tensors + 1] = { "rope_freqs.weight", { #factors }, "F32", ane.tensor.from(factors, { #factors }):bytes() }
  return true
end

-- llama.cpp's pre-tokenizer name (tokenizer.ggml.pre) of a tokenizer.json's split stages: the
-- one ane.formats.gguf reads back to the same stages.
local PREFERRED_PRE = { "default", "llama-bpe", "qwen2", "smollm" }
local function pre_tokenizer_name(stages, nfc)
  local function same(a, b)
    if type(a) ~= "table" or type(b) ~= "table" then return a == b end
    if #a ~= #b then return false end
    for i = 1, #a do if a[i] ~= b[i] then return false end end
    return true
  end
  for _, name in ipairs(PREFERRED_PRE) do
    local how = gguf.PRE_TOKENIZERS[name]
    if same(how.pattern, stages) and (how.nfc or false) == (nfc or false) then return name end
  end
end

-- Token types of tokenizer.ggml.token_type (llama.cpp's llama_token_type).
local NORMAL, UNKNOWN, CONTROL, USER_DEFINED, BYTE = 1, 2, 3, 4, 6

-- tokenizer.ggml.* of a SentencePiece vocabulary (ane.sentencepiece): Llama's <unk>, <s>, </s> at
-- 0-2 and its <0xXX> byte pieces typed as llama.cpp's converters type them.
local function sentencepiece_metadata(tokenizer, metadata)
  local tokens, scores, types = {}, {}, {}
  for id = 0, tokenizer.vocab_size - 1 do
    local piece, score = tokenizer.spm:piece(id)
    types[id + 1] = id == 0 and UNKNOWN or (id == 1 or id == 2) and CONTROL or piece:match("^<0x%x%x>$") and BYTE or NORMAL
    -- (llama2.c's tokenizer.bin writes <s> and </s> as "\n<s>\n": a control token is its name)
    tokens[id + 1], scores[id + 1] = types[id + 1] == CONTROL and piece:match("^%s*(.-)%s*$") or piece, score
  end
  for _, m in ipairs({ { "tokenizer.ggml.model", "string", "llama" }, { "tokenizer.ggml.tokens", "string[]", tokens },
    { "tokenizer.ggml.scores", "f32[]", scores }, { "tokenizer.ggml.token_type", "i32[]", types },
    { "tokenizer.ggml.bos_token_id", "u32", tokenizer.bos }, { "tokenizer.ggml.eos_token_id", "u32", tokenizer.eos },
    { "tokenizer.ggml.unknown_token_id", "u32", 0 } }) do
    metadata[#metadata + 1] = m
  end
  return true
end

-- tokenizer.ggml.* of a byte-level BPE tokenizer.json: tokens in id order, merges, the
-- pre-tokenizer's name, the added tokens typed control (special) or user-defined; the BOS /
-- EOS ids and chat template of tokenizer_config.json beside it.
local function bpe_metadata(path, tokenizer, model, metadata)
  local json, err = ane.io.read_json(path)
  if not json then return nil, err end
  local stages = tokenizer.pattern
  local pre = pre_tokenizer_name(stages, tokenizer.nfc)
  if not pre then
    return fail("%s: its pre-tokenizer is none of those llama.cpp names and anelua reads back (%s)", path,
      table.concat(PREFERRED_PRE, ", "))
  end
  local tokens, types, count = {}, {}, model.vocab_size
  for token, id in pairs(json.model.vocab) do
    tokens[id + 1], types[id + 1], count = token, NORMAL, math.max(count, id + 1)
  end
  local special = {}
  for _, added in ipairs(json.added_tokens or {}) do
    tokens[added.id + 1], types[added.id + 1] = added.content, added.special and CONTROL or USER_DEFINED
    special[added.content], count = added.id, math.max(count, added.id + 1)
  end
  for id = 1, count do
    if tokens[id] == nil then tokens[id], types[id] = string.format("[PAD%d]", id - 1), USER_DEFINED end -- (llama.cpp's fill)
  end
  local merges = {}
  for i, merge in ipairs(json.model.merges) do merges[i] = type(merge) == "table" and table.concat(merge, " ") or merge end
  for _, m in ipairs({ { "tokenizer.ggml.model", "string", "gpt2" }, { "tokenizer.ggml.pre", "string", pre },
    { "tokenizer.ggml.tokens", "string[]", tokens }, { "tokenizer.ggml.token_type", "i32[]", types },
    { "tokenizer.ggml.merges", "string[]", merges } }) do
    metadata[#metadata + 1] = m
  end
  local dir = path:match("^(.*)/[^/]*$") or "."
  local config = ane.io.read_json(dir .. "/tokenizer_config.json")
  config = type(config) == "table" and config or {}
  local ids = {}
  for _, field in ipairs({ "bos", "eos" }) do
    local text = config[field .. "_token"]
    if type(text) == "table" then text = text.content end
    ids[field] = type(text) == "string" and special[text] or nil
  end
  ids.eos = ids.eos or model.stop_token -- (config.json's eos_token_id)
  for _, field in ipairs({ "bos", "eos" }) do
    if ids[field] then metadata[#metadata + 1] = { "tokenizer.ggml." .. field .. "_token_id", "u32", ids[field] } end
  end
  local template = type(config.chat_template) == "string" and config.chat_template
    or ane.io.read_file(dir .. "/chat_template.jinja")
  if template then metadata[#metadata + 1] = { "tokenizer.chat_template", "string", template } end
  return true
end

-- The tokenizer.* and chat template metadata of a GGUF file, copied.
local function copy_tokenizer(path, metadata)
  local file, err = gguf.open(path)
  if not file then return nil, err end
  local keys = {}
  for key in pairs(file.metadata) do if key:match("^tokenizer%.") then keys[#keys + 1] = key end end
  table.sort(keys)
  for _, key in ipairs(keys) do
    local kind = file.metadata_types and file.metadata_types[key]
    if not kind then return fail("%s: metadata '%s' has no type to copy it as", path, key) end
    metadata[#metadata + 1] = { key, kind, file.metadata[key] }
  end
  return true
end

-- The tokenizer file beside a model's source (a directory, or a checkpoint file's directory).
local function tokenizer_beside(source)
  local lfs = require("lfs")
  if type(source) ~= "string" then return nil end
  local dir = lfs.attributes(source, "mode") == "directory" and source or source:match("^(.*)/[^/]*$") or "."
  for _, file in ipairs({ "tokenizer.json", "tokenizer.model", "tokenizer.bin" }) do
    if lfs.attributes(dir .. "/" .. file, "mode") == "file" then return dir .. "/" .. file end
  end
end

-- The tokenizer.* metadata: `tokenizer` a file, nil for the source's (a GGUF file's own, or the
-- file beside it), or false for none (its end-of-text id only).
local function tokenizer_metadata(model, tokenizer_path, metadata, path)
  local source = model.source
  if tokenizer_path == false then
    metadata[#metadata + 1] = { "tokenizer.ggml.eos_token_id", "u32", model.stop_token }
    return true
  end
  if not tokenizer_path and type(source) == "string" and require("ane.models.llama").is_gguf(source) then
    return copy_tokenizer(source, metadata) -- as it is
  end
  tokenizer_path = tokenizer_path or tokenizer_beside(source)
  if not tokenizer_path then
    return fail("%s: no tokenizer beside %s (tokenizer.json, tokenizer.model or tokenizer.bin), which a GGUF file must "
      .. "carry for llama.cpp to run it", path, tostring(source))
  end
  local tokenizer, why = require("ane.models").tokenizer_file(tokenizer_path, model.vocab_size)
  if not tokenizer then return nil, why end
  if tokenizer.spm then return sentencepiece_metadata(tokenizer, metadata) end
  return bpe_metadata(tokenizer_path, tokenizer, model, metadata)
end

--- Writes `model` (ane.models.llama) as a GGUF file at `path`, atomically. opts.type: "F32",
--- "F16" (default) or "Q8_0" / "Q4_0" for the matrices (a model quantized to q8_0 / q4_0 keeps
--- its own); opts.tokenizer: the tokenizer file to carry (default: a GGUF source's own, or the one
--- beside the model's source; false: none, a file of weights only, which llama.cpp cannot run).
--- Returns true and a list of notes (what the file holds differently: Mistral's context cut to its
--- attention window), or nil and a message naming what llama.cpp's GGUF cannot hold.
function M.write(path, model, opts)
  opts = opts or {}
  local c = model.config
  local architecture = ARCHITECTURES[c.model_type or "llama"]
  local function refuse(format, ...) return fail("%s: " .. format, path, ...) end
  if not architecture then
    return refuse("anelua writes GGUF for the Llama, Mistral, Phi-3, Qwen2 and Qwen3 families, not '%s'", tostring(c.model_type))
  end
  if model.lora then return refuse("the model has LoRA adapters, which the file would leave out (merge or save them apart)") end
  -- Mistral's window: llama.cpp's "llama" attends to every position, which within the window is
  -- the same; the file's context ends there
  local context, notes = model.context_length, {}
  if c.sliding_window and c.sliding_window < context then
    context = c.sliding_window
    notes[#notes + 1] = string.format("the context is %d positions, the model's attention window (llama.cpp's %s "
      .. "architecture attends to every position, the same within it; the model has %d)", context, architecture,
      model.context_length)
  end
  local file_type = opts.type or "F16"
  if not FILE_TYPES[file_type] then return refuse("type '%s' is not F32, F16, Q8_0 or Q4_0", tostring(file_type)) end
  if model.refresh_weights then model:refresh_weights() end -- trained parameters not yet in the programs' weights
  local metadata = { { "general.architecture", "string", architecture },
    { "general.name", "string", ((tostring(model.source):match("([^/]+)/*$") or "anelua"):gsub("%.%w+$", "")) },
    { "general.file_type", "u32", FILE_TYPES[file_type] } }
  if ENCODINGS[file_type] then metadata[#metadata + 1] = { "general.quantization_version", "u32", 2 } end
  for _, entry in ipairs({ { "context_length", context }, { "embedding_length", c.dim },
    { "feed_forward_length", c.hidden }, { "block_count", c.n_layer }, { "attention.head_count", c.n_head },
    { "attention.head_count_kv", c.n_kv_head }, { "attention.key_length", c.head_dim },
    { "attention.value_length", c.head_dim }, { "rope.dimension_count", c.head_dim }, { "vocab_size", model.vocab_size } }) do
    metadata[#metadata + 1] = { architecture .. "." .. entry[1], "u32", entry[2] }
  end
  metadata[#metadata + 1] = { architecture .. ".attention.layer_norm_rms_epsilon", "f32", c.norm_eps }
  metadata[#metadata + 1] = { architecture .. ".rope.freq_base", "f32", c.rope_theta }
  local tensors = {}
  local ok, err = rope_scaling(c, architecture, metadata, tensors)
  if not ok then return refuse("%s", err) end

  -- the tensors: matrices in the file's type, q and k rows in llama.cpp's order, vectors F32
  local permute = INTERLEAVED[architecture] and c.rope == "half"
  local function add_matrix(name, w, heads)
    local bytes, type_or_err = matrix_bytes(w, file_type, name)
    if not bytes then return nil, type_or_err end
    if heads and permute then bytes = interleave_rows(bytes, heads, c.head_dim) end
    local shape = w:shape()
    tensors[#tensors + 1] = { name, { shape[1], w:numel() // shape[1] }, type_or_err, bytes }
    return true
  end
  local function add_vector(name, t)
    tensors[#tensors + 1] = { name, { t:numel() }, "F32", decoder.in_dtype(t, "fp32"):reshape(t:numel()) }
  end
  ok, err = add_matrix(names("token_embedding"), model.P.token_embedding)
  if not ok then return refuse("%s", err) end
  for l, layer in ipairs(model.P.layers) do
    local stored = model.P.stored_layers[l]
    for _, role in ipairs(require("ane.models.llama_config").layer_roles(c)) do
      local t, name = stored[role] or layer[role], names(role, l - 1)
      if t == nil then return refuse("layer %d has no '%s' weight", l - 1, role) end
      if role:match("norm$") or role:match("_bias$") then -- (biases: Qwen2's, whose rows keep their order)
        add_vector(name, t)
      else
        ok, err = add_matrix(name, t, role == "q" and c.n_head or role == "k" and c.n_kv_head or nil)
        if not ok then return refuse("%s", err) end
      end
    end
  end
  add_vector(names("final_norm"), model.P.final_norm)
  if not model.shared_classifier then -- (a tied classifier is the embedding, as llama.cpp reads a file without output.weight)
    ok, err = add_matrix(names("classifier"), model.P.classifier)
    if not ok then return refuse("%s", err) end
  end

  ok, err = tokenizer_metadata(model, opts.tokenizer, metadata, path)
  if not ok then return nil, err end
  ok, err = gguf.write(path, metadata, tensors)
  if not ok then return nil, err end
  return true, notes
end

return M

-- Writes small, valid seed files for the Lua-reader fuzz targets (spec/fuzz/seeds/<reader>/):
-- one or two of each format, small enough for libFuzzer's 64 KB inputs, written through
-- anelua's own writers where it has them and field by field where it does not.
--   build/anelua scripts/make_fuzz_seeds.lua [--out DIR]
local ane = require("ane")
local lfs = require("lfs")
local opts = require("ane.cli").command {
  name = "scripts/make_fuzz_seeds.lua",
  summary = "Writes the seed files of the Lua-reader fuzz targets (one directory per reader).",
  compiles = false,
  options = { { "out", "path", "spec/fuzz/seeds", "the directory the readers' seed directories go in" } },
}:parse(arg)
lfs.mkdir(opts.out)
local root = opts.out .. "/"

local function write(reader, name, bytes)
  lfs.mkdir(root .. reader)
  local f = assert(io.open(root .. reader .. "/" .. name, "wb"))
  f:write(bytes)
  f:close()
end

local function read(path) local f = assert(io.open(path, "rb")); local b = f:read("a"); f:close(); return b end

local tmp = os.tmpname()
-- safetensors
assert(ane.io.save_safetensors(tmp, { a = ane.tensor.randn({ 2, 3 }, { seed = 1 }), b = ane.tensor({ 4 }, "fp16"):fill(1) },
  { note = "seed" }))
write("safetensors", "two_tensors.safetensors", read(tmp))
-- llama2.c checkpoint (dim 8, hidden 16, 1 layer, 2 heads, vocab 12, seq 4), llama2c names
local config = { dim = 8, hidden = 16, n_layer = 1, n_head = 2, n_kv_head = 2, vocab_size = 12, seq_len = 4 }
local function t(shape) return ane.tensor.randn(shape, { seed = #shape }) end
local params = { token_embedding = t({ 12, 8 }), rms_final = t({ 8 }), ["rms_att.0"] = t({ 8 }), ["rms_ffn.0"] = t({ 8 }),
  ["wq.0"] = t({ 8, 8 }), ["wk.0"] = t({ 8, 8 }), ["wv.0"] = t({ 8, 8 }), ["wo.0"] = t({ 8, 8 }),
  ["w1.0"] = t({ 16, 8 }), ["w3.0"] = t({ 16, 8 }), ["w2.0"] = t({ 8, 16 }) }
assert(require("ane.formats.llama2c").write(tmp, config, params))
write("llama2c", "tiny.bin", read(tmp))
-- llm.c GPT-2 checkpoint: header, then the 16 tensors of C = 4, L = 1, heads 2, V = Vp = 6, T = 4
local C, L, V, T = 4, 1, 6, 4
local count = V * C + T * C + 2 * L * C + L * 3 * C * C + L * 3 * C + L * C * C + L * C + 2 * L * C + L * 4 * C * C + L * 4 * C
  + L * C * 4 * C + L * C + 2 * C
local header = string.pack("<i4i4i4i4i4i4i4i4", 20240326, 3, T, V, L, 2, C, V) .. string.rep("\0", 1024 - 32)
local floats = {}
for i = 1, count do floats[i] = string.pack("<f", ((i * 37) % 17 - 8) / 64) end
write("llmc", "tiny_gpt2.bin", header .. table.concat(floats))
-- shards: llm.c and llama2.c
local data = require("ane.data")
assert(data.write(tmp, { 1, 2, 3, 4, 5, 50256, 7 }, { format = "llmc" }))
write("shard", "llmc.bin", read(tmp))
assert(data.write(tmp, { 1, 2, 3, 4 }, { format = "llama2c" }))
write("shard", "llama2c.bin", read(tmp))
-- SentencePiece: llama2.c's tokenizer.bin (max length, then score, length, bytes per token)
local pieces = { "<unk>", "<s>", "</s>", "a", "b", "ab", " a" }
local bin = { string.pack("<i4", 2) }
for i, p in ipairs(pieces) do bin[#bin + 1] = string.pack("<fi4", -i, #p) .. p end
write("sentencepiece", "llama2c_tokenizer.bin", table.concat(bin))
write("sentencepiece", "model_head.model", read("data/tokenizers/llama2/tokenizer.model"):sub(1, 4096))
-- tokenizer.json (a byte-level BPE with an added token)
write("tokenizer_json", "tiny.json", [[{"added_tokens":[{"id":6,"content":"<|endoftext|>"}],
"normalizer":null,"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false},
"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2,"c":3,"Ġ":4,"Ġa":5},"merges":["a b","Ġ a"]}}]])
-- llm.c's gpt2_tokenizer.bin: header, then length-prefixed tokens
local tokens = { "a", "b", "ab", " c", "<|endoftext|>" }
local tb = { string.pack("<I4I4I4I4", 20240328, 2, #tokens, 4) .. string.rep("\0", 1024 - 16) }
for _, t in ipairs(tokens) do tb[#tb + 1] = string.char(#t) .. t end
write("tokenizer_bin", "tiny_tokenizer.bin", table.concat(tb))
-- vocab.json, NUL, merges.txt
write("vocab_merges", "tiny", '{"a":0,"b":1,"ab":2,"\\u0120":3,"\\u0120a":4}\0#version: 0.2\na b\n\u{120} a\n')
-- an anelua checkpoint
local dir = tmp .. ".ckpt"
lfs.mkdir(dir)
local saved = assert(require("ane.checkpoint").save(dir, 3, { params = { w = ane.tensor.randn({ 2, 2 }, { seed = 2 }) },
  m = {}, v = {}, config = { dim = 2 }, trainer = { lr = 0.1 } }))
write("checkpoint", "step3.safetensors", read(saved))
os.remove(saved)
lfs.rmdir(dir)
-- a Hugging Face Llama config.json
write("hf_config", "config.json", '{"model_type":"llama","hidden_size":8,"intermediate_size":16,"num_hidden_layers":1,'
  .. '"num_attention_heads":2,"num_key_value_heads":2,"vocab_size":12,"max_position_embeddings":4,"rms_norm_eps":1e-5}')
-- a GGUF file (version 3, architecture llama: dim 32, 1 layer, 2 heads, hidden 32, vocab 8),
-- its matrices in F32, Q8_0 and Q4_0, with a SentencePiece tokenizer in its metadata
local vocabulary = { "<unk>", "<s>", "</s>", "\u{2581}a", "a", "b", "\u{2581}", "<0x41>" }
local scores = {}
for i = 1, #vocabulary do scores[i] = -i end
local metadata = { { "general.architecture", "string", "llama" } }
for _, kv in ipairs({ { "embedding_length", 32 }, { "feed_forward_length", 32 }, { "block_count", 1 },
  { "context_length", 8 }, { "attention.head_count", 2 }, { "attention.head_count_kv", 2 } }) do
  metadata[#metadata + 1] = { "llama." .. kv[1], "u32", kv[2] }
end
for _, m in ipairs({ { "llama.attention.layer_norm_rms_epsilon", "f32", 1e-5 }, { "tokenizer.ggml.model", "string", "llama" },
  { "tokenizer.ggml.tokens", "string[]", vocabulary }, { "tokenizer.ggml.scores", "f32[]", scores },
  { "tokenizer.ggml.bos_token_id", "u32", 1 }, { "tokenizer.ggml.eos_token_id", "u32", 2 } }) do
  metadata[#metadata + 1] = m
end
local function f32_bytes(n)
  local b = {}
  for i = 1, n do b[i] = string.pack("<f", ((i * 13) % 11 - 5) / 16) end
  return table.concat(b)
end
local function block_bytes(blocks, size) -- scale 1/32, codes from the block's number
  local b = {}
  for i = 1, blocks do
    b[i] = ane.tensor.from({ 0.03125 }, { 1 }, "fp16"):bytes() .. string.rep(string.char(17 * i % 256), size - 2)
  end
  return table.concat(b)
end
assert(require("ane.formats.gguf").write(tmp, metadata, {
  { "token_embd.weight", { 8, 32 }, "F32", f32_bytes(256) }, { "output_norm.weight", { 32 }, "F32", f32_bytes(32) },
  { "blk.0.attn_norm.weight", { 32 }, "F32", f32_bytes(32) }, { "blk.0.ffn_norm.weight", { 32 }, "F32", f32_bytes(32) },
  { "blk.0.attn_q.weight", { 32, 32 }, "Q8_0", block_bytes(32, 34) }, { "blk.0.attn_k.weight", { 32, 32 }, "Q4_0", block_bytes(32, 18) },
  { "blk.0.attn_v.weight", { 32, 32 }, "F32", f32_bytes(1024) }, { "blk.0.attn_output.weight", { 32, 32 }, "Q8_0", block_bytes(32, 34) },
  { "blk.0.ffn_gate.weight", { 32, 32 }, "Q4_0", block_bytes(32, 18) }, { "blk.0.ffn_up.weight", { 32, 32 }, "Q8_0", block_bytes(32, 34) },
  { "blk.0.ffn_down.weight", { 32, 32 }, "F32", f32_bytes(1024) },
}))
write("gguf", "tiny_llama.gguf", read(tmp))
-- the same model with a byte-level BPE tokenizer (tokenizer.ggml.model "gpt2"): GPT-2's byte
-- alphabet (one token a byte, in its printable form), two merges and a control token
local byte_tokens = {}
for b = 0, 255 do
  local printable = (b >= 33 and b <= 126) or (b >= 161 and b <= 172) or (b >= 174)
  byte_tokens[#byte_tokens + 1] = printable and utf8.char(b) or nil
end
local shifted = 0
for b = 0, 255 do
  if not ((b >= 33 and b <= 126) or (b >= 161 and b <= 172) or (b >= 174)) then
    byte_tokens[#byte_tokens + 1] = utf8.char(256 + shifted)
    shifted = shifted + 1
  end
end
byte_tokens[#byte_tokens + 1] = "\u{120}a"
byte_tokens[#byte_tokens + 1] = "ab"
byte_tokens[#byte_tokens + 1] = "<|endoftext|>"
local token_types = {}
for i = 1, #byte_tokens do token_types[i] = i == #byte_tokens and 3 or 1 end
local bpe_metadata = {}
for _, m in ipairs(metadata) do
  if not m[1]:match("^tokenizer%.") then bpe_metadata[#bpe_metadata + 1] = m end
end
for _, m in ipairs({ { "tokenizer.ggml.model", "string", "gpt2" }, { "tokenizer.ggml.pre", "string", "qwen2" },
  { "tokenizer.ggml.tokens", "string[]", byte_tokens }, { "tokenizer.ggml.token_type", "i32[]", token_types },
  { "tokenizer.ggml.merges", "string[]", { "\u{120} a", "a b" } } }) do
  bpe_metadata[#bpe_metadata + 1] = m
end
local gguf_file = assert(require("ane.formats.gguf").open(tmp))
local gguf_tensors = {}
for _, name in ipairs(gguf_file.order) do
  local t = gguf_file.tensors[name]
  gguf_tensors[#gguf_tensors + 1] = { name, t.shape, t.type, read(tmp):sub(t.first + 1, t.last) }
end
assert(require("ane.formats.gguf").write(tmp .. ".bpe", bpe_metadata, gguf_tensors))
write("gguf", "tiny_llama_bpe.gguf", read(tmp .. ".bpe"))
os.remove(tmp .. ".bpe")
-- K-quant matrices alone (rows of 256: a model of them would pass the fuzzer's 64 KB), which the
-- reader keeps as stored (Q4_K and Q5_K split into codes, scales and offsets; Q6_K as stored):
-- d and dmin 1/1024, 6-bit scales and mins, codes from the block's bytes
local function k_block(size, i)
  local half = ane.tensor.from({ 1 / 1024 }, { 1 }, "fp16"):bytes()
  local body = {}
  for j = 1, size - 4 do body[j] = string.char((i * 29 + j * 7) % 256) end
  if size == 210 then return table.concat(body) .. string.rep("\0", 2) .. half end -- Q6_K: d last
  return half .. half .. table.concat(body)
end
assert(require("ane.formats.gguf").write(tmp, { { "general.architecture", "string", "llama" } }, {
  { "q4_k", { 2, 256 }, "Q4_K", k_block(144, 1) .. k_block(144, 2) }, { "q5_k", { 1, 256 }, "Q5_K", k_block(176, 3) },
  { "q6_k", { 1, 256 }, "Q6_K", k_block(210, 4) },
}))
write("gguf", "k_quants.gguf", read(tmp))
os.remove(tmp)
print("seeds written to " .. root)

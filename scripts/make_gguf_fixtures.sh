#!/usr/bin/env bash
# Writes spec/data/gguf/: llama-tiny (spec/data/reference/llama-tiny/model.bin, a llama2.c
# checkpoint) converted to GGUF by llama.cpp's own tools from ../shared/peers/llama.cpp/, with
# Llama 2's tokenizer.bin cut to the model's 320 tokens: llama-tiny-f32.gguf (its converter),
# llama-tiny-q8_0.gguf and llama-tiny-q4_0.gguf (llama-quantize --pure: every matrix in the
# type). The converter writes a context of 128; gguf_set_metadata.py sets the model's 64.
# A developer script: the specs read the committed files and need no llama.cpp.
#   scripts/make_gguf_fixtures.sh [PEERS_DIR]   (default ../shared/peers)
set -euo pipefail
cd "$(dirname "$0")/.."
peers=${1:-../shared/peers}/llama.cpp
out=spec/data/gguf
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
cat > "$work/cut.lua" <<'LUA'
local bytes = assert(require("ane").io.read_file("data/tokenizers/llama2/tokenizer.bin"))
local at = 5 -- int32 max token length, then per token: float32 score, int32 length, the bytes
for _ = 1, 320 do at = at + 8 + string.unpack("<i4", bytes, at + 4) end
assert(require("ane").io.write_file_atomic(arg[1], bytes:sub(1, at - 1)))
LUA
build/anelua "$work/cut.lua" "$work/tokenizer.bin"
"$peers/bin/llama-convert-llama2c-to-ggml" --copy-vocab-from-model "$work/tokenizer.bin" \
  --llama2c-model spec/data/reference/llama-tiny/model.bin --llama2c-output-model "$out/llama-tiny-f32.gguf" >/dev/null 2>&1
PYTHONPATH="$peers/gguf-py" /usr/bin/python3 "$peers/gguf-py/gguf/scripts/gguf_set_metadata.py" --force \
  "$out/llama-tiny-f32.gguf" llama.context_length 64 >/dev/null
for q in q8_0 q4_0; do
  "$peers/bin/llama-quantize" --pure "$out/llama-tiny-f32.gguf" "$out/llama-tiny-$q.gguf" "${q^^}" 1 >/dev/null 2>&1
done
ls -l "$out"

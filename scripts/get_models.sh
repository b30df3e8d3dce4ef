#!/usr/bin/env bash
# Downloads model files on a machine with internet (never needed for the tests):
#   scripts/get_models.sh gpt2      -> models/gpt2/{config.json, model.safetensors, vocab.json, merges.txt}
# Files come from the Hugging Face hub (openai-community/gpt2). Set ANELUA_MODELS to put
# them elsewhere; examples look in --model, then $ANELUA_MODELS/<name>, then models/<name>.
set -euo pipefail
name=${1:-}
root=$(cd "$(dirname "$0")/.." && pwd)
target="${ANELUA_MODELS:-$root/models}/$name"
case "$name" in
  gpt2)
    base="https://huggingface.co/openai-community/gpt2/resolve/main"
    files="config.json model.safetensors vocab.json merges.txt"
    ;;
  *)
    echo "usage: scripts/get_models.sh gpt2" >&2
    exit 1
    ;;
esac
mkdir -p "$target"
for file in $files; do
  if [ -s "$target/$file" ]; then
    echo "==> $target/$file is already there"
    continue
  fi
  echo "==> downloading $file"
  curl -fL --retry 3 -o "$target/$file.part" "$base/$file"
  mv "$target/$file.part" "$target/$file"
done
echo "==> done: anelua examples/gpt2.lua --model $target"

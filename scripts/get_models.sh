#!/usr/bin/env bash
# Downloads model files on a machine with internet (never needed for the tests), each one
# verified against the checksum the hub publishes for it:
#
#   scripts/get_models.sh NAME...      NAME: gpt2 stories15M stories42M stories110M qwen3-0.6b (or all)
#
#   gpt2         -> models/gpt2/{config.json, model.safetensors, vocab.json, merges.txt}   (openai-community/gpt2)
#   stories15M   -> models/stories15M/{stories15M.bin, tokenizer.bin}                        (karpathy/tinyllamas)
#   stories42M, stories110M: likewise
#   qwen3-0.6b   -> models/qwen3-0.6b/{config.json, generation_config.json, model.safetensors,
#                   tokenizer.json, tokenizer_config.json}                                   (Qwen/Qwen3-0.6B)
#
# Checksums: the Hugging Face hub answers each file with its hash: X-Linked-Etag (the SHA-256
# of a large, LFS-stored file) or ETag (the git blob SHA-1 of a small one). A file is kept
# only when its bytes hash to that value; a file without a published hash, or one whose hash
# differs, is an error naming the file (nothing half-downloaded is left as the real name).
# Files already present and verified (a .verified stamp beside them) are not fetched again.
# A run that fails (offline, a bad checksum, Ctrl-C) removes the model directory it created.
# The Stories checkpoints use Llama-2's tokenizer.bin, which anelua ships: it is copied.
#
# ANELUA_MODELS puts the models elsewhere (default: models/ in the checkout);
# ANELUA_MODELS_URL replaces https://huggingface.co (the tests serve files on 127.0.0.1).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
models=${ANELUA_MODELS:-$root/models}
hub=${ANELUA_MODELS_URL:-https://huggingface.co}

usage() {
  echo "usage: scripts/get_models.sh NAME...   (gpt2 stories15M stories42M stories110M qwen3-0.6b all)" >&2
  exit 2
}

say() { printf '==> %s\n' "$*"; }
fail() { printf 'get_models.sh: %s\n' "$*" >&2; exit 1; }

command -v curl >/dev/null || fail "curl is needed (Debian: apt-get install curl)"
command -v sha256sum >/dev/null || fail "sha256sum is needed (coreutils)"

# The git blob SHA-1 of a file: sha1("blob <size>\0" + bytes).
git_blob_sha1() {
  local size
  size=$(wc -c <"$1")
  { printf 'blob %d\0' "$size"; cat "$1"; } | sha1sum | cut -d' ' -f1
}

# The hash the hub publishes for a URL: X-Linked-Etag if any response carries one, else the
# first ETag; quotes and a weak-validator prefix removed. Empty when there is none.
published_hash() {
  local headers linked etag
  headers=$(curl -fsIL --retry 3 "$1" | tr -d '\r') || return 1
  linked=$(printf '%s\n' "$headers" | sed -n 's/^[Xx]-[Ll]inked-[Ee][Tt]ag: *//p' | head -n1)
  etag=$(printf '%s\n' "$headers" | sed -n 's/^[Ee][Tt]ag: *//p' | head -n1)
  printf '%s\n' "${linked:-$etag}" | sed -e 's/^W\///' -e 's/"//g'
}

# fetch REPO FILE DIR: downloads $hub/REPO/resolve/main/FILE to DIR/FILE, verified.
fetch() {
  local repo=$1 file=$2 dir=$3
  local url="$hub/$repo/resolve/main/$file" target="$dir/$file"
  if [ -s "$target" ] && [ -f "$target.verified" ]; then
    say "$target is already there (verified)"
    return
  fi
  local want
  want=$(published_hash "$url") || fail "$url: the server did not answer"
  [ -n "$want" ] || fail "$url: the server publishes no checksum for $file; not downloading it unverified"
  say "downloading $repo/$file"
  curl -fL --retry 3 -o "$target.part" "$url" || { rm -f "$target.part"; fail "$url: download failed"; }
  local got
  case ${#want} in
    64) got=$(sha256sum "$target.part" | cut -d' ' -f1) ;;
    40) got=$(git_blob_sha1 "$target.part") ;;
    *) rm -f "$target.part"; fail "$url: the published checksum '$want' is neither a SHA-256 nor a git SHA-1" ;;
  esac
  if [ "$got" != "$want" ]; then
    rm -f "$target.part"
    fail "$target: checksum $got does not match the published $want; the file was not kept"
  fi
  mv "$target.part" "$target"
  printf '%s\n' "$want" >"$target.verified"
  say "$target verified ($want)"
}

# A model's directory made by this run and not yet complete: removed if the run fails, so an
# offline or interrupted run leaves no directory the examples would take for a model.
unfinished=""
trap '[ -z "$unfinished" ] || rm -rf "$unfinished"' EXIT

# start_model DIR: the directory of the model about to be fetched (created, and marked
# unfinished when this run creates it); finish_model: it is complete.
start_model() {
  [ -d "$1" ] || unfinished=$1
  mkdir -p "$1"
}
finish_model() { unfinished=""; }

get() {
  local name=$1
  case "$name" in
    gpt2)
      start_model "$models/gpt2"
      for file in config.json model.safetensors vocab.json merges.txt; do fetch openai-community/gpt2 "$file" "$models/gpt2"; done
      finish_model
      say "done: build/anelua examples/gpt2.lua --model $models/gpt2"
      ;;
    stories15M | stories42M | stories110M)
      start_model "$models/$name"
      fetch karpathy/tinyllamas "$name.bin" "$models/$name"
      cp "$root/data/tokenizers/llama2/tokenizer.bin" "$models/$name/tokenizer.bin"
      finish_model
      say "done: build/anelua examples/stories.lua $models/$name/$name.bin"
      ;;
    qwen3-0.6b)
      start_model "$models/qwen3-0.6b"
      for file in config.json generation_config.json model.safetensors tokenizer.json tokenizer_config.json; do
        fetch Qwen/Qwen3-0.6B "$file" "$models/qwen3-0.6b"
      done
      finish_model
      say "done: build/anelua examples/stories.lua $models/qwen3-0.6b"
      ;;
    all) for each in gpt2 stories15M stories42M stories110M qwen3-0.6b; do get "$each"; done ;;
    *) echo "get_models.sh: unknown model '$name'" >&2; usage ;;
  esac
}

[ $# -gt 0 ] || usage
case "$1" in -h | --help) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
for name in "$@"; do get "$name"; done

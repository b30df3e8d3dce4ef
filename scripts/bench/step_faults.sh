#!/usr/bin/env bash
# Minor page faults per steady training step: the same small run (examples/train_stories.lua,
# a 4-layer dim-256 Llama on the synthetic corpus, batch 2 x 128) for A and for B steps, each
# under /usr/bin/time; (faults(B) - faults(A)) / (B - A) leaves out start-up and compiles.
#   scripts/bench/step_faults.sh [A=4] [B=24] [extra train_stories.lua options ...]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
a=${1:-4}
b=${2:-24}
shift 2 || true
faults() {
  local dir
  dir=$(mktemp -d)
  /usr/bin/time -f '%R' -o "$dir/time" "$root/build/anelua" "$root/examples/train_stories.lua" --steps "$1" --dim 256 \
    --layers 4 --heads 4 --hidden 768 --seq 128 --batch 2 --ckpt-dir "$dir" --ckpt-every 100000 "${@:2}" >/dev/null
  tail -1 "$dir/time"
  rm -rf "$dir"
}
fa=$(faults "$a" "$@")
fb=$(faults "$b" "$@")
echo "minor page faults: $fa after $a steps, $fb after $b steps: $(( (fb - fa) / (b - a) )) per steady step"

#!/usr/bin/env bash
# Crash safety by trials: SIGKILL a small training run at N random moments (every other one
# while a checkpoint is being written), resume it with --resume latest after each, then check
# that the run's losses equal an uninterrupted run's bit for bit and that no partial
# checkpoint file is left behind.
#   scripts/kill_trials.sh [N]      (ANELUA=path/to/anelua, STEPS=steps of the run)
set -euo pipefail
cd "$(dirname "$0")/.."
trials=${1:-100}
steps=${STEPS:-40}
anelua=${ANELUA:-build/anelua}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run=(examples/train_stories.lua --steps "$steps" --ckpt-every 1 --keep 2 --batch 2 --seq 16 --dim 16 --hidden 32
     --layers 1 --heads 2)

"$anelua" "${run[@]}" --ckpt-dir "$work/reference" >/dev/null
losses() { grep -o '"loss_hex":"[^"]*"' "$1/metrics.jsonl"; }

kills=0 during_write=0 finished_early=0
for ((i = 1; i <= trials; i++)); do
  resume=()
  ls "$work/run"/ckpt-*.safetensors >/dev/null 2>&1 && resume=(--resume latest)
  "$anelua" "${run[@]}" --ckpt-dir "$work/run" "${resume[@]}" >/dev/null 2>&1 &
  pid=$!
  if ((i % 2 == 0)); then # wait for a checkpoint being written (its temporary file), then kill
    deadline=$((${EPOCHREALTIME/./} + 10000000)) # 10 s, in microseconds
    while ((${EPOCHREALTIME/./} < deadline)); do
      compgen -G "$work/run/*.tmp-*" >/dev/null && break
      kill -0 "$pid" 2>/dev/null || break
    done
  else
    sleep "0.$((RANDOM % 900 + 100))"
  fi
  if kill -9 "$pid" 2>/dev/null; then
    kills=$((kills + 1))
    compgen -G "$work/run/*.tmp-*" >/dev/null && during_write=$((during_write + 1))
    wait "$pid" 2>/dev/null || true
  else # it ended by itself: it must have succeeded
    finished_early=$((finished_early + 1))
    status=0
    wait "$pid" 2>/dev/null || status=$?
    if ((status != 0)); then
      echo "kill trials: trial $i: the run (${resume[*]:-fresh}) failed by itself with status $status" >&2
      exit 1
    fi
  fi
  if [ "$(losses "$work/run" 2>/dev/null | wc -l)" -ge "$steps" ] && ! kill -0 "$pid" 2>/dev/null &&
     ls "$work/run"/ckpt-*"$steps".safetensors >/dev/null 2>&1; then
    rm -rf "$work/run" # the run completed: start the next trial from scratch
  fi
done
resume=()
ls "$work/run"/ckpt-*.safetensors >/dev/null 2>&1 && resume=(--resume latest)
"$anelua" "${run[@]}" --ckpt-dir "$work/run" "${resume[@]}" >/dev/null || { echo "kill trials: the final resume failed" >&2; exit 1; }
leftovers=$(compgen -G "$work/run/*.tmp-*" | wc -l || true)
if diff <(losses "$work/reference") <(losses "$work/run") >"$work/diff.txt"; then same=yes; else
  same=NO
  keep=$(mktemp -d /tmp/kill-trials-XXXXXX)
  cp -r "$work"/. "$keep"/
  echo "kill trials: the losses differ (first lines of the diff below); runs kept in $keep" >&2
  head -6 "$work/diff.txt" >&2
fi
echo "kill trials: $kills SIGKILLs ($during_write while a checkpoint was being written, $finished_early runs had" \
     "finished before their kill, each with status 0); the final --resume latest succeeded; losses equal to the uninterrupted run bit for" \
     "bit: $same; partial checkpoint files left: $leftovers"
[ "$same" = yes ] && [ "$leftovers" -eq 0 ]

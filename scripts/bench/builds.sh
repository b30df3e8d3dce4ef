#!/usr/bin/env bash
# Runs benchmarks of two checkouts of anelua back to back, alternating A B A B ..., so a
# change can be compared with the build before it on the same machine in the same minutes
# (e.g. a worktree of the previous commit in /tmp/before). Each run's output is kept in
# OUT/<bench>.<A|B>.<round>.txt and its summary lines (rates, times, shares of a bound) are
# printed as they come. Compare the rows of the same round; take medians over rounds.
#   scripts/bench/builds.sh A_DIR B_DIR ROUNDS OUT bench.lua [args] [-- bench2.lua [args] ...]
set -euo pipefail
if [ $# -lt 5 ]; then
  echo "usage: $0 A_DIR B_DIR ROUNDS OUT bench.lua [args] [-- bench.lua [args] ...]" >&2
  exit 2
fi
a_dir=$1 b_dir=$2 rounds=$3 out=$4
shift 4
for dir in "$a_dir" "$b_dir"; do
  [ -x "$dir/build/anelua" ] || { echo "$0: $dir/build/anelua is missing (build that checkout first)" >&2; exit 2; }
done
mkdir -p "$out"
benches=() current=""
for word in "$@"; do
  if [ "$word" = "--" ]; then benches+=("$current"); current=""; else current="$current $word"; fi
done
benches+=("$current")
for bench in "${benches[@]}"; do
  read -r -a argv <<<"$bench"
  name=$(basename "${argv[0]}" .lua)
  for round in $(seq 1 "$rounds"); do
    for side in A B; do
      dir=$a_dir; [ "$side" = B ] && dir=$b_dir
      file="$out/$name.$side.$round.txt"
      (cd "$dir" && build/anelua "scripts/bench/${argv[0]}" "${argv[@]:1}") >"$file" 2>&1 || echo "($name $side round $round failed: see $file)"
      echo "== $name $side round $round ($dir)"
      grep -E "tok/s|tokens/s|ms|GFLOP|%|x " "$file" | grep -v "^#" | head -12 || true
    done
  done
done

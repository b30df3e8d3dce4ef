#!/usr/bin/env bash
# Fuzzes the MIL parser with libFuzzer under ASan + UBSan.
#   scripts/fuzz.sh [seconds=600] [jobs=1]
# Corpus: spec/fuzz/corpus (grows; seeded from spec/golden/*.mil). Crashes are written to
# spec/fuzz/crashes/. Needs clang with libFuzzer (Debian: clang, libclang-rt-dev).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-600}
jobs=${2:-1}
out="$root/build-fuzz"
mkdir -p "$out" "$root/spec/fuzz/corpus" "$root/spec/fuzz/crashes"
cp -n "$root"/spec/golden/*.mil "$root/spec/fuzz/corpus/" 2>/dev/null || true
sources=$(find "$root/ane_core" -name '*.c' | sort)
echo "==> building $out/fuzz_mil_parser"
clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$root" $sources "$root/spec/fuzz/fuzz_mil_parser.c" -o "$out/fuzz_mil_parser" -lopenblas -lm -ldl
echo "==> fuzzing for ${seconds}s"
cd "$out"
./fuzz_mil_parser -max_total_time="$seconds" -jobs="$jobs" -workers="$jobs" -max_len=65536 -timeout=10 \
  -dict="$root/spec/fuzz/mil.dict" -rss_limit_mb=4096 -artifact_prefix="$root/spec/fuzz/crashes/" -print_final_stats=1 \
  "$root/spec/fuzz/corpus" 2>&1 | tee "$out/fuzz.log" | grep -E "^#[0-9]+.*(pulse|DONE|NEW)|ERROR|SUMMARY|stat::" | tail -40

#!/usr/bin/env bash
# Fuzzes the MIL parser and the sim backend with libFuzzer under ASan + UBSan.
#   scripts/fuzz.sh [seconds=600]
# Corpus: spec/fuzz/corpus (grows; seeded from spec/golden/*.mil); dictionary:
# spec/fuzz/mil.dict. Crashes land in spec/fuzz/crashes/ (copy fixed ones to
# spec/fuzz/regressions/, which the test suite replays). Needs Debian's clang, which
# ships libFuzzer. The full log is build-fuzz/fuzz.log; the summary is printed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-600}
out="$root/build-fuzz"
mkdir -p "$out" "$root/spec/fuzz/corpus" "$root/spec/fuzz/crashes"
cp -n "$root"/spec/golden/*.mil "$root/spec/fuzz/corpus/" 2>/dev/null || true
sources=$(find "$root/ane_core" -name '*.c' | sort)
echo "==> building $out/fuzz_mil_parser (clang, -fsanitize=fuzzer,address,undefined)"
clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$root" -I/usr/include/x86_64-linux-gnu/openblas-pthread $sources "$root/spec/fuzz/fuzz_mil_parser.c" \
  -o "$out/fuzz_mil_parser" -lopenblas $(pkg-config --libs libpcre2-8 libutf8proc) -lm -ldl -lpthread
echo "==> fuzzing for ${seconds}s"
cd "$out"
status=0
OPENBLAS_NUM_THREADS=1 ./fuzz_mil_parser -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=4096 \
  -dict="$root/spec/fuzz/mil.dict" -artifact_prefix="$root/spec/fuzz/crashes/" -print_final_stats=1 \
  "$root/spec/fuzz/corpus" >"$out/fuzz.log" 2>&1 || status=$?
grep -E "^#[0-9]+ +(INITED|DONE)|ERROR|SUMMARY|^stat::" "$out/fuzz.log" || true
echo "==> exit status $status; crashes: $(ls "$root/spec/fuzz/crashes" | wc -l)"
exit $status

#!/usr/bin/env bash
# Fuzzes a reader with libFuzzer under ASan + UBSan.
#   scripts/fuzz.sh [seconds=600] [target=mil_parser]
# Targets: mil_parser (the MIL parser and the sim backend; corpus seeded from
# spec/golden/*.mil, dictionary spec/fuzz/mil.dict) and milblob (the MILBlob reader; seeded
# from spec/fuzz/seeds/milblob). Corpora grow in spec/fuzz/corpus[-<target>]; crashes land in
# spec/fuzz/crashes/ (copy fixed ones to spec/fuzz/regressions/ as <name>.mil, or to
# spec/fuzz/regressions/milblob/, which the test suite replays). Needs Debian's clang, which
# ships libFuzzer. The full log is build-fuzz/fuzz-<target>.log; the summary is printed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-600}
target=${2:-mil_parser}
out="$root/build-fuzz"
case "$target" in
  mil_parser) corpus="$root/spec/fuzz/corpus"; seeds=("$root"/spec/golden/*.mil); extra=(-dict="$root/spec/fuzz/mil.dict") ;;
  milblob) corpus="$root/spec/fuzz/corpus-milblob"; seeds=("$root"/spec/fuzz/seeds/milblob/*); extra=() ;;
  *) echo "usage: scripts/fuzz.sh [seconds] [mil_parser|milblob]" >&2; exit 2 ;;
esac
mkdir -p "$out" "$corpus" "$root/spec/fuzz/crashes"
cp -n "${seeds[@]}" "$corpus/" 2>/dev/null || true
sources=$(find "$root/ane_core" -name '*.c' | sort)
echo "==> building $out/fuzz_$target (clang, -fsanitize=fuzzer,address,undefined)"
clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$root" -I"$root/spec/ane_double/include" -I/usr/include/x86_64-linux-gnu/openblas-pthread $sources "$root/spec/fuzz/fuzz_$target.c" \
  -o "$out/fuzz_$target" -lopenblas $(pkg-config --libs libpcre2-8 libutf8proc) -lm -ldl -lpthread
echo "==> fuzzing $target for ${seconds}s"
cd "$out"
status=0
OPENBLAS_NUM_THREADS=1 "./fuzz_$target" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=4096 \
  "${extra[@]}" -artifact_prefix="$root/spec/fuzz/crashes/" -print_final_stats=1 \
  "$corpus" >"$out/fuzz-$target.log" 2>&1 || status=$?
grep -E "^#[0-9]+ +(INITED|DONE)|ERROR|SUMMARY|^stat::" "$out/fuzz-$target.log" || true
echo "==> exit status $status; crashes: $(ls "$root/spec/fuzz/crashes" | wc -l)"
exit $status

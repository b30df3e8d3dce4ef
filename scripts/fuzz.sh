#!/usr/bin/env bash
# Fuzzes a reader with libFuzzer under ASan + UBSan.
#   scripts/fuzz.sh [seconds=600] [target=mil_parser]   (FUZZ_MAX_LEN: largest input, default
#   65536; FUZZ_RUNS: stop after that many executions; FUZZ_TIMEOUT: seconds before an input
#   counts as a hang, default 10 — raise it for a fuzzer run at low priority beside other work)
# Targets: mil_parser (the MIL parser and the sim backend; corpus seeded from
# spec/golden/*.mil and spec/fuzz/seeds/mil_parser/*.mil, dictionary spec/fuzz/mil.dict) and milblob (the MILBlob reader; seeded
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
  mil_parser) corpus="$root/spec/fuzz/corpus"; seeds=("$root"/spec/golden/*.mil "$root"/spec/fuzz/seeds/mil_parser/*.mil); extra=(-dict="$root/spec/fuzz/mil.dict") ;;
  milblob) corpus="$root/spec/fuzz/corpus-milblob"; seeds=("$root"/spec/fuzz/seeds/milblob/*); extra=() ;;
  safetensors|llama2c|llmc|shard|sentencepiece|tokenizer_json|tokenizer_bin|vocab_merges|checkpoint|hf_config|llama_config|gpt2_config|probe_report|checkpoint_metadata|gguf)
    reader=$target; target=lua_reader; corpus="$root/spec/fuzz/corpus-$reader"
    seeds=("$root"/spec/fuzz/seeds/$reader/*); extra=() ;;
  *) echo "usage: scripts/fuzz.sh [seconds] [mil_parser|milblob|safetensors|llama2c|llmc|shard|sentencepiece|tokenizer_json|tokenizer_bin|vocab_merges|checkpoint|hf_config|llama_config|gpt2_config|probe_report|checkpoint_metadata|gguf]" >&2; exit 2 ;;
esac
mkdir -p "$out" "$corpus" "$root/spec/fuzz/crashes"
cp -n "${seeds[@]}" "$corpus/" 2>/dev/null || true
sources=$(find "$root/ane_core" -name '*.c' | sort)
lua_flags=()
if [ "$target" = lua_reader ]; then # the readers are Lua: the module's bindings and Lua itself go in
  sources="$sources $(ls "$root"/bindings/*.c)"
  lua_flags=($(pkg-config --cflags --libs lua5.4))
fi
binary="$out/fuzz_$target" # one binary for every Lua reader: FUZZ_READER picks
if [ ! -x "$binary" ] || [ -n "$(find "$root/ane_core" "$root/bindings" "$root/spec/fuzz" -newer "$binary" \( -name '*.[ch]' -o -name coverage_ignore.txt \) | head -1)" ]; then
  echo "==> building $binary (clang, -fsanitize=fuzzer,address,undefined)"
  clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -fsanitize-coverage-ignorelist="$root/spec/fuzz/coverage_ignore.txt" \
    -I"$root" -I"$root/spec/ane_double/include" -I/usr/include/x86_64-linux-gnu/openblas-pthread $sources "$root/spec/fuzz/fuzz_$target.c" \
    "${lua_flags[@]}" -o "$binary" -lopenblas $(pkg-config --libs libpcre2-8 libutf8proc) -lm -ldl -lpthread
fi
name=${reader:-$target}
echo "==> fuzzing $name for ${seconds}s"
cd "$out"
status=0
FUZZ_READER=${reader:-} FUZZ_ROOT="$root" OPENBLAS_NUM_THREADS=1 "$binary" -max_total_time="$seconds" ${FUZZ_RUNS:+-runs=$FUZZ_RUNS} -max_len=${FUZZ_MAX_LEN:-65536} \
  -timeout=${FUZZ_TIMEOUT:-10} -rss_limit_mb=4096 "${extra[@]}" -artifact_prefix="$root/spec/fuzz/crashes/$name-" -print_final_stats=1 \
  "$corpus" >"$out/fuzz-$name.log" 2>&1 || status=$?
grep -E "^#[0-9]+ +(INITED|DONE)|ERROR|SUMMARY|^stat::|fuzz_lua_reader:" "$out/fuzz-$name.log" | head -20 || true
echo "==> exit status $status; crashes: $(ls "$root/spec/fuzz/crashes" | wc -l)"
exit $status

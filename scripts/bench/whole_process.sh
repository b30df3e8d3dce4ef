#!/usr/bin/env bash
# Whole processes, as a user runs them: greedy generation of the same 250 tokens after the same
# 5-token prompt ("Once upon a time" and BOS: 254 forward positions each) of the same random
# Stories110M-shaped checkpoint from a cold start, by anelua (fp16 and fp32 from the llama2.c
# file; fp16 from the same weights converted once to an fp16 directory, as llama.cpp's F16
# reads them converted once to GGUF; sim, cpu profile), llama.cpp (llama-cli on the checkpoint
# as GGUF F16 / F32) and llama2.c's run.c (fp32), alternating the programs round by round
# under /usr/bin/time; prints each run's wall time and peak resident memory, then the median
# ratios anelua / peer of both. The token counts say the same work in each program's terms:
# anelua's --max-tokens and llama-cli's -n count new tokens, run.c's -n counts positions with
# the prompt's (stories.lua had run 5 more tokens than llama-cli, past its 256-position caches).
#   scripts/bench/whole_process.sh [rounds=3] [work=/tmp/anelua-peers]
# Needs the peers built by scripts/bench/decode_vs_runc.lua and quantized_decode.lua (run.c,
# the checkpoint, work/gguf); says so when they are missing.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
rounds=${1:-3}
work=${2:-/tmp/anelua-peers}
bin=$root/../shared/peers/llama.cpp/bin
tok=$root/data/tokenizers/llama2/tokenizer.bin
for f in "$work/run" "$work/stories110M.bin" "$work/gguf/model-f16.gguf" "$work/gguf/model-f32.gguf" "$bin/llama-cli"; do
  [ -e "$f" ] || { echo "peer not available: no $f (run scripts/bench/quantized_decode.lua first)"; exit 0; }
done
# llama.cpp's binaries were built for one CPU (GGML_NATIVE): where they die on an instruction
# this one lacks, their pairs are left out and said so (a crash is not a run)
# the fp16 directory (converted once, like the GGUF files; its conversion is timed, not counted)
fp16_dir=$work/stories110M-fp16
if [ ! -e "$fp16_dir/model.safetensors" ]; then
  start=$(date +%s.%N)
  "$root/build/anelua" "$root/scripts/quantize.lua" "$work/stories110M.bin" "$fp16_dir" --mode none --precision fp16 >/dev/null
  echo "converted $work/stories110M.bin to $fp16_dir once in $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
fi
order=(anelua_fp16dir llamacpp_f16 anelua_fp16 anelua_fp32 llamacpp_f32 runc)
pairs=("anelua_fp16dir llamacpp_f16" "anelua_fp16 llamacpp_f16" "anelua_fp32 llamacpp_f32" "anelua_fp32 runc"
  "anelua_fp16dir runc")
if ! { "$bin/llama-bench" -m "$work/gguf/model-f32.gguf" -p 8 -n 0 -t 1 -r 1 >/dev/null 2>&1; } 2>/dev/null; then
  echo "llama.cpp not available: its binaries do not run on this CPU (llama-bench failed); comparing with run.c only"
  order=(anelua_fp16dir anelua_fp16 anelua_fp32 runc)
  pairs=("anelua_fp32 runc" "anelua_fp16dir runc" "anelua_fp16 runc")
fi
declare -A cmd=(
  [anelua_fp16dir]="$root/build/anelua $root/examples/stories.lua $fp16_dir --tokenizer $tok --max-tokens 250 --temperature 0 --profile cpu --precision fp16"
  [anelua_fp16]="$root/build/anelua $root/examples/stories.lua $work/stories110M.bin --tokenizer $tok --max-tokens 250 --temperature 0 --profile cpu --precision fp16"
  [anelua_fp32]="$root/build/anelua $root/examples/stories.lua $work/stories110M.bin --tokenizer $tok --max-tokens 250 --temperature 0 --profile cpu --precision fp32"
  [llamacpp_f16]="$bin/llama-cli -m $work/gguf/model-f16.gguf -p 'Once upon a time' -n 250 -t 2 -c 512 --temp 0 -no-cnv -s 1"
  [llamacpp_f32]="$bin/llama-cli -m $work/gguf/model-f32.gguf -p 'Once upon a time' -n 250 -t 2 -c 512 --temp 0 -no-cnv -s 1"
  [runc]="$work/run $work/stories110M.bin -z $tok -t 0 -n 254 -i 'Once upon a time'"
)
out=$(mktemp)
for r in $(seq 1 "$rounds"); do
  for name in "${order[@]}"; do
    /usr/bin/time -f "%e %M" -o "$out" bash -c "${cmd[$name]}" >/dev/null 2>&1
    read -r wall kb < <(tail -1 "$out")
    echo "$r $name $wall $kb"
  done
done | tee "$out.runs" | awk '{printf "round %s %-15s %7.2f s wall %8.0f MB peak\n", $1, $2, $3, $4 / 1024}'
ratio() { # anelua peer field (3 wall, 4 peak): the median over rounds of anelua / peer, and its range
  awk -v a="$1" -v p="$2" -v f="$3" '$2 == a { x[$1] = $f } $2 == p { y[$1] = $f }
    END { for (r in x) print x[r] / y[r] }' "$out.runs" | sort -g |
    awk '{ v[NR] = $1 } END { printf "%.2fx (%.2f-%.2f)", v[int((NR + 1) / 2)], v[1], v[NR] }'
}
echo
echo "| anelua | peer | wall time, median ratio (range) | peak memory, median ratio (range) |"
echo "|---|---|---|---|"
for pair in "${pairs[@]}"; do
  set -- $pair
  echo "| $1 | $2 | $(ratio "$1" "$2" 3) | $(ratio "$1" "$2" 4) |"
done
rm -f "$out" "$out.runs"

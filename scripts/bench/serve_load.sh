#!/usr/bin/env bash
# anelua serve against llama.cpp's llama-server on the same GGUF file (a Stories110M-shaped
# llama2.c checkpoint converted by llama.cpp's own tools, ../shared/peers), with the same load
# generator (serve_load.mjs): for each number of concurrent streaming clients, both servers
# started with that many slots, then rounds that alternate anelua, llama-server, anelua, ...
# Prints per engine and clients: aggregate tokens/s, time to first token and inter-token latency
# (p50 / p99), failed requests; the median ratio of anelua's throughput to llama-server's with
# its range; each engine's batching gain (most clients / one). ANELUA_LLAMA_CPP_BIN names a
# llama.cpp build for this CPU (build_llama_cpp.sh) where the peers' binaries do not run; without
# a llama-server that runs, anelua's rows alone are printed. Then the fault run against anelua
# serve: COUNT requests cut off, malformed, oversized, slow and ordinary; RSS before and after;
# the slots /health reports idle at the end. --shape qwen3-0.6b runs the same on a random F16 model
# at Qwen3-0.6B's shape in llama.cpp's llama architecture (qwen_shape_gguf.lua says why) with
# Qwen3's tokenizer, written once into the work directory.
#
#   scripts/bench/serve_load.sh [--clients "1 4 8"] [--seconds 15] [--rounds 2] [--tokens 64]
#                               [--format f16|q8_0|q4_0|f32] [--shape stories|qwen3-0.6b] [--faults 1000]
#                               [--workdir DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
clients_list="1 4 8" seconds=15 rounds=2 tokens=64 format=f16 shape=stories fault_count=1000 work=/tmp/anelua-serve-bench
while [ $# -gt 0 ]; do
  case $1 in
    --clients) clients_list=$2; shift 2 ;; --seconds) seconds=$2; shift 2 ;; --rounds) rounds=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;; --format) format=$2; shift 2 ;; --faults) fault_count=$2; shift 2 ;;
    --workdir) work=$2; shift 2 ;; --shape) shape=$2; shift 2 ;;
    *) echo "serve_load.sh: unknown option $1 (see the comment at its top)" >&2; exit 2 ;;
  esac
done
peers=../shared/peers
server_bin=${ANELUA_LLAMA_CPP_BIN:-$peers/llama.cpp/bin}/llama-server
anelua=build/anelua
mkdir -p "$work"
[ -f "$work/stories110M.bin" ] || "$peers/build.sh" "$work" >/dev/null
"$peers/llama.cpp/make_models.sh" "$work/stories110M.bin" ../shared/data/tokenizers/llama2/tokenizer.bin "$work" >/dev/null
model=$work/model-$format.gguf
case $shape in
  stories) ;;
  qwen3-0.6b)
    model=$work/qwen3-0.6b-shape-f16.gguf
    [ -f "$model" ] || "$anelua" scripts/bench/qwen_shape_gguf.lua "$model" >/dev/null ;;
  *) echo "serve_load.sh: --shape is stories or qwen3-0.6b, not '$shape'" >&2; exit 2 ;;
esac
context=512
load="node scripts/bench/serve_load.mjs"

wait_healthy() { # URL PID
  for _ in $(seq 1 600); do
    curl -sf "$1/health" >/dev/null 2>&1 && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

start_anelua() { # SLOTS -> pid in $pid
  "$anelua" serve "$model" --port 18431 --parallel "$1" --queue 64 --context $context --profile cpu --alias stories \
    2>"$work/anelua.log" &
  pid=$!
  wait_healthy http://127.0.0.1:18431 $pid || { cat "$work/anelua.log" >&2; exit 1; }
}

peer=yes
start_llama() { # SLOTS; peer=no when llama-server does not run here
  "$server_bin" -m "$model" --port 18432 -t 2 -c $((context * $1)) -np "$1" --alias stories >"$work/llama.log" 2>&1 &
  pid=$!
  if ! wait_healthy http://127.0.0.1:18432 $pid; then
    wait $pid 2>/dev/null; status=$?
    echo "llama-server not available (exit status $status$([ $status = 132 ] && echo ': an illegal instruction, built for another CPU')); anelua alone"
    peer=no
  fi
}

echo "model: $model ($(du -h "$model" | cut -f1)); $seconds s per run, $rounds rounds, $tokens tokens per request"
results=$work/results.jsonl
: >"$results"
for clients in $clients_list; do
  for round in $(seq 1 "$rounds"); do
    for engine in anelua llama; do
      if [ $engine = anelua ]; then start_anelua "$clients"; url=http://127.0.0.1:18431
      else
        [ $peer = yes ] && start_llama "$clients"
        [ $peer = yes ] || continue
        url=http://127.0.0.1:18432
      fi
      $load load $url stories 1 2 8 >/dev/null # (warm-up: compiles, first touches)
      line=$($load load $url stories "$clients" "$seconds" "$tokens")
      kill -TERM $pid; wait $pid 2>/dev/null || true
      echo "{\"engine\":\"$engine\",\"round\":$round,\"result\":$line}" >>"$results"
      echo "$engine clients=$clients round $round: $line"
    done
  done
done
node -e '
const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
const median = (v) => { const s = [...v].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };
const by = {};
for (const l of lines) ((by[l.result.clients] ??= { anelua: [], llama: [] })[l.engine]).push(l.result);
const engines = lines.some((l) => l.engine === "llama") ? ["anelua", "llama"] : ["anelua"];
console.log("\n| clients | engine | tokens/s | TTFT p50 / p99 ms | ITL p50 / p99 ms | failed |");
console.log("|---|---|---|---|---|---|");
const rate = {};
for (const [clients, e] of Object.entries(by)) {
  for (const engine of engines) {
    const rs = e[engine];
    rate[engine] ??= {};
    rate[engine][clients] = median(rs.map((r) => r.tokens_per_s));
    const f = (k) => median(rs.map((r) => r[k] ?? NaN)).toFixed(1);
    console.log(`| ${clients} | ${engine === "llama" ? "llama-server" : "anelua serve"} | ${rate[engine][clients].toFixed(1)} | ` +
      `${f("ttft_p50")} / ${f("ttft_p99")} | ${f("itl_p50")} / ${f("itl_p99")} | ${rs.reduce((a, r) => a + r.failed, 0)} |`);
  }
  if (engines.length < 2) continue;
  const ratios = e.anelua.map((r, i) => r.tokens_per_s / e.llama[i].tokens_per_s);
  console.log(`|   | anelua / llama-server | ${median(ratios).toFixed(2)} (${Math.min(...ratios).toFixed(2)}-${Math.max(...ratios).toFixed(2)}) | | | |`);
}
const counts = Object.keys(by).map(Number).sort((a, b) => a - b);
const [lo, hi] = [counts[0], counts[counts.length - 1]];
for (const engine of engines)
  console.log(`batching gain ${engine} (${hi} clients / ${lo}): ${(rate[engine][hi] / rate[engine][lo]).toFixed(2)}x`);
' "$results"

if [ "$fault_count" -gt 0 ]; then
  echo
  echo "faults: $fault_count requests against anelua serve --parallel 4 --max-body 1048576"
  "$anelua" serve "$model" --port 18431 --parallel 4 --queue 64 --context $context --profile cpu --alias stories \
    2>"$work/anelua-faults.log" &
  pid=$!
  wait_healthy http://127.0.0.1:18431 $pid || { cat "$work/anelua-faults.log" >&2; exit 1; }
  $load faults http://127.0.0.1:18431 stories 50 >/dev/null # (warm-up: compiles, buffers)
  before=$(ps -o rss= -p $pid)
  $load faults http://127.0.0.1:18431 stories "$fault_count"
  after=$(ps -o rss= -p $pid)
  echo "RSS before ${before} KiB, after ${after} KiB; /health: $(curl -s http://127.0.0.1:18431/health)"
  kill -TERM $pid; wait $pid; echo "exit status after SIGTERM: $?"
fi

#!/usr/bin/env bash
# The fuzz row of CI: every libFuzzer target of scripts/fuzz.sh (ASan + UBSan) for a short,
# fixed number of executions from its seeds, so a reader that starts crashing on the inputs
# near its seeds fails CI; the long runs stay with scripts/fuzz.sh.
#
#   scripts/fuzz_ci.sh [runs=2000] [target ...]   (default: all targets)
#
# Fails when a target finds anything (the input lands in spec/fuzz/crashes/) or when it ran
# fewer executions than asked (a time cap of 600 s per target guards against a slow reader).
# Prints one line per target: executions, seconds, new coverage.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-2000}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(mil_parser milblob safetensors llama2c llmc shard sentencepiece tokenizer_json tokenizer_bin vocab_merges
           checkpoint hf_config llama_config gpt2_config probe_report checkpoint_metadata gguf)
fi
failed=0
for target in "${targets[@]}"; do
  started=$(date +%s)
  status=0
  FUZZ_RUNS=$runs FUZZ_TIMEOUT=${FUZZ_TIMEOUT:-30} "$root/scripts/fuzz.sh" 600 "$target" >"$root/build-fuzz-ci-$target.log" 2>&1 ||
    status=$?
  log="$root/build-fuzz/fuzz-$target.log"
  executed=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" 2>/dev/null | grep -o '[0-9]*$' || echo 0)
  added=$(grep -o 'stat::new_units_added: *[0-9]*' "$log" 2>/dev/null | grep -o '[0-9]*$' || echo 0)
  printf '%-20s %8s executions in %4d s, %4s new inputs, exit %d\n' "$target" "${executed:-0}" \
    $(( $(date +%s) - started )) "${added:-0}" "$status"
  if [ "$status" -ne 0 ] || [ "${executed:-0}" -lt "$runs" ]; then
    failed=1
    cat "$root/build-fuzz-ci-$target.log" >&2
    grep -E "ERROR|SUMMARY|raised|without" "$log" 2>/dev/null | head -20 >&2 || true
  fi
done
exit $failed

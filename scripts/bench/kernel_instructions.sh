#!/usr/bin/env bash
# Instructions per element of each CPU kernel, scalar against NEON, counted under qemu-user (no
# Mac needed): the aarch64 build's driver (kernel_instructions.c) runs each kernel under
# qemu-aarch64 -singlestep -d exec,nochain, which logs one "Trace" line per instruction executed
# (Debian's qemu ships no instruction-count plugin); the count with 0 calls is subtracted from
# the count with CALLS calls, so only the kernel's instructions remain. The rest of the process
# varies by a few thousand instructions from run to run (measured: +-3,000 of 3.9 million), so
# each kernel runs enough calls to cover at least ELEMENTS elements (default 262,144): its
# share is then hundreds of thousands of instructions or more. Levels: the scalar
# reference, NEON on a Cortex-A53 model (no dot products) and on qemu's max CPU (with them).
# Counts instructions, not time: a proxy for the work per element, not a Mac's speed (for that,
# build/anelua scripts/bench/cpu_kernels.lua on the Mac).
#   scripts/bench/kernel_instructions.sh [--build-dir build-aarch64] [--elements N] [KERNEL ...]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build-aarch64 covered=262144 kernels=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build=$2; shift 2 ;;
    --elements) covered=$2; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "kernel_instructions.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) kernels+=("$1"); shift ;;
  esac
done
[ ${#kernels[@]} -gt 0 ] || kernels=(gemv_fp16 gemv_fp32 gemv_int8 gemv_lut4 vecmat_fp16 q8_int8 q8_lut4 q16_lut4 exp tanh adamw lut4_decode transpose)
[ -f "$build/CMakeCache.txt" ] || { echo "no aarch64 build in $build: run scripts/test_aarch64.sh --tests '^c/test_cpu$' first" >&2; exit 1; }
cmake --build "$build" --target bench_kernel_instructions >/dev/null
driver="$build/bench_kernel_instructions"
# instructions the driver executes for `calls` calls of a kernel at a level on a qemu CPU model
# (the trace read through a pipe: the scalar kernels' run to tens of millions of lines)
count() { # model level calls
  QEMU_CPU=$1 qemu-aarch64 -L / -singlestep -d exec,nochain -D /dev/stdout "$driver" "$kernel" "$2" "$3" | grep -c '^Trace'
}

printf '%-12s %10s %10s %14s %12s %18s\n' kernel elements scalar "neon (A53)" "neon (max)" "scalar / neon"
for kernel in "${kernels[@]}"; do
  elements=$(QEMU_CPU=max qemu-aarch64 -L / "$driver" "$kernel" scalar 0 | awk '{print $3}')
  calls=$(( (covered + elements - 1) / elements ))
  per_element() { # model level
    local base with
    base=$(count "$1" "$2" 0)
    with=$(count "$1" "$2" "$calls")
    awk -v a="$base" -v b="$with" -v n="$elements" -v c="$calls" 'BEGIN { printf "%.2f", (b - a) / (n * c) }'
  }
  scalar=$(per_element cortex-a53 scalar)
  neon=$(per_element cortex-a53 native)
  best=$(per_element max native)
  ratio=$(awk -v s="$scalar" -v n="$best" 'BEGIN { printf "%.1fx", s / n }')
  printf '%-12s %10s %10s %14s %12s %18s\n' "$kernel" "$elements" "$scalar" "$neon" "$best" "$ratio"
done

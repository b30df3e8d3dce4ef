#!/usr/bin/env bash
# Builds llama.cpp's llama-cli, llama-server, llama-bench, llama-perplexity and llama-quantize
# for this CPU (GGML_NATIVE) from a source tree of the commit the peers were built from
# (c392e50, ../shared/peers/README.md), for machines where the peers' binaries stop on an
# instruction this CPU lacks (they were built with AVX-512). The benchmarks then take
#   ANELUA_LLAMA_CPP_BIN=OUT/bin
#   scripts/bench/build_llama_cpp.sh SOURCE_DIR OUT     (SOURCE_DIR: a checkout of llama.cpp at c392e50)
set -euo pipefail
source_dir=$1 out=$2
cmake -S "$source_dir" -B "$out" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF >/dev/null
cmake --build "$out" -j "$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)" \
  --target llama-cli llama-server llama-bench llama-perplexity llama-quantize >/dev/null
ls "$out/bin"

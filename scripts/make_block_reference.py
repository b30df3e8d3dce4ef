#!/usr/bin/env python3
"""Writes spec/data/gguf/blocks-reference.gguf: for each block type anelua reads (Q8_0, Q4_0,
Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K), a [2, 512] tensor `<type>.blocks` of random blocks in that
type (random codes, finite random fp16 scales) and `<type>.expected`, the F32 weights gguf-py's
own dequantization (llama.cpp's gguf-py/gguf/quants.py, numpy) gives them. spec/blocks_spec.lua
holds ane.dequantize_blocks to these, bit for bit, through anelua's GGUF reader.
A developer script: the spec reads the committed file and needs no Python.
    /usr/bin/python3 scripts/make_block_reference.py [PEERS_DIR]   (default ../shared/peers)"""
import os
import sys

import numpy as np

peers = sys.argv[1] if len(sys.argv) > 1 else "../shared/peers"
sys.path.insert(0, os.path.join(peers, "llama.cpp", "gguf-py"))
from gguf import GGUFWriter, GGMLQuantizationType as Q, quants  # noqa: E402
from gguf.constants import GGML_QUANT_SIZES  # noqa: E402

os.chdir(os.path.join(os.path.dirname(__file__), ".."))
rng = np.random.default_rng(20261205)
ROWS, COLUMNS = 2, 512

# Where each type keeps its fp16 scales, in bytes from the block's start (blocks.h).
HALF_SCALES = {Q.Q8_0: [0], Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2],
               Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208]}

writer = GGUFWriter("spec/data/gguf/blocks-reference.gguf", "reference")
for qtype, offsets in HALF_SCALES.items():
    weights, size = GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(ROWS * COLUMNS // weights, size), dtype=np.uint8)
    for offset in offsets:  # scales spread over fp16's range, signs mixed, never inf or nan
        scales = (rng.standard_normal(blocks.shape[0]) * np.exp2(rng.integers(-12, 4, blocks.shape[0])))
        blocks[:, offset:offset + 2] = scales.astype(np.float16).view(np.uint8).reshape(-1, 2)
    data = blocks.reshape(ROWS, -1)
    expected = quants.dequantize(data, qtype).astype(np.float32)
    assert expected.shape == (ROWS, COLUMNS) and np.isfinite(expected).all()
    writer.add_tensor(qtype.name.lower() + ".blocks", data, raw_dtype=qtype)
    writer.add_tensor(qtype.name.lower() + ".expected", expected)
writer.write_header_to_file()
writer.write_kv_data_to_file()
writer.write_tensors_to_file()
writer.close()
print("wrote spec/data/gguf/blocks-reference.gguf:", len(HALF_SCALES), "types x", ROWS * COLUMNS, "weights")

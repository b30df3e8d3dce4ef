"""Writes the weights of a llama.cpp GGUF file (one made from a llama2.c checkpoint by
../shared/peers/llama.cpp/make_models.sh), dequantized to fp32, as a llama2.c (legacy v0)
checkpoint with its own classifier: so anelua's fp32 forward can score llama.cpp's Q8_0 / Q4_0
weight rounding on the same text as its own int8 / int4 (scripts/bench/quantized_decode.lua).
Reads the file with llama.cpp's gguf-py (its GGUFReader and quants.dequantize), which the
caller puts on PYTHONPATH; needs numpy (Debian python3-numpy).
usage: PYTHONPATH=../shared/peers/llama.cpp/gguf-py /usr/bin/python3 gguf_to_llama2c.py IN.gguf OUT.bin"""
import struct
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def main(source, target):
    reader = GGUFReader(source)
    tensors = {t.name: t for t in reader.tensors}

    def field(key):
        value = reader.fields[key]
        return int(value.parts[value.data[0]][0])

    def weights(name):  # [rows, columns] as llama.cpp multiplies them (GGUF lists shapes innermost first)
        t = tensors[name]
        return dequantize(t.data, t.tensor_type).astype(np.float32).reshape([int(n) for n in reversed(t.shape)])

    dim, layers = field("llama.embedding_length"), field("llama.block_count")
    heads, kv_heads = field("llama.attention.head_count"), field("llama.attention.head_count_kv")
    hidden, seq_len = field("llama.feed_forward_length"), field("llama.context_length")
    embedding = weights("token_embd.weight")
    vocab = embedding.shape[0]

    def stacked(role):
        return np.stack([weights("blk.%d.%s.weight" % (layer, role)) for layer in range(layers)])

    with open(target, "wb") as out:
        # a negative vocabulary size: the classifier (output.weight) follows, not shared
        out.write(struct.pack("7i", dim, hidden, layers, heads, kv_heads, -vocab, seq_len))
        for part in [embedding, stacked("attn_norm"), stacked("attn_q"), stacked("attn_k"), stacked("attn_v"),
                     stacked("attn_output"), stacked("ffn_norm"), stacked("ffn_gate"), stacked("ffn_down"),
                     stacked("ffn_up"), weights("output_norm.weight"),
                     np.zeros(seq_len * (dim // heads), np.float32),  # the unused freq_cis tables
                     weights("output.weight")]:
            out.write(np.ascontiguousarray(part, dtype=np.float32).tobytes())


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])

#!/usr/bin/env python3
"""Writes spec/data/gguf/<family>-tiny-f32.gguf: the tiny Hugging Face fixtures of
spec/data/reference/ (llama3-tiny, smollm2-tiny, mistral-tiny, qwen2-tiny, qwen3-tiny) converted
to GGUF as llama.cpp's convert_hf_to_gguf.py lays them out, with gguf-py's own writer and name
map (../shared/peers/llama.cpp/gguf-py), not anelua's:
  - architecture "llama" for Llama, SmolLM2 and Mistral; "qwen2"; "qwen3" (this gguf-py predates
    Qwen3: its keys and tensors are Qwen2's plus attn_q_norm / attn_k_norm, as llama.cpp's
    llama-arch.cpp has them);
  - "llama" q and k rows permuted from rotate-half pairs to adjacent pairs (the converter's
    permute: per head, rows reshaped [2, head_dim / 2] and swapped);
  - Llama 3.1's rope_scaling as the tensor rope_freqs.weight, one factor per frequency
    (1 above the high-frequency wavelength, `factor` below the low one, 1 / ((1 - s) / factor
    + s) between, s = (original / wavelength - low) / (high - low));
  - weights in F32 (the bf16 values exactly), no tokenizer (the fixtures have none).
spec/gguf_spec.lua holds each to the PyTorch logits of its directory.
A developer script: the spec reads the committed files and needs no Python.
    /usr/bin/python3 scripts/make_gguf_families.py [PEERS_DIR]   (default ../shared/peers)"""
import json
import math
import os
import struct
import sys

import numpy as np

peers = sys.argv[1] if len(sys.argv) > 1 else "../shared/peers"
sys.path.insert(0, os.path.join(peers, "llama.cpp", "gguf-py"))
import gguf  # noqa: E402

os.chdir(os.path.join(os.path.dirname(__file__), ".."))
FAMILIES = {"llama3-tiny": "llama", "smollm2-tiny": "llama", "mistral-tiny": "llama", "qwen2-tiny": "qwen2",
            "qwen3-tiny": "qwen3"}
NAME_MAPS = {"llama": gguf.MODEL_ARCH.LLAMA, "qwen2": gguf.MODEL_ARCH.QWEN2, "qwen3": gguf.MODEL_ARCH.QWEN2}


def read_safetensors(path):
    with open(path, "rb") as f:
        header_size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(header_size))
        data = f.read()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        raw = np.frombuffer(data[start:end], dtype={"BF16": np.uint16, "F32": np.float32, "F16": np.float16}[info["dtype"]])
        if info["dtype"] == "BF16":
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        tensors[name] = raw.astype(np.float32).reshape(info["shape"])
    return tensors


def permute(w, heads):
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def rope_factors(config, head_dim):
    r = config["rope_scaling"]
    base, factor = config.get("rope_theta", 10000.0), r["factor"]
    low, high, original = r["low_freq_factor"], r["high_freq_factor"], r["original_max_position_embeddings"]
    factors = []
    for i in range(0, head_dim, 2):
        wavelength = 2 * math.pi / (1.0 / base ** (i / head_dim))
        if wavelength < original / high:
            factors.append(1.0)
        elif wavelength > original / low:
            factors.append(factor)
        else:
            smooth = (original / wavelength - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)


for family, arch in FAMILIES.items():
    directory = "spec/data/reference/" + family
    config = json.load(open(directory + "/config.json"))
    tensors = read_safetensors(directory + "/model.safetensors")
    layers, heads = config["num_hidden_layers"], config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads", heads)
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    out = "spec/data/gguf/%s-f32.gguf" % family
    writer = gguf.GGUFWriter(out, arch)
    writer.add_name(family)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(layers)
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(config.get("rope_theta", 10000.0))
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    if arch == "qwen3" or head_dim != config["hidden_size"] // heads:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    eos = config.get("eos_token_id")
    eos = eos[0] if isinstance(eos, list) else eos
    if isinstance(eos, int):
        writer.add_eos_token_id(eos)
    names = gguf.get_tensor_name_map(NAME_MAPS[arch], layers)
    norms = gguf.get_tensor_name_map(gguf.MODEL_ARCH.OLMO2, layers)  # has attn_q_norm / attn_k_norm
    if (config.get("rope_scaling") or {}).get("rope_type") == "llama3":
        writer.add_tensor("rope_freqs.weight", rope_factors(config, head_dim))
    for hf_name, value in tensors.items():
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias")) or \
            norms.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        assert name, hf_name
        if arch == "llama" and name.endswith("attn_q.weight"):
            value = permute(value, heads)
        elif arch == "llama" and name.endswith("attn_k.weight"):
            value = permute(value, kv_heads)
        writer.add_tensor(name, np.ascontiguousarray(value))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print("wrote", out, len(tensors), "tensors")

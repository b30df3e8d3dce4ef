#!/usr/bin/python3
"""Writes the test fixtures in spec/data/reference/: tiny random models in the real
checkpoint formats and what an independent PyTorch implementation computes from them.

    /usr/bin/python3 scripts/make_fixtures.py [--tokenizers DIR]   (Debian: python3-torch, python3-numpy)

Never needed to run the tests: the files it writes are committed. The models below are
written from the format descriptions (GPT-2 as in Hugging Face's Conv1D layout, llama2.c's
legacy v0 file, a Hugging Face Qwen3 directory in bf16) and evaluated in float64, so the
expectations carry no fp32 rounding of their own. Vocabularies are small (a few hundred
tokens) so that the files stay small; every format path is still exercised.

  gpt2-tiny/  config.json, model.safetensors (F32, [in, out] Conv1D weights)
  llama-tiny/ model.bin (llama2.c v0, negative vocab_size: unshared wcls)
  qwen3-tiny/ config.json, model.safetensors (BF16, tied), tokenizer.json (the Qwen3 tokenizer
              cut to its first tokens and merges, with its added tokens renumbered after them),
              tokenizer_config.json (Qwen3's, its chat template; added tokens renumbered the same)
  llama3-tiny/, smollm2-tiny/, qwen2-tiny/, mistral-tiny/, phi3-tiny/: Hugging Face directories of
              those families as their configs describe them (Llama 3.1's rope_scaling of type llama3
              and untied lm_head; SmolLM2's tied embeddings; Qwen2's q/k/v biases; Mistral's sliding
              window; Phi-3's fused projections and LongRoPE), BF16, no tokenizer (ids in, logits out); expected.safetensors also holds
              targets, the mean cross-entropy loss and every gradient as grad.<HF name>
  gemma3-tiny/ a Gemma 3 text directory (gemma3_text: (1 + w) norms, post-norms, GeGLU, sliding
              window 5 in two of three layers with their own RoPE base), BF16, no tokenizer;
              gemma3-softcap-tiny/ the same with the scores and the logits soft-capped
  each with expected.safetensors (input_ids, targets, logits, loss; gpt2/llama also every
  gradient as grad.<name> and adamw_losses) and meta.json.
"""
import argparse
import json
import math
import os
import struct

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "spec", "data", "reference")
torch.set_default_dtype(torch.float64)
ADAMW = {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0, "steps": 5}


# --------------------------------------------------------------------------- files
def write_safetensors(path, tensors, dtypes=None, metadata=None):
    """tensors: name -> torch tensor; dtypes: name -> 'F32'|'BF16'|'I32' (default F32)."""
    dtypes = dtypes or {}
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name in tensors:                                                           # in the order given
        t = tensors[name].detach()
        kind = dtypes.get(name, "I32" if not t.is_floating_point() else "F32")
        if kind == "F32":
            data = t.to(torch.float32).contiguous().numpy().tobytes()
        elif kind == "BF16":
            data = t.to(torch.bfloat16).contiguous().view(torch.int16).numpy().tobytes()
        elif kind == "I32":
            data = t.to(torch.int32).contiguous().numpy().tobytes()
        else:
            raise ValueError(kind)
        header[name] = {"dtype": kind, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def write_json(path, value):
    with open(path, "w") as f:
        json.dump(value, f, indent=2)
        f.write("\n")


def cross_entropy(logits, targets):
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def adamw_losses(params, loss_fn):
    """Loss before each of five AdamW steps on the same batch, then after the last."""
    opt = torch.optim.AdamW(params, lr=ADAMW["lr"], betas=tuple(ADAMW["betas"]), eps=ADAMW["eps"],
                            weight_decay=ADAMW["weight_decay"])
    losses = []
    for _ in range(ADAMW["steps"]):
        opt.zero_grad()
        loss = loss_fn()
        losses.append(loss.item())
        loss.backward()
        opt.step()
    with torch.no_grad():
        losses.append(loss_fn().item())
    return torch.tensor(losses)


def rms_norm(x, weight, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * weight


def causal_attention(q, k, v):
    """q [B, H, T, hs], k/v [B, H, T, hs] -> [B, H, T, hs]."""
    T, hs = q.shape[2], q.shape[3]
    scores = q @ k.transpose(-1, -2) / math.sqrt(hs)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    return torch.softmax(scores.masked_fill(mask, float("-inf")), -1) @ v


# --------------------------------------------------------------------------- GPT-2
def gpt2_fixture(gen):
    V, C, L, H, T = 384, 64, 2, 4, 64
    config = {"model_type": "gpt2", "vocab_size": V, "n_positions": T, "n_ctx": T, "n_embd": C, "n_layer": L,
              "n_head": H, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new", "bos_token_id": V - 1,
              "eos_token_id": V - 1, "architectures": ["GPT2LMHeadModel"]}

    def randn(*shape, scale=0.02):
        return (torch.randn(*shape, generator=gen) * scale).requires_grad_()

    def near_one(n):
        return (1 + 0.1 * torch.randn(n, generator=gen)).requires_grad_()

    P = {"wte.weight": randn(V, C, scale=0.1), "wpe.weight": randn(T, C, scale=0.05),
         "ln_f.weight": near_one(C), "ln_f.bias": randn(C)}
    for l in range(L):
        p = f"h.{l}."
        P.update({p + "ln_1.weight": near_one(C), p + "ln_1.bias": randn(C),
                  p + "attn.c_attn.weight": randn(C, 3 * C, scale=0.1), p + "attn.c_attn.bias": randn(3 * C),
                  p + "attn.c_proj.weight": randn(C, C, scale=0.1), p + "attn.c_proj.bias": randn(C),
                  p + "ln_2.weight": near_one(C), p + "ln_2.bias": randn(C),
                  p + "mlp.c_fc.weight": randn(C, 4 * C, scale=0.1), p + "mlp.c_fc.bias": randn(4 * C),
                  p + "mlp.c_proj.weight": randn(4 * C, C, scale=0.1), p + "mlp.c_proj.bias": randn(C)})

    def layer_norm(x, w, b):
        return torch.nn.functional.layer_norm(x, (C,), w, b, 1e-5)

    def gelu_tanh(x):
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))

    def forward(ids):
        B, S = ids.shape
        x = P["wte.weight"][ids] + P["wpe.weight"][:S]
        for l in range(L):
            p = f"h.{l}."
            h = layer_norm(x, P[p + "ln_1.weight"], P[p + "ln_1.bias"])
            qkv = h @ P[p + "attn.c_attn.weight"] + P[p + "attn.c_attn.bias"]      # Conv1D: x W + b
            q, k, v = (t.reshape(B, S, H, C // H).transpose(1, 2) for t in qkv.split(C, -1))
            a = causal_attention(q, k, v).transpose(1, 2).reshape(B, S, C)
            x = x + a @ P[p + "attn.c_proj.weight"] + P[p + "attn.c_proj.bias"]
            h = layer_norm(x, P[p + "ln_2.weight"], P[p + "ln_2.bias"])
            x = x + gelu_tanh(h @ P[p + "mlp.c_fc.weight"] + P[p + "mlp.c_fc.bias"]) @ P[p + "mlp.c_proj.weight"] \
                + P[p + "mlp.c_proj.bias"]
        return layer_norm(x, P["ln_f.weight"], P["ln_f.bias"]) @ P["wte.weight"].T          # tied classifier

    ids = torch.randint(0, V, (2, 16), generator=gen)
    targets = torch.randint(0, V, (2, 16), generator=gen)
    model = {name: t.detach().clone() for name, t in P.items()}
    logits = forward(ids)
    loss = cross_entropy(logits, targets)
    loss.backward()
    expected = {"input_ids": ids, "targets": targets, "logits": logits, "loss": loss.reshape(1)}
    expected.update({"grad." + name: t.grad.clone() for name, t in P.items()})
    expected["adamw_losses"] = adamw_losses(list(P.values()), lambda: cross_entropy(forward(ids), targets))
    return config, model, expected


# --------------------------------------------------------------------------- Llama (llama2.c v0)
LLAMA_FIELDS = ["token_embedding", "rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3", "rms_final"]


def llama_fixture(gen):
    dim, hidden, L, H, V, seq = 64, 192, 2, 4, 320, 64
    hs = dim // H

    def randn(*shape, scale=0.1):
        return (torch.randn(*shape, generator=gen) * scale).requires_grad_()

    def near_one(*shape):
        return (1 + 0.1 * torch.randn(*shape, generator=gen)).requires_grad_()

    P = {"token_embedding": randn(V, dim, scale=0.5), "rms_att": near_one(L, dim), "wq": randn(L, dim, dim),
         "wk": randn(L, dim, dim), "wv": randn(L, dim, dim), "wo": randn(L, dim, dim), "rms_ffn": near_one(L, dim),
         "w1": randn(L, hidden, dim), "w2": randn(L, dim, hidden), "w3": randn(L, hidden, dim),
         "rms_final": near_one(dim), "wcls": randn(V, dim)}

    # interleaved RoPE: the pair (2i, 2i+1) of each head turns by pos * theta^(-2i/hs)
    freqs = 10000.0 ** (-torch.arange(0, hs, 2) / hs)                                   # [hs/2]
    angles = torch.arange(seq)[:, None] * freqs[None, :]                               # [seq, hs/2]

    def rope(x):  # [B, H, S, hs]
        S = x.shape[2]
        cos, sin = torch.cos(angles[:S]), torch.sin(angles[:S])
        even, odd = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = even * cos - odd * sin
        out[..., 1::2] = even * sin + odd * cos
        return out

    def forward(ids):
        B, S = ids.shape
        x = P["token_embedding"][ids]
        for l in range(L):
            h = rms_norm(x, P["rms_att"][l], 1e-5)
            q, k, v = ((h @ P[w][l].T).reshape(B, S, H, hs).transpose(1, 2) for w in ("wq", "wk", "wv"))
            a = causal_attention(rope(q), rope(k), v).transpose(1, 2).reshape(B, S, dim)
            x = x + a @ P["wo"][l].T
            h = rms_norm(x, P["rms_ffn"][l], 1e-5)
            x = x + (torch.nn.functional.silu(h @ P["w1"][l].T) * (h @ P["w3"][l].T)) @ P["w2"][l].T
        return rms_norm(x, P["rms_final"], 1e-5) @ P["wcls"].T

    def file_bytes():
        header = struct.pack("<7i", dim, hidden, L, H, H, -V, seq)                   # negative V: unshared wcls
        parts = [header] + [P[f].detach().to(torch.float32).numpy().tobytes() for f in LLAMA_FIELDS]
        parts.append(bytes(seq * (hs // 2) * 4 * 2))                                     # freq_cis_real/imag: unused, zero
        parts.append(P["wcls"].detach().to(torch.float32).numpy().tobytes())
        return b"".join(parts)

    # the file holds fp32: compute from exactly those values
    with torch.no_grad():
        for t in P.values():
            t.copy_(t.to(torch.float32).to(torch.float64))
    model_bin = file_bytes()
    ids = torch.randint(0, V, (2, 16), generator=gen)
    targets = torch.randint(0, V, (2, 16), generator=gen)
    logits = forward(ids)
    loss = cross_entropy(logits, targets)
    loss.backward()
    expected = {"input_ids": ids, "targets": targets, "logits": logits, "loss": loss.reshape(1)}
    for name, t in P.items():
        if name in ("rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3"):                   # [L, ...]
            for l in range(L):
                expected[f"grad.{name}.{l}"] = t.grad[l].clone()
        else:
            expected["grad." + name] = t.grad.clone()
    expected["adamw_losses"] = adamw_losses(list(P.values()), lambda: cross_entropy(forward(ids), targets))
    return model_bin, expected, {"dim": dim, "hidden": hidden, "n_layers": L, "n_heads": H, "n_kv_heads": H,
                                  "vocab_size": V, "seq_len": seq}


# --------------------------------------------------------------------------- Qwen3 (HF, bf16)
def tiny_qwen3_tokenizer(source, keep):
    """The Qwen3 tokenizer.json cut to its first `keep` tokens and the merges among them; the
    added tokens follow at keep, keep + 1, ..."""
    with open(source) as f:
        tok = json.load(f)
    vocab = {t: i for t, i in tok["model"]["vocab"].items() if i < keep}
    merges = []
    for merge in tok["model"]["merges"]:
        left, right = merge if isinstance(merge, list) else merge.split(" ")
        if left in vocab and right in vocab and (left + right) in vocab:
            merges.append([left, right])
    tok["model"]["vocab"], tok["model"]["merges"] = vocab, merges
    for offset, added in enumerate(tok["added_tokens"]):
        added["id"] = keep + offset
    if tok.get("post_processor"):
        tok["post_processor"] = None
    return tok


def tiny_qwen3_tokenizer_config(source, tokenizer):
    """Qwen3's tokenizer_config.json (its chat template, eos_token) with added_tokens_decoder
    keyed by the ids the cut tokenizer gives those tokens."""
    with open(source) as f:
        config = json.load(f)
    ids = {a["content"]: a["id"] for a in tokenizer["added_tokens"]}
    config["added_tokens_decoder"] = {str(ids[entry["content"]]): entry
                                      for entry in config["added_tokens_decoder"].values()}
    return config


def bf16_draws(gen):
    """randn(*shape, scale) and near_one(n): normal draws (times scale; 1 + 0.1 x one) rounded to
    bf16 and held in float64, as the bf16 checkpoints store them."""
    def bf16(t):
        return t.to(torch.bfloat16).to(torch.float64)

    def randn(*shape, scale=0.1):
        return bf16(torch.randn(*shape, generator=gen) * scale)

    def near_one(n):
        return bf16(1 + 0.1 * torch.randn(n, generator=gen))
    return randn, near_one


def qwen3_fixture(gen, tokenizer):
    specials = {a["content"]: a["id"] for a in tokenizer["added_tokens"]}
    V = max(specials.values()) + 1 + 6                                               # a few unused rows, as real models have
    D, inter, L, H, KV, hd = 64, 128, 2, 4, 2, 32
    config = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": V, "hidden_size": D,
              "intermediate_size": inter, "num_hidden_layers": L, "num_attention_heads": H,
              "num_key_value_heads": KV, "head_dim": hd, "hidden_act": "silu", "rms_norm_eps": 1e-6,
              "rope_theta": 1000000.0, "max_position_embeddings": 128, "tie_word_embeddings": True,
              "torch_dtype": "bfloat16", "bos_token_id": specials["<|endoftext|>"],
              "eos_token_id": specials["<|im_end|>"], "attention_bias": False}

    randn, near_one = bf16_draws(gen)

    W = {"model.embed_tokens.weight": randn(V, D, scale=0.5), "model.norm.weight": near_one(D)}
    for l in range(L):
        p = f"model.layers.{l}."
        W.update({p + "input_layernorm.weight": near_one(D), p + "post_attention_layernorm.weight": near_one(D),
                  p + "self_attn.q_proj.weight": randn(H * hd, D), p + "self_attn.k_proj.weight": randn(KV * hd, D),
                  p + "self_attn.v_proj.weight": randn(KV * hd, D), p + "self_attn.o_proj.weight": randn(D, H * hd),
                  p + "self_attn.q_norm.weight": near_one(hd), p + "self_attn.k_norm.weight": near_one(hd),
                  p + "mlp.gate_proj.weight": randn(inter, D), p + "mlp.up_proj.weight": randn(inter, D),
                  p + "mlp.down_proj.weight": randn(D, inter)})

    inv = 1e6 ** (-torch.arange(0, hd, 2) / hd)                                         # [hd/2]

    def rope_half(x):  # [B, h, S, hd]: pairs (i, i + hd/2)
        S = x.shape[2]
        angles = torch.arange(S)[:, None] * inv[None, :]
        cos, sin = torch.cos(angles).repeat(1, 2), torch.sin(angles).repeat(1, 2)
        first, second = x[..., : hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat([-second, first], -1) * sin

    def forward(ids):
        B, S = ids.shape
        x = W["model.embed_tokens.weight"][ids]
        for l in range(L):
            p = f"model.layers.{l}."
            h = rms_norm(x, W[p + "input_layernorm.weight"], 1e-6)
            q = (h @ W[p + "self_attn.q_proj.weight"].T).reshape(B, S, H, hd).transpose(1, 2)
            k = (h @ W[p + "self_attn.k_proj.weight"].T).reshape(B, S, KV, hd).transpose(1, 2)
            v = (h @ W[p + "self_attn.v_proj.weight"].T).reshape(B, S, KV, hd).transpose(1, 2)
            q = rope_half(rms_norm(q, W[p + "self_attn.q_norm.weight"], 1e-6))
            k = rope_half(rms_norm(k, W[p + "self_attn.k_norm.weight"], 1e-6))
            k, v = k.repeat_interleave(H // KV, 1), v.repeat_interleave(H // KV, 1)        # head h reads kv head h // 2
            a = causal_attention(q, k, v).transpose(1, 2).reshape(B, S, H * hd)
            x = x + a @ W[p + "self_attn.o_proj.weight"].T
            h = rms_norm(x, W[p + "post_attention_layernorm.weight"], 1e-6)
            x = x + (torch.nn.functional.silu(h @ W[p + "mlp.gate_proj.weight"].T) * (h @ W[p + "mlp.up_proj.weight"].T)) \
                @ W[p + "mlp.down_proj.weight"].T
        return rms_norm(x, W["model.norm.weight"], 1e-6) @ W["model.embed_tokens.weight"].T

    ids = torch.randint(0, V, (1, 12), generator=gen)
    targets = torch.randint(0, V, (1, 12), generator=gen)
    with torch.no_grad():
        logits = forward(ids)
        loss = cross_entropy(logits, targets)
    expected = {"input_ids": ids, "targets": targets, "logits": logits, "loss": loss.reshape(1)}
    return config, W, expected


def forward_and_gradients(gen, forward, W, V, S):
    """Random ids and targets (one sequence of S below V, ids from 3), forward's logits, the mean
    cross-entropy and the gradient of every weight in W: the expectations of an HF fixture."""
    ids = torch.randint(3, V, (1, S), generator=gen)
    targets = torch.randint(3, V, (1, S), generator=gen)
    for t in W.values():
        t.requires_grad_(True)
    logits = forward(ids)
    loss = cross_entropy(logits, targets)
    loss.backward()
    expected = {"input_ids": ids, "targets": targets, "logits": logits.detach(), "loss": loss.detach().reshape(1)}
    expected.update({"grad." + name: t.grad for name, t in W.items()})
    return expected


def hf_family_fixture(gen, family):
    """A tiny Hugging Face directory of one Llama-like family and its float64 logits, computed as
    transformers' modelling code defines the family (facts from modeling_llama.py, modeling_qwen2.py,
    modeling_mistral.py and modeling_rope_utils.py): RMSNorm, rotate-half RoPE with the family's
    frequencies, grouped-query attention, SwiGLU."""
    V, D, inter, L, H, KV, hd = 256, 64, 128, 2, 4, 2, 16
    S = 12
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": V, "hidden_size": D,
              "intermediate_size": inter, "num_hidden_layers": L, "num_attention_heads": H,
              "num_key_value_heads": KV, "head_dim": hd, "hidden_act": "silu", "rms_norm_eps": 1e-5,
              "rope_theta": 10000.0, "max_position_embeddings": 128, "tie_word_embeddings": False,
              "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2}
    scaling = None
    if family == "llama3":   # Llama 3.1: theta 500000, rope_scaling llama3 (original context cut to 32 here)
        scaling = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 32,
                   "rope_type": "llama3"}
        config.update({"rope_theta": 500000.0, "rope_scaling": scaling, "attention_bias": False, "mlp_bias": False,
                       "eos_token_id": [2, 3]})
    elif family == "smollm2":  # Llama with tied embeddings, theta 100000
        config.update({"rope_theta": 100000.0, "tie_word_embeddings": True, "num_key_value_heads": 4})
        KV = 4
    elif family == "qwen2":    # q, k, v biases (always, in modeling_qwen2), tied in the small sizes
        config.update({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "rope_theta": 1000000.0,
                       "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "use_sliding_window": False,
                       "sliding_window": 32768, "max_window_layers": 21})
        del config["head_dim"]
    elif family == "phi3":     # fused qkv_proj and gate_up_proj; LongRoPE within its original context
        short = [1.0 + 0.25 * i for i in range(hd // 2)]
        scaling = {"rope_type": "longrope", "short_factor": short, "long_factor": [4.0 * f for f in short]}
        config.update({"model_type": "phi3", "architectures": ["Phi3ForCausalLM"], "rope_scaling": scaling,
                       "original_max_position_embeddings": 32, "max_position_embeddings": 128, "sliding_window": None,
                       "partial_rotary_factor": 1.0})
    elif family == "mistral":  # a sliding window narrower than the context: the sequence stays inside it
        config.update({"model_type": "mistral", "architectures": ["MistralForCausalLM"], "rope_theta": 1000000.0,
                       "sliding_window": 16, "head_dim": None})
        hd = D // H

    randn, near_one = bf16_draws(gen)

    W = {"model.embed_tokens.weight": randn(V, D, scale=0.5), "model.norm.weight": near_one(D)}
    if not config["tie_word_embeddings"]:
        W["lm_head.weight"] = randn(V, D)
    for l in range(L):
        p = f"model.layers.{l}."
        W.update({p + "input_layernorm.weight": near_one(D), p + "post_attention_layernorm.weight": near_one(D),
                  p + "self_attn.q_proj.weight": randn(H * hd, D), p + "self_attn.k_proj.weight": randn(KV * hd, D),
                  p + "self_attn.v_proj.weight": randn(KV * hd, D), p + "self_attn.o_proj.weight": randn(D, H * hd),
                  p + "mlp.gate_proj.weight": randn(inter, D), p + "mlp.up_proj.weight": randn(inter, D),
                  p + "mlp.down_proj.weight": randn(D, inter)})
        if family == "qwen2":
            W.update({p + "self_attn.q_proj.bias": randn(H * hd, scale=0.5), p + "self_attn.k_proj.bias": randn(KV * hd, scale=0.5),
                      p + "self_attn.v_proj.bias": randn(KV * hd, scale=0.5)})

    inv = config["rope_theta"] ** (-torch.arange(0, hd, 2) / hd)                        # [hd/2]
    attention_factor = 1.0
    if scaling and scaling["rope_type"] == "longrope":  # _compute_longrope_parameters, sequences within the original
        original, expanded = config["original_max_position_embeddings"], config["max_position_embeddings"]
        attention_factor = math.sqrt(1 + math.log(expanded / original) / math.log(original))
        inv = inv / torch.tensor(scaling["short_factor"])
    elif scaling:  # modeling_rope_utils._compute_llama3_parameters
        factor, lo, hi, n = (scaling[k] for k in ("factor", "low_freq_factor", "high_freq_factor",
                                                  "original_max_position_embeddings"))
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > n / lo, inv / factor, inv)
        smooth = (n / wavelen - lo) / (hi - lo)
        medium = ~(wavelen < n / hi) & ~(wavelen > n / lo)
        inv = torch.where(medium, (1 - smooth) * scaled / factor + smooth * scaled, scaled)

    def rope_half(x):
        angles = torch.arange(x.shape[2])[:, None] * inv[None, :]
        cos, sin = torch.cos(angles).repeat(1, 2) * attention_factor, torch.sin(angles).repeat(1, 2) * attention_factor
        first, second = x[..., : hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat([-second, first], -1) * sin

    def project(h, p, name):
        y = h @ W[p + f"self_attn.{name}_proj.weight"].T
        return y + W[p + f"self_attn.{name}_proj.bias"] if p + f"self_attn.{name}_proj.bias" in W else y

    def forward(ids):
        B, T = ids.shape
        x = W["model.embed_tokens.weight"][ids]
        for l in range(L):
            p = f"model.layers.{l}."
            h = rms_norm(x, W[p + "input_layernorm.weight"], config["rms_norm_eps"])
            q = project(h, p, "q").reshape(B, T, H, hd).transpose(1, 2)
            k = project(h, p, "k").reshape(B, T, KV, hd).transpose(1, 2)
            v = project(h, p, "v").reshape(B, T, KV, hd).transpose(1, 2)
            q, k = rope_half(q), rope_half(k)
            k, v = k.repeat_interleave(H // KV, 1), v.repeat_interleave(H // KV, 1)
            a = causal_attention(q, k, v).transpose(1, 2).reshape(B, T, H * hd)
            x = x + a @ W[p + "self_attn.o_proj.weight"].T
            h = rms_norm(x, W[p + "post_attention_layernorm.weight"], config["rms_norm_eps"])
            x = x + (torch.nn.functional.silu(h @ W[p + "mlp.gate_proj.weight"].T) * (h @ W[p + "mlp.up_proj.weight"].T)) \
                @ W[p + "mlp.down_proj.weight"].T
        head = W["lm_head.weight"] if "lm_head.weight" in W else W["model.embed_tokens.weight"]
        return rms_norm(x, W["model.norm.weight"], config["rms_norm_eps"]) @ head.T

    expected = forward_and_gradients(gen, forward, W, V, S)
    saved = {name: t.detach() for name, t in W.items()}
    if family == "phi3":  # Phi-3's checkpoints hold q, k, v and gate, up fused (modeling_phi3), in that row order
        for l in range(L):
            p = f"model.layers.{l}."
            saved[p + "self_attn.qkv_proj.weight"] = torch.cat([saved.pop(p + f"self_attn.{n}_proj.weight") for n in "qkv"])
            saved[p + "mlp.gate_up_proj.weight"] = torch.cat([saved.pop(p + "mlp.gate_proj.weight"),
                                                              saved.pop(p + "mlp.up_proj.weight")])
    return config, saved, expected


def gemma3_fixture(gen, softcap=None):
    """A tiny Gemma 3 text directory (model_type gemma3_text) and its float64 logits, loss and
    gradients, computed as transformers' modeling_gemma3.py defines the model (facts, read there):
    RMSNorms scaled by (1 + weight); embeddings times sqrt(hidden_size) cast to the weights' dtype
    (bf16 here); q/k norms per head before RoPE; norms after attention and after the MLP as well
    as before; GeGLU with GELU's tanh form; scores scaled by query_pre_attn_scalar^-0.5; sliding
    layers (layer_types) see the last sliding_window keys (kv > q - window) and rotate by
    rope_local_base_freq, the full layer by rope_theta with linear rope_scaling. Sequences of 12
    positions over a window of 5 exercise the window; q's width (64) differs from hidden (48)."""
    V, D, inter, L, H, KV, hd, S = 256, 48, 96, 3, 4, 2, 16, 12
    window, scalar, eps = 5, 24, 1e-6
    layer_types = ["sliding_attention", "full_attention", "sliding_attention"]
    config = {"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"], "vocab_size": V, "hidden_size": D,
              "intermediate_size": inter, "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": KV,
              "head_dim": hd, "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": eps,
              "query_pre_attn_scalar": scalar, "sliding_window": window, "layer_types": layer_types,
              "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
              "rope_scaling": {"rope_type": "linear", "factor": 8.0},
              "attn_logit_softcapping": softcap and softcap[0], "final_logit_softcapping": softcap and softcap[1],
              "attention_bias": False, "max_position_embeddings": 128,
              "tie_word_embeddings": True, "torch_dtype": "bfloat16", "bos_token_id": 2, "eos_token_id": [1, 106],
              "pad_token_id": 0}
    randn, _ = bf16_draws(gen)
    W = {"model.embed_tokens.weight": randn(V, D, scale=0.5), "model.norm.weight": randn(D)}
    for l in range(L):
        p = f"model.layers.{l}."
        W.update({p + "input_layernorm.weight": randn(D), p + "post_attention_layernorm.weight": randn(D),
                  p + "pre_feedforward_layernorm.weight": randn(D), p + "post_feedforward_layernorm.weight": randn(D),
                  p + "self_attn.q_proj.weight": randn(H * hd, D), p + "self_attn.k_proj.weight": randn(KV * hd, D),
                  p + "self_attn.v_proj.weight": randn(KV * hd, D), p + "self_attn.o_proj.weight": randn(D, H * hd),
                  p + "self_attn.q_norm.weight": randn(hd), p + "self_attn.k_norm.weight": randn(hd),
                  p + "mlp.gate_proj.weight": randn(inter, D), p + "mlp.up_proj.weight": randn(inter, D),
                  p + "mlp.down_proj.weight": randn(D, inter)})
    embed_scale = torch.tensor(D ** 0.5).to(torch.bfloat16).to(torch.float64)       # 6.9375: cast to bf16

    def norm(x, w):                                                                  # Gemma3RMSNorm
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w)

    def rope(x, theta, factor):
        inv = theta ** (-torch.arange(0, hd, 2) / hd) / factor
        angles = torch.arange(x.shape[2])[:, None] * inv[None, :]
        cos, sin = torch.cos(angles).repeat(1, 2), torch.sin(angles).repeat(1, 2)
        first, second = x[..., : hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat([-second, first], -1) * sin

    def forward(ids):
        B, T = ids.shape
        x = W["model.embed_tokens.weight"][ids] * embed_scale
        query, key = torch.arange(T)[:, None], torch.arange(T)[None, :]
        for l in range(L):
            p = f"model.layers.{l}."
            sliding = layer_types[l] == "sliding_attention"
            h = norm(x, W[p + "input_layernorm.weight"])
            q = (h @ W[p + "self_attn.q_proj.weight"].T).reshape(B, T, H, hd).transpose(1, 2)
            k = (h @ W[p + "self_attn.k_proj.weight"].T).reshape(B, T, KV, hd).transpose(1, 2)
            v = (h @ W[p + "self_attn.v_proj.weight"].T).reshape(B, T, KV, hd).transpose(1, 2)
            q, k = norm(q, W[p + "self_attn.q_norm.weight"]), norm(k, W[p + "self_attn.k_norm.weight"])
            theta, factor = (10000.0, 1.0) if sliding else (1000000.0, 8.0)
            q, k = rope(q, theta, factor), rope(k, theta, factor)
            k, v = k.repeat_interleave(H // KV, 1), v.repeat_interleave(H // KV, 1)
            visible = key <= query
            if sliding:
                visible = visible & (key > query - window)
            scores = (q @ k.transpose(-1, -2)) * scalar ** -0.5
            if softcap:                                                  # eager_attention_forward's softcap
                scores = torch.tanh(scores / softcap[0]) * softcap[0]
            scores = scores.masked_fill(~visible, float("-inf"))
            a = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(B, T, H * hd)
            x = x + norm(a @ W[p + "self_attn.o_proj.weight"].T, W[p + "post_attention_layernorm.weight"])
            h = norm(x, W[p + "pre_feedforward_layernorm.weight"])
            gate = torch.nn.functional.gelu(h @ W[p + "mlp.gate_proj.weight"].T, approximate="tanh")
            y = (gate * (h @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T
            x = x + norm(y, W[p + "post_feedforward_layernorm.weight"])
        logits = norm(x, W["model.norm.weight"]) @ W["model.embed_tokens.weight"].T
        if softcap:                                                      # Gemma3ForCausalLM's final softcap
            logits = torch.tanh(logits / softcap[1]) * softcap[1]
        return logits

    expected = forward_and_gradients(gen, forward, W, V, S)
    return config, {name: t.detach() for name, t in W.items()}, expected


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokenizers", default=os.path.join(ROOT, "data", "tokenizers"),
                        help="where qwen3/tokenizer.json is (default: data/tokenizers)")
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(20261201)

    out = os.path.join(OUT, "gpt2-tiny")
    os.makedirs(out, exist_ok=True)
    config, model, expected = gpt2_fixture(gen)
    write_json(os.path.join(out, "config.json"), config)
    write_safetensors(os.path.join(out, "model.safetensors"), model, metadata={"format": "pt"})
    write_safetensors(os.path.join(out, "expected.safetensors"), expected)
    write_json(os.path.join(out, "meta.json"), {"V": config["vocab_size"], "C": 64, "L": 2, "H": 4, "T": 64, "B": 2,
                                                "S": 16, "loss_reduction": "mean over B*S", "adamw": ADAMW,
                                                "computed": "float64, scripts/make_fixtures.py"})

    out = os.path.join(OUT, "llama-tiny")
    os.makedirs(out, exist_ok=True)
    model_bin, expected, shape = llama_fixture(gen)
    with open(os.path.join(out, "model.bin"), "wb") as f:
        f.write(model_bin)
    write_safetensors(os.path.join(out, "expected.safetensors"), expected)
    write_json(os.path.join(out, "meta.json"), dict(shape, format="llama2.c legacy v0, negative vocab_size (unshared wcls)",
                                                    rope="interleaved adjacent pairs, theta 10000", norm_eps=1e-5, B=2,
                                                    S=16, adamw=ADAMW, computed="float64, scripts/make_fixtures.py"))

    out = os.path.join(OUT, "qwen3-tiny")
    os.makedirs(out, exist_ok=True)
    tokenizer = tiny_qwen3_tokenizer(os.path.join(args.tokenizers, "qwen3", "tokenizer.json"), 512)
    config, weights, expected = qwen3_fixture(gen, tokenizer)
    write_json(os.path.join(out, "config.json"), config)
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tokenizer, f, ensure_ascii=False, separators=(",", ":"))
    write_json(os.path.join(out, "tokenizer_config.json"),
               tiny_qwen3_tokenizer_config(os.path.join(args.tokenizers, "qwen3", "tokenizer_config.json"), tokenizer))
    write_safetensors(os.path.join(out, "model.safetensors"), weights, {name: "BF16" for name in weights},
                      metadata={"format": "pt"})
    write_safetensors(os.path.join(out, "expected.safetensors"), expected)
    write_json(os.path.join(out, "meta.json"), {"V": config["vocab_size"], "B": 1, "S": 12,
                                                "rope": "rotate-half, theta 1e6", "gqa": "4 query heads on 2 kv heads",
                                                "computed": "float64 from the bf16 weights, scripts/make_fixtures.py"})
    families = {"llama3": "Llama 3.1 (rope_scaling llama3, theta 5e5, untied, GQA 4 on 2)",
                "smollm2": "SmolLM2 (Llama, tied embeddings, theta 1e5)",
                "qwen2": "Qwen2 (q/k/v biases, tied, theta 1e6)",
                "mistral": "Mistral (sliding window 16 of 128 positions, theta 1e6)",
                "phi3": "Phi-3 (fused qkv_proj and gate_up_proj, LongRoPE short factors within 32 positions)"}
    def write_family(name, what, fixture):
        out = os.path.join(OUT, name + "-tiny")
        os.makedirs(out, exist_ok=True)
        config, weights, expected = fixture
        write_json(os.path.join(out, "config.json"), config)
        write_safetensors(os.path.join(out, "model.safetensors"), weights, {name: "BF16" for name in weights},
                          metadata={"format": "pt"})
        write_safetensors(os.path.join(out, "expected.safetensors"), expected)
        write_json(os.path.join(out, "meta.json"), {"V": config["vocab_size"], "B": 1, "S": 12, "family": what,
                                                    "computed": "float64 from the bf16 weights, scripts/make_fixtures.py"})
    for family, what in families.items():
        write_family(family, what, hf_family_fixture(gen, family))
    write_family("gemma3", "Gemma 3 text (sliding window 5 in layers 0 and 2, query_pre_attn_scalar 24, GeGLU, "
                 "(1 + w) norms)", gemma3_fixture(gen))
    write_family("gemma3-softcap", "Gemma 3 text with attn_logit_softcapping 2 and final_logit_softcapping 3 (Gemma 3 "
                 "sets none; small caps so that tanh bends)", gemma3_fixture(gen, softcap=(2.0, 3.0)))
    for name in ["gpt2-tiny", "llama-tiny", "qwen3-tiny", "gemma3-tiny", "gemma3-softcap-tiny"] + [f + "-tiny" for f in families]:
        size = sum(os.path.getsize(os.path.join(OUT, name, f)) for f in os.listdir(os.path.join(OUT, name)))
        print(f"wrote spec/data/reference/{name} ({size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()

"""The PyTorch side of scripts/bench/train_vs_peers.lua: times training steps (forward,
backward, AdamW) of the peers' own PyTorch models (../shared/peers/pytorch/torch_models.py,
imported from the directory given, not copied) at a batch and sequence length of the caller's
choosing, in a fresh process, and prints one line the bench reads:

    first <seconds> steady <median seconds of the later steps> steps <n>

    /usr/bin/python3 scripts/bench/torch_train_step.py PEERS_PYTORCH_DIR {gpt2|stories} B T STEPS
"""
import os
import statistics
import sys
import time

peers_dir, which, batch, seq, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
sys.path.insert(0, peers_dir)
import torch  # noqa: E402
from torch_models import GPT2, Llama  # noqa: E402

torch.manual_seed(0)
torch.set_num_threads(int(os.environ.get("THREADS", "2")))
model, vocab = (GPT2(), 50257) if which == "gpt2" else (Llama(), 32000)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
inputs = torch.randint(0, vocab, (batch, seq))
targets = torch.randint(0, vocab, (batch, seq))
times = []
for _ in range(steps + 1):  # the first step is reported on its own (allocations, thread start-up)
    start = time.perf_counter()
    _, loss = model(inputs, targets)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    times.append(time.perf_counter() - start)
print("first %.4f steady %.4f steps %d" % (times[0], statistics.median(times[1:]), steps))

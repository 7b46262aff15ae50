#!/usr/bin/python3
"""PyTorch CPU eager counterpart of mlp_bench: the same MLP, batch, optimizer
and loop (loss read back every step). Prints one JSON line."""
import argparse
import json
import time

import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--hidden", default="1024,1024,1024")
p.add_argument("--batch", type=int, default=128)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--warmup", type=int, default=20)
p.add_argument("--steps", type=int, default=200)
a = p.parse_args()

torch.set_num_threads(a.threads)
torch.manual_seed(1)
layers, prev = [], 784
for h in [int(v) for v in a.hidden.split(",")]:
    layers += [torch.nn.Linear(prev, h), torch.nn.ReLU()]
    prev = h
layers.append(torch.nn.Linear(prev, 10))
model = torch.nn.Sequential(*layers)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.rand(a.batch, 784) * 2 - 1
y = torch.arange(a.batch) % 10

for step in range(a.warmup + a.steps):
    if step == a.warmup:
        start = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    last = loss.item()
seconds = time.perf_counter() - start
print(json.dumps({
    "impl": "pytorch-" + torch.__version__, "batch": a.batch,
    "threads": torch.get_num_threads(), "steps": a.steps,
    "samples_per_second": round(a.steps * a.batch / seconds, 1),
    "ms_per_step": round(1000 * seconds / a.steps, 3),
    "final_loss": round(last, 4)}))

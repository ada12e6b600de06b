"""A script that times each step with a device synchronize, as a throughput log does."""

import time

import torch
from torch import nn

import devicekit

device = devicekit.device()
model = nn.Linear(8, 2).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
devicekit.synchronize()  # once, before the loop: no finding
for step in range(3):
    start = time.perf_counter()
    loss = model(torch.randn(4, 8, device=device)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    devicekit.synchronize()  # <host-sync>
    print(f"step {step}: {time.perf_counter() - start:.4f} s")

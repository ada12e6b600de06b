"""A script on devicekit's API that copies its loss to the host every step."""

import torch
from torch import nn

import devicekit

device = devicekit.device()
model = nn.Linear(8, 2).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
history = []
for _ in range(3):
    loss = model(torch.randn(4, 8).to(device)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    history.append(loss.detach().cpu())  # <host-sync>
print("trained on", device)

"""Every hazard preflight reports, each on a line of its own marked `# <kind>`."""

import sys

import torch
from torch import nn

torch.manual_seed(0)
encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 2)
head = nn.Linear(16, 4)
optimizer = torch.optim.SGD(head.parameters(), lr=0.1)
data = torch.randn(10, 5, 16)
encoder.eval()
print("hazards start", sys.argv[1:])
for start in range(0, 10, 4):
    x = data[start:start + 4]  # batches of 4, 4 and 2
    with torch.no_grad():
        features = encoder(x)  # <cpu-fallback>
    weights = torch.ones(4, dtype=torch.float64)  # <float64>
    pooled = features.mean(1)  # <dynamic-shape>
    logits = head(pooled)
    positive = logits[logits > 0]  # <data-dependent-shape>
    loss = logits.pow(2).mean() + positive.sum() * 0
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"loss {loss.item():.4f}")  # <host-sync>

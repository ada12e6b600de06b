"""A CUDA script's habits on a machine without CUDA: autocast for cuda around CPU tensors."""

import torch
from torch import nn

model = nn.Linear(8, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    with torch.autocast(device_type="cuda", dtype=torch.float16):  # <autocast-device>
        loss = model(torch.randn(4, 8)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
if torch.cuda.is_available():
    torch.cuda.synchronize()  # <cuda-only>

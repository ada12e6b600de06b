"""Takes one step, then feeds a layer the wrong width: torch raises inside its own code."""

import torch
from torch import nn

model = nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    width = 4 if step == 0 else 3
    loss = model(torch.ones(2, width)).sum()  # <raise>
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

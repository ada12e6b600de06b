"""Takes one step, then fails."""

import torch

weight = torch.zeros(3, requires_grad=True)
optimizer = torch.optim.SGD([weight], lr=0.1)
for step in range(3):
    loss = (weight.double() - 1).pow(2).sum()  # <float64>
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step == 1:
        raise ValueError("the data ran out")  # <raise>

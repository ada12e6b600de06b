"""Interrupted (SIGINT, as Ctrl-C sends it) after its third step."""

import signal

import torch

weight = torch.zeros(2, requires_grad=True)
optimizer = torch.optim.SGD([weight], lr=0.1)
for step in range(5):
    (weight - 1).pow(2).sum().backward()
    optimizer.step()
    if step == 2:
        # raise() delivers to this thread before it returns; os.kill(os.getpid()) may go to
        # one of torch's threads and land a step later on a loaded machine.
        signal.raise_signal(signal.SIGINT)

"""Runs a model but never steps an optimizer."""

import torch

print(torch.nn.Linear(3, 2)(torch.ones(1, 3)).shape)

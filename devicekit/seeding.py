"""Seeding every random number generator a training run touches."""

import random

import numpy as np
import torch


def seed_everything(seed: int, rank: int = 0) -> int:
    """Seed python, numpy and torch (CPU and every device) with `seed + rank`.

    Ranks get different streams so their augmentations differ; DDP still starts every
    rank from rank 0's weights. torch.manual_seed seeds all devices, accelerators included.
    """
    value = int(seed) + int(rank)
    random.seed(value)
    np.random.seed(value % 2**32)
    torch.manual_seed(value)
    return value

"""Mistakes the published hints must catch: mypy reports each line whose comment names an
error code, with that code, and no other line."""

import torch

import devicekit

rank: str = devicekit.rank()  # error: assignment
device: torch.device = devicekit.device_type()  # error: assignment
devicekit.launch(print, args=3)  # error: arg-type
devicekit.init_distributed(timeout="60")  # error: arg-type
devicekit.autocast(dtype=0.5)  # error: arg-type
devicekit.save_checkpoint(42, {})  # error: arg-type
devicekit.wrap_ddp([torch.nn.Linear(2, 2)])  # error: arg-type
devicekit.world_size() + "1"  # error: operator
devicekit.is_bf16_supported().lower()  # error: attr-defined

"""`devicekit preflight`: find the aten operators a training script needs that torch_npu lacks."""

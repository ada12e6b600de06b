"""`torch_npu.optim` under `python -m devicekit simulate`: torch_npu's fused optimizers
(devicekit/simulate/fused_optim.py), each computing what the matching torch optimizer does."""

from devicekit.simulate.fused_optim import (
    NpuFusedAdadelta,
    NpuFusedAdam,
    NpuFusedAdamP,
    NpuFusedAdamW,
    NpuFusedBertAdam,
    NpuFusedLamb,
    NpuFusedOptimizerBase,
    NpuFusedRMSprop,
    NpuFusedRMSpropTF,
    NpuFusedSGD,
)

__all__ = [
    "NpuFusedAdadelta",
    "NpuFusedAdam",
    "NpuFusedAdamP",
    "NpuFusedAdamW",
    "NpuFusedBertAdam",
    "NpuFusedLamb",
    "NpuFusedOptimizerBase",
    "NpuFusedRMSprop",
    "NpuFusedRMSpropTF",
    "NpuFusedSGD",
]

"""`apex.optimizers` of Ascend's apex on the stand-in: its NPU fused optimizers and Lamb
(devicekit/simulate/ascend_apex_optim.py)."""

from devicekit.simulate.ascend_apex_optim import (
    Lamb,
    NpuFusedAdadelta,
    NpuFusedAdam,
    NpuFusedAdamP,
    NpuFusedAdamW,
    NpuFusedBertAdam,
    NpuFusedLamb,
    NpuFusedRMSprop,
    NpuFusedRMSpropTF,
    NpuFusedSGD,
)

__all__ = [
    "Lamb",
    "NpuFusedAdadelta",
    "NpuFusedAdam",
    "NpuFusedAdamP",
    "NpuFusedAdamW",
    "NpuFusedBertAdam",
    "NpuFusedLamb",
    "NpuFusedRMSprop",
    "NpuFusedRMSpropTF",
    "NpuFusedSGD",
]


def __getattr__(name: str) -> object:
    raise AttributeError(
        f"apex.optimizers.{name} is not provided by devicekit's stand-in of Ascend's apex "
        "(its NPU fused optimizers and Lamb are): install Ascend's apex to use it"
    )

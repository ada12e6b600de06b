"""The stand-in's `hccl`: a collective backend for `npu` tensors, carried by gloo.

gloo takes only CPU tensors, so every collective hands it CPU views of the npu tensors'
own (host) memory: results land in the npu tensors with no copy.
"""

from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist

BACKEND = "hccl"

# The ProcessGroup methods torch.distributed, DDP and FSDP2 call: {name: gloo's method}.
_COLLECTIVES = {
    name: name
    for name in (
        "allreduce",
        "allreduce_coalesced",
        "allgather",
        "_allgather_base",
        "allgather_coalesced",
        "broadcast",
        "reduce",
        "gather",
        "scatter",
        "reduce_scatter",
        "_reduce_scatter_base",
        "alltoall_base",
        "alltoall",
        "send",
        "recv",
        "recv_anysource",
        "barrier",
    )
} | {
    # torch 2.13's names for the flat-buffer collectives (all_gather_into_tensor,
    # reduce_scatter_tensor, all_to_all_single), which gloo still answers by the old ones.
    "all_gather_single": "_allgather_base",
    "reduce_scatter_single": "_reduce_scatter_base",
    "all_to_all_single": "alltoall_base",
}


class HcclOverGloo(dist.ProcessGroup):
    """A process group of `size` ranks over `store` whose collectives take npu tensors."""

    def __init__(
        self,
        store: dist.Store,
        rank: int,
        size: int,
        timeout: timedelta,
        host_view: Callable[[torch.Tensor], torch.Tensor],
    ) -> None:
        # torch's stub lacks the binding's (rank, size) overload: a group with no store
        super().__init__(rank, size)  # type: ignore[call-arg]
        self._gloo = dist.ProcessGroupGloo(store, rank, size, timeout)
        self._host_view = host_view

    def getBackendName(self) -> str:
        return BACKEND

    def _on_host(self, value: object) -> object:
        if isinstance(value, torch.Tensor):
            return self._host_view(value) if value.device.type == "npu" else value
        if isinstance(value, (list, tuple)):
            return type(value)(self._on_host(item) for item in value)
        if isinstance(value, dict):
            return {key: self._on_host(item) for key, item in value.items()}
        return value


def _passed_to_gloo(name: str, gloos: str) -> Callable[..., object]:
    def collective(self: HcclOverGloo, *args: object, **kwargs: object) -> object:
        return getattr(self._gloo, gloos)(
            *(self._on_host(value) for value in args),
            **{key: self._on_host(value) for key, value in kwargs.items()},
        )

    collective.__name__ = name
    return collective


for _name, _gloos in _COLLECTIVES.items():
    setattr(HcclOverGloo, _name, _passed_to_gloo(_name, _gloos))


def register(host_view: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Make `hccl` the backend torch picks for npu tensors."""
    if BACKEND.upper() in dist.Backend._plugins:  # registered by an earlier activation
        return

    def create(store: dist.Store, rank: int, size: int, timeout: timedelta) -> HcclOverGloo:
        group = HcclOverGloo(store, rank, size, timeout, host_view)
        group._register_backend(
            torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, group._gloo
        )
        return group

    dist.Backend.register_backend(BACKEND, create, devices=["npu"])

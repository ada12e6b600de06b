"""Rule `fsdp-state-dict-offload`: FSDP1's `FullStateDictConfig(offload_to_cpu=True,
rank0_only=True)` offloads where there is an accelerator only: on a CPU the gathered
weights are on the host already, and FSDP's offload frees them before they are read
("out of bounds for storage of size 0"):
`FullStateDictConfig(offload_to_cpu=devicekit.is_available(), rank0_only=True)`."""

import libcst as cst

from devicekit.port.nodes import bound_args
from devicekit.port.rule import Port

RULES = ("fsdp-state-dict-offload",)

_FSDP_FULL_STATE_DICT_CONFIG = {
    "torch.distributed.fsdp.FullStateDictConfig",
    "torch.distributed.fsdp.api.FullStateDictConfig",
}


def matches_call(port: Port, qualified: set[str], method: str | None) -> bool:
    return bool(qualified & _FSDP_FULL_STATE_DICT_CONFIG)


def on_call(
    port: Port, original: cst.Call, updated: cst.Call, qualified: set[str]
) -> cst.Call | None:
    """FullStateDictConfig(offload_to_cpu=True) ->
    FullStateDictConfig(offload_to_cpu=devicekit.is_available())."""
    result = port.accelerator_flag(
        updated, bound_args(updated, ("offload_to_cpu", "rank0_only")).get("offload_to_cpu")
    )
    if result is updated:
        return None
    return port.changed(original, "fsdp-state-dict-offload", result)

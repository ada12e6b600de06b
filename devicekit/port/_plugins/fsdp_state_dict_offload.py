"""Rule `fsdp-state-dict-offload`: FSDP1's `FullStateDictConfig(offload_to_cpu=True,
rank0_only=True)` offloads where there is an accelerator only: on a CPU the gathered
weights are on the host already, and FSDP's offload frees them before they are read
("out of bounds for storage of size 0"):
`FullStateDictConfig(offload_to_cpu=devicekit.is_available(), rank0_only=True)`."""

from typing import TYPE_CHECKING

import libcst as cst

from devicekit.port import names
from devicekit.port._plugins import call
from devicekit.port.nodes import bound_args

if TYPE_CHECKING:
    from devicekit.port.transformer import PortTransformer


@call(lambda port, qualified, method: bool(qualified & names.FSDP_FULL_STATE_DICT_CONFIG))
def fsdp_state_dict_offload(
    port: "PortTransformer", original: cst.Call, updated: cst.Call, qualified: set[str]
) -> cst.Call | None:
    """FullStateDictConfig(offload_to_cpu=True) ->
    FullStateDictConfig(offload_to_cpu=devicekit.is_available())."""
    result = port.accelerator_flag(
        updated, bound_args(updated, ("offload_to_cpu", "rank0_only")).get("offload_to_cpu")
    )
    if result is updated:
        return None
    return port.changed(original, "fsdp-state-dict-offload", result)

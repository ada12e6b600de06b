"""Rule `fsdp-device-id`: FSDP1's `FullyShardedDataParallel(model,
device_id=torch.cuda.current_device(), sync_module_states=True)` gets this rank's device as
a torch.device (FSDP reads an index as an accelerator's, and needs `cpu` said on a CPU),
and syncs module states where there is an accelerator (FSDP broadcasts them from
accelerators only; CPU ranks start from their own, equally seeded, initialization):
`device_id=devicekit.device(), sync_module_states=devicekit.is_available()`."""

import libcst as cst

from devicekit.port.nodes import bound_args, device_call, is_devicekit_call, replace_arg_value
from devicekit.port.rule import Port

RULES = ("fsdp-device-id",)

_FSDP = {
    "torch.distributed.fsdp.FullyShardedDataParallel",
    "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
}
_FSDP_PARAMS = (
    "module",
    "process_group",
    "sharding_strategy",
    "cpu_offload",
    "auto_wrap_policy",
    "backward_prefetch",
    "mixed_precision",
    "ignored_modules",
    "param_init_fn",
    "device_id",
    "sync_module_states",
)


def _on_this_device(
    port: Port, original: cst.Call, updated: cst.Call, arg: cst.Arg | None
) -> cst.Call:
    if arg is None:
        return updated
    if is_devicekit_call(arg.value, "current_device") and not arg.value.args:
        return replace_arg_value(updated, arg, device_call(None))
    return port.port_arg(original, updated, arg, "device", allow_int=True) or updated


def matches_call(port: Port, qualified: set[str], method: str | None) -> bool:
    return bool(qualified & _FSDP)


def on_call(
    port: Port, original: cst.Call, updated: cst.Call, qualified: set[str]
) -> cst.Call | None:
    """FSDP(model, device_id=torch.cuda.current_device(), sync_module_states=True) ->
    FSDP(model, device_id=devicekit.device(), sync_module_states=devicekit.is_available())."""
    result = _on_this_device(
        port, original, updated, bound_args(updated, _FSDP_PARAMS).get("device_id")
    )
    result = port.accelerator_flag(
        result, bound_args(result, _FSDP_PARAMS).get("sync_module_states")
    )
    if result is updated:
        return None
    return port.changed(
        original, "fsdp-device-id", port.keywords(original, result, qualified, None)[0]
    )

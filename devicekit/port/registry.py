"""The port rules, in the order they are tried: PLUGINS, one line per rule module (see
rule.py for what a rule module holds), and `hooks()`, their hooks by kind.

The order matters where rules meet: the call rules are tried in this order (the first
one that matches a call gets it), `master_env_setdefault` comes before `device_string`
(both rewrite assignments), and `manual` comes last, since it reports what no rule before
it ported.
"""

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

from devicekit.port._plugins import (
    accelerator_branch,
    accelerator_guard,
    autocast,
    capability_question,
    cuda_method,
    ddp_device_ids,
    destroy_process_group,
    device_argument,
    device_string,
    fsdp_device_id,
    fsdp_state_dict_offload,
    grad_scaler,
    harmless,
    init_process_group,
    keyword_arguments,
    library_scaler,
    local_rank_alias,
    manual,
    map_location,
    master_env_setdefault,
    nccl_available,
    npu_setting,
    out_of_memory_error,
    pin_memory,
    spawn_launch,
    tensor_is_cuda,
    to_device,
    torch_cuda_api,
    torch_device,
)
from devicekit.port.rule import (
    LEAVE_TYPES,
    CallHook,
    CallMatcher,
    KeywordHook,
    LeaveHook,
    ReferenceHook,
    Rule,
    UnportedCallHook,
)

PLUGINS: tuple[Rule, ...] = (
    cuda_method,
    to_device,
    pin_memory,
    local_rank_alias,
    torch_device,
    device_argument,
    autocast,
    grad_scaler,
    library_scaler,
    init_process_group,
    ddp_device_ids,
    fsdp_device_id,
    fsdp_state_dict_offload,
    spawn_launch,
    destroy_process_group,
    torch_cuda_api,
    nccl_available,
    out_of_memory_error,
    map_location,
    keyword_arguments,
    master_env_setdefault,
    device_string,
    accelerator_branch,
    tensor_is_cuda,
    accelerator_guard,
    capability_question,
    npu_setting,
    harmless,
    manual,
)


@dataclass(frozen=True)
class Hooks:
    """The hooks of a tuple of rule modules, by kind, each list in the tuple's order."""

    leave: Mapping[str, list[LeaveHook]]  # by node type name: "Assign"
    call: list[tuple[CallMatcher, CallHook]]
    unported_call: list[UnportedCallHook]
    keyword: Mapping[str, tuple[str, KeywordHook]]  # keyword -> (rule id, hook)
    reference: list[ReferenceHook]


def _hook(rule: Rule, name: str) -> object:
    return getattr(rule, name, None)


@functools.cache
def hooks(plugins: tuple[Rule, ...]) -> Hooks:
    """The hooks of `plugins` (PLUGINS, where a test adds none), gathered once per tuple."""
    leave: dict[str, list[LeaveHook]] = {}
    for node_type in LEAVE_TYPES:
        found = [_hook(rule, f"leave_{node_type}") for rule in plugins]
        leave[node_type] = [cast(LeaveHook, hook) for hook in found if hook is not None]
    call = [
        (cast(CallMatcher, _hook(rule, "matches_call")), cast(CallHook, on_call))
        for rule in plugins
        if (on_call := _hook(rule, "on_call")) is not None
    ]
    keyword: dict[str, tuple[str, KeywordHook]] = {}
    for rule in plugins:
        on_keyword = _hook(rule, "on_keyword")
        for name, rule_id in getattr(rule, "KEYWORDS", {}).items():
            keyword[name] = (rule_id, cast(KeywordHook, on_keyword))
    return Hooks(
        leave,
        call,
        [cast(UnportedCallHook, h) for r in plugins if (h := _hook(r, "on_unported_call"))],
        keyword,
        [cast(ReferenceHook, h) for r in plugins if (h := _hook(r, "on_reference"))],
    )

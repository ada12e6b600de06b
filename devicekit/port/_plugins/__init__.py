"""The rewrites of `devicekit port`, one module per idiom, and the registry they join.

A module is named for the idiom it ports (`cuda_method.py`: `x.cuda()`, rule
`cuda-method`) and its docstring names the rule ids it reports. Its functions receive the
transformer (`port`: helpers and bookkeeping, see transformer.py) and register with:

- `@leave(NodeType)`: (port, original, updated) for each such node; the replacement, or
  None to leave the node to the next rule.
- `@call(when)`: (port, original, updated, qualified) for a call for which
  `when(port, qualified, method)` holds (`method`: the name after the call's last dot, or
  None). Only the first call rule that matches a call is tried; when it returns None, the
  call is handled as one no rule rewrote.
- `@unported_call`: (port, original, qualified) for each call no call rule rewrote.
- `@keyword(name, rule)`: (port, original, updated, arg, qualified, method) for an argument
  `name=...` of a call no call rule rewrote (or of one a call rule hands to
  `port.keywords`); the call with it ported, or None. The change is reported as `rule`.
- `@reference`: (port, original, updated, name) for a Name or Attribute at the end of its
  attribute chain, once per qualified name it may refer to; the replacement, or None.

Rules of one kind are tried in the order of PLUGINS, which imports them: the call rules
in that order (first match wins), `master_env_setdefault` before `device_string` (both
rewrite assignments), and `manual` last, since it reports what no rule before it ported.
"""

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import libcst as cst

if TYPE_CHECKING:
    from devicekit.port.transformer import PortTransformer

# What a leave rule may return (besides None): libcst takes each node type's own.
LeaveResult = (
    cst.CSTNode | cst.RemovalSentinel | cst.FlattenSentinel[cst.CSTNode] | cst.MaybeSentinel
)
# (port, original, updated): the nodes are of the type the rule was registered for.
LeaveRule = Callable[["PortTransformer", Any, Any], LeaveResult | None]
CallMatcher = Callable[["PortTransformer", set[str], str | None], bool]
CallRule = Callable[["PortTransformer", cst.Call, cst.Call, set[str]], cst.BaseExpression | None]
UnportedCallRule = Callable[["PortTransformer", cst.Call, set[str]], None]
KeywordRule = Callable[
    ["PortTransformer", cst.Call, cst.Call, cst.Arg, set[str], str | None], cst.Call | None
]
ReferenceRule = Callable[
    ["PortTransformer", cst.Name | cst.Attribute, cst.BaseExpression, str],
    cst.BaseExpression | None,
]

_LeaveRuleT = TypeVar("_LeaveRuleT", bound=LeaveRule)
_CallRuleT = TypeVar("_CallRuleT", bound=CallRule)
_UnportedCallRuleT = TypeVar("_UnportedCallRuleT", bound=UnportedCallRule)
_KeywordRuleT = TypeVar("_KeywordRuleT", bound=KeywordRule)
_ReferenceRuleT = TypeVar("_ReferenceRuleT", bound=ReferenceRule)

LEAVE_RULES: dict[type[cst.CSTNode], list[LeaveRule]] = {}
CALL_RULES: list[tuple[CallMatcher, CallRule]] = []
UNPORTED_CALL_RULES: list[UnportedCallRule] = []
KEYWORD_RULES: dict[str, tuple[str, KeywordRule]] = {}
REFERENCE_RULES: list[ReferenceRule] = []


def leave(node_type: type[cst.CSTNode]) -> Callable[[_LeaveRuleT], _LeaveRuleT]:
    """Register a rewrite of `node_type` nodes."""

    def register(rule: _LeaveRuleT) -> _LeaveRuleT:
        LEAVE_RULES.setdefault(node_type, []).append(rule)
        return rule

    return register


def call(when: CallMatcher) -> Callable[[_CallRuleT], _CallRuleT]:
    """Register a rewrite of the calls `when` matches."""

    def register(rule: _CallRuleT) -> _CallRuleT:
        CALL_RULES.append((when, rule))
        return rule

    return register


def unported_call(rule: _UnportedCallRuleT) -> _UnportedCallRuleT:
    """Register a check of every call no call rule rewrote."""
    UNPORTED_CALL_RULES.append(rule)
    return rule


def keyword(name: str, rule_id: str) -> Callable[[_KeywordRuleT], _KeywordRuleT]:
    """Register the rewrite of keyword argument `name=`, reported as `rule_id`."""

    def register(rule: _KeywordRuleT) -> _KeywordRuleT:
        KEYWORD_RULES[name] = (rule_id, rule)
        return rule

    return register


def reference(rule: _ReferenceRuleT) -> _ReferenceRuleT:
    """Register a rewrite of (or a check on) a name at the end of its attribute chain."""
    REFERENCE_RULES.append(rule)
    return rule


# Importing a plugin registers its rules, in this order (see above).
PLUGINS = [
    importlib.import_module(f"{__name__}.{name}")
    for name in (
        "cuda_method",
        "to_device",
        "pin_memory",
        "local_rank_alias",
        "torch_device",
        "device_argument",
        "autocast",
        "grad_scaler",
        "library_scaler",
        "init_process_group",
        "ddp_device_ids",
        "fsdp_device_id",
        "fsdp_state_dict_offload",
        "spawn_launch",
        "destroy_process_group",
        "torch_cuda_api",
        "nccl_available",
        "out_of_memory_error",
        "map_location",
        "backend",
        "argparse_default",
        "master_env_setdefault",
        "device_string",
        "accelerator_branch",
        "tensor_is_cuda",
        "accelerator_guard",
        "capability_question",
        "npu_setting",
        "harmless",
        "manual",
    )
]

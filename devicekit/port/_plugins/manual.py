"""Reported for a manual change, and left alone: what has no portable equivalent
(names.MANUAL: CUDA events, streams and graphs, NVTX, device properties, nn.DataParallel,
C++/CUDA extensions, apex, cupy, triton, pynvml, torch_npu's operators, optimizers and
profiler, ...) and any torch.cuda or torch.npu name no other rule ports. Imports of the
CUDA-only packages and their decorators (`@triton.jit`) are reported too. Each item says
why and what to do instead."""

from typing import TYPE_CHECKING

import libcst as cst
import libcst.matchers as m

from devicekit.port import names
from devicekit.port._plugins import leave, npu_setting, reference, unported_call
from devicekit.port.nodes import code

if TYPE_CHECKING:
    from devicekit.port.transformer import PortTransformer


def _report(port: "PortTransformer", node: cst.CSTNode, name: str) -> None:
    """Report `node`, which refers to `name`, with why and how to change it by hand."""
    reason = names.manual_reason(name)
    if reason is not None:
        port.report(node, reason)


def _report_import(port: "PortTransformer", node: cst.CSTNode, module: str) -> None:
    if module.split(".")[0] in names.MANUAL_IMPORTS:
        _report(port, node, module)


@leave(cst.Import)
def import_statement(port: "PortTransformer", original: cst.Import, updated: cst.Import) -> None:
    """`import cupy`, `import apex.amp`."""
    for alias in original.names:
        _report_import(port, original, code(alias.name))


@leave(cst.ImportFrom)
def import_from(port: "PortTransformer", original: cst.ImportFrom, updated: cst.ImportFrom) -> None:
    """`from apex import amp`."""
    if original.module is not None and not original.relative:
        _report_import(port, original, code(original.module))


@leave(cst.Decorator)
def decorator(port: "PortTransformer", original: cst.Decorator, updated: cst.Decorator) -> None:
    """`@triton.jit`, `@triton.autotune(...)`."""
    target = original.decorator
    target = target.func if isinstance(target, cst.Call) else target
    for name in port.qualified(target):
        if name.split(".")[0] in names.MANUAL_IMPORTS:
            _report(port, original, name)


_DEVICE_MODULES = ("torch.cuda.", "torch.npu.", "torch_npu.npu.")


@unported_call
def manual_call(port: "PortTransformer", original: cst.Call, qualified: set[str]) -> None:
    """`torch.nn.DataParallel(model)`, `torch.utils.cpp_extension.load(...)`,
    `torch_npu.npu_format_cast(...)`."""
    if m.matches(original.func, m.Attribute(value=m.Call())):
        return  # `DataParallel(model).to(d)`: libcst names it DataParallel.to; the inner call
        # is the one to report
    for name in qualified:
        reason = names.manual_reason(name)
        if reason and not name.startswith(_DEVICE_MODULES):  # those: device_module below
            port.report(original, reason)


@reference
def device_module(
    port: "PortTransformer",
    original: cst.Name | cst.Attribute,
    updated: cst.BaseExpression,
    name: str,
) -> None:
    """`torch.cuda.Event(...)`, `torch.npu.get_device_name()`: the call, or the name where
    it is not called. Registered last: what an earlier rule ported is not reported."""
    if not name.startswith(_DEVICE_MODULES) or port.is_twin(original, name):
        return  # an Ascend name is reported as itself, not as its CUDA twin
    if m.matches(original, m.Attribute(value=m.Call())):
        return  # `get_device_properties(0).total_memory`: the call is the item
    cuda = names.cuda_twin(name) or name
    short = cuda[len("torch.cuda.") :]
    called = port.call_of(original)
    if called is not None and (
        short in names.DEVICEKIT_FUNCTIONS
        or cuda in names.AUTOCAST
        or cuda in names.CUDA_GRAD_SCALER
    ):
        return  # the call rules port it with its arguments
    if names.npu_setting(name) and npu_setting.is_guarded(port, original):
        return
    _report(port, original if called is None else called, name)

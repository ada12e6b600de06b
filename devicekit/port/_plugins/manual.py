"""Reported for a manual change, and left alone: what has no portable equivalent
(names.MANUAL: CUDA events, streams and graphs, NVTX, device properties, nn.DataParallel,
C++/CUDA extensions, apex, cupy, triton, pynvml, torch_npu's operators, optimizers and
profiler, ...) and any torch.cuda or torch.npu name no other rule ports. Imports of the
CUDA-only packages and their decorators (`@triton.jit`) are reported too. Each item says
why and what to do instead; Ascend apex's `amp.initialize(..., combine_ddp=True)` says
what to wrap in DDP.

Kept instead, with the reason, where the script has its own way on: a torch.cuda or
torch.npu name behind the script's own test for its device (`if torch.cuda.is_available():
torch.cuda.get_device_name()`), unless the test's other way stops the program; and the
uses of a package every import of which has an `except ImportError` fallback (`try: from
apex import amp` / `except ImportError: amp = None`)."""

import libcst as cst
import libcst.matchers as m

from devicekit.port import names
from devicekit.port._plugins import npu_setting
from devicekit.port.branches import skipped_elsewhere
from devicekit.port.nodes import code
from devicekit.port.rule import Port

RULES = ()  # it rewrites nothing: it reports

# Modules whose import alone is reported.
_MANUAL_IMPORTS = ("apex", "cupy", "triton", "nvtx", "pynvml")


def _report(port: Port, node: cst.CSTNode, name: str) -> None:
    """Report `node`, which refers to `name`, with why and how to change it by hand."""
    reason = names.manual_reason(name)
    if reason is not None:
        port.report(node, reason)


_OPTIONAL = (
    "{package} is optional here (every import of it has an `except ImportError` fallback): "
    "this runs only where {package} is installed and chosen"
)


def _optional_package(port: Port, name: str) -> str | None:
    """The CUDA-only package `name` belongs to, when every import of it in this file has
    its own fallback (timm's `try: from apex import amp` / `except ImportError:`)."""
    package = name.split(".")[0]
    if package not in _MANUAL_IMPORTS:
        return None
    imports = [
        node
        for node in m.findall(port.module, m.Import() | m.ImportFrom())
        if any(module.split(".")[0] == package for module in _modules(node))
    ]
    return package if imports and all(_falls_back(port, node) for node in imports) else None


def _modules(node: cst.CSTNode) -> list[str]:
    if isinstance(node, cst.Import):
        return [code(alias.name) for alias in node.names]
    if isinstance(node, cst.ImportFrom) and node.module is not None and not node.relative:
        return [code(node.module)]
    return []


def _report_import(port: Port, node: cst.CSTNode, module: str) -> None:
    if module.split(".")[0] in _MANUAL_IMPORTS and not _falls_back(port, node):
        _report(port, node, module)


def _falls_back(port: Port, node: cst.CSTNode) -> bool:
    """Whether the import `node` stands in a `try:` whose `except ImportError` (or
    ModuleNotFoundError, or a bare `except`) gives the script a way on without it."""
    child, parent = node, port.parent(node)
    while parent is not None and not isinstance(parent, (cst.FunctionDef, cst.ClassDef)):
        if isinstance(parent, cst.Try) and parent.body is child:
            return any(
                handler.type is None
                or any(
                    code(caught) in _IMPORT_ERRORS
                    for caught in (
                        [e.value for e in handler.type.elements]
                        if isinstance(handler.type, cst.Tuple)
                        else [handler.type]
                    )
                )
                for handler in parent.handlers
            )
        child, parent = parent, port.parent(parent)
    return False


_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception"}


def leave_Import(port: Port, original: cst.Import, updated: cst.Import) -> None:
    """`import cupy`, `import apex.amp`."""
    for alias in original.names:
        _report_import(port, original, code(alias.name))


def leave_ImportFrom(port: Port, original: cst.ImportFrom, updated: cst.ImportFrom) -> None:
    """`from apex import amp`."""
    if original.module is not None and not original.relative:
        _report_import(port, original, code(original.module))


def leave_Decorator(port: Port, original: cst.Decorator, updated: cst.Decorator) -> None:
    """`@triton.jit`, `@triton.autotune(...)`."""
    target = original.decorator
    target = target.func if isinstance(target, cst.Call) else target
    for name in port.qualified(target):
        if name.split(".")[0] in _MANUAL_IMPORTS:
            _report(port, original, name)


_DEVICE_MODULES = ("torch.cuda.", "torch.npu.", "torch_npu.npu.")


def on_unported_call(port: Port, original: cst.Call, qualified: set[str]) -> None:
    """`torch.nn.DataParallel(model)`, `torch.utils.cpp_extension.load(...)`,
    `torch_npu.npu_format_cast(...)`."""
    if m.matches(original.func, m.Attribute(value=m.Call())):
        return  # `DataParallel(model).to(d)`: libcst names it DataParallel.to; the inner call
        # is the one to report
    for name in qualified:
        reason = names.manual_reason(name)
        if name == "apex.amp.initialize" and _combines_ddp(original):
            reason = _COMBINED_DDP
        if not reason or name.startswith(_DEVICE_MODULES):  # those: device_module below
            continue
        optional = _optional_package(port, name)
        if optional and reason is not _COMBINED_DDP:
            port.keep(original, _OPTIONAL.format(package=optional))
        else:
            port.report(original, reason)


# Ascend's apex all-reduces the gradients inside amp when asked, and the scripts that ask
# build no DDP wrapper of their own.
_COMBINED_DDP = (
    "Ascend apex's amp.initialize(..., combine_ddp=True) also all-reduces the gradients, so "
    "this script wraps no DDP of its own: replacing amp.initialize alone leaves the ranks' "
    "gradients never all-reduced, and each rank trains its own model",
    "replace amp.initialize with devicekit.autocast() + devicekit.GradScaler(), and wrap "
    "the model it returned with model = devicekit.wrap_ddp(model) before the optimizer "
    "steps (one all-reduce per step, as combine_ddp gave)",
)


def _combines_ddp(call: cst.Call) -> bool:
    return any(
        arg.keyword is not None
        and arg.keyword.value == "combine_ddp"
        and not m.matches(arg.value, m.Name("False") | m.Name("None"))
        for arg in call.args
    )


def on_reference(
    port: Port,
    original: cst.Name | cst.Attribute,
    updated: cst.BaseExpression,
    name: str,
) -> None:
    """`torch.cuda.Event(...)`, `torch.npu.get_device_name()`: the call, or the name where
    it is not called. Last in PLUGINS: what an earlier rule ported is not reported."""
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
    item = original if called is None else called
    if skipped_elsewhere(port, item):
        port.keep(item, _SKIPPED)
        return
    _report(port, item, name)


_SKIPPED = (
    "runs only behind the script's own test for its device, left as written: on another "
    "device the script skips it, as it did before"
)

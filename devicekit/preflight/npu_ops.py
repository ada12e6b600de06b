"""The operators torch_npu 2.13.0 implements, read from its wheel, and their lookup.

Names use the form of ``OpOverload.name()``: ``"aten::add.Tensor"``, ``"aten::relu"`` for a
default overload (``torch.ops.aten.relu.default``). torch_npu's own operators (the yaml's
``custom`` section) are registered by ``TORCH_LIBRARY(npu, m)`` (torchnpugen's
CustomRegisterSchema.cpp template; Python calls them as ``torch.ops.npu.<name>``), so they are
``"npu::npu_dtype_cast"``; every other entry names an aten operator.
"""

import functools
import hashlib
import re
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:
    from torch import Argument

TORCH_NPU_VERSION = "2.13.0"
DATA_FILE = Path(__file__).with_name(f"torch_npu_{TORCH_NPU_VERSION}_ops.txt")
# Where the list is in the wheel; readable without importing torch_npu.
YAML_IN_WHEEL = "torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml"
SECTIONS = ("supported", "custom", "symint", "autograd", "quant")
# The keyword-only arguments of a factory's functional overload that its out= one lacks.
_TENSOR_OPTIONS = ("dtype", "layout", "device", "pin_memory")
_OPERATOR = re.compile(r"[A-Za-z_]\w*(\.\w+)?")  # add, add.Tensor, npu_dtype_cast


def _entry_name(entry: object) -> str:
    """An entry's ``name.overload``: a plain string, or a dict's ``func:`` up to its "("."""
    func = entry.get("func") if isinstance(entry, dict) else entry
    name = func.split("(", 1)[0].strip() if isinstance(func, str) else None
    if name is None or not _OPERATOR.fullmatch(name):
        raise ValueError(f"an entry that names no operator: {str(entry)[:60]!r}")
    return name


def from_yaml(text: str) -> frozenset[str]:
    """The operator names listed in the text of ``npu_native_functions_by_codegen.yaml``:
    every entry of its sections supported, custom, symint, autograd and quant. An entry whose
    operator is one the ``custom`` section defines is ``npu::``, every other ``aten::``."""
    document = yaml.safe_load(text)
    if not isinstance(document, dict):
        raise ValueError("not a mapping of sections")
    sections = {name: document.get(name) or [] for name in SECTIONS}
    for name, entries in sections.items():
        if not isinstance(entries, list):
            raise ValueError(f"section {name!r} is not a list")
    if not any(sections.values()):
        raise ValueError(f"none of the sections {', '.join(SECTIONS)} lists an operator")
    custom_ops = {_entry_name(entry).split(".", 1)[0] for entry in sections["custom"]}
    names = set()
    for entries in sections.values():
        for entry in entries:
            name = _entry_name(entry)
            namespace = "npu" if name.split(".", 1)[0] in custom_ops else "aten"
            names.add(f"{namespace}::{name}")
    return frozenset(names)


def from_wheel(path: str | Path) -> frozenset[str]:
    """The operator names listed in the torch_npu wheel at `path` (see from_yaml)."""
    with zipfile.ZipFile(path) as wheel:
        return from_yaml(wheel.read(YAML_IN_WHEEL).decode("utf-8"))


def write_data_file(wheel_path: str | Path, out_path: str | Path = DATA_FILE) -> int:
    """Write the sorted names of the wheel at `wheel_path` to `out_path`, one a line, after a
    header line naming their source and the wheel's sha256; return how many names."""
    wheel_path = Path(wheel_path)
    digest = hashlib.sha256(wheel_path.read_bytes()).hexdigest()
    names = sorted(from_wheel(wheel_path))
    header = f"# {YAML_IN_WHEEL} in {wheel_path.name} sha256={digest}"
    Path(out_path).write_text("\n".join([header, *names]) + "\n")
    return len(names)


def parse_data_file(text: str) -> frozenset[str]:
    """The names in the text of a data file written by write_data_file."""
    return frozenset(
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    )


@functools.cache
def _load(path: Path) -> frozenset[str]:
    return parse_data_file(path.read_text())


def load(path: str | Path | None = None) -> frozenset[str]:
    """The names torch_npu 2.13.0 lists, from the data file shipped with devicekit (or
    `path`); read once per path."""
    return _load(Path(path) if path is not None else DATA_FILE)


def canonical(name: str) -> str:
    """`name` in OpOverload.name() form: a default overload loses its ``.default``."""
    return name[: -len(".default")] if name.endswith(".default") else name


def _signature(arguments: Iterable["Argument"]) -> list[tuple[str, str, bool]]:
    return [(argument.name, str(argument.type), argument.kwarg_only) for argument in arguments]


@functools.cache
def functional_name(name: str) -> str | None:
    """The functional overload of the out= overload `name` (``"aten::add.out"`` ->
    ``"aten::add.Tensor"``), from torch's schemas: the overload of the same operator with no
    written-to argument whose arguments are those of `name` less its keyword-only written-to
    ones (out, grad_input, ...). None when `name` is no out= overload or has no such twin."""
    import torch  # only here: the data itself needs no torch

    op, _, overload = canonical(name).partition(".")
    if "::" not in op:
        return None
    schemas = torch._C._jit_get_schemas_for_operator(op)
    own = next((schema for schema in schemas if schema.overload_name == overload), None)
    if own is None:
        return None

    def written(argument: "Argument") -> bool:
        return argument.alias_info is not None and argument.alias_info.is_write

    outs = [argument for argument in own.arguments if written(argument)]
    if not outs or not all(argument.kwarg_only for argument in outs):
        return None
    wanted = _signature(argument for argument in own.arguments if not written(argument))
    functionals = [schema for schema in schemas if not any(map(written, schema.arguments))]
    # Exactly the same arguments; else (factories: zeros.out, rand.out) the same once the
    # functional's keyword-only tensor options, which an out= overload has no use for, go.
    for options in ((), _TENSOR_OPTIONS):
        for schema in functionals:
            kept = [
                argument
                for argument in schema.arguments
                if not (argument.kwarg_only and argument.name in options)
            ]
            if _signature(kept) == wanted:
                return f"{op}.{schema.overload_name}" if schema.overload_name else op
    return None


def is_listed(name: str, ops: frozenset[str] | None = None) -> bool:
    """Whether the operator `name` (``"aten::add.out"``; ``.default`` allowed) is in `ops`
    (default: load()), itself or through its functional overload (see functional_name)."""
    ops = load() if ops is None else ops
    name = canonical(name)
    if name in ops:
        return True
    functional = functional_name(name)
    return functional is not None and functional in ops

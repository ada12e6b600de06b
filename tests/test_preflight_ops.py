"""devicekit.preflight.npu_ops: the shipped list of the operators torch_npu 2.13.0 implements
is the pinned wheel's list, and its lookup answers known facts about it.

The wheel comes from tests/support/npu_wheel.py: downloaded once into the test cache and
checked against its pinned sha256; a failed download skips, and fails in CI.
"""

import re
from collections import Counter

import pytest
import torch  # noqa: F401  (before devicekit, as conftest.py explains)

from devicekit.preflight import npu_ops
from support.npu_wheel import NPU_VERSION, OPS_DATA_FILE, WHEEL_SHA256, fetch_wheel

HEADER = re.compile(
    r"# (?P<source>\S+) in torch_npu-(?P<version>[^-]+)-(?P<tag>\S+)\.whl "
    r"sha256=(?P<sha256>[0-9a-f]{64})$"
)


@pytest.fixture(scope="module")
def header():
    """The data file's header line, parsed."""
    first = npu_ops.DATA_FILE.read_text().splitlines()[0]
    match = HEADER.match(first)
    assert match, f"{npu_ops.DATA_FILE.name}: header {first!r} does not match {HEADER.pattern}"
    return match


def test_the_wheel_the_suite_fetches_first_is_the_lists(header):
    """The controller fetches the wheel of the data file it finds in the checkout (the
    workers have no network): the file devicekit reads."""
    assert OPS_DATA_FILE == npu_ops.DATA_FILE


def test_header_names_the_pinned_wheel(header):
    assert header["source"] == npu_ops.YAML_IN_WHEEL
    assert header["version"] == npu_ops.TORCH_NPU_VERSION == NPU_VERSION
    assert header["tag"] in WHEEL_SHA256, (
        f"tag {header['tag']} is not pinned in support/npu_wheel.py"
    )
    assert header["sha256"] == WHEEL_SHA256[header["tag"]], (
        f"header sha256 {header['sha256']} is not the pinned {WHEEL_SHA256[header['tag']]}"
    )


def test_data_file_is_the_wheels_list(header):
    from_wheel = npu_ops.from_wheel(fetch_wheel(header["tag"]))
    shipped = npu_ops.load()
    assert shipped == from_wheel, (
        f"{npu_ops.DATA_FILE.name} differs from the wheel: only in the file "
        f"{sorted(shipped - from_wheel)[:10]}, "
        f"only in the wheel {sorted(from_wheel - shipped)[:10]}; "
        f"regenerate it with npu_ops.write_data_file(wheel)"
    )


def test_data_file_is_sorted_one_name_a_line():
    lines = npu_ops.DATA_FILE.read_text().splitlines()[1:]
    assert lines == sorted(set(lines)), "names are not sorted and unique"
    assert all(re.fullmatch(r"(aten|npu)::\w+(\.\w+)?", line) for line in lines), [
        line for line in lines if not re.fullmatch(r"(aten|npu)::\w+(\.\w+)?", line)
    ][:10]


def test_size_and_namespaces():
    ops = npu_ops.load()
    per_namespace = Counter(name.split("::")[0] for name in ops)
    assert 1400 <= len(ops) <= 1600, f"{len(ops)} names ({dict(per_namespace)}); expected ~1,500"
    assert set(per_namespace) == {"aten", "npu"}, dict(per_namespace)
    assert 350 <= per_namespace["npu"] <= 450, dict(per_namespace)


@pytest.mark.parametrize(
    "name",
    [
        "aten::add.Tensor",
        "aten::relu",
        "aten::relu.default",
        "aten::isin.Tensor_Tensor_out",
        "aten::isin.Tensor_Tensor",
        "aten::_foreach_add_.List",
        "npu::npu_dtype_cast",
        "npu::npu_format_cast_.acl_format",
        "npu::copy_memory_",  # listed in `supported`, defined in `custom`: npu's
    ],
)
def test_listed(name):
    assert npu_ops.is_listed(name), f"{name} should be listed for torch_npu {NPU_VERSION}"


@pytest.mark.parametrize(
    "name",
    [
        "aten::_transformer_encoder_layer_fwd",
        "aten::_foreach_add_",  # no such overload name: only .List, .Scalar, ... are
        "aten::npu_dtype_cast",  # torch_npu's own ops live in the npu namespace
        "aten::no_such_op_xyz",
        "aten::no_such_op_xyz.out",
        "no_namespace",
    ],
)
def test_not_listed(name):
    assert not npu_ops.is_listed(name), f"{name} should not be listed"


@pytest.mark.parametrize(
    "out, functional",
    [
        ("aten::add.out", "aten::add.Tensor"),
        ("aten::add.Scalar_out", "aten::add.Scalar"),
        ("aten::gelu_backward.grad_input", "aten::gelu_backward"),
        ("aten::threshold_backward.grad_input", "aten::threshold_backward"),
        ("aten::isin.Tensor_Tensor_out", "aten::isin.Tensor_Tensor"),
        ("aten::max.dim_max", "aten::max.dim"),
        ("aten::sum.IntList_out", "aten::sum.dim_IntList"),
        ("aten::zeros.out", "aten::zeros"),
    ],
)
def test_functional_name(out, functional):
    assert npu_ops.functional_name(out) == functional


@pytest.mark.parametrize(
    "name", ["aten::add.Tensor", "aten::add_.Tensor", "aten::relu", "aten::no_such_op_xyz.out"]
)
def test_functional_name_of_no_out_overload_is_none(name):
    assert npu_ops.functional_name(name) is None


def test_out_overload_counts_through_its_functional_one():
    ops = frozenset({"aten::gelu_backward"})
    assert npu_ops.is_listed("aten::gelu_backward.grad_input", ops)
    assert not npu_ops.is_listed("aten::gelu.out", ops)


def test_from_yaml_namespaces_and_entry_shapes():
    text = """
backend: NPU
cpp_namespace: at_npu::native
supported:
  - relu
  - func: clone
    op_api: true
  - func: add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)
    impl_ns: op_api
  - my_custom_
custom:
  - func: my_custom_(Tensor(a!) self) -> Tensor(a!)
  - func: npu_thing.overload(Tensor self) -> Tensor
symint:
  - func: npu_thing.overload(Tensor self) -> Tensor
quant:
  - func: int_repr(Tensor self) -> Tensor
"""
    assert npu_ops.from_yaml(text) == {
        "aten::relu",
        "aten::clone",
        "aten::add.out",
        "aten::int_repr",
        "npu::my_custom_",
        "npu::npu_thing.overload",
    }


def test_from_yaml_rejects_an_entry_it_cannot_read():
    with pytest.raises(ValueError, match="an entry that names no operator"):
        npu_ops.from_yaml("supported:\n  - {impl_ns: op_api}\n")

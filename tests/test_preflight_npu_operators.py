"""`devicekit preflight` on Ascend code: the torch_npu operators a user's files name, read from
the source, each looked up in torch_npu 2.13.0's list; a name it lacks (a typo in a branch
only an NPU takes) is an `npu-operator` finding at its line, with the closest listed name,
and the listed ones are one line of the report and the JSON's `npu_operators`.

The checker runs here on small files; preflight runs in this process on a CPU-only script
that guards its torch_npu import; and one real `python -m devicekit preflight
--npu-stand-in` process (the stand-in registers its device for the life of a process) runs
tests/preflight_scripts/ascend_fused.py, whose lines are marked `# <name>`.
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import clean_environ
from devicekit.preflight import npu_ops, report
from devicekit.preflight.checks import all_checks, npu_operators
from devicekit.preflight.checks.base import Context
from devicekit.preflight.recording import Recording
from support.preflight_in_process import preflight_in_process
from support.time_limit import _hard_time_limit  # noqa: F401  (autouse)

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "tests" / "preflight_scripts"
STAND_IN_TIMEOUT_S = 180  # about 10 s on a 2-core machine


def marked(name):
    """The lines of ascend_fused.py marked `# <name>`."""
    lines = (SCRIPTS / "ascend_fused.py").read_text().splitlines()
    return [number for number, text in enumerate(lines, 1) if f"# <{name}>" in text]


def scan(tmp_path, source):
    """(the npu-operator findings, the supported operators) of `source` as the user's file."""
    path = tmp_path / "user.py"
    path.write_text(textwrap.dedent(source))
    context = Context(npu_ops=npu_ops.load(), torch_npu="2.13.0", scripts=[str(path)])
    return npu_operators.findings(Recording(), context), npu_operators.supported(context)


def sites(supported):
    return {op.name: [(line, count) for _, line, count in op.sites] for op in supported}


def test_a_misspelt_operator_is_found_at_its_line_with_the_name_torch_npu_has(tmp_path):
    found, supported = scan(
        tmp_path,
        """\
        import torch_npu as tnpu

        def norm(x, w):
            if x.device.type == "npu":
                return tnpu.npu_rms_nrom(x, w)[0]
            return x
        """,
    )
    (finding,) = found
    assert (finding.kind, finding.op, finding.line, finding.count) == (
        "npu-operator",
        "torch_npu.npu_rms_nrom",
        5,
        1,
    )
    assert finding.file.endswith("user.py") and finding.stack == [f"{finding.file}:5"]
    assert finding.detail == (
        "torch_npu.npu_rms_nrom is not an operator of torch_npu 2.13.0; "
        "the closest it has: npu_rms_norm"
    )
    assert supported == []


def test_listed_operators_are_no_finding_and_are_listed_with_their_lines(tmp_path):
    found, supported = scan(
        tmp_path,
        """\
        import torch_npu

        def block(x, w, cos, sin):
            x = torch_npu.npu_rms_norm(x, w)[0]
            q, k = torch_npu.npu_rotary_mul(x, cos, sin), torch_npu.npu_rotary_mul(x, cos, sin)
            y = torch_npu.fast_gelu(q)  # listed, without the npu_ prefix
            return torch_npu.npu_rms_norm(y, w)[0]
        """,
    )
    assert found == []
    assert sites(supported) == {
        "npu_rms_norm": [(4, 1), (7, 1)],
        "npu_rotary_mul": [(5, 2)],
        "fast_gelu": [(6, 1)],
    }
    assert [op.name for op in supported] == ["npu_rms_norm", "npu_rotary_mul", "fast_gelu"]


def test_torch_ops_npu_is_looked_up_with_its_overload(tmp_path):
    found, supported = scan(
        tmp_path,
        """\
        import torch

        a = torch.ops.npu.npu_rms_norm(x, w)
        b = torch.ops.npu.npu_rms_norm.default(x, w)
        c = torch.ops.npu.npu_format_cast.Tensor(x, a)
        d = torch.ops.npu.npu_swiglue(x)
        e = torch.ops.npu._npu_dropout_gen_mask.default(x)
        """,
    )
    assert sites(supported) == {
        "npu_rms_norm": [(3, 1), (4, 1)],
        "npu_format_cast.Tensor": [(5, 1)],
    }
    assert [(f.op, f.line, f.detail) for f in found] == [
        (
            "torch.ops.npu.npu_swiglue",
            6,
            "torch.ops.npu.npu_swiglue is not an operator of torch_npu 2.13.0; "
            "the closest it has: npu_swiglu",
        ),
        (
            "torch.ops.npu._npu_dropout_gen_mask.default",
            7,
            "torch.ops.npu._npu_dropout_gen_mask.default is not an operator of torch_npu "
            "2.13.0; its overloads there: Tensor",
        ),
    ]


def test_a_name_imported_from_torch_npu_counts_where_it_is_called(tmp_path):
    found, supported = scan(
        tmp_path,
        """\
        from torch_npu import npu_swiglu as swiglu
        from torch_npu import npu_swiglue

        def mlp(x):
            return swiglu(x, dim=-1)
        """,
    )
    assert sites(supported) == {"npu_swiglu": [(5, 1)]}
    (finding,) = found  # the import itself fails on the NPU: ImportError
    assert (finding.op, finding.line) == ("torch_npu.npu_swiglue", 2)
    assert finding.detail.endswith("the closest it has: npu_swiglu")


def test_torch_npus_modules_and_attributes_are_not_operators(tmp_path):
    found, supported = scan(
        tmp_path,
        """\
        import torch_npu
        import torch_npu.npu
        from torch_npu import optim, profiler
        from torch_npu.contrib import transfer_to_npu
        from torch_npu.npu import npu_config_typo  # another module's name

        torch_npu.npu.set_device("npu:0")
        print(torch_npu.__version__, torch_npu.npu.get_device_name(0))
        opt = torch_npu.optim.NpuFusedAdamW(params)
        with torch_npu.profiler.profile():
            pass
        torch_npu.contrib.transfer_to_npu
        torch_npu.npu_my_fused_op = lambda x: x  # the file's own, set on torch_npu
        torch_npu.npu_my_fused_op(x)
        """,
    )
    assert (found, supported) == ([], [])


def test_the_report_lists_the_supported_operators_after_the_summary():
    supported = [
        npu_operators.Supported("npu_rms_norm", [("model.py", 9, 1)]),
        npu_operators.Supported(
            "npu_fusion_attention",
            [("model.py", 40, 2), ("model.py", 52, 1), ("train.py", 7, 1), ("train.py", 9, 1)],
        ),
    ]
    checks = all_checks()
    lines = report.text([], checks, "2.13.0", 2, "finished", supported).splitlines()
    assert lines[0].startswith("devicekit preflight: 0 finding(s)")
    assert lines[1] == (
        "torch_npu operators it calls (each in torch_npu 2.13.0; checked by name only: the npu "
        "stand-in runs PyTorch references of them, not their NPU kernels): npu_rms_norm "
        "(model.py:9), npu_fusion_attention (model.py:40 x2, model.py:52, train.py:7, +1 more)"
    )
    data = report.to_json([], checks, "2.13.0", 2, supported)
    assert data["npu_operators"][1]["sites"][3] == {"file": "train.py", "line": 9, "count": 1}
    assert "npu_operators" not in report.to_json([], checks, "2.13.0", 2)


def test_preflight_finds_a_typo_in_a_branch_that_only_an_npu_takes(tmp_path):
    # No stand-in: on a CPU runner the script's NPU branch does not run, and is read.
    (tmp_path / "train.py").write_text(
        textwrap.dedent(
            """\
            import torch
            try:
                import torch_npu
            except ImportError:
                torch_npu = None

            model = torch.nn.Linear(4, 4)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for _ in range(2):
                x = model(torch.randn(2, 4))
                if torch_npu is not None:
                    x = torch_npu.npu_swiglu(torch_npu.npu_rms_nrom(x, model.bias)[0])
                x.sum().backward()
                opt.step()
            """
        )
    )
    result = preflight_in_process(
        ["--json", "report.json", "train.py"], tmp_path, clean_environ(OMP_NUM_THREADS=1)
    )
    assert result.returncode == 0, result.stderr
    data = json.loads((tmp_path / "report.json").read_text())
    (finding,) = data["findings"]
    assert (finding["kind"], finding["file"], finding["line"]) == ("npu-operator", "train.py", 12)
    assert (
        "train.py:12  torch_npu.npu_rms_nrom is not an operator of torch_npu 2.13.0; the "
        "closest it has: npu_rms_norm" in result.stdout
    )
    assert "raises AttributeError" in result.stdout
    assert data["npu_operators"] == [
        {"name": "npu_swiglu", "sites": [{"file": "train.py", "line": 12, "count": 1}]}
    ]


@pytest.fixture(scope="module")
def stand_in_run(tmp_path_factory):
    """One `python -m devicekit preflight --npu-stand-in` process on ascend_fused.py: (its
    JSON report, the CompletedProcess)."""
    out = tmp_path_factory.mktemp("ascend") / "report.json"
    result = subprocess.run(
        [sys.executable, "-m", "devicekit", "preflight", "--steps", "2", "--json", str(out)]
        + ["--npu-stand-in", "ascend_fused.py"],
        cwd=SCRIPTS,
        env=clean_environ(OMP_NUM_THREADS=1),
        capture_output=True,
        text=True,
        timeout=STAND_IN_TIMEOUT_S,
    )
    assert result.returncode == 0, (result.stdout, result.stderr)
    return json.loads(out.read_text()), result


def test_an_ascend_script_runs_to_its_end_on_the_stand_in(stand_in_run):
    data, result = stand_in_run
    assert "ascend_fused: trained 2 steps on npu" in result.stdout
    assert "2 optimizer step(s) recorded (finished)" in result.stdout
    assert data["steps"] == 2


def test_the_typo_in_its_npu_only_branch_is_found_with_the_name_it_meant(stand_in_run):
    data, result = stand_in_run
    (line,) = marked("npu-operator")
    typos = [f for f in data["findings"] if f["kind"] == "npu-operator"]
    assert [(f["file"], f["line"], f["op"]) for f in typos] == [
        ("ascend_fused.py", line, "torch_npu.npu_rms_nrom")
    ]
    assert (
        f"ascend_fused.py:{line}  torch_npu.npu_rms_nrom is not an operator of torch_npu 2.13.0;"
        " the closest it has: npu_rms_norm"
    ) in result.stdout


def test_its_fused_operators_are_reported_as_supported(stand_in_run):
    data, result = stand_in_run
    names = ["npu_rms_norm", "npu_rotary_mul", "npu_fusion_attention", "npu_swiglu"]
    listed = {op["name"]: op["sites"] for op in data["npu_operators"]}
    assert list(listed) == names
    for name in names:
        (line,) = marked(name)
        count = 2 if name == "npu_rotary_mul" else 1  # q's and k's, on one line
        assert listed[name] == [{"file": "ascend_fused.py", "line": line, "count": count}]
    summary, supported_line = result.stdout.splitlines()[1:3]
    assert summary.startswith("devicekit preflight: ")
    assert supported_line.startswith("torch_npu operators it calls (each in torch_npu 2.13.0;")
    assert f"npu_rotary_mul (ascend_fused.py:{marked('npu_rotary_mul')[0]} x2)" in supported_line


def test_its_ascend_calls_are_no_cuda_only_finding_and_its_fused_lines_no_finding(stand_in_run):
    data, _ = stand_in_run
    assert [f for f in data["findings"] if f["kind"] == "cuda-only"] == []
    fused = {
        line
        for name in ("npu_rms_norm", "npu_rotary_mul", "npu_fusion_attention", "npu_swiglu")
        for line in marked(name)
    }
    assert [f for f in data["findings"] if f["line"] in fused] == []
    # torch.npu.amp.GradScaler unscales in float32, as torch_npu's does: no float64 there.
    assert [f for f in data["findings"] if f["kind"] == "float64"] == []

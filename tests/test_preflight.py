"""`devicekit preflight`: a user's script run here, recorded, and what it will hit on an
Ascend NPU reported at the user's own lines.

The scripts under tests/preflight_scripts mark the line of each hazard with `# <kind>`.

Most runs are `python -m devicekit preflight ARGS` inside this process
(tests/support/preflight_in_process.py, `preflight_here`): devicekit's command line itself,
in the same folder, with the environment the process would get (os.environ for the call),
its stdout and stderr captured and its exit code returned as a CompletedProcess; the
test's own frames are not recorded as the user's, and what the script changes (the
working directory, os.environ, sys.argv and sys.path, devicekit's kind, the process group,
torch's random state and settings, the warning filters) is put back afterwards. Each
such run was compared with the process when this split was made: the same exit code,
stdout, stderr and JSON report, byte for byte, but for main.py's own timings ("Time
0.091", "Data 0.068"), which no test reads. Every test of this module has a hard time
limit of TIMEOUT_S (support/time_limit.py), as each process has.

Three runs stay real processes (`preflight`), each with its reason where it is made: the
hazards run (the proof that the command works as a program: the script's output, on a
buffered pipe, passes through before the report), the npu stand-in (DEVICEKIT_SIMULATE=npu
must be set before torch is imported, and the device it registers stays for the life of
the process) and Ctrl-C (a real SIGINT). A usage mistake's one line and exit 2 from the
real interpreter is tests/test_fuzz_preflight.py's process.
"""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import clean_environ
from devicekit.errors import UsageError
from devicekit.preflight import checks
from devicekit.preflight.cli import read_arguments
from invariant import assert_usage_line
from support.preflight_in_process import preflight_in_process
from support.runs import tiny_args
from support.time_limit import DEFAULT_TIME_LIMIT_S, _hard_time_limit  # noqa: F401  (autouse)

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "tests" / "preflight_scripts"
TIMEOUT_S = DEFAULT_TIME_LIMIT_S  # a process's timeout; each test's hard limit (in-process)
KINDS = ("cpu-fallback", "float64", "dynamic-shape", "data-dependent-shape", "host-sync")


def preflight(*args, cwd=SCRIPTS, **env):
    """Run `python -m devicekit preflight ARGS` in `cwd` as a new process; the
    CompletedProcess."""
    return subprocess.run(
        [sys.executable, "-m", "devicekit", "preflight", *map(str, args)],
        cwd=cwd,
        env=clean_environ(OMP_NUM_THREADS=1, **env),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def preflight_here(*args, cwd=SCRIPTS, **env):
    """The same command in this process, with the environment the process would get; the
    same CompletedProcess (see the module's docstring)."""
    return preflight_in_process(args, cwd, clean_environ(OMP_NUM_THREADS=1, **env))


def marked(script, kind):
    """The line of `script` marked `# <kind>`."""
    return min(all_marked(script, kind))


def all_marked(script, kind):
    """The lines of `script` marked `# <kind>`."""
    lines = Path(SCRIPTS, script).read_text().splitlines()
    return {number for number, text in enumerate(lines, 1) if f"# <{kind}>" in text}


def report_of(tmp_path, *args, run=preflight_here, **env):
    """(the JSON report, the CompletedProcess) of a preflight run with --json, in this
    process unless `run` is `preflight`."""
    path = tmp_path / "report.json"
    result = run("--json", path, *args, **env)
    return json.loads(path.read_text()), result


def by_kind(report, kind):
    return [finding for finding in report["findings"] if finding["kind"] == kind]


def one_line_error(result):
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def hazards(tmp_path_factory):
    # A process: the proof that the command works as a program (its output through a pipe).
    folder = tmp_path_factory.mktemp("hazards")
    return report_of(folder, "hazards.py", "--flag", "value", run=preflight)


@pytest.mark.parametrize("kind", KINDS)
def test_each_hazard_is_found_at_its_own_line(hazards, kind):
    report, _ = hazards
    found = by_kind(report, kind)
    assert found, f"no {kind} finding: {report['findings']}"
    lines = {finding["line"] for finding in found}
    assert marked("hazards.py", kind) in lines, (kind, found)
    for finding in found:
        assert finding["file"] == "hazards.py"
        assert finding["stack"][0] == f"hazards.py:{finding['line']}"
        assert finding["count"] >= 1 and finding["detail"]


def test_the_findings_name_the_operator_and_what_was_seen(hazards):
    report, _ = hazards
    assert report["torch_npu"] == "2.13.0" and report["steps"] == 3
    (fallback,) = by_kind(report, "cpu-fallback")
    assert fallback["op"] == "aten::_transformer_encoder_layer_fwd"
    assert fallback["count"] == 6  # 2 layers x 3 steps
    shapes = by_kind(report, "dynamic-shape")
    assert shapes[0]["line"] == marked("hazards.py", "cpu-fallback"), "where the change starts"
    pooled = next(f for f in shapes if f["line"] == marked("hazards.py", "dynamic-shape"))
    assert "[2, 5, 16]" in pooled["detail"] and "[4, 5, 16]" in pooled["detail"], pooled
    (reads,) = by_kind(report, "host-sync")
    assert reads["count"] == 3 and "1.0 per step" in reads["detail"], reads
    assert set(report) == {"torch_npu", "steps", "findings", "host_side"}
    assert report["host_side"] == []
    assert set(report["findings"][0]) == {
        "kind",
        "op",
        "file",
        "line",
        "stack",
        "count",
        "detail",
        "via",
    }
    assert {finding["via"] for finding in report["findings"]} == {""}, "all the script's own"


def test_the_scripts_own_output_passes_through_first(hazards):
    _, result = hazards
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "hazards start ['--flag', 'value']", lines[:2]
    assert [line for line in lines if line.startswith("loss ")] == lines[1:4]
    assert lines[4].startswith("devicekit preflight: "), lines[4]
    assert lines[4].endswith(
        " finding(s) in 5 kind(s), checked against torch_npu 2.13.0; 3 "
        "optimizer step(s) recorded (finished)"
    ), lines[4]
    text = result.stdout[result.stdout.index("devicekit preflight:") :]
    order = [
        text.index(f"\n{kind} (")
        for kind in (
            "cpu-fallback",
            "dynamic-shape",
            "host-sync",
            "data-dependent-shape",
            "float64",
        )
    ]
    assert order == sorted(order), "kinds are reported most costly first"
    assert text.count("  what to do: ") == 5


def test_a_script_of_common_layers_has_no_finding(tmp_path):
    """conv, batch norm, LSTM, SDPA, GELU, embedding, layer norm, AdamW and autocast."""
    report, result = report_of(tmp_path, "--strict", "clean.py")
    assert result.returncode == 0, result.stdout + result.stderr
    assert report["findings"] == [] and report["steps"] == 3


def test_strict_exits_1_when_something_falls_back(tmp_path):
    _, result = report_of(tmp_path, "--strict", "hazards.py")
    assert result.returncode == 1, result.stderr


def test_steps_stops_the_script_after_that_many_optimizer_steps(tmp_path):
    report, result = report_of(tmp_path, "--steps", "2", "hazards.py")
    assert result.returncode == 0, result.stderr
    assert report["steps"] == 2
    assert sum(line.startswith("loss ") for line in result.stdout.splitlines()) == 2
    assert "(stopped)" in result.stdout


@pytest.mark.parametrize("steps, note", [("3", False), ("5", True)])
def test_a_script_that_ends_before_steps_gets_a_note_and_one_that_reaches_it_none(
    tmp_path, steps, note
):
    report, result = report_of(tmp_path, "--steps", steps, "hazards.py")  # 3 steps
    assert result.returncode == 0, result.stderr
    assert report["steps"] == 3
    expected = (
        "devicekit preflight: note: hazards.py ended after 3 optimizer step(s), before --steps 5"
    )
    assert result.stderr.strip() == (expected if note else ""), result.stderr


def test_autocast_for_another_device_and_cuda_only_calls(tmp_path):
    report, result = report_of(tmp_path, "wrong_autocast.py")
    assert result.returncode == 0, result.stderr
    (autocast,) = by_kind(report, "autocast-device")
    assert autocast["line"] == marked("wrong_autocast.py", "autocast-device")
    assert 'autocast("cuda") around cpu tensors' in autocast["detail"], autocast
    cuda = by_kind(report, "cuda-only")
    assert marked("wrong_autocast.py", "cuda-only") in {f["line"] for f in cuda}, cuda


def test_a_script_that_raises_is_named_and_the_findings_so_far_are_kept(tmp_path):
    report, result = report_of(tmp_path, "raises.py")
    assert result.returncode == 1
    assert "ValueError: the data ran out" in result.stderr  # the script's own traceback
    last = result.stderr.strip().splitlines()[-1]
    assert last == (
        f"devicekit preflight: raises.py raised ValueError at raises.py:"
        f"{marked('raises.py', 'raise')}; the report covers what ran before"
    ), last
    assert report["steps"] == 2
    assert marked("raises.py", "float64") in {f["line"] for f in by_kind(report, "float64")}


def test_a_crash_inside_torch_is_placed_at_the_scripts_line(tmp_path):
    """The innermost frame is torch's (nn.Linear's forward); the line named is the
    script's, and the report does not say that nothing would fail."""
    report, result = report_of(tmp_path, "crash_in_torch.py")
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last == (
        f"devicekit preflight: crash_in_torch.py raised RuntimeError at crash_in_torch.py:"
        f"{marked('crash_in_torch.py', 'raise')}; the report covers what ran before"
    ), last
    assert report["steps"] == 1 and report["findings"] == []
    assert "nothing this script ran" not in result.stdout, result.stdout
    assert "nothing that ran before the script raised would fail" in result.stdout


def test_a_script_that_runs_out_of_memory_says_so_in_one_line(tmp_path):
    """What ends a script alone in one line (a usage mistake, the npu stand-in's refusals,
    running out of memory) is that line under preflight too, not a traceback."""
    # 1 PiB: more than an x86-64 or arm64 address space holds, so it fails at once
    (tmp_path / "big.py").write_text(
        "import torch\n\nbatch = torch.empty(1 << 50, dtype=torch.uint8)\n"
    )
    _, result = report_of(tmp_path, "big.py", cwd=tmp_path)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr, result.stderr
    first, last = result.stderr.strip().splitlines()
    assert first.startswith("error: out of memory: the CPU can't allocate memory"), first
    assert last == (
        "devicekit preflight: big.py raised RuntimeError at big.py:3; the report covers what "
        "ran before"
    ), last


def test_a_script_that_never_steps_gets_a_note(tmp_path):
    report, result = report_of(tmp_path, "no_step.py")
    assert result.returncode == 0, result.stderr
    assert report["steps"] == 0
    assert result.stderr.strip() == (
        "devicekit preflight: note: no_step.py made no optimizer "
        "step, so nothing is known per step; the findings cover "
        "what it ran"
    )


def test_a_script_that_starts_its_own_ranks_runs_as_a_world_of_one(tmp_path):
    report, result = report_of(tmp_path, "spawns_ranks.py")
    assert result.returncode == 0, result.stderr
    assert "rank 0 of 1 done" in result.stdout
    assert report["steps"] == 2


def test_a_module_runs_with_its_arguments(tmp_path):
    report, result = report_of(tmp_path, "-m", "hazards", "--flag", cwd=SCRIPTS)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "hazards start ['--flag']"
    assert report["steps"] == 3


def test_another_releases_list_is_used(tmp_path):
    ops = tmp_path / "npu_native_functions_by_codegen.yaml"
    ops.write_text("supported:\n  - add.Tensor\ncustom: []\n")
    report, result = report_of(tmp_path, "--ops", ops, "clean.py")
    assert result.returncode == 0, result.stderr
    missing = {f["op"] for f in by_kind(report, "cpu-fallback")}
    assert "aten::addmm" in missing and "aten::add.Tensor" not in missing, missing
    assert report["torch_npu"] == ops.name


@pytest.mark.parametrize(
    "args, says, run",
    [
        # That a usage mistake ends the real interpreter with one line and exit 2 is proven
        # by a process in tests/test_fuzz_preflight.py (a script that does not compile).
        (
            ["missing.py"],
            "error: script 'missing.py' does not exist: check the path",
            preflight_here,
        ),
        (["--steps", "0", "hazards.py"], "error: --steps 0 must be at least 1", preflight_here),
        (
            [],
            "error: preflight needs a script: devicekit preflight [options] SCRIPT [ARGS...] "
            "(or -m MODULE [ARGS...])",
            preflight_here,
        ),
        (
            ["--torch-npu", "2.1.0", "hazards.py"],
            "error: --torch-npu 2.1.0: devicekit ships the list of 2.13.0 only",
            preflight_here,
        ),
        (
            ["--ops", "nowhere.yaml", "hazards.py"],
            "error: --ops 'nowhere.yaml' does not exist",
            preflight_here,
        ),
        (
            ["--json", "no/such/dir/r.json", "hazards.py"],
            "error: --json 'no/such/dir/r.json': folder",
            preflight_here,
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, says, run):
    line = one_line_error(run(*args))
    assert line.startswith(says), line


# Checked in-process by read_arguments before anything runs: each was a traceback after
# the run, two lines, or a script overwritten with the report.
@pytest.mark.parametrize(
    "argv, says",
    [
        (
            ["nul.py"],
            "script 'nul.py' does not parse: it contains a NUL byte (line 2): it is not a "
            "Python source file, or it was saved as UTF-16: save it as UTF-8 text",
        ),
        (["syntax.py"], "script 'syntax.py' does not parse: invalid syntax (line 1)"),
        (
            ["module_return.py"],
            "script 'module_return.py' does not parse: 'return' outside function (line 1)",
        ),
        (
            ["--json", "train.py", "train.py"],
            "--json 'train.py' is a folder or the script itself: "
            "name a new file, such as report.json",
        ),
        (["--json", "sub", "train.py"], "--json 'sub' is a folder or the script itself"),
        (["--json", "", "train.py"], "--json '': name a file for the report, such as report.json"),
        (
            ["--json", "a\0b", "train.py"],
            "--json 'a\\x00b' is not a usable path (embedded null byte): choose another path",
        ),
        (
            ["--json", "x" * 300, "train.py"],
            f"--json '{'x' * 300}' is not a usable path (File name too long)",
        ),
        (
            ["--torch-npu", "2.1\n0", "train.py"],
            "--torch-npu '2.1\\n0': devicekit ships the list of 2.13.0 only",
        ),
        (
            ["--ops", "bad.yaml", "train.py"],
            "--ops 'bad.yaml' is not a torch_npu wheel or operator "
            "yaml (ScannerError: mapping values are not allowed "
            "here (line 1)): pass the file from the release you "
            "target",
        ),
        (
            ["-m", "no_such_module_here"],
            "-m 'no_such_module_here': no module named "
            "'no_such_module_here' in this folder or on sys.path",
        ),
        (["-m", "a b"], "-m 'a b' is not a module name"),
        (
            ["--json", "/proc/r.json", "train.py"],
            "--json '/proc/r.json': folder '/proc' cannot hold the report (No such file or "
            "directory): choose another path",
        ),
        (["sub"], "script 'sub' is a folder: name the .py file to run in it"),
        (["--ops", "sub", "train.py"], "--ops 'sub' is a folder: pass a torch_npu wheel"),
        (
            ["--ops", "config.yaml", "train.py"],
            "--ops 'config.yaml' is not a torch_npu wheel or operator yaml (ValueError: none "
            "of the sections supported, custom, symint, autograd, quant lists an operator)",
        ),
        (
            ["--ops", "words.yaml", "train.py"],
            "--ops 'words.yaml' is not a torch_npu wheel or operator yaml (ValueError: an "
            "entry that names no operator: 'add two numbers')",
        ),
    ],
    ids=[
        "NUL byte",
        "syntax error",
        "return outside a function",
        "json over the script",
        "json a folder",
        "json empty",
        "json NUL",
        "json too long",
        "version with a newline",
        "yaml error",
        "no such module",
        "not a module name",
        "json where no file can be made",
        "script a folder",
        "ops a folder",
        "ops a config, not an operator list",
        "ops a list of words",
    ],
)
def test_arguments_are_refused_in_one_line_before_the_script_runs(
    tmp_path, monkeypatch, argv, says
):
    monkeypatch.chdir(tmp_path)
    for name, data in {
        "nul.py": b"x = 1\n\x00\n",
        "syntax.py": b"def f(:\n    pass\n",
        "module_return.py": b"return 1\n",
        "train.py": b"print('ran')\n",
        "bad.yaml": b"a: b: c\n",
        "config.yaml": b"arch: resnet50\nepochs: 2\n",
        "words.yaml": b"supported:\n  - add two numbers\n",
    }.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "sub").mkdir()
    with pytest.raises(UsageError) as error:
        read_arguments(argv)
    message = assert_usage_line(error.value, [argv[-1] if argv[0] != "-m" else "-m", argv[0]])
    assert message.startswith(says), message


@pytest.mark.parametrize(
    "argv, says",
    [
        (
            ["--steps", "x", "train.py"],
            "error: argument --steps: invalid int value: 'x' (see: devicekit preflight --help)",
        ),
        (
            ["--st", "2", "train.py"],
            "error: unrecognized arguments: --st (see: devicekit preflight --help)",
        ),  # an abbreviation took "2" for the script
    ],
)
def test_argparse_refusals_are_one_line(tmp_path, monkeypatch, capsys, argv, says):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('ran')\n")
    with pytest.raises(SystemExit) as stop:
        read_arguments(argv)
    assert stop.value.code == 2 and capsys.readouterr().err == says + "\n"


@pytest.mark.slow
@pytest.mark.parametrize(
    "script, args",
    [
        ("examples/spawn_config.py", []),
        ("examples/launch_local_rank.py", []),
        ("examples/gpt_pretrain.py", ["--strategy", "shard"]),
        ("examples/finetune_sampler.py", []),
        (
            "main.py",
            tiny_args(batch=8, epochs=None, steps=None, val_steps=None, print_freq=None),
        ),
    ],
)
def test_our_examples_and_the_demo_model_fall_back_nowhere(script, args, tmp_path):
    report, result = report_of(tmp_path, "--steps", "3", REPO / script, *args, cwd=REPO)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert report["steps"] == 3
    assert report["findings"] == [], report["findings"]


def test_on_the_npu_stand_in_every_read_back_to_the_host_is_seen(tmp_path):
    """On the CPU `.cpu()` is no copy at all; on a device named npu it is one."""
    on_cpu, _ = report_of(tmp_path, "on_device.py")
    assert by_kind(on_cpu, "host-sync") == []
    # A process: DEVICEKIT_SIMULATE=npu is read as torch is imported, and the npu it
    # registers would stay in this process.
    report, result = report_of(tmp_path, "--npu-stand-in", "on_device.py", run=preflight)
    assert result.returncode == 0, result.stderr
    assert "trained on npu:0" in result.stdout
    (sync,) = by_kind(report, "host-sync")
    assert (sync["op"], sync["line"], sync["count"]) == (
        ".cpu()",
        marked("on_device.py", "host-sync"),
        3,
    ), sync


def test_a_synchronize_every_step_is_a_host_sync_and_one_before_the_loop_is_not(tmp_path):
    report, result = report_of(tmp_path, "synchronizes.py")
    assert result.returncode == 0, result.stderr
    (sync,) = by_kind(report, "host-sync")
    assert (sync["op"], sync["line"], sync["count"]) == (
        "synchronize()",
        marked("synchronizes.py", "host-sync"),
        3,
    ), sync
    assert sync["detail"] == "synchronize(): 3 calls in 3 of 4 step periods (1.0 per step)"


@pytest.mark.parametrize("synthetic", [False, True], ids=["dataset", "generator"])
def test_work_on_the_host_is_not_the_devices(tmp_path, synthetic):
    """A Dataset's work at random sizes (resizing, erasing a random patch, a boolean mask)
    is the host's: no finding. A generator's, outside any DataLoader, is listed apart as
    host-side. The patch erased on the batch after .to(device) is the device's."""
    report, result = report_of(tmp_path, "host_data.py", *(["--synthetic"] if synthetic else []))
    assert result.returncode == 0, result.stderr
    device = [(f["kind"], f["line"]) for f in report["findings"]]
    assert device == [("dynamic-shape", marked("host_data.py", "dynamic-shape"))], device
    host = [(f["kind"], f["line"]) for f in report["host_side"]]
    assert host == ([("host-side", marked("host_data.py", "host-side"))] if synthetic else [])
    assert not all_marked("host_data.py", "host") & {line for _, line in device + host}
    text = result.stdout[result.stdout.index("devicekit preflight:") :]
    assert " 1 finding(s) in 1 kind(s), " in text.splitlines()[0], text
    apart = "\nhost-side (1), apart from the device's findings: work on tensors not seen reaching"
    assert (apart in text) is synthetic, text
    if synthetic:
        assert text.index(apart) > text.index("\ndynamic-shape (1)\n"), "after the device's"


_LIBRARY = """\"\"\"Metrics as helper libraries write them: plain Python numbers.\"\"\"


def accuracy(logits, labels):
    return (logits.argmax(1) == labels).float().mean().item()
"""
_TRAINS_WITH_THE_LIBRARY = """import torch
from torch import nn

import meters

model = nn.Linear(4, 3)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    inputs, labels = torch.randn(8, 4), torch.randint(0, 3, (8,))
    logits = model(inputs)
    loss = nn.functional.cross_entropy(logits, labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"accuracy {meters.accuracy(logits, labels):.2f}")
"""


def test_a_finding_inside_an_installed_library_is_at_the_users_line_via_the_librarys(
    tmp_path, monkeypatch
):
    """A package installed in a site-packages folder reads .item() every step: the finding
    is the script's line that calls it, with the package's own line as `via`, and the
    advice says to change the call, not the library."""
    site = tmp_path / "venv" / "lib" / "site-packages"
    site.mkdir(parents=True)
    (site / "meters.py").write_text(_LIBRARY)
    (tmp_path / "train.py").write_text(_TRAINS_WITH_THE_LIBRARY)
    monkeypatch.syspath_prepend(site)
    monkeypatch.delitem(sys.modules, "meters", raising=False)
    try:
        report, result = report_of(tmp_path, "train.py", cwd=tmp_path)
    finally:
        sys.modules.pop("meters", None)
    assert result.returncode == 0, result.stderr
    (sync,) = by_kind(report, "host-sync")
    assert (sync["file"], sync["line"], sync["via"]) == ("train.py", 15, "meters.py:5"), sync
    assert sync["stack"] == ["train.py:15"], "no frame of the library's"
    assert (
        "  train.py:15  .item(): 3 reads in 3 of 4 step periods (1.0 per step)  via "
        "meters.py:5  (x3)\n"
    ) in result.stdout, result.stdout
    assert (
        "  via: the installed library's line that ran it, reached from yours: change your call "
        "(its arguments, its options, or another function), not the library\n"
    ) in result.stdout, result.stdout


def test_sparse_gradients_are_found_where_the_layer_runs(tmp_path):
    """nn.Embedding and nn.EmbeddingBag with sparse=True: the layers' lines, the fix, and
    --strict fails; a frozen sparse table makes no gradient and no finding, and the
    operators on the sparse gradient are not called CPU fallbacks (torch_npu refuses them)."""
    report, result = report_of(tmp_path, "--strict", "sparse_embeddings.py")
    assert result.returncode == 1, result.stdout + result.stderr
    found = sorted((f["kind"], f["op"], f["line"]) for f in report["findings"])
    first, second = sorted(all_marked("sparse_embeddings.py", "sparse-gradient"))
    assert found == [
        ("sparse-gradient", "nn.Embedding(sparse=True)", first),
        ("sparse-gradient", "nn.EmbeddingBag(sparse=True)", second),
    ], found
    assert "torch_npu 2.13.0 cannot build on the NPU" in report["findings"][0]["detail"]
    assert (
        "  what to do: make the gradient dense: sparse=False (sparse_grad=False for gather); "
        "an optimizer kept for sparse gradients (SparseAdam) becomes Adam or AdamW\n"
    ) in result.stdout, result.stdout


def test_ctrl_c_stops_the_script_and_still_reports(tmp_path):
    # A process: the script sends itself a real SIGINT.
    report, result = report_of(tmp_path, "interrupted.py", run=preflight)
    assert result.returncode == 130, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert report["steps"] == 3
    assert "3 optimizer step(s) recorded (interrupted)" in result.stdout


# -- the worked example of docs/extending.md: a preflight check of one's own ---------------------

_ADDS_AT_INDICES = """import torch
from torch import nn

model = nn.Linear(4, 3)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
index = torch.tensor([0, 1, 0, 2, 1, 0, 3, 3])
for step in range(3):
    outputs = model(torch.randn(8, 4))
    pooled = torch.zeros(4, 3).index_add(0, index, outputs)
    scattered = torch.zeros(4, 3).scatter_add(0, index[:, None].expand(8, 3), outputs)
    loss = pooled.sum() + scattered.sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_the_worked_example_of_a_preflight_check(tmp_path, monkeypatch):
    """docs/extending/preflight_check.py, in CHECKS just after float64 (its line), finds the
    script's two adds at indices, and the report gives its advice."""
    path = REPO / "docs" / "extending" / "preflight_check.py"
    spec = importlib.util.spec_from_file_location("preflight_check_example", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    at = checks.CHECKS.index(checks.float64) + 1
    monkeypatch.setattr(checks, "CHECKS", (*checks.CHECKS[:at], example, *checks.CHECKS[at:]))
    (tmp_path / "train.py").write_text(_ADDS_AT_INDICES)
    report, result = report_of(tmp_path, "train.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    found = sorted((f["op"], f["line"], f["count"]) for f in by_kind(report, "nondeterministic"))
    assert found == [("aten::index_add", 9, 3), ("aten::scatter_add", 10, 3)], found
    assert by_kind(report, "nondeterministic")[0]["detail"].endswith(
        "atomic adds on the device, in no fixed order"
    )
    assert f"  what to do: {example.ADVICE}\n" in result.stdout, result.stdout

"""Property-based tests of what `devicekit preflight` reads before it runs anything: its
command line, the script (read and compiled here, never run), the --ops operator list, and
the user's files the cuda-only check ports after the run.

Every input works or is refused with one line naming it (the flag or the script, the line of
the problem) and what to do: read_arguments raises UsageError (argparse: SystemExit 2 with
one line on stderr), the command prints "error: ..." and exits with code 2 before running
the script. Nothing generated here is run as a program.
"""

import contextlib
import io
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
import yaml
from hypothesis import event, example, given
from hypothesis import strategies as st

from conftest import clean_environ
from devicekit.errors import UsageError
from devicekit.preflight import npu_ops
from devicekit.preflight.checks import cuda_only
from devicekit.preflight.checks.base import Context
from devicekit.preflight.cli import read_arguments
from devicekit.preflight.recording import Recording
from invariant import (
    UNWRITABLE_PATHS,
    assert_command_refused,
    assert_usage_line,
    no_files_left,
)
from support.preflight_in_process import preflight_in_process
from support.python_inputs import ANY_BYTES, GENERATED, folder_of, lines_of, parses, scripts

pytestmark = pytest.mark.filterwarnings("ignore::SyntaxWarning")

TIMEOUT_S = 120
TRAIN = b"import torch\nmodel = torch.nn.Linear(2, 2)\nprint(model(torch.ones(2)))\n"
OPS = b"supported:\n  - add.Tensor\n  - func: relu(Tensor self) -> Tensor\ncustom:\n  - npu_x\n"


def read(argv: list[str]):
    """read_arguments(argv): (the Namespace or None, the UsageError or None, exit code of
    an argparse refusal or None, stderr)."""
    err = io.StringIO()
    args = error = code = None
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            args = read_arguments(argv)
        except UsageError as refused:
            error = refused
        except SystemExit as stop:
            code = stop.code
    return args, error, code, err.getvalue()


def assert_script_refused(error: BaseException, data: bytes, name: str) -> str:
    """The one line for a script that cannot be compiled: its name and a real line."""
    message = assert_usage_line(error, [repr(name)])
    assert message.startswith(f"script {name!r} "), message
    assert not re.search(r"line (None|0)\b", message), message
    found = re.search(r"line (\d+)", message)
    assert found and 1 <= int(found.group(1)) <= lines_of(data), message
    return message


# -- the script: read and compiled, never run --------------------------------------------


@given(st.one_of(ANY_BYTES, scripts()))
@example(b"x = 1\n\x00\n")  # was: the run's SyntaxError traceback and exit 1
@example(b"def f(:\n    pass\n")
@example(b"return 1\n")  # parses, does not compile
@example(b"# \xff\nx = 1\n")  # Python compiles it (an undecodable byte in a comment)
@example(b"x = " + b"+".join([b"a"] * 5000) + b"\n")
def test_any_script_is_compiled_or_refused_with_its_line(data):
    """A script Python compiles is accepted; any other is refused with its name and the
    line of the problem, and nothing of it runs."""
    with folder_of({"train.py": data}) as folder:
        before = os.listdir(folder)
        args, error, code, err = read(["train.py", "--epochs", "1"])
        no_files_left(str(folder), before)
    assert code is None and err == "", (code, err)
    if error is None:
        assert parses(data) and args.script == "train.py" and args.args == ["--epochs", "1"]
        event("compiled")
    else:
        assert not parses(data), f"refused a script Python compiles: {error}"
        assert_script_refused(error, data, "train.py")
        event(f"refused: {kind_of(str(error).split(':', 1)[1])}")


# -- the command line ------------------------------------------------------------------

WHEEL = io.BytesIO()
with zipfile.ZipFile(WHEEL, "w") as archive:
    archive.writestr(npu_ops.YAML_IN_WHEEL, OPS)
# -m NAME looks its top-level module up without importing anything (json: imported already).
FILES = {
    "train.py": TRAIN,
    "broken.py": b"x = (\n",
    "ops.yaml": OPS,
    "bad.yaml": b"a: b: c\n",
    "torch_npu-2.13.0.whl": WHEEL.getvalue(),
    "fake.whl": b"PK not a zip",
    "sub/keep.txt": b"",
    "mod_here.py": TRAIN,
}
NAME = st.text(st.characters(exclude_characters="/"), max_size=12).filter(
    lambda name: name not in (".", "..")
)
KNOWN_FILE = st.sampled_from(sorted(FILES) + ["missing.py", "sub", "report.json", "", "x" * 300])
FILE = st.integers(0, 3).flatmap(lambda i: KNOWN_FILE if i else NAME)  # mostly known names
OPTION = st.one_of(
    st.tuples(
        st.just("--steps"),
        st.one_of(st.sampled_from(["0", "3", "-1", "x", "1e3", ""]), st.integers().map(str), NAME),
    ),
    st.tuples(st.just("--json"), FILE),
    st.tuples(st.just("--torch-npu"), st.one_of(st.sampled_from(["2.13.0", "2.1.0", ""]), NAME)),
    st.tuples(st.just("--ops"), FILE),
    st.sampled_from(
        [
            ("--strict",),
            ("--npu-stand-in",),
            ("--steps=2",),
            ("--json=sub",),
            ("--st", "2"),
            ("-x",),
            ("--",),
        ]
    ),
)
MODULE = st.one_of(
    st.sampled_from(["mod_here", "json.tool", "nosuch_module_here", "a b", "1x", "os..path", ""]),
    NAME,
)
TARGET = st.one_of(
    st.just(["train.py"]),
    FILE.map(lambda name: [name]),
    MODULE.map(lambda name: ["-m", name]),
    st.just([]),
)


@st.composite
def command_lines(draw) -> list[str]:
    """preflight's options, a script or -m MODULE, the script's own arguments; or any
    tokens at all."""
    if draw(st.integers(0, 3)) == 0:
        return draw(st.lists(st.one_of(FILE, OPTION.map(lambda option: option[0])), max_size=6))
    options = [token for option in draw(st.lists(OPTION, max_size=3)) for token in option]
    return options + draw(TARGET) + draw(st.lists(NAME, max_size=2))


def kind_of(message: str) -> str:
    """A refusal's kind for the statistics: its words up to the first quoted value."""
    return re.sub(r"-?\d+", "N", re.split(r"['\"]", message)[0])[:40]


@given(command_lines())
@example(["--steps", "x", "train.py"])  # argparse: "usage: ..." and the error, two lines
@example(["--torch-npu", "2.1\n0", "train.py"])  # the version's newline made two lines
@example(["--ops", "bad.yaml", "train.py"])  # yaml's message: four lines
@example(["--json", "train.py", "train.py"])  # the report would overwrite the script
@example(["--json", "sub", "train.py"])  # a folder: IsADirectoryError after the run
@example(["--json", "", "train.py"])
@example(["--json", "a\0b", "train.py"])  # ValueError: embedded null byte
@example(["-m", "nosuch_module_here"])  # was: ModuleNotFoundError traceback from the run
@example(["-m", "a b"])
@example(["--st", "2", "train.py"])  # an abbreviation took "2" for the script
@example(["broken.py"])
def test_any_command_line_is_read_or_refused_in_one_line(argv):
    """read_arguments: the arguments (every file they name checked), or one line naming
    what is wrong; nothing is written."""
    with folder_of(FILES) as folder:
        before = os.listdir(folder)
        args, error, code, err = read(argv)
        no_files_left(str(folder), before)
    if error is not None:
        assert_usage_line(error, ["--", "-m", "script", "preflight needs a script"])
        assert code is None and err == ""
        event(f"refused: {kind_of(str(error))}")
    elif code is not None:
        if code == 0:  # -h, --help
            return
        assert_command_refused(code, err, ["error: "])
        event(f"refused by argparse: {kind_of(err)}")
    else:
        assert err == ""
        assert args.module is not None or args.script in FILES
        assert isinstance(args.operators, frozenset) and args.operators
        event("read")


# -- the --ops file ------------------------------------------------------------------

ENTRY = st.one_of(
    st.text(max_size=20),
    st.integers(),
    st.none(),
    st.dictionaries(
        st.sampled_from(["func", "name", "op"]),
        st.one_of(st.text(max_size=20), st.integers()),
        max_size=2,
    ),
)
DOCUMENT = st.one_of(
    st.dictionaries(
        st.sampled_from(list(npu_ops.SECTIONS) + ["other"]),
        st.one_of(st.lists(ENTRY, max_size=5), ENTRY),
        max_size=6,
    ),
    st.recursive(
        st.one_of(st.text(max_size=10), st.integers(), st.none()),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
        ),
        max_leaves=10,
    ),
)
YAML_TEXT = st.one_of(
    DOCUMENT.map(lambda doc: yaml.safe_dump(doc, allow_unicode=True).encode()),
    st.text().map(lambda text: text.encode("utf-8", "surrogatepass")),
    st.binary(),
    st.just(OPS),
)


@st.composite
def ops_files(draw):
    """(a file name, its bytes): an operator yaml, or a wheel holding one (or not)."""
    content = draw(YAML_TEXT)
    if not draw(st.booleans()):
        return "ops.yaml", content
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        name = draw(st.sampled_from([npu_ops.YAML_IN_WHEEL, "torch_npu/other.yaml"]))
        archive.writestr(name, content)
    data = buffer.getvalue()
    return "torch_npu.whl", data[: draw(st.integers(0, len(data)))] if draw(st.booleans()) else data


@given(ops_files())
@example(("ops.yaml", b"a: b: c\n"))
@example(("ops.yaml", b"supported: 3\n"))
@example(("ops.yaml", b"supported:\n  - 3\n"))
@example(("ops.yaml", b"\xff\xfe"))
@example(("ops.yaml", b"[" * 5000))  # yaml: RecursionError
def test_any_ops_file_is_read_or_refused_in_one_line(named):
    name, data = named
    with folder_of({"train.py": TRAIN, name: data}):
        args, error, code, err = read(["--ops", name, "train.py"])
    assert code is None and err == ""
    if error is None:
        assert args.release == name and all("::" in op for op in args.operators)
        event("read")
    else:
        message = assert_usage_line(error, [f"--ops {name!r}"])
        assert "pass the file from the release you target" in message
        event(f"refused: {message.split('(')[1].split(':')[0]}")


# -- the cuda-only check: the user's files, ported after the run --------------------------


@GENERATED
@given(st.one_of(ANY_BYTES, scripts()))
@example(b"import torch\nx = torch.ones(2).cuda()\n\x00\n")
@example(b"x = 1\r\n\nmodel = model.cuda()\n")
def test_the_cuda_only_check_reads_any_file(data):
    """Whatever a file the run went through holds, the check reports at its lines or
    passes it over; it never fails the report."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "train.py")
        Path(path).write_bytes(data)
        found = cuda_only.findings(Recording(), Context(frozenset(), "2.13.0", [path]))
    for finding in found:
        assert finding.file == path and 1 <= finding.line <= lines_of(data), finding
    event("findings" if found else "none")


# -- the command, as a user runs it ----------------------------------------------------


def preflight_command(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "devicekit", "preflight", *map(str, args)],
        cwd=cwd,
        env=clean_environ(OMP_NUM_THREADS=1),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def test_a_script_that_does_not_compile_is_refused_before_it_runs(tmp_path):
    (tmp_path / "train.py").write_bytes(b"print('ran')\nx = 1\n\x00\n")
    before = os.listdir(tmp_path)
    result = preflight_command("--json", "report.json", "train.py", cwd=tmp_path)
    line = assert_command_refused(result.returncode, result.stderr, ["'train.py'"])
    assert line == (
        "error: script 'train.py' does not parse: it contains a NUL byte (line 3): "
        "it is not a Python source file, or it was saved as UTF-16: save it as "
        "UTF-8 text"
    ), line
    assert result.stdout == ""
    no_files_left(str(tmp_path), before)


@pytest.mark.parametrize(
    "argv, says",
    [
        (
            ["--ops", "bad.yaml", "train.py"],
            "error: --ops 'bad.yaml' is not a torch_npu wheel or "
            "operator yaml (ScannerError: mapping values are not "
            "allowed here (line 1)): pass the file",
        ),
        (
            ["--steps", "x", "train.py"],
            "error: argument --steps: invalid int value: 'x' (see: devicekit preflight --help)",
        ),
    ],
    ids=["yaml error", "steps not a number"],
)
def test_bad_flags_are_one_line_before_anything_runs(tmp_path, argv, says):
    """In-process (support/preflight_in_process.py: devicekit's command line itself): the
    refusal comes before any script runs; the test above keeps the real command's path
    (one line on stderr, exit code 2, no traceback) proven end to end."""
    (tmp_path / "train.py").write_text("print('ran')\n")
    (tmp_path / "bad.yaml").write_text("a: b: c\n")
    result = preflight_in_process(argv, tmp_path, clean_environ(OMP_NUM_THREADS=1))
    line = assert_command_refused(result.returncode, result.stderr, [argv[0]])
    assert line.startswith(says), line
    assert result.stdout == ""


@given(UNWRITABLE_PATHS)
def test_a_report_where_no_file_can_be_made_is_refused_before_the_run(path):
    with folder_of({"train.py": TRAIN}):
        args, error, code, err = read(["--json", path, "train.py"])
    assert (args, code, err) == (None, None, "")
    assert assert_usage_line(error, [f"--json {path!r}"])

"""Property-based tests of what `devicekit port` reads: any source file, any command line.

For every input the port either works or refuses it with one line naming the file (or the
flag), the line of the problem and what to do: `port_source` raises ParseFailure (a
UsageError), the command prints "devicekit port: error: ..." and exits with code 2, and
nothing is written. What it writes still parses, and porting it again changes nothing.

Python modules come from hypothesmith (from Python's grammar and from libcst's node
types), alone and with CUDA (and Ascend) idioms put into their blocks, so the rewrites
fire in odd surroundings; other inputs are any text or bytes, and valid scripts broken a
byte at a time (tests/support/python_inputs.py makes them all). The "ci" profile
(tests/conftest.py) keeps this short; `pytest tests/test_fuzz_port.py
--hypothesis-profile=long` tries many more.
"""

import contextlib
import difflib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import assume, event, example, given
from hypothesis import strategies as st

from conftest import clean_environ
from devicekit.errors import one_line
from devicekit.port import ParseFailure, port_source
from devicekit.port.cli import main
from invariant import (
    EXIT_USAGE,
    UNWRITABLE_PATHS,
    assert_command_refused,
    assert_usage_line,
    no_files_left,
    working_directory,
)
from support.python_inputs import (
    ANY_BYTES,
    GENERATED,
    IDIOMS,
    MODULES,
    folder_of,
    lines_of,
    parses,
    scripts,
)

# Generated code may well compare a literal with `is`: Python warns, the port need not.
pytestmark = pytest.mark.filterwarnings("ignore::SyntaxWarning")

TIMEOUT_S = 120

# The lines of the idioms: the only lines a port may change.
IDIOM_LINES = {line.strip() for idiom in IDIOMS for line in idiom.splitlines()}
# Lone \r line ends after backslashes, and characters of several bytes: libcst's parser
# panics ("byte index 20 is not a char boundary").
PANIC = "try:\n\\\r\r class V\U0002e1e0\u0134:\\\ns\nexcept \\\r :\n p".encode()


def assert_refused(error: BaseException, data: bytes, path: str = "fuzz.py") -> str:
    """`error` is the one line a user gets for `data`: it names the file and a real line."""
    message = assert_usage_line(error, [path])
    assert not re.search(r"line (None|0)\b", message), message
    found = re.search(r"line (\d+)", message)
    assert found, f"no line number: {message!r}"
    assert 1 <= int(found.group(1)) <= lines_of(data), (message, lines_of(data))
    return message


def assert_ports_cleanly(data: bytes) -> tuple[bytes, object]:
    """Port valid `data`: no error, the output compiles, and porting it again changes
    nothing."""
    out, report = port_source(data, "fuzz.py")
    assert parses(out), out
    assert (out == data) == (not report.changes)
    again, second = port_source(out, "fuzz.py")
    assert again == out, "porting the ported output changed it"
    assert second.changes == [], second.changes
    return out, report


def ended(data: bytes, like: bytes) -> bytes:
    """`data` ending with a line end: where its last line was a line of `like` that ended,
    that line's end (the port removed the line after it), else \\n."""
    if data.endswith((b"\n", b"\r")) or not data:
        return data
    last = data.splitlines()[-1]
    ends = [line[len(last) :] for line in like.splitlines(True) if line.rstrip(b"\r\n") == last]
    return data + next((end for end in reversed(ends) if end), b"\n")


def assert_only_idioms_changed(script: bytes, out: bytes) -> None:
    """Every line the port removed or rewrote is one of an idiom's, or a comment above an
    idiom it removed (`# for the NPU` above `import torch_npu` goes with it): the code
    around them is kept byte for byte, line endings included."""
    before = ended(script, script).splitlines(True)
    after = ended(out, script).splitlines(True)
    matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
    for tag, start, end, _, _ in matcher.get_opcodes():
        if tag not in ("replace", "delete"):
            continue
        changed = [line.decode("utf-8", "replace").strip() for line in before[start:end]]
        idioms = [i for i, line in enumerate(changed) if line in IDIOM_LINES]
        strange = [
            line
            for i, line in enumerate(changed)
            if line
            and line not in IDIOM_LINES
            and not (line.startswith("#") and any(i < j for j in idioms))
        ]
        assert not strange, f"lines outside the idioms changed: {strange}"


# -- scripts: hypothesmith modules, alone and with CUDA idioms in their blocks -------------


@GENERATED
@given(MODULES.map(lambda code: code.encode("utf-8", "surrogatepass")))
@example(b"x = 1\r\n\ny = 2\n")  # mixed line endings: libcst failed ("Internal error")
@example(b"class A:\\\r \n pass\n")  # a lone \r: "tried to get line 4 which is out of range"
@example(b"# \xc3\xa9\n\x0cx = 1\n")
@example(PANIC)  # libcst's parser panicked at it (a BaseException)
def test_any_python_module_ports(data):
    """A module Python compiles is ported (mostly as it is) and ported again unchanged."""
    assume(parses(data))
    _, report = assert_ports_cleanly(data)
    event("changed" if report.changes else "unchanged")


@GENERATED
@given(scripts())
@example(b"x = 1\r\n\nmodel = model.cuda()\n")
@example(b"import torch\rx = 1\rmodel = model.cuda()\r")
@example(b"import torch\n\x0cdef f():\n\x0c    model = model.cuda()\n\x0cy = 1\n")
@example(b"if f():\n    pass\n    import torch_npu\n")  # the if went, and f() with it
@example(b"import torch_npu\n\r\n\n #\n")  # libcst drops an indented comment at the end
@example(b"x = 1  #\nimport torch_npu")
@example(b"import torch_npu\n\n\n #\r#\n")  # libcst dropped the lines before the last comment
@example(b"\r\n#\r\nimport torch_npu")
def test_cuda_idioms_in_any_surroundings(script):
    """Idioms put anywhere in generated code are ported; the code around them is kept."""
    out, report = assert_ports_cleanly(script)
    assert_only_idioms_changed(script, out)
    event(f"{min(len(report.changes), 3)}{'+' if len(report.changes) >= 3 else ''} change(s)")
    event(f"manual items: {bool(report.manual)}")


# -- any bytes: ported, or refused with the line -------------------------------------------


@given(ANY_BYTES)
@example(b"x = 1\n\x00\n")  # was: "source code string cannot contain null bytes (line None)"
@example(b"# \xff\nx = 1\n")  # Python reads it; libcst's SyntaxError was a traceback
@example(b"x = 1\ny = '\xff'\n")
@example(b"\xef\xbb\xbf# -*- coding: latin-1 -*-\nx = 1\n")  # was "(line 0)"
@example(b"# -*- coding: nope -*-\nx = 1\n")
@example(b"x = 1\n\\\n")
@example(b"\n\t \\\r\n")  # Python reads it; libcst does not
@example("x = 1\ny = '\u2028'\n".encode())
@example(b"x = (" + b" ".join([b"'a'"] * 5000) + b")\n")
@example(b"x = " + b"+".join([b"a"] * 5000) + b"\n")  # RecursionError in Python's parser
@example(
    b"if x == 0:\n    a = 0\n"
    + b"".join(b"elif x == %d:\n    a = %d\n" % (i, i) for i in range(1, 1000))
    + b"y = z.cuda()\n"
)
@example(b"x = " + b"-" * 900 + b"1\ny = z.cuda()\n")  # RecursionError in libcst's visitors
def test_any_bytes_are_ported_or_refused_with_their_line(data):
    """port_source(bytes): the ported bytes, or ParseFailure whose one line names the file
    and the line of the problem."""
    try:
        out, report = port_source(data, "fuzz.py")
    except ParseFailure as error:
        message = assert_refused(error, data)
        if parses(data, compiled=False):  # Python reads it: libcst cannot, or not deep enough
            assert any(why in message for why in ("with libcst", "too deeply", "text: byte")), (
                message
            )
        event(f"refused: {re.split(r'[(:]', message[len('fuzz.py: ') :])[0]}")
        return
    event("ported" if report.changes else "unchanged")
    assert parses(data, compiled=False)
    assert (out == data) == (not report.changes)
    if report.changes:
        assert parses(out, compiled=False)
        assert port_source(out, "fuzz.py")[0] == out


# -- the command, in-process -----------------------------------------------------------

GOOD = "import torch\nmodel = torch.nn.Linear(2, 2).cuda()\n"
FILES = {
    "good.py": GOOD.encode(),
    "plain.py": b"print('hi')\n",
    "nul.py": b"x = 1\n\x00\n",
    "latin.py": b"x = '\xe9'\n",
    "sub/deep.py": GOOD.encode(),
    "notes.txt": b"text\n",
}
NAME = st.text(st.characters(exclude_characters="/"), min_size=1, max_size=12).filter(
    lambda name: name not in (".", "..")
)
KNOWN_PATH = st.sampled_from(
    sorted(FILES) + ["sub", ".", "out", "r.json", "missing.py", "", "sub/new", "x" * 300]
)
PORTABLE = st.sampled_from(["good.py", "plain.py", "sub", "sub/deep.py"])
PATH = st.integers(0, 3).flatmap(  # mostly names that can be ported, then other known ones
    lambda i: [NAME, KNOWN_PATH, PORTABLE, PORTABLE][i]
)
OPTION = st.one_of(
    st.sampled_from([("--write",), ("--check",), ("--",), ("-x",)]),
    st.tuples(st.sampled_from(["--out", "--report"]), PATH),
    PATH.map(lambda path: (f"--out={path}",)),
)


@st.composite
def command_lines(draw) -> list[str]:
    """port's options and paths, in any order; or any tokens at all."""
    if draw(st.integers(0, 3)) == 0:
        return draw(st.lists(st.one_of(PATH, OPTION.map(lambda option: option[0])), max_size=6))
    tokens = [[token for token in option] for option in draw(st.lists(OPTION, max_size=3))]
    tokens += [[path] for path in draw(st.lists(PATH, min_size=1, max_size=3))]
    return [token for group in draw(st.permutations(tokens)) for token in group]


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (relative name: content)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def is_report(data: bytes) -> bool:
    """Whether `data` is a report of --report (which may replace a file of any other kind)."""
    try:
        return json.loads(data)["tool"] == "devicekit port"
    except (ValueError, KeyError, TypeError):
        return False


def run_main(argv: list[str]) -> tuple[int, str, str]:
    """`devicekit port ARGV` in-process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as stop:  # argparse
            code = stop.code
    return code, out.getvalue(), err.getvalue()


@given(command_lines())
@example(["--write", "nul.py", "good.py"])
@example(["--report", "good.py", "good.py"])  # overwrote the script with the JSON report
@example(["--report", "nul.py/r.json", "good.py"])
@example(["--report", "latin.py", "good.py"])  # wrote the JSON over another script
@example(["--out=0", "--report", "0", "good.py"])  # wrote 0/good.py, then failed on the report
@example(["--out", "good.py", "sub"])
@example(["--out", "", "good.py"])
@example([""])  # Path("") is ".": it ported the whole folder
@example(["0", "--write", ""])  # "unrecognized arguments: " (the empty one, after a flag)
@example(["a\nb.py"])  # a name with a newline: the error was two lines
@example(["\x00"])  # ValueError: embedded null byte
@example(["x" * 300])  # OSError: File name too long
@example(["--report", "r\0.json", "good.py"])  # ValueError: embedded null byte
@example(["--out", "o/" + "x" * 300, "good.py"])  # refused only after making the folder o/
def test_any_command_line_works_or_is_one_line(argv):
    """Exit 0 or 1 having done its work, or 2 with one line on stderr and no file changed
    or left behind."""
    with folder_of(FILES) as folder:
        before = snapshot(folder)
        code, _, err = run_main(argv)
        after = snapshot(folder)
    if code == EXIT_USAGE:
        named = [one_line(part) or "''" for token in argv for part in token.split("=")]
        line = assert_command_refused(code, err, named + ["PATH"])
        assert line.startswith("devicekit port: error: "), line
        assert after == before, "a refused command changed files"
        reason = line.split(": error: ", 1)[1]
        if reason.startswith(("unrecognized arguments", "the following arguments")):
            reason = reason.split(":")[0]
        event(f"refused: {re.sub(r'^[^:]*: ', '', reason)[:30]}")
    else:
        assert code in (0, 1) and err == "", (code, err)
        assert not [name for name in after if Path(name).name.startswith(".")], (
            f"a temporary file was left: {sorted(after)}"
        )
        for name in set(before) & set(after):
            if after[name] != before[name]:  # the report, or rewritten in place and whole
                assert is_report(after[name]) or ("--write" in argv and parses(after[name])), name
        event(f"exit {code}")


# -- the command, as a user runs it ---------------------------------------------------


def port_command(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "devicekit", "port", *map(str, args)],
        cwd=cwd,
        env=clean_environ(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def test_a_file_with_a_nul_byte_is_refused_and_nothing_is_written(tmp_path):
    (tmp_path / "a_good.py").write_text(GOOD)
    broken = tmp_path / "b_broken.py"
    broken.write_bytes(b"import torch\nx = torch.ones(2).cuda()\n\x00\n")
    before = os.listdir(tmp_path)
    result = port_command("--write", "--report", "r.json", ".", cwd=tmp_path)
    line = assert_command_refused(result.returncode, result.stderr, ["b_broken.py"])
    assert "does not parse: it contains a NUL byte (line 3)" in line and "None" not in line
    assert result.stdout == ""
    no_files_left(str(tmp_path), before)
    assert (tmp_path / "a_good.py").read_text() == GOOD
    assert broken.read_bytes() == b"import torch\nx = torch.ones(2).cuda()\n\x00\n"


# The two below run the command in-process (its parser and main(), the same code `python -m
# devicekit port` runs after its imports): the NUL-byte test above keeps the real command's
# path (one line on stderr, exit code 2, no traceback) proven end to end.


def test_a_file_that_is_not_utf8_is_refused_with_its_line(tmp_path):
    script = tmp_path / "train.py"
    script.write_bytes(b"import torch\n# caf\xe9\nx = torch.ones(2).cuda()\n")
    with working_directory(tmp_path):
        code, _, stderr = run_main(["--out", "ported", "train.py"])
    line = assert_command_refused(code, stderr, ["train.py"])
    assert "byte 0xe9 at line 2" in line, line
    assert sorted(os.listdir(tmp_path)) == ["train.py"]


def test_a_bad_command_line_is_one_line(tmp_path):
    with working_directory(tmp_path):
        code, _, stderr = run_main(["--write", "--check", "train.py"])
    line = assert_command_refused(code, stderr, ["--check"])
    assert line.startswith("devicekit port: error: argument --check: not allowed"), line


@given(path=UNWRITABLE_PATHS, flag=st.sampled_from(["--report", "--out"]))
def test_an_output_where_no_file_can_be_made_is_refused_before_any_output(
    tmp_path_factory, path, flag
):
    """Refused on one line naming it, before the diff, a report or a ported file."""
    script = tmp_path_factory.mktemp("port") / "train.py"
    script.write_text(GOOD)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([flag, path, str(script)])
    assert (code, out.getvalue()) == (EXIT_USAGE, "")
    line = assert_command_refused(code, err.getvalue(), [path])
    assert flag in line, line
    assert script.read_text() == GOOD

"""Every fenced block of README.md and docs/**/*.md, run or checked the way a reader would use
it (tests/test_docs.py makes one pytest item of each block, named `FILE:LINE` of its fence).

Documents are lexed by Sybil (its Markdown fence lexer, which also finds fences inside list
items, block quotes and indented ones) and each block is evaluated by a function here:

- ```python: written to a file in a scratch folder and run as `python NAME` there. A first
  line `# NAME.py` (optionally followed by text: `# tiny.py: the whole script`) names the
  file; otherwise it gets a generated name. It must exit 0.
- ```bash: run as `bash -e -o pipefail -c BLOCK` in the scratch folder, with this
  environment's python, torchrun and devicekit first on PATH. It must exit 0. Its
  commands that start no process of their own (`python -m devicekit doctor`, ...: see
  InProcessCommands) run inside the test process, which answers the block's `python`.
- Markers, on the block's first line (in a python block, on the line after a `# NAME.py`
  line when there is one):
  - `# not run by the tests: REASON` (REASON not empty: a GPU, an NPU, two hosts, an
    install, ...): the block is only checked, python with compile(), bash with `bash -n`.
  - `# expect exit code N`: the block must exit with exactly N; when N is 2 (a usage error),
    its stderr must hold no traceback.
  A marker anywhere else in a block is refused, so that a misplaced one cannot let a block
  run unchecked or skip it silently.
- Before a block runs, every python block earlier in the same document that names its file
  (those marked not run included) is written into the scratch folder, not run: a later
  `torchrun --standalone --nproc-per-node 2 tiny.py` finds `# tiny.py`, even when its item
  runs alone. Every block gets a fresh scratch folder.
- The scratch folder also holds copies of the repository's application (main.py, trainer/,
  models/, launch/, examples/, tests/port_corpus/, tests/preflight_scripts/), so that
  commands written for a checkout run as written. They are copies, not links:
  `devicekit port --write` replaces files. Nothing is written into the repository.
- Every other fence is output or a file's content, and must name one of the languages in
  OTHER_LANGUAGES; a fence without a language, or with any other, is refused (`fence_problems`),
  so that no block escapes checking by its spelling (```sh, ```py, a bare ```).

A failure names the block's fence, the exit code and the tail of its output, and where it
can, the line that failed: a python block's last traceback line in its own file, a bash
block's failing command (an ERR trap read through BASH_ENV, which the commands it starts do
not inherit).

Processes run under tests/processes.py: own session, output to files, environment from
conftest's clean_environ (no launcher variables, the repository on PYTHONPATH) with
OMP_NUM_THREADS=1, PYTHONUNBUFFERED=1 and PIP_NO_INDEX=1 (a `pip install` not marked as not
run cannot download into this environment), and a timeout of RUN_TIMEOUT_S after which the
block's processes (its group and every descendant seen) are killed.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from unittest import mock

import pytest
from sybil import Document, Example, Sybil
from sybil.parsers.abstract import AbstractCodeBlockParser
from sybil.parsers.markdown.lexers import FencedCodeBlockLexer, RawFencedCodeBlockLexer
from sybil.typing import Evaluator

from conftest import ROOT, clean_environ
from invariant import working_directory
from support.devicekit_in_process import NeedsProcess, devicekit_in_process, runs_in_process
from support.main_in_process import run_main_until_launch
from support.processes import Finished, Processes
from trainer import demo_data

REPO = Path(ROOT)
RUN_TIMEOUT_S = 600  # the demo block: 3 min 40 s on a 2-core Cascade Lake Xeon (fp32)
CHECK_TIMEOUT_S = 60  # `bash -n` only parses
TAIL_LINES = 40

RUN_LANGUAGES = ("python", "bash")
OTHER_LANGUAGES = ("text", "diff", "json", "yaml", "ini", "toml")
# What to write instead of a language the docs do not use.
INSTEAD = {
    "sh": "```bash",
    "shell": "```bash",
    "zsh": "```bash",
    "console": "```bash for the command and ```text for its output",
    "py": "```python",
    "python3": "```python",
    "pycon": "```python for a script, ```text for a session's output",
    "yml": "```yaml",
    "": "```bash for a command, ```python for a script, ```text for output",
}

# The application a checkout holds besides the library (which comes from PYTHONPATH).
APPLICATION = (
    "main.py",
    "trainer",
    "models",
    "launch",
    "examples",
    "tests/port_corpus",
    "tests/preflight_scripts",
)

NAMED = re.compile(r"^#\s*([\w./-]+\.py)\b")
MARKER = re.compile(r"^\s*#\s*(not run by the tests|expect exit code)\b(.*)$")
NOT_RUN = re.compile(r"^:\s*(\S.*)$")
EXIT_CODE = re.compile(r"^\s+(\d+)\s*$")
# Read by the block's bash before the block (BASH_ENV), by no bash it starts: names the
# block's line of a command that fails, so that a failure says which command it was.
ERR_TRAP = """unset BASH_ENV
trap 'echo "docs_examples: line $LINENO exited $?" >&2' ERR
"""
TRAPPED = re.compile(r"^docs_examples: line (\d+) exited (\d+)\n?", re.M)


# The `python` a bash block finds first on PATH: `python -m devicekit ARGS` and
# `python main.py ARGS` go to the test process (IN_PROCESS_CLIENT asks it), anything else to
# this environment's python.
PYTHON_SHIM = """#!/bin/bash
if [[ ${{1-}} == -m && ${{2-}} == devicekit || ${{1-}} == main.py ]]; then
    exec {python} -S {client} {socket} "$@"
fi
exec {python} "$@"
"""
# Run with -S (no site: it cannot import torch). The test process answers with the command's
# exit code and output, or with null when the command needs a process of its own.
IN_PROCESS_CLIENT = """import json, os, socket, sys

path, args = sys.argv[1], sys.argv[2:]
request = {"args": args, "cwd": os.getcwd(), "env": dict(os.environ)}
with socket.socket(socket.AF_UNIX) as conn:
    conn.connect(path)
    conn.sendall(json.dumps(request).encode())
    conn.shutdown(socket.SHUT_WR)
    reply = json.loads(conn.makefile("rb").read())
if reply is None:
    os.execv(sys.executable, [sys.executable, *args])
sys.stdout.write(reply["stdout"])
sys.stdout.flush()
sys.stderr.write(reply["stderr"])
sys.exit(reply["code"])
"""


def documents(root: Path = REPO) -> list[Path]:
    """README.md and every Markdown file under docs/, in a fixed order."""
    return [root / "README.md"] + sorted((root / "docs").glob("**/*.md"))


class Header:
    """What a block's first lines say about it: the file name of a python block, and the
    marker (not run, with its reason, or the exit code it must end with)."""

    def __init__(self, language: str, source: str) -> None:
        lines = source.splitlines()
        self.name: str | None = None
        self.not_run: str | None = None
        self.exit_code = 0
        self.problems: list[str] = []
        first = 0
        named = NAMED.match(lines[0]) if language == "python" and lines else None
        if named:
            self.name = named[1]
            first = 1
            self._check_name()
        for number, line in enumerate(lines, start=1):
            marker = MARKER.match(line)
            if marker is None:
                continue
            if number != first + 1:
                self.problems.append(
                    f"line {number} of the block: `{line.strip()}` is read only on the "
                    f"block's first line{' (after its `# NAME.py` line)' if first else ''}"
                )
            else:
                self._read_marker(marker[1], marker[2])

    def _check_name(self) -> None:
        """Refuse a name that would write outside the scratch folder."""
        assert self.name is not None
        parts = Path(self.name).parts
        if Path(self.name).is_absolute() or ".." in parts:
            self.problems.append(
                f"`# {self.name}` names a file outside the scratch folder: "
                f"write a name relative to it, without `..`"
            )

    def _read_marker(self, kind: str, rest: str) -> None:
        """Read the marker `kind` whose text after the keyword is `rest`."""
        if kind == "not run by the tests":
            reason = NOT_RUN.match(rest)
            if reason is None:
                self.problems.append(
                    "write the reason after the colon: `# not run by the tests: REASON`"
                )
            else:
                self.not_run = reason[1]
        else:
            code = EXIT_CODE.match(rest)
            if code is None:
                self.problems.append("write the exit code as a number: `# expect exit code N`")
            else:
                self.exit_code = int(code[1])


def display(example: Example) -> str:
    """`FILE:LINE` of the block's opening fence, FILE as the reader knows it."""
    return f"{example.namespace['display']}:{example.line}"


def _doc_line(example: Example, block_line: int) -> str:
    """`FILE:LINE` of line `block_line` (1 = the line after the fence) of the block."""
    return f"{example.namespace['display']}:{example.line + block_line}"


def _tail(text: str) -> str:
    """The last TAIL_LINES lines of `text`, saying how many came before."""
    lines = text.rstrip().splitlines()
    cut = len(lines) - TAIL_LINES
    return "\n".join(([f"[... {cut} lines before]"] if cut > 0 else []) + lines[-TAIL_LINES:])


def _fenced(language: str, evaluator: Evaluator) -> AbstractCodeBlockParser:
    """Sybil's Markdown CodeBlockParser for `language` with our evaluator, without its
    second lexer (code in HTML comments, which a reader never sees and the language check
    would not see either)."""
    lexer = FencedCodeBlockLexer(
        language=r".+", mapping={"language": "arguments", "source": "source"}
    )
    return AbstractCodeBlockParser([lexer], language, evaluator)


def prepare_scratch(example: Example, scratch: Path) -> None:
    """Fill `scratch` (empty) with copies of the application and the files named by the
    python blocks before `example` in its document."""
    for relative in APPLICATION:
        source, target = REPO / relative, scratch / relative
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        elif source.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    for _, region in example.document.regions:
        if region.start >= example.start:
            break
        if region.lexemes.get("arguments") != "python":
            continue
        header = Header("python", region.parsed)
        if header.name is not None and not header.problems:
            _write(scratch / header.name, region.parsed)


def _write(path: Path, text: str) -> None:
    """Write `text` to `path`, making its folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def environment() -> dict[str, str]:
    """The blocks' environment: no launcher variables, the repository on PYTHONPATH, one
    compute thread per process, this environment's executables first on PATH."""
    # Unbuffered: a block killed at its timeout still shows what it printed. No package
    # index: a `pip install` left unmarked fails instead of changing this environment.
    env = clean_environ(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PIP_NO_INDEX="1")
    # sys.executable's own folder, not its resolved one: a venv's python is a link.
    env["PATH"] = os.pathsep.join(filter(None, [os.path.dirname(sys.executable), env.get("PATH")]))
    return env


class InProcessCommands:
    """While a bash block runs (a context manager), the commands of it that start no process
    of their own run in this process, in a thread, and the block sees their output and exit
    code, without the `import torch` of a new interpreter: `python -m devicekit ARGS`
    (support.devicekit_in_process: doctor, port, preflight, a check refused before its
    ranks start), `python -m trainer.demo_data DIR` and a `python main.py ARGS` that main.py
    refuses before its launch (support.main_in_process). The others, a main.py or trainer
    that is not the repository's, and any command whose environment's PYTHONPATH or
    DEVICEKIT_SIMULATE differs from the block's (read before devicekit is imported) run as
    processes. `bin` holds the `python` that asks (PYTHON_SHIM), for the block's PATH."""

    def __init__(self, env: dict[str, str]) -> None:
        self.pythonpath = env.get("PYTHONPATH")
        # A short folder of its own: a socket's path is limited to 107 bytes.
        self.folder = Path(tempfile.mkdtemp(prefix="docs-"))
        self.bin = self.folder / "bin"
        self.bin.mkdir()
        client, path = self.folder / "client.py", self.folder / "socket"
        client.write_text(IN_PROCESS_CLIENT)
        shim = self.bin / "python"
        shim.write_text(PYTHON_SHIM.format(python=sys.executable, client=client, socket=path))
        shim.chmod(0o755)
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(str(path))
        self.listener.listen()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> InProcessCommands:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(RUN_TIMEOUT_S)
        self.listener.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _serve(self) -> None:
        while not self.stopping.is_set():
            ready, _, _ = select.select([self.listener], [], [], 0.2)
            if ready:
                conn, _ = self.listener.accept()
                with conn:
                    request = json.loads(conn.makefile("rb").read())
                    conn.sendall(json.dumps(self._answer(**request)).encode())

    def _answer(self, args: list[str], cwd: str, env: dict[str, str]) -> dict | None:
        """`python ARGS`'s exit code and output, or None: run it as a process."""
        if env.get("PYTHONPATH") != self.pythonpath or env.get("DEVICEKIT_SIMULATE"):
            return None
        try:
            if args[:2] == ["-m", "devicekit"] and runs_in_process(args[2:], env):
                result = devicekit_in_process(args[2:], cwd, env)
            elif args[:2] == ["-m", "trainer.demo_data"] and _is_ours(cwd, "trainer"):
                result = _command_in_process(demo_data.main, args[2:], cwd, env)
            elif args[:1] == ["main.py"] and _is_ours(cwd, "main.py"):
                result = _main_refusal(args[1:], cwd, env)
            else:
                return None
        except NeedsProcess:
            return None
        except BaseException:  # as the process would: its traceback, exit code 1
            return {"code": 1, "stdout": "", "stderr": traceback.format_exc()}
        return {"code": result.returncode, "stdout": result.stdout, "stderr": result.stderr}


def _is_ours(folder: str, relative: str) -> bool:
    """Whether `folder`/`relative` (a file, or a folder of .py files) is the repository's,
    the one this process imports."""
    copy, ours = Path(folder, relative), REPO / relative
    if ours.is_file():
        return copy.is_file() and copy.read_bytes() == ours.read_bytes()
    files = sorted(path.relative_to(ours) for path in ours.rglob("*.py"))
    return files == sorted(path.relative_to(copy) for path in copy.rglob("*.py")) and all(
        (copy / name).read_bytes() == (ours / name).read_bytes() for name in files
    )


def _command_in_process(
    main: Callable[[list[str]], int | None], argv: list[str], cwd: str, env: dict[str, str]
) -> subprocess.CompletedProcess:
    """A command line's `main(argv)` in `cwd` with `env` as its whole environment, as a
    process runs it: its exit code and output."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.ExitStack() as stack:
        stack.enter_context(working_directory(cwd))
        stack.enter_context(mock.patch.dict(os.environ, env, clear=True))
        stack.enter_context(contextlib.redirect_stdout(stdout))
        stack.enter_context(contextlib.redirect_stderr(stderr))
        try:
            code = main(argv)
        except SystemExit as stop:
            code = stop.code
        if code is not None and not isinstance(code, int):  # sys.exit("text"): exit code 1
            print(code, file=sys.stderr)
            code = 1
    return subprocess.CompletedProcess(argv, code or 0, stdout.getvalue(), stderr.getvalue())


def _main_refusal(argv: list[str], cwd: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`python main.py ARGV` when main.py refuses it before its launch; NeedsProcess when
    it reaches the launch (the run is the process's)."""
    stdout = io.StringIO()
    with mock.patch.dict(os.environ, env, clear=True), contextlib.redirect_stdout(stdout):
        code, stderr, launched = run_main_until_launch(argv, cwd)
    if launched is not None:
        raise NeedsProcess("main.py " + " ".join(argv))
    return subprocess.CompletedProcess(["main.py", *argv], code, stdout.getvalue(), stderr)


def _run(
    example: Example,
    argv: list[str],
    header: Header,
    env: dict[str, str],
    culprit: Callable[[str], str | None],
    served: InProcessCommands | None = None,
) -> str | None:
    """Run `argv` in the example's scratch folder (`served`: with its in-process commands);
    why it failed, or None. `culprit` finds in a failed block's stderr what failed, at the
    document's line."""
    scratch, logs = example.namespace["scratch"], example.namespace["logs"]
    timeout = example.namespace["timeout"]
    # The commands' thread ends after the processes: a block killed at its timeout may
    # have one running, which nothing can stop but its end.
    with served or contextlib.nullcontext(), Processes(logs) as procs:
        proc = procs.start("block", argv, env, cwd=scratch)
        try:
            [result] = procs.finish_all([proc], timeout)
        except pytest.fail.Exception as failed:
            # finish_all's first line says what did not end in time; the output comes as a tail.
            result = procs.read(proc)
            why = str(failed).splitlines()[0]
            return f"{display(example)}: {why}; killed\n" + _outputs(result)
    where = display(example)
    if result.returncode != header.exit_code:
        expected = f"exit code {header.exit_code}" if header.exit_code else "success (0)"
        message = f"{where}: exit code {result.returncode}, expected {expected}"
        found = culprit(result.stderr)
        return message + (f"; {found}" if found else "") + "\n" + _outputs(result)
    if header.exit_code == 2 and "Traceback" in result.stderr:
        return (
            f"{where}: exit code 2 with a traceback on stderr: a usage error must be one "
            f"line\n" + _outputs(result)
        )
    return None


def _outputs(result: Finished) -> str:
    """A finished block's stdout and stderr, their tails (without the ERR trap's lines)."""
    stderr = TRAPPED.sub("", result.stderr)
    return f"[stdout]\n{_tail(result.stdout)}\n[stderr]\n{_tail(stderr)}"


def _raised_at(example: Example, script: str, stderr: str) -> str | None:
    """Where a python block's traceback last passes through its own file, if it does."""
    frames = re.findall(rf'File "(?:.*/)?{re.escape(script)}", line (\d+)', stderr)
    return f"the error is raised at {_doc_line(example, int(frames[-1]))}" if frames else None


def _failed_command(example: Example, stderr: str) -> str | None:
    """Which command of a bash block failed, from the ERR trap's last line."""
    found = TRAPPED.findall(stderr)
    if not found:
        return None
    line, code = found[-1]
    return f"the command at {_doc_line(example, int(line))} exited {code}"


def _problems(example: Example, header: Header) -> str | None:
    """The header's problems, each at the block's fence; None without any."""
    if header.problems:
        return "\n".join(f"{display(example)}: {problem}" for problem in header.problems)
    return None


def evaluate_python(example: Example) -> str | None:
    """Run a python block as a script (or only compile it, when marked not run)."""
    header = Header("python", example.parsed)
    problems = _problems(example, header)
    if problems:
        return problems
    if header.not_run is not None:
        try:
            compile(example.parsed, display(example), "exec")
        except SyntaxError as error:
            return (
                f"{_doc_line(example, error.lineno or 1)}: SyntaxError: {error.msg} "
                f"(a block marked not run is still compiled)"
            )
        return None
    scratch = example.namespace["scratch"]
    prepare_scratch(example, scratch)
    name = header.name or f"block_{example.line}.py"
    _write(scratch / name, example.parsed)
    script = Path(name).name
    return _run(
        example,
        [sys.executable, name],
        header,
        environment(),
        lambda stderr: _raised_at(example, script, stderr),
    )


def evaluate_bash(example: Example) -> str | None:
    """Run a bash block (or only parse it with `bash -n`, when marked not run)."""
    header = Header("bash", example.parsed)
    problems = _problems(example, header)
    if problems:
        return problems
    if header.not_run is not None:
        checked = subprocess.run(
            ["bash", "-n", "-c", example.parsed],
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
        if checked.returncode != 0:
            # bash numbers the block's lines from 1: point at the document's line instead.
            located = re.sub(
                r"^bash: -c: line (\d+):",
                lambda found: _doc_line(example, int(found[1])) + ":",
                checked.stderr.strip(),
                flags=re.M,
            )
            return (
                f"{display(example)}: `bash -n` finds a syntax error (a block marked not run is "
                f"still parsed):\n{located}"
            )
        return None
    prepare_scratch(example, example.namespace["scratch"])
    trap = Path(example.namespace["logs"]) / "err_trap.sh"
    _write(trap, ERR_TRAP)
    env = environment()
    served = InProcessCommands(env)
    env["PATH"] = os.pathsep.join([str(served.bin), env["PATH"]])
    return _run(
        example,
        ["bash", "-e", "-o", "pipefail", "-c", example.parsed],
        header,
        {**env, "BASH_ENV": str(trap)},
        lambda stderr: _failed_command(example, stderr),
        served,
    )


SYBIL = Sybil(parsers=[_fenced("python", evaluate_python), _fenced("bash", evaluate_bash)])


def parse(path: Path, root: Path = REPO) -> Document:
    """The document at `path` with its python and bash blocks, shown relative to `root`."""
    document = SYBIL.parse(path)
    document.namespace["display"] = path.relative_to(root).as_posix()
    return document


def examples(paths: list[Path], root: Path = REPO) -> Iterator[Example]:
    """Every python and bash block of `paths`, in document order."""
    for path in paths:
        yield from parse(path, root).examples()


def is_run(example: Example) -> bool:
    """Whether evaluating `example` starts processes (it is not marked not run)."""
    header = Header(example.region.lexemes["arguments"], example.parsed)
    return header.not_run is None


def run_example(
    example: Example, scratch: Path, logs: Path, timeout: float = RUN_TIMEOUT_S
) -> None:
    """Evaluate `example` in the empty folder `scratch` (its output files go to `logs`);
    raises sybil's SybilFailure, whose `result` says why, when the block fails."""
    scratch.mkdir(parents=True, exist_ok=True)
    example.namespace.update(scratch=scratch, logs=logs, timeout=timeout)
    example.evaluate()


# Every fence, whatever its info string, for the language check.
_ANY_FENCE = RawFencedCodeBlockLexer(info_pattern=re.compile(r"(?P<info>[^\n]*)\n?"))


def fence_problems(path: Path, root: Path = REPO) -> list[str]:
    """One line per fence of the document at `path` whose info string is not exactly one of
    RUN_LANGUAGES or OTHER_LANGUAGES: where it is and what to write instead."""
    document = Document(path.read_text(encoding="utf-8"), str(path))
    shown = path.relative_to(root).as_posix()
    allowed = RUN_LANGUAGES + OTHER_LANGUAGES
    problems = []
    for region in _ANY_FENCE(document):
        info = region.lexemes["info"]
        if info in allowed:
            continue
        line = document.text.count("\n", 0, region.start) + 1
        said = f"```{info}" if info.strip() else "a fence without a language"
        word = info.strip()
        if word in allowed:  # the right word with spaces around: read as another language
            instead = f"```{word}, with nothing after it"
        else:
            instead = INSTEAD.get(word.lower(), "one of " + ", ".join(f"```{a}" for a in allowed))
        problems.append(
            f"{shown}:{line}: {said} is neither run nor allowed as output: write {instead}"
        )
    return problems

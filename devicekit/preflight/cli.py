"""`devicekit preflight [options] SCRIPT [ARGS...]` (or `-m MODULE`): run a training script
on this machine, record what it dispatches, and report what it will hit on an Ascend NPU.

Exit code: the script's own when it failed (1 when it raised), else 1 with --strict when
something would fail or fall back to the CPU on the NPU (a sparse gradient, an operator
torch_npu lacks, a CUDA-only call), else 0. Usage mistakes: one line,
exit code 2, before anything runs; every flag, and the files they name, is checked first,
and the script is compiled (not run): one that Python cannot compile is such a mistake.
"""

import argparse
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

from devicekit import simulate, writable
from devicekit.errors import ArgumentParser, UsageError
from devicekit.preflight import npu_ops, report
from devicekit.preflight.checks import all_checks, npu_operators
from devicekit.preflight.checks.base import Check, Context, Finding
from devicekit.preflight.recording import Recording
from devicekit.preflight.runner import run
from devicekit.simulate import command

STRICT_KINDS = ("sparse-gradient", "cpu-fallback", "cuda-only")


def _parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="devicekit preflight",
        allow_abbrev=False,
        description="Run a training script here and report what it will hit on an Ascend NPU.",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="stop the script after N optimizer steps (default: let it finish)",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 when anything would fail or fall back to the CPU on the NPU",
    )
    lists = parser.add_mutually_exclusive_group()
    lists.add_argument(
        "--torch-npu",
        metavar="VERSION",
        help=f"the torch_npu release to check against (shipped: {npu_ops.TORCH_NPU_VERSION})",
    )
    lists.add_argument(
        "--ops",
        metavar="FILE",
        help="check against another release: its wheel, or the "
        "npu_native_functions_by_codegen.yaml from it",
    )
    parser.add_argument(
        "--npu-stand-in",
        action="store_true",
        help="record on the npu stand-in (DEVICEKIT_SIMULATE=npu): a script "
        "on devicekit's API puts its tensors on a device named npu, and "
        "reads back to the host are seen exactly",
    )
    parser.add_argument("-m", dest="module", metavar="MODULE", help="run a module as a script")
    parser.add_argument("script", nargs="?", help="the training script")
    parser.add_argument("args", nargs="*", help="the script's own arguments")
    return parser


_TAKES_VALUE = ("--steps", "--json", "--torch-npu", "--ops")  # the rest are flags


def _split(argv: list[str]) -> tuple[list[str], list[str]]:
    """(preflight's own arguments, the script's): everything after the script or after
    `-m MODULE` belongs to the script, as with `python -m cProfile`."""
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "-m":
            return argv[: i + 2], argv[i + 2 :]
        if token == "--":
            return argv[: i + 2], argv[i + 2 :]
        if not token.startswith("-"):
            return argv[: i + 1], argv[i + 1 :]
        i += 2 if token in _TAKES_VALUE else 1
    return argv, []


def _operator_list(args: argparse.Namespace) -> tuple[frozenset[str], str]:
    """(the set of listed operators, the release it describes)."""
    if args.torch_npu not in (None, npu_ops.TORCH_NPU_VERSION):
        raise UsageError(
            f"--torch-npu {_shown(args.torch_npu)}: devicekit ships the list of "
            f"{npu_ops.TORCH_NPU_VERSION} only; for another release pass "
            "--ops FILE with its wheel or its npu_native_functions_by_codegen.yaml"
        )
    if args.ops is None:
        return npu_ops.load(), npu_ops.TORCH_NPU_VERSION
    path = Path(args.ops)
    if path.is_dir():
        raise UsageError(
            f"--ops {args.ops!r} is a folder: pass a torch_npu wheel or its "
            "npu_native_functions_by_codegen.yaml"
        )
    if not os.path.isfile(path):  # False for a name too long to be one, as for a missing file
        raise UsageError(
            f"--ops {args.ops!r} does not exist: pass a torch_npu wheel or its "
            "npu_native_functions_by_codegen.yaml"
        )
    try:
        if path.suffix == ".whl":
            return npu_ops.from_wheel(path), path.name
        return npu_ops.from_yaml(path.read_text(encoding="utf-8")), path.name
    except Exception as error:  # any unreadable file: zip, yaml or encoding errors alike
        mark = getattr(error, "problem_mark", None)
        if mark is not None:  # a yaml error: its own message is several lines
            why = f"{type(error).__name__}: {getattr(error, 'problem', '')} (line {mark.line + 1})"
        else:
            why = f"{type(error).__name__}: {error}"
        why = " ".join(why.split())
        raise UsageError(
            f"--ops {args.ops!r} is not a torch_npu wheel or operator yaml "
            f"({why}): pass the file from the release you target"
        ) from None


def _shown(text: str) -> str:
    """`text` as a message shows it: as typed, or quoted where it has odd characters."""
    return text if text.isprintable() and text.strip() == text and text else repr(text)


def _check_script(path: str) -> None:
    """UsageError unless `path` is a Python file that compiles (nothing in it is run)."""
    from devicekit.port.source_bytes import ParseFailure, check_python

    if os.path.isdir(path):
        raise UsageError(f"script {path!r} is a folder: name the .py file to run in it")
    if not os.path.isfile(path):
        raise UsageError(f"script {path!r} does not exist: check the path")
    try:
        source = Path(path).read_bytes()
    except OSError as error:
        raise UsageError(f"script {path!r} cannot be read: {error.strerror}") from None
    try:
        check_python(source, compiled=True)
    except ParseFailure as failure:
        raise UsageError(f"script {path!r} {failure}") from None


def _check_module(name: str) -> None:
    """UsageError unless `name` is a module name whose top-level package or module can be
    found from here (its submodules are found as the run imports it)."""
    if not all(part.isidentifier() for part in name.split(".")):
        raise UsageError(
            f"-m {name!r} is not a module name: give a dotted name such as train or package.train"
        )
    top = name.split(".")[0]
    saved = sys.path[:]
    sys.path.insert(0, os.getcwd())  # as the run has it
    try:
        found = top in sys.modules or importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        found = False
    finally:
        sys.path[:] = saved
    if not found:
        raise UsageError(
            f"-m {name!r}: no module named {top!r} in this folder or on sys.path: "
            "check the name, or run from the folder that holds it"
        )


def _check_json(path: str, script: str | None) -> None:
    """UsageError unless the report can be written at `path`."""
    if not path:
        raise UsageError("--json '': name a file for the report, such as report.json")
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        pass
    except (OSError, ValueError) as error:  # a NUL in the name, a name too long
        raise UsageError(
            f"--json {path!r} is not a usable path "
            f"({getattr(error, 'strerror', None) or error}): choose another "
            "path"
        ) from None
    try:
        folder = os.path.dirname(os.path.abspath(path))
        reason = (
            writable.cannot_hold_files(folder) if os.path.isdir(folder) else "it does not exist"
        )
        taken = os.path.isdir(path) or (
            script is not None and os.path.exists(path) and os.path.samefile(path, script)
        )
    except (OSError, ValueError) as error:  # a NUL in the name, a name too long
        folder, reason, taken = os.path.dirname(path), str(error), False
    if reason is not None:
        raise UsageError(
            f"--json {path!r}: folder {folder!r} cannot hold the report ({reason}): "
            "choose another path"
        )
    if taken:
        raise UsageError(
            f"--json {path!r} is a folder or the script itself: name a new file, "
            "such as report.json"
        )


def _check_arguments(args: argparse.Namespace) -> None:
    if args.steps is not None and args.steps < 1:
        raise UsageError(f"--steps {args.steps} must be at least 1")
    if args.module is None and args.script is None:
        raise UsageError(
            "preflight needs a script: devicekit preflight [options] SCRIPT "
            "[ARGS...] (or -m MODULE [ARGS...])"
        )
    if args.script is not None:
        _check_script(args.script)
    if args.module is not None:
        _check_module(args.module)
    if args.json is not None:
        _check_json(args.json, args.script)


def read_arguments(argv: list[str]) -> argparse.Namespace:
    """Preflight's own arguments from `argv`, every one checked, with the operator list
    (`operators`, `release`) read: UsageError (or SystemExit 2 from argparse, one line on
    stderr) for a bad one. The script is read and compiled, never run."""
    own, script_args = _split(argv)
    args = _parser().parse_args(own)
    args.args = script_args
    _check_arguments(args)
    args.operators, args.release = _operator_list(args)
    return args


def _write_json(path: str, data: dict[str, object]) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(prefix=".preflight.", dir=folder)
    try:
        with os.fdopen(handle, "w") as stream:
            json.dump(data, stream, indent=2)
            stream.write("\n")
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def _in_order(check: Check, recording: Recording, context: Context) -> list[Finding]:
    found = check.findings(recording, context)
    if getattr(check, "KEEP_ORDER", False):
        return found
    return sorted(found, key=lambda f: (-f.count, f.file, f.line))


def main(argv: list[str]) -> int:
    """`devicekit preflight` with `argv` (the arguments after "preflight"); the exit code."""
    args = read_arguments(argv)
    ops, release = args.operators, args.release
    if args.npu_stand_in:
        simulate.activate(simulate.visible_count(os.environ))
        os.environ["DEVICEKIT_DEVICE"] = "npu"
        sys.path[:0] = command.sites()  # an Ascend script's `import torch_npu`, `apex`
    recording = Recording()
    target = args.module or args.script
    outcome = run(target, args.args, args.module is not None, recording, args.steps)
    scripts = sorted(
        f for f in recording.files if os.path.isfile(f) and not f.startswith(sys.prefix)
    ) or ([args.script] if args.script else [])
    context = Context(npu_ops=ops, torch_npu=release, scripts=scripts)
    checks = all_checks()
    findings = [finding for check in checks for finding in _in_order(check, recording, context)]
    supported = npu_operators.supported(context)
    state = outcome.state if outcome.state != "raised" else f"raised at {outcome.where}"
    sys.stdout.flush()
    print(report.text(findings, checks, release, recording.steps, state, supported), flush=True)
    if args.json:
        data = report.to_json(findings, checks, release, recording.steps, supported)
        _write_json(args.json, data)
    if recording.steps == 0 and outcome.state != "raised":
        print(
            f"devicekit preflight: note: {target} made no optimizer step, so nothing is "
            "known per step; the findings cover what it ran",
            file=sys.stderr,
        )
    elif (
        args.steps is not None
        and recording.steps < args.steps
        and outcome.state != "stopped"
        and outcome.exit_code == 0
    ):
        print(
            f"devicekit preflight: note: {target} ended after {recording.steps} optimizer "
            f"step(s), before --steps {args.steps}",
            file=sys.stderr,
        )
    if outcome.state == "raised":
        print(
            f"devicekit preflight: {target} raised {type(outcome.error).__name__} at "
            f"{outcome.where}; the report covers what ran before",
            file=sys.stderr,
        )
        return 1
    if outcome.exit_code:
        return outcome.exit_code
    return 1 if args.strict and any(f.kind in STRICT_KINDS for f in findings) else 0

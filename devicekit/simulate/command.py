"""`python -m devicekit simulate [--devices N] [--memory SIZE] -- COMMAND [ARGS...]`: run
any command (a script, `torchrun ...`, `bash run_8p.sh`, `python -m pytest`) with the npu
stand-in in every Python process it starts, whether or not that code imports devicekit.

The command replaces this process (exec): its signals, output and exit code are its own,
and nothing is left to clean up. What it inherits:

- PYTHONPATH starts with site/, which holds an entry point of torch's backend autoload
  (group `torch.backends`, the one torch_npu registers on an Ascend machine): every
  process that imports torch, mp.spawn's and torchrun's children, a shell loop's ranks and
  DataLoader workers included, activates the stand-in then; and the stand-in's torch_npu;
- then, where no apex is importable here, apex_site/: Ascend's apex (amp and its NPU fused
  optimizers), which most Ascend model zoo scripts import; an installed apex is left alone;
- TORCH_DEVICE_BACKEND_AUTOLOAD=1, which importing devicekit sets to 0 for a real
  torch_npu's sake (refused here);
- DEVICEKIT_SIMULATE=npu, DEVICEKIT_SIMULATE_DEVICES and DEVICEKIT_SIMULATE_MEMORY, which
  code that imports devicekit reads as before.
"""

import importlib.util
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

import devicekit
from devicekit.errors import ArgumentParser, UsageError, say
from devicekit.simulate import (
    DEFAULT_DEVICES,
    DEVICES_ENV,
    MAX_DEVICES,
    MEMORY_ENV,
    SIMULATE_ENV,
    SITE,
    memory_capacity,
    real_torch_npu_installed,
)

AUTOLOAD_ENV = "TORCH_DEVICE_BACKEND_AUTOLOAD"
APEX_SITE = SITE.with_name("apex_site")  # Ascend's apex, where none is installed


def _parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="devicekit simulate",
        description="Run COMMAND with the npu stand-in in every Python process it starts.",
    )
    parser.add_argument(
        "--devices",
        default=str(DEFAULT_DEVICES),
        help=f"simulated NPUs on this machine, 1 to {MAX_DEVICES} (default {DEFAULT_DEVICES})",
    )
    parser.add_argument(
        "--memory", help="what each simulated NPU holds: 512MiB, 2GiB (default: no limit)"
    )
    parser.add_argument("command", nargs="...", help="the command to run, after --")
    return parser


def _devices(raw: str) -> int:
    # ASCII digits only: str.isdigit() also takes "²", which int() refuses.
    if not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= MAX_DEVICES):
        raise UsageError(
            f"--devices {raw!r}: give a whole number of simulated NPUs from 1 to {MAX_DEVICES}"
        )
    return int(raw)


def _memory(raw: str) -> None:
    try:
        memory_capacity({MEMORY_ENV: raw})
    except UsageError:
        raise UsageError(
            f"--memory {raw!r} is not a memory size: write it as 512MiB, 2GiB or a number "
            "of bytes, or leave it out for no limit"
        ) from None


def real_apex_installed() -> bool:
    """Whether an apex other than the stand-in's (apex_site/apex) can be imported."""
    spec = importlib.util.find_spec("apex")
    return spec is not None and not (spec.origin or "").startswith(str(APEX_SITE) + os.sep)


def sites() -> list[str]:
    """The folders the stand-in's Python processes find first: site/ (torch's autoload
    entry point and torch_npu), then apex_site/ unless an apex is installed."""
    return [str(SITE)] if real_apex_installed() else [str(SITE), str(APEX_SITE)]


def main(argv: Sequence[str]) -> int:
    """Check the command line, then exec the command with the stand-in's environment."""
    args = _parser().parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise UsageError(
            "no command to run: write it after --, as in `python -m devicekit simulate -- "
            "torchrun --nproc-per-node 2 train.py`"
        )
    devices = _devices(args.devices)
    if args.memory is not None:
        _memory(args.memory)
    if real_torch_npu_installed():
        raise UsageError(
            "torch_npu is installed in this environment: the stand-in and a real NPU stack "
            "are never mixed; run the simulation in an environment without torch_npu"
        )
    program = shutil.which(command[0])
    if program is None:
        raise UsageError(f"{command[0]!r}: command not found: check its name and PATH")

    environ = dict(os.environ)
    # The stand-in arrives through torch's backend autoload, which importing devicekit
    # switches off for a real torch_npu's sake (none is installed here: checked above).
    environ.update({SIMULATE_ENV: "npu", DEVICES_ENV: str(devices), AUTOLOAD_ENV: "1"})
    if args.memory is not None:
        environ[MEMORY_ENV] = args.memory
    # site/ first (apex_site/ next, unless an apex is installed); devicekit's own folder
    # last, for a checkout that is not installed.
    paths = [*sites(), *filter(None, environ.get("PYTHONPATH", "").split(os.pathsep))]
    environ["PYTHONPATH"] = os.pathsep.join([*paths, str(Path(devicekit.__file__).parents[1])])
    say(
        f"devicekit simulate: {devices} simulated NPU(s), npu:0 to npu:{devices - 1}, in every "
        "Python process of this command; NPU numerics and speed are not simulated"
    )
    hccl = sorted(name for name in environ if name.startswith("HCCL_"))
    if hccl:  # HCCL_CONNECT_TIMEOUT, HCCL_BUFFSIZE...: passed on, nothing reads them
        say(
            f"devicekit simulate: {', '.join(hccl)} accepted and ignored: the stand-in's "
            "hccl runs on gloo, on the host, with no HCCL to tune"
        )
    sys.stdout.flush()
    try:
        os.execve(program, [command[0], *command[1:]], environ)
    except OSError as error:
        raise UsageError(f"{command[0]!r} cannot be run ({error.strerror}): check it") from None

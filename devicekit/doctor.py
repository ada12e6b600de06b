"""`python -m devicekit doctor`: what this machine offers, what devicekit would choose, and
the next command to run -- the facts a bug report needs. It never fails on a missing or
malformed variable: such a variable is reported as a problem."""

import argparse
import json
import os
import platform
from collections.abc import Sequence
from typing import Any

import torch

from devicekit import __version__, environments, kinds
from devicekit.environments import LaunchOptions, resolve_launch
from devicekit.errors import UsageError
from devicekit.kinds.base import DeviceKind
from devicekit.kinds.npu import (
    CANN_SET_ENV,
    NpuKind,
    cann_install,
    torch_npu_matches,
    torch_npu_version,
)
from devicekit.kinds.resolve import ENV_VAR, resolve_kind
from devicekit.workers import fork_can_deadlock

CANN_VARS = ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH", "ASCEND_OPP_PATH")
HCCL_VARS = (
    "HCCL_CONNECT_TIMEOUT",
    "HCCL_EXEC_TIMEOUT",
    "HCCL_IF_IP",
    "HCCL_SOCKET_IFNAME",
    "HCCL_WHITELIST_DISABLE",
    "RANK_TABLE_FILE",
)
SHM_PATH = "/dev/shm"
# DataLoader workers hand batches over in shared memory; Docker's default of 64 MiB is
# exhausted by a few ImageNet batches, and the workers then die with "bus error".
SHM_WARN_BYTES = 1 << 30
NO_LAUNCHER = "none (single process, or spawn)"


def _npu_status() -> dict[str, str | bool | None]:
    npu = kinds.get("npu")
    assert isinstance(npu, NpuKind)  # register_kind() refuses another class named "npu"
    version = torch_npu_version()
    matches = None if version is None else torch_npu_matches(version, torch.__version__)
    if version is None and npu.is_registered():
        # Something other than the torch_npu package registered torch.npu: say what.
        module = torch.get_device_module("npu")
        return {
            "state": "not installed, torch.npu registered",
            "version": None,
            "matches_torch": None,
            "detail": f"torch.npu comes from {module.__name__}: {module.get_device_name()}",
        }
    if version is None and not npu.is_installed():
        return {
            "state": "not installed",
            "version": None,
            "matches_torch": None,
            "detail": npu.load_state()[1],
        }
    state, reason = npu.load_state()
    return {"state": state, "version": version, "matches_torch": matches, "detail": reason}


def _visible_devices() -> dict[str, dict[str, str | Sequence[int | str] | None]]:
    report = {}
    for kind in (kinds.get(name) for name in kinds.names()):
        var = kind.visible_devices_env
        if var is None:
            continue
        entry: dict[str, str | Sequence[int | str] | None] = {"value": os.environ.get(var)}
        try:
            entry["parsed"] = kind.visible_devices(os.environ)
        except UsageError as error:
            entry["error"] = str(error)
        report[var] = entry
    return report


def _shm_bytes() -> int | None:
    """The size of /dev/shm, or None where there is none."""
    try:
        stats = os.statvfs(SHM_PATH)
    except OSError:
        return None
    return stats.f_blocks * stats.f_frsize


def _human_bytes(count: int) -> str:
    return f"{count / (1 << 30):.1f} GiB" if count >= 1 << 30 else f"{count / (1 << 20):.0f} MiB"


def _next_command(kind: DeviceKind, count: int, launcher: str | None) -> str:
    if launcher is not None:
        return "python -m devicekit check   (under the same launcher, in every rank)"
    if kind.is_accelerator and count > 1:
        return f"torchrun --standalone --nproc-per-node {count} -m devicekit check"
    if kind.is_accelerator:
        return "python -m devicekit check needs 2 devices; with one, train: python main.py --dummy"
    return "python -m devicekit check --nproc-per-node 2"


def _warnings(info: dict[str, Any]) -> list[str]:
    found = []
    npu = info["torch_npu"]
    if npu["matches_torch"] is False:
        torch_release = torch.__version__.split("+")[0]
        found.append(
            f"torch_npu {npu['version']} does not match torch {info['torch']}: "
            f"torch-npu pairs with the same torch release; pip install "
            f"torch-npu=={torch_release}"
        )
    shm = info["shm_bytes"]
    if shm is not None and shm < SHM_WARN_BYTES:
        found.append(
            f'{SHM_PATH} is {_human_bytes(shm)}: DataLoader workers die with "bus '
            f'error" when it fills; give it {_human_bytes(SHM_WARN_BYTES)} or more '
            "(docker run --shm-size=8g; Kubernetes: an emptyDir of medium Memory at "
            "/dev/shm) or use --workers 0"
        )
    if fork_can_deadlock():
        found.append(
            f"Python {info['python']} can deadlock a forked child (CPython gh-112275): "
            "DataLoader workers forked in a distributed run may hang at start; "
            "devicekit.worker_context() starts them from a forkserver instead (main.py "
            "does); upgrade to Python 3.11.10, 3.10.15 or later to fork them"
        )
    return found


def _precision(kind: DeviceKind) -> dict[str, Any]:
    """The defaults a script on the flat API gets here: autocast on or off, its dtype, loss
    scaling, channels_last."""
    amp = kind.default_amp()
    dtype = kind.amp_dtype()
    return {
        "amp": amp,
        "amp_dtype": str(dtype).removeprefix("torch."),
        "loss_scaling": amp and kind.needs_grad_scaler(dtype),
        "channels_last": kind.prefers_channels_last(amp),
    }


def _precision_line(precision: dict[str, Any]) -> str:
    if precision["amp"]:
        line = f"{precision['amp_dtype']} autocast"
        line += " with loss scaling" if precision["loss_scaling"] else ", no loss scaling"
    else:
        line = "fp32 (AMP off: autocast(enabled=True) or --amp turns it on)"
    return line + (", channels_last" if precision["channels_last"] else ", NCHW")


def gather(requested: str | None = None) -> dict[str, Any]:
    """Everything doctor reports, as a JSON-ready dict."""
    problems: list[str] = []
    environment = environments.detect(LaunchOptions())
    launcher = environment.NAME if environments.started_by_launcher(environment) else None
    info: dict[str, Any] = {
        "devicekit": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch_accelerator": str(torch.accelerator.current_accelerator()),
        "torch_npu": _npu_status(),
        "cann": {var: os.environ.get(var) for var in CANN_VARS},
        "cann_install": cann_install(os.environ),
        "cann_set_env_sh": CANN_SET_ENV if os.path.exists(CANN_SET_ENV) else None,
        "hccl": {var: os.environ.get(var) for var in HCCL_VARS},
        "shm_bytes": _shm_bytes(),
        "visible_devices": _visible_devices(),
        "requested_device": requested or os.environ.get(ENV_VAR) or "auto",
        "launcher": launcher or NO_LAUNCHER,
        "launch_environment": environments.variables_set(environment, os.environ),
    }
    try:
        kind = resolve_kind(requested, source="--device")
    except UsageError as error:
        problems.append(str(error))
        kind = None
    if kind is not None:
        count = kind.device_count()
        info.update(device=kind.name, backend=kind.backend, devices_per_node=count)
        try:
            info["precision"] = _precision(kind)
        except UsageError as error:  # a DEVICEKIT_CPU_BF16 or DEVICEKIT_AMP_DTYPE it refuses
            problems.append(str(error))
        info["compile_backend"] = kind.compile_backend()
        if info["compile_backend"] is None:
            info["no_compiler"] = kind.no_compiler_reason()
        try:
            info["launch_context"] = resolve_launch(LaunchOptions(), kind=kind).describe()
        except UsageError as error:
            problems.append(str(error))
        info["next"] = _next_command(kind, count, launcher)
    for _var, entry in info["visible_devices"].items():
        if "error" in entry:
            problems.append(entry["error"])
    info["warnings"] = _warnings(info)
    info["problems"] = list(dict.fromkeys(problems))
    return info


def format_report(info: dict[str, Any]) -> str:
    """The human-readable doctor report."""
    npu = info["torch_npu"]
    npu_line = npu["state"] + (f" ({npu['version']})" if npu["version"] else "")
    lines = [
        f"devicekit    {info['devicekit']}",
        f"python       {info['python']} on {info['platform']}",
        f"torch        {info['torch']} (torch.accelerator: {info['torch_accelerator']})",
        f"torch_npu    {npu_line}",
    ]
    if npu["state"] not in ("ok", "not installed"):
        lines.append(f"             {npu['detail']}")
    install = info["cann_install"]
    lines.append(
        "CANN         "
        + (
            f"{install['version']} at {install['path']} (found by {install['found_by']})"
            if install["version"]
            else "not found"
        )
    )
    cann = {k: v for k, v in info["cann"].items() if v}
    lines.append(f"CANN vars    {', '.join(f'{k}={v}' for k, v in cann.items()) or 'not sourced'}")
    hccl = {k: v for k, v in info["hccl"].items() if v}
    lines.append(f"HCCL vars    {', '.join(f'{k}={v}' for k, v in hccl.items()) or 'none set'}")
    shm = info["shm_bytes"]
    lines.append(f"{SHM_PATH:<12} {'absent' if shm is None else _human_bytes(shm)}")
    for var, entry in info["visible_devices"].items():
        lines.append(f"{var:<26} {entry['value'] if entry['value'] is not None else 'unset'}")
    lines.append(f"requested    {info['requested_device']}")
    if "device" in info:
        lines.append(
            f"chosen       {info['device']} with backend {info['backend']}, "
            f"{info['devices_per_node']} device(s) per node"
        )
    if "precision" in info:
        lines.append(f"precision    {_precision_line(info['precision'])}")
    if "compile_backend" in info:
        backend = info["compile_backend"]
        lines.append(f"compile      {backend or 'eager: ' + info['no_compiler']}")
    read = ", ".join(f"{k}={v}" for k, v in info["launch_environment"].items())
    lines.append(f"launcher     {info['launcher']}" + (f", from {read}" if read else ""))
    if "launch_context" in info:
        lines.append(f"this process {info['launch_context']}")
    for warning in info["warnings"]:
        lines.append(f"WARNING      {warning}")
    for problem in info["problems"]:
        lines.append(f"PROBLEM      {problem}")
    if "next" in info:
        lines.append(f"next         {info['next']}")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    """Entry point for `devicekit doctor`; exit code 2 when a problem blocks running."""
    info = gather(args.device)
    print(json.dumps(info, indent=2) if args.json else format_report(info), flush=True)
    return 2 if info["problems"] else 0

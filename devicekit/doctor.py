"""`python -m devicekit doctor`: what this machine offers, what devicekit would choose, and
the next command to run."""

import json
import os
import platform

import torch

from devicekit import kinds
from devicekit.detect import ENV_VAR, resolve_kind
from devicekit.errors import UsageError
from devicekit.kinds.npu import CANN_SET_ENV, torch_npu_version
from devicekit.launch import LaunchOptions, launcher_of, resolve_launch

CANN_VARS = ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH", "ASCEND_OPP_PATH")
HCCL_VARS = ("HCCL_CONNECT_TIMEOUT", "HCCL_EXEC_TIMEOUT", "HCCL_IF_IP", "HCCL_SOCKET_IFNAME",
             "HCCL_WHITELIST_DISABLE", "RANK_TABLE_FILE")
LAUNCH_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
               "MASTER_PORT", "RANK_ID", "RANK_SIZE", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK")


def _npu_status():
    npu = kinds.get("npu")
    version = torch_npu_version()
    if version is None and not npu.is_installed():
        return {"state": "not installed", "version": None, "detail": npu.load_state()[1]}
    state, reason = npu.load_state()
    return {"state": state, "version": version, "detail": reason}


def _visible_devices():
    report = {}
    for kind in (kinds.get(name) for name in kinds.names()):
        var = kind.visible_devices_env
        if var is None:
            continue
        entry = {"value": os.environ.get(var)}
        try:
            entry["parsed"] = kind.visible_devices(os.environ)
        except UsageError as error:
            entry["error"] = str(error)
        report[var] = entry
    return report


def _next_command(kind, count, launcher):
    if launcher is not None:
        return "python -m devicekit check   (under the same launcher, in every rank)"
    if kind.is_accelerator and count > 1:
        return f"torchrun --standalone --nproc-per-node {count} -m devicekit check"
    if kind.is_accelerator:
        return "python -m devicekit check needs 2 devices; with one, train: python main.py --dummy"
    return "python -m devicekit check --nproc-per-node 2"


def gather(requested=None):
    """Everything doctor reports, as a JSON-ready dict."""
    problems = []
    info = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch_accelerator": str(torch.accelerator.current_accelerator()),
        "torch_npu": _npu_status(),
        "cann": {var: os.environ.get(var) for var in CANN_VARS},
        "cann_set_env_sh": CANN_SET_ENV if os.path.exists(CANN_SET_ENV) else None,
        "hccl": {var: os.environ.get(var) for var in HCCL_VARS},
        "visible_devices": _visible_devices(),
        "requested_device": requested or os.environ.get(ENV_VAR) or "auto",
        "launch_environment": {var: os.environ[var] for var in LAUNCH_VARS if var in os.environ},
    }
    try:
        kind = resolve_kind(requested, source="--device")
    except UsageError as error:
        problems.append(str(error))
        kind = None
    if kind is not None:
        count = kind.device_count()
        info.update(device=kind.name, backend=kind.backend, devices_per_node=count)
        launcher = launcher_of()
        info["launcher"] = launcher or "none (single process, or spawn)"
        try:
            info["launch_context"] = resolve_launch(LaunchOptions(), kind=kind).describe()
        except UsageError as error:
            problems.append(str(error))
        info["next"] = _next_command(kind, count, launcher)
    for var, entry in info["visible_devices"].items():
        if "error" in entry:
            problems.append(entry["error"])
    info["problems"] = list(dict.fromkeys(problems))
    return info


def format_report(info):
    """The human-readable doctor report."""
    npu = info["torch_npu"]
    npu_line = npu["state"] + (f" ({npu['version']})" if npu["version"] else "")
    lines = [
        f"python       {info['python']} on {info['platform']}",
        f"torch        {info['torch']} (torch.accelerator: {info['torch_accelerator']})",
        f"torch_npu    {npu_line}",
    ]
    if npu["state"] not in ("ok", "not installed"):
        lines.append(f"             {npu['detail']}")
    cann = {k: v for k, v in info["cann"].items() if v}
    lines.append(f"CANN         {', '.join(f'{k}={v}' for k, v in cann.items()) or 'not sourced'}")
    hccl = {k: v for k, v in info["hccl"].items() if v}
    lines.append(f"HCCL vars    {', '.join(f'{k}={v}' for k, v in hccl.items()) or 'none set'}")
    for var, entry in info["visible_devices"].items():
        lines.append(f"{var:<26} {entry['value'] if entry['value'] is not None else 'unset'}")
    lines.append(f"requested    {info['requested_device']}")
    if "device" in info:
        lines.append(f"chosen       {info['device']} with backend {info['backend']}, "
                     f"{info['devices_per_node']} device(s) per node")
        lines.append(f"launcher     {info['launcher']}")
    if "launch_context" in info:
        lines.append(f"this process {info['launch_context']}")
    for problem in info["problems"]:
        lines.append(f"PROBLEM      {problem}")
    if "next" in info:
        lines.append(f"next         {info['next']}")
    return "\n".join(lines)


def main(args):
    """Entry point for `devicekit doctor`; exit code 2 when a problem blocks running."""
    info = gather(args.device)
    print(json.dumps(info, indent=2) if args.json else format_report(info), flush=True)
    return 2 if info["problems"] else 0

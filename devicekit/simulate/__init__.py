"""A stand-in `npu` device for machines without one: DEVICEKIT_SIMULATE=npu.

torch really dispatches to it: PrivateUse1 renamed "npu", a small C++ extension
(npu_standin.cpp: host memory, device guard, a fallback that runs every operator with
torch's CPU kernels), `torch.npu` (npu_module.py) and an `hccl` collective backend carried
by gloo (hccl.py). This package is the only code in devicekit that knows it is simulated.
"""

import atexit
import importlib.util
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

from devicekit.errors import UsageError
from devicekit.kinds.visible import parse_ascend

SIMULATE_ENV = "DEVICEKIT_SIMULATE"
DEVICES_ENV = "DEVICEKIT_SIMULATE_DEVICES"
MEMORY_ENV = "DEVICEKIT_SIMULATE_MEMORY"
VISIBLE_ENV = "ASCEND_RT_VISIBLE_DEVICES"
CHOICES = ("npu",)
DEFAULT_DEVICES = 2
MAX_DEVICES = 64

# The folder `devicekit simulate` puts first on PYTHONPATH: torch's autoload entry point
# for the stand-in, and its torch_npu.
SITE = Path(__file__).with_name("site")

_active = False


def requested(environ: Mapping[str, str]) -> str | None:
    """The device DEVICEKIT_SIMULATE asks for ("npu"), or None when it is unset or empty."""
    value = environ.get(SIMULATE_ENV, "").strip().lower()
    if not value:
        return None
    if value not in CHOICES:
        raise UsageError(
            f"{SIMULATE_ENV}={environ[SIMULATE_ENV]!r} is not a device devicekit "
            f"can simulate: use {' or '.join(CHOICES)}, or unset it"
        )
    return value


def visible_count(environ: Mapping[str, str]) -> int:
    """How many npu devices this process sees: DEVICEKIT_SIMULATE_DEVICES on the machine,
    narrowed by ASCEND_RT_VISIBLE_DEVICES as the Ascend runtime narrows it."""
    raw = environ.get(DEVICES_ENV, str(DEFAULT_DEVICES)).strip()
    # ASCII digits only: str.isdigit() also takes "²", which int() refuses.
    if not re.fullmatch(r"[0-9]{1,3}", raw) or not 1 <= int(raw) <= MAX_DEVICES:
        raise UsageError(
            f"{DEVICES_ENV}={environ[DEVICES_ENV]!r} must be a whole number of "
            f"simulated NPUs from 1 to {MAX_DEVICES}"
        )
    total = int(raw)
    if environ.get(VISIBLE_ENV) is None:
        return total
    try:
        ids = parse_ascend(VISIBLE_ENV, environ[VISIBLE_ENV])
    except UsageError:
        return 0  # the runtime sees no device; devicekit's npu kind says why
    absent = [i for i in ids if i >= total]
    if absent:
        raise UsageError(
            f"{VISIBLE_ENV}={environ[VISIBLE_ENV]!r} names NPU {absent[0]}, but "
            f"this machine has {total} (0-{total - 1}; simulated, {DEVICES_ENV}="
            f"{total}): list devices that exist"
        )
    return len(ids)


_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def memory_capacity(environ: Mapping[str, str]) -> int:
    """Bytes each simulated device holds, from DEVICEKIT_SIMULATE_MEMORY ("512MiB", "2GiB",
    "1.5GB", a number of bytes); 0 when it is unset: no limit but the host's."""
    raw = environ.get(MEMORY_ENV, "").strip()
    if not raw:
        return 0
    # ASCII digits only, as for the device count.
    size = re.fullmatch(r"([0-9]{1,15}(?:\.[0-9]{1,6})?) ?([A-Za-z]{0,3})", raw)
    scale = _UNITS.get(size.group(2).lower(), 0) if size else 0
    nbytes = int(float(size.group(1)) * scale) if size else 0
    if nbytes < 1:
        raise UsageError(
            f"{MEMORY_ENV}={environ[MEMORY_ENV]!r} is not a memory size: write it as "
            "512MiB, 2GiB or a number of bytes, or unset it for no limit"
        )
    return nbytes


def real_torch_npu_installed() -> bool:
    """Whether a torch_npu other than the stand-in's (site/torch_npu) is imported or can be."""
    module = sys.modules.get("torch_npu")
    spec = module.__spec__ if module is not None else importlib.util.find_spec("torch_npu")
    if spec is None:
        return module is not None
    return not (spec.origin or "").startswith(str(SITE) + os.sep)


def autoload() -> None:
    """torch's backend autoload entry point (group `torch.backends`, as torch_npu's own):
    `python -m devicekit simulate` puts it on PYTHONPATH (site/), so that every Python
    process of its command has the stand-in once it imports torch, devicekit or not."""
    activate_from_environment()


def activate_from_environment(environ: Mapping[str, str] = os.environ) -> bool:
    """Provide the stand-in device when DEVICEKIT_SIMULATE asks for it; whether it is active."""
    if requested(environ) is None:
        return _active
    activate(visible_count(environ), memory=memory_capacity(environ))
    return True


def activate(devices: int = DEFAULT_DEVICES, *, memory: int = 0) -> None:
    """Register the stand-in `npu` device with `devices` visible devices in this process,
    each holding `memory` bytes (0: as much as the host gives)."""
    global _active
    if _active:
        return
    import torch

    if real_torch_npu_installed():
        raise UsageError(
            f"{SIMULATE_ENV}=npu, but torch_npu is installed here: the stand-in "
            f"and a real NPU stack cannot share a process; unset {SIMULATE_ENV} "
            "to use torch_npu, or run the simulation in an environment without it"
        )
    owner = torch._C._get_privateuse1_backend_name()
    if owner not in ("privateuseone", "npu"):
        raise UsageError(
            f"{SIMULATE_ENV}=npu, but torch's extension device is taken by "
            f"{owner!r} in this process: unset {SIMULATE_ENV}"
        )

    from devicekit.simulate import build, fused, hccl, npu_amp, npu_module, rnn, sparse

    torch.utils.rename_privateuse1_backend("npu")
    native = build.load()
    native.set_device_count(devices)
    native.set_capacity(memory)
    npu_module._native = native
    # torch's _register_device_module is unannotated
    torch._register_device_module("npu", npu_module)  # type: ignore[no-untyped-call]
    sys.modules["torch.npu.amp"] = npu_amp
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
    torch.nn.parameter.UninitializedTensorMixin._allowed_methods.append(torch.Tensor.npu)  # type: ignore[attr-defined]
    hccl.register(native.host_view)
    rnn.register()
    sparse.register()
    fused.register()
    atexit.register(_settle_autograd_threads, os.getpid())
    _active = True


def _settle_autograd_threads(pid: int) -> None:
    # torch.autograd.backward leaves a Python object in the graph task, which the device's
    # autograd thread releases just after backward returns; if Python is finalizing by
    # then, the thread is killed inside C++ and the process aborts ("terminate called
    # without an active exception"). A last backward on each device, with no Python
    # object attached, returns only after that thread has let go of the previous one.
    if os.getpid() != pid:  # a forked child (a DataLoader worker) has no autograd threads
        return
    import torch
    from torch.autograd.variable import Variable

    from devicekit.simulate import npu_module

    for index in range(npu_module.device_count()):  # torch.npu
        leaf = torch.zeros((), device=f"npu:{index}", requires_grad=True)
        Variable._execution_engine.run_backward(
            (leaf * 1,), (torch.ones((), device=leaf.device),), False, False, (), True, True
        )

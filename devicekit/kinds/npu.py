"""Huawei Ascend NPUs through torch_npu (which registers `torch.npu`), collectives over HCCL.

torch_npu is imported only when an NPU is asked for or probed, and the reason it cannot
load is kept so every caller reports the same clear line.

Settings that decide speed, checked against torch-npu 2.13.0's sources:
- kernels: on the chips whose recommended default is the compile-once binary kernels
  (Atlas A2 "Ascend910B*", A3 "Ascend910_93*") devicekit sets `jit_compile=False` when it
  binds the device, so an older CANN's on-line compilation default cannot slow a run down;
  elsewhere (Ascend 910A) the CANN default stands. DEVICEKIT_NPU_JIT_COMPILE=0/1 forces it.
- autocast: device type "npu" (`torch.autocast("cuda")` on an NPU only warns and runs in fp32).
- GradScaler: torch_npu's `torch.npu.amp.GradScaler`, Ascend's recommendation (see
  `grad_scaler`).
"""

import importlib.metadata
import importlib.util
import os
import platform
import re
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any

import torch

from devicekit.errors import UsageError
from devicekit.kinds.base import AcceleratorKind, Profiler
from devicekit.kinds.visible import parse_ascend

CANN_SET_ENV = "/usr/local/Ascend/ascend-toolkit/set_env.sh"
CANN_INSTALL_INFO = "/etc/Ascend/ascend_cann_install.info"
JIT_COMPILE_ENV = "DEVICEKIT_NPU_JIT_COMPILE"
# torch_npu itself tells these chips apart by the same name prefixes.
BINARY_KERNEL_CHIPS = ("Ascend910B", "Ascend910_93")


def torch_npu_version() -> str | None:
    """The installed torch-npu distribution's version, read without importing it, or None."""
    try:
        return importlib.metadata.version("torch-npu")
    except importlib.metadata.PackageNotFoundError:
        return None


def cann_install(environ: Mapping[str, str]) -> dict[str, str | None]:
    """The CANN toolkit's version and folder, read from its install files without importing
    torch_npu: {"version", "path", "found_by"} (all None when none is found). Looked for
    where set_env.sh points (ASCEND_TOOLKIT_HOME, ASCEND_HOME_PATH), then under the
    Install_Path of /etc/Ascend/ascend_cann_install.info, /usr/local/Ascend and ~/Ascend
    (ascend-toolkit/latest up to CANN 8, cann from 8.5)."""
    roots = [
        (environ[var], var)
        for var in ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH")
        if environ.get(var)
    ]
    install_path = _info_value(CANN_INSTALL_INFO, "Install_Path")
    bases = ([(install_path, CANN_INSTALL_INFO)] if install_path else []) + [
        ("/usr/local/Ascend", "the default location"),
        (os.path.expanduser("~/Ascend"), "the default location"),
    ]
    for base, found_by in bases:
        roots += [
            (os.path.join(base, "ascend-toolkit", "latest"), found_by),
            (os.path.join(base, "cann"), found_by),
        ]
    arch = f"{platform.machine()}-linux"
    for root, found_by in roots:
        for folder in (root, os.path.join(root, "latest")):
            version = _info_value(
                os.path.join(folder, arch, "ascend_toolkit_install.info"), "version"
            )
            if version:
                return {"version": version, "path": os.path.realpath(folder), "found_by": found_by}
    return {"version": None, "path": None, "found_by": None}


def _info_value(path: str, key: str) -> str | None:
    """The value of `key=value` in an Ascend .info file, or None (no file, no key)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    for line in lines:
        name, sep, value = line.partition("=")
        if sep and name.strip() == key:
            return value.strip().strip('"') or None
    return None


def release(version: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) of a version string ("2.13.0+cpu", "2.13.0.post1"), or None."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    return None if match is None else (int(match[1]), int(match[2]), int(match[3] or 0))


def torch_npu_matches(npu_version: str, torch_version: str) -> bool:
    """Whether torch_npu `npu_version` pairs with torch `torch_version`: torch-npu X.Y.Z
    requires torch==X.Y.Z.* (its wheels' Requires-Dist)."""
    return release(npu_version) is not None and release(npu_version) == release(torch_version)


def jit_compile_override(environ: Mapping[str, str]) -> bool | None:
    """DEVICEKIT_NPU_JIT_COMPILE: True for "1" (kernels compiled on line), False for "0"
    (binary kernels), None when unset."""
    value = environ.get(JIT_COMPILE_ENV)
    if value is None:
        return None
    if value.strip() not in ("0", "1"):
        raise UsageError(
            f"{JIT_COMPILE_ENV}={value!r} must be 0 (binary kernels) or 1 "
            "(kernels compiled on line), or unset (devicekit's choice per chip)"
        )
    return value.strip() == "1"


class NpuKind(AcceleratorKind):
    name = "npu"
    default_backend = "hccl"
    accepted_backends = frozenset({"hccl"})
    backend_owner = "Ascend NPUs (Habana Gaudi uses the same name)"
    visible_devices_env: str = "ASCEND_RT_VISIBLE_DEVICES"
    install_hint = "pip install 'devicekit[npu]'"

    def __init__(self) -> None:
        self._load_error: tuple[str, str] | None = None
        self._loaded = False
        self._compile_mode_set = False

    def visible_devices(self, environ: Mapping[str, str]) -> list[int] | None:
        value = environ.get(self.visible_devices_env)
        return None if value is None else parse_ascend(self.visible_devices_env, value)

    @staticmethod
    def is_registered() -> bool:
        """Whether this process's torch already has the npu device (`torch.npu`)."""
        return torch._C._get_privateuse1_backend_name() == "npu" and hasattr(torch, "npu")

    @classmethod
    def is_installed(cls) -> bool:
        """Whether torch_npu can be found (without importing it), or torch has the npu
        device already."""
        return (
            "torch_npu" in sys.modules
            or cls.is_registered()
            or importlib.util.find_spec("torch_npu") is not None
        )

    def worth_a_warning_when_skipped(self) -> bool:
        return self.is_installed()

    def compile_backend(self) -> str | None:
        # torch_npu compiles for the NPU through Inductor: its torch_npu._inductor registers
        # the npu code generators on the first compile (torch_npu.utils._dynamo). A torch_npu
        # without that package (the stand-in's) gives inductor nothing to generate npu code.
        if importlib.util.find_spec("torch_npu") is None:
            return None
        return "inductor" if importlib.util.find_spec("torch_npu._inductor") else None

    def no_compiler_reason(self) -> str:
        return "no compiler for npu here (torch_npu's Inductor backend is missing)"

    def load_state(self) -> tuple[str, str]:
        """Import torch_npu once; return (state, reason) with state one of
        "ok", "not installed", "CANN missing", "import failed"."""
        if self._loaded or self.is_registered():
            return "ok", ""
        if self._load_error is not None:
            return self._load_error
        if not self.is_installed():
            return "not installed", (
                "torch_npu is not installed; install the release that matches "
                f"torch {torch.__version__.split('+')[0]}: {self.install_hint} "
                f"(or pip install torch-npu=={torch.__version__.split('+')[0]})"
            )
        try:
            import torch_npu  # noqa: F401  (registers torch.npu and the hccl backend)
        except ImportError as error:
            missing = str(error).split(":")[0]
            # Only the loader's "not found" means CANN is off the library path; an
            # "undefined symbol" in a .so found is a version mismatch, not a missing CANN.
            if ".so" in missing and "cannot open shared object file" in str(error):
                self._load_error = (
                    "CANN missing",
                    (
                        f"torch_npu is installed but the CANN libraries are not "
                        f"on the library path ({missing} not found): run `source {CANN_SET_ENV}` "
                        "(or your CANN install's set_env.sh) in this shell first"
                    ),
                )
            else:
                self._load_error = ("import failed", f"import torch_npu failed: {error}")
            return self._load_error
        except Exception as error:  # torch_npu raises RuntimeError on version/accelerator conflicts
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
            self._load_error = ("import failed", f"import torch_npu failed: {first_line}")
            return self._load_error
        self._loaded = True
        return "ok", ""

    def probe(self) -> tuple[bool, str]:
        if not self.is_installed():
            return False, self.load_state()[1]
        # Validate the variable before any NPU call: the runtime would silently hide devices.
        self.visible_devices(os.environ)
        state, reason = self.load_state()
        if state != "ok":
            return False, reason
        if not self.module.is_available() or self.module.device_count() == 0:
            shown = os.environ.get(self.visible_devices_env)
            return False, (
                f"torch_npu loaded but no NPU is usable "
                f"({self.visible_devices_env}={shown!r}); check `npu-smi info` and that no "
                "stale process holds the devices"
            )
        return True, ""

    def prepare_process_group(self, timeout_s: float, environ: MutableMapping[str, str]) -> None:
        # HCCL waits HCCL_CONNECT_TIMEOUT (default 120 s, range 120..7200) for links,
        # independently of torch's timeout; follow --dist-timeout unless the user set it.
        environ.setdefault("HCCL_CONNECT_TIMEOUT", str(int(min(max(timeout_s, 120), 7200))))

    def device_count(self) -> int:
        if self.load_state()[0] != "ok":
            return 0
        count: int = self.module.device_count()
        return count

    def set_device(self, index: int) -> None:
        jit_compile = jit_compile_override(os.environ)
        self.module.set_device(index)
        if self._compile_mode_set:
            return
        if jit_compile is None and self.module.get_device_name().startswith(BINARY_KERNEL_CHIPS):
            jit_compile = False
        # Not is_jit_compile_false(): it would initialise the device to answer.
        if jit_compile is not None:
            self.module.set_compile_mode(jit_compile=jit_compile)
        self._compile_mode_set = True

    def grad_scaler(self, enabled: bool, **kwargs: Any) -> torch.amp.GradScaler:
        # torch_npu's subclass of torch.amp.GradScaler, as Ascend's migration guide uses:
        # on chips that saturate instead of producing inf/nan (910A) it reads the overflow
        # flag torch's own class cannot see, and `dynamic=False` gives a static loss scale.
        scaler: torch.amp.GradScaler = self.module.amp.GradScaler(enabled=enabled, **kwargs)
        return scaler

    def profiler(
        self, output_dir: str, wait: int, warmup: int, active: int, repeat: int, **options: Any
    ) -> Profiler:
        # torch.profiler does not see the NPU: torch_npu's profiler records its operators
        # (CANN's msprof underneath) and writes the trace layout TensorBoard's Ascend
        # profiler plugin reads. Where torch.npu was registered without torch_npu's
        # profiler (the stand-in, and its torch_npu), only the host can be profiled.
        try:
            import torch_npu.profiler
        except ImportError:
            return super().profiler(output_dir, wait, warmup, active, repeat, **options)

        profiler: Profiler = torch_npu.profiler.profile(
            activities=[
                torch_npu.profiler.ProfilerActivity.CPU,
                torch_npu.profiler.ProfilerActivity.NPU,
            ],
            schedule=torch_npu.profiler.schedule(
                wait=wait, warmup=warmup, active=active, repeat=repeat
            ),
            on_trace_ready=torch_npu.profiler.tensorboard_trace_handler(output_dir),
            **options,
        )
        return profiler

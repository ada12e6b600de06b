"""Huawei Ascend NPUs through torch_npu (which registers `torch.npu`), collectives over HCCL.

torch_npu is imported only when an NPU is asked for or probed, and the reason it cannot
load is kept so every caller reports the same clear line.
"""

import importlib.metadata
import importlib.util
import os
import sys

import torch

from devicekit.kinds.base import AcceleratorKind
from devicekit.kinds.visible import parse_ascend

CANN_SET_ENV = "/usr/local/Ascend/ascend-toolkit/set_env.sh"


def torch_npu_version():
    """The installed torch-npu distribution's version, read without importing it, or None."""
    try:
        return importlib.metadata.version("torch-npu")
    except importlib.metadata.PackageNotFoundError:
        return None


class NpuKind(AcceleratorKind):
    name = "npu"
    default_backend = "hccl"
    accepted_backends = frozenset({"hccl"})
    visible_devices_env = "ASCEND_RT_VISIBLE_DEVICES"
    install_hint = "pip install 'devicekit[npu]'"

    def __init__(self):
        self._load_error = None
        self._loaded = False

    def visible_devices(self, environ):
        value = environ.get(self.visible_devices_env)
        return None if value is None else parse_ascend(self.visible_devices_env, value)

    @staticmethod
    def is_installed():
        """Whether torch_npu can be found (without importing it)."""
        return "torch_npu" in sys.modules or importlib.util.find_spec("torch_npu") is not None

    def worth_a_warning_when_skipped(self):
        return self.is_installed()

    def load_state(self):
        """Import torch_npu once; return (state, reason) with state one of
        "ok", "not installed", "CANN missing", "import failed"."""
        if self._loaded:
            return "ok", ""
        if self._load_error is not None:
            return self._load_error
        if not self.is_installed():
            return "not installed", (
                "torch_npu is not installed; install the release that matches "
                f"torch {torch.__version__.split('+')[0]}: {self.install_hint} "
                f"(or pip install torch-npu=={torch.__version__.split('+')[0]})")
        try:
            import torch_npu  # noqa: F401  (registers torch.npu and the hccl backend)
        except ImportError as error:
            missing = str(error).split(":")[0]
            # Only the loader's "not found" means CANN is off the library path; an
            # "undefined symbol" in a .so found is a version mismatch, not a missing CANN.
            if ".so" in missing and "cannot open shared object file" in str(error):
                self._load_error = ("CANN missing", (
                    f"torch_npu is installed but the CANN libraries are not "
                    f"on the library path ({missing} not found): run `source {CANN_SET_ENV}` "
                    "(or your CANN install's set_env.sh) in this shell first"))
            else:
                self._load_error = ("import failed", f"import torch_npu failed: {error}")
            return self._load_error
        except Exception as error:  # torch_npu raises RuntimeError on version/accelerator conflicts
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
            self._load_error = ("import failed", f"import torch_npu failed: {first_line}")
            return self._load_error
        self._loaded = True
        return "ok", ""

    def probe(self):
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
                "stale process holds the devices")
        return True, ""

    def prepare_process_group(self, timeout_s, environ):
        # HCCL waits HCCL_CONNECT_TIMEOUT (default 120 s, range 120..7200) for links,
        # independently of torch's timeout; follow --dist-timeout unless the user set it.
        environ.setdefault("HCCL_CONNECT_TIMEOUT", str(int(min(max(timeout_s, 120), 7200))))

    def device_count(self):
        if self.load_state()[0] != "ok":
            return 0
        return self.module.device_count()

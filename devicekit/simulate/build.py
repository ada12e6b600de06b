"""Compiling the stand-in's C++ extension once, and loading it from the cache after.

The cache key covers the source, torch's and Python's versions, so an upgrade rebuilds.
One process builds at a time (a file lock), into a temporary folder that is renamed into
place only when the build succeeded: a failed or interrupted build leaves nothing behind.
"""

import fcntl
import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Protocol

import torch

from devicekit import writable
from devicekit.errors import UsageError

SOURCE = Path(__file__).with_name("npu_standin.cpp")
NAME = "devicekit_npu_standin"
CACHE_ENV = "DEVICEKIT_CACHE"
# Build once for at most this long: ranks that wait for another's build wait as long.
BUILD_TIMEOUT_S = 600


class Extension(Protocol):
    """The compiled extension's functions (npu_standin.cpp's PYBIND11_MODULE)."""

    def set_device_count(self, count: int) -> None: ...

    def device_count(self) -> int: ...

    def set_current_device(self, index: int) -> None: ...

    def current_device(self) -> int: ...

    def host_view(self, tensor: torch.Tensor) -> torch.Tensor: ...  # a CPU tensor, same memory

    def set_capacity(self, nbytes: int) -> None: ...  # per device; 0: no limit

    def capacity(self) -> int: ...  # what set_capacity set

    def memory_usage(self, index: int) -> tuple[int, int]: ...  # (bytes in use, their peak)

    def reset_peak(self, index: int) -> None: ...


def cache_root() -> Path:
    """DEVICEKIT_CACHE, else $XDG_CACHE_HOME/devicekit, else ~/.cache/devicekit."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "devicekit"


def _key() -> str:
    digest = hashlib.sha256(SOURCE.read_bytes())
    digest.update(f"{torch.__version__} {sys.version} {sys.platform}".encode())
    return digest.hexdigest()[:16]


def _import(folder: Path) -> Extension:
    path = next(folder.glob(f"{NAME}*.so"))
    loader = importlib.machinery.ExtensionFileLoader(NAME, str(path))
    spec = importlib.machinery.ModuleSpec(NAME, loader, origin=str(path))
    spec.has_location = True  # origin is the file: the module gets its __file__
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def missing_tools() -> str:
    """What the build needs and this machine lacks, as a phrase; '' when nothing is missing."""
    from torch.utils.cpp_extension import is_ninja_available

    missing = []
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        missing.append(f"a C++ compiler ({compiler!r} is not on PATH)")
    if not is_ninja_available():
        missing.append("ninja")
    return " and ".join(missing)


def load() -> Extension:
    """The compiled extension: from the cache, or built now (about 20 s on 2 cores)."""
    root = cache_root()
    folder = root / f"npu-standin-{_key()}"
    try:
        built = folder.is_dir()  # an OSError here: a name too long, a file on the path
        if not built:
            existing, to_make = writable.nearest_existing(root)
            root.mkdir(parents=True, exist_ok=True)
            lock = open(root / "npu-standin.lock", "w")
    except OSError as error:
        raise UsageError(
            f"the npu stand-in's build cache {str(root)!r} is not writable "
            f"({error.strerror or error}): set {CACHE_ENV} to a writable folder"
        ) from None
    if built:
        return _import(folder)
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if folder.is_dir():  # built by another process while this one waited
            return _import(folder)
        missing = missing_tools()
        if missing:
            _remove_made(root / "npu-standin.lock", existing, to_make)
            raise UsageError(
                f"DEVICEKIT_SIMULATE=npu compiles a small C++ extension on first use and "
                f"needs {missing}: install them (Debian/Ubuntu: apt-get install g++ "
                f"ninja-build; or pip install ninja) and run again"
            )
        return _build(root, folder)


def _remove_made(lock: Path, existing: str, made: list[str]) -> None:
    """Undo what a start that cannot build made: the lock file, the folders made for it
    (each only if empty: another process may have built meanwhile)."""
    lock.unlink(missing_ok=True)
    folders = [os.path.join(existing, *made[: i + 1]) for i in range(len(made))]
    for folder in reversed(folders):
        try:
            os.rmdir(folder)
        except OSError:
            return


def _build(root: Path, folder: Path) -> Extension:
    from torch.utils.cpp_extension import load as compile_and_load

    staging = Path(tempfile.mkdtemp(prefix="npu-standin-build.", dir=root))
    try:
        module: ModuleType = compile_and_load(
            NAME, [str(SOURCE)], build_directory=str(staging), extra_cflags=["-O2"], verbose=False
        )
    except (RuntimeError, OSError) as error:
        shutil.rmtree(staging, ignore_errors=True)
        first = next(
            (line for line in str(error).splitlines() if "error" in line.lower()),
            str(error).strip().splitlines()[0] if str(error).strip() else repr(error),
        )
        raise UsageError(
            f"DEVICEKIT_SIMULATE=npu: building the stand-in failed: {first.strip()}"
        ) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    os.replace(staging, folder)
    return module

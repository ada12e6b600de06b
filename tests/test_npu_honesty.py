"""devicekit's NPU code checked against the real torch-npu 2.13.0 wheel.

The wheel is downloaded (never imported, never installed into this environment: with
torch_npu in site-packages and no CANN, torch's backend autoload makes `import torch`
itself fail). Its sources show whether every `torch.npu.*` devicekit calls exists and
whether it registers what devicekit relies on. Installed with `pip --target` into a
cache folder, it is then put on PYTHONPATH of subprocesses to observe the real failure
modes of a machine without CANN.
"""

import ast
import configparser
import ctypes
import email.parser
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
DEVICEKIT = REPO / "devicekit"
FAKE_NPU = REPO / "tests" / "fake_npu"
NPU_VERSION = "2.13.0"
TIMEOUT_S = 120
PIP_TIMEOUT_S = 600

# Variables that would change what a devicekit subprocess sees; the tests set their own.
_SCRUBBED = {"TORCH_DEVICE_BACKEND_AUTOLOAD", "DEVICEKIT_DEVICE", "CUDA_VISIBLE_DEVICES",
             "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
             "MASTER_PORT", "GROUP_RANK", "NODE_RANK", "TORCHELASTIC_RUN_ID", "RANK_ID",
             "RANK_SIZE", "RANK_TABLE_FILE", "TORCH_TRANSFER_TO_NPU"}
_SCRUBBED_PREFIXES = ("ASCEND_", "HCCL_", "SLURM_", "OMPI_", "FAKE_NPU_")


def subprocess_env(*paths, **overrides):
    """os.environ without launcher/device variables, with `paths` then the repo root
    prepended to PYTHONPATH, and `overrides` applied."""
    env = {name: value for name, value in os.environ.items()
           if name not in _SCRUBBED and not name.startswith(_SCRUBBED_PREFIXES)}
    inherited = [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []
    env["PYTHONPATH"] = os.pathsep.join([*map(str, paths), str(REPO), *inherited])
    env.update(overrides)
    return env


def run_python(args, env):
    """Run `python ARGS` from the repo root with a timeout; return the CompletedProcess."""
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=TIMEOUT_S)


def _cache_dir():
    """$DEVICEKIT_TEST_CACHE, or ~/.cache/devicekit-tests."""
    configured = os.environ.get("DEVICEKIT_TEST_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "devicekit-tests"


def _cached_wheels(cache):
    """The torch-npu wheels in `cache` built for this Python (cpXY tag)."""
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    return sorted(cache.glob(f"torch_npu-{NPU_VERSION}-{tag}-*.whl"))


def _last_line(text):
    """The last non-empty line of `text` (pip's actual complaint), or ''."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


@pytest.fixture(scope="session")
def npu_wheel():
    """Path to the torch-npu wheel, downloaded once into the cache (skip when impossible)."""
    cache = _cache_dir()
    if not _cached_wheels(cache):
        cache.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pip", "download", f"torch-npu=={NPU_VERSION}",
                   "--no-deps", "-d", str(cache)]
        try:
            result = subprocess.run(command, capture_output=True, text=True,
                                    timeout=PIP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.skip(f"pip download torch-npu=={NPU_VERSION} took over {PIP_TIMEOUT_S} s")
        if result.returncode != 0 or not _cached_wheels(cache):
            pytest.skip(f"cannot download torch-npu=={NPU_VERSION} for this Python: "
                        f"{_last_line(result.stderr) or _last_line(result.stdout)}")
    return _cached_wheels(cache)[-1]


@pytest.fixture(scope="session")
def wheel(npu_wheel):
    """The wheel's sources, read from the archive."""
    return WheelSources(npu_wheel)


@pytest.fixture(scope="session")
def npu_target(npu_wheel):
    """A folder holding the wheel installed with `pip install --no-deps --target`, reused
    while it comes from the same wheel. Never on this process's sys.path."""
    target = npu_wheel.parent / "npu_target"
    stamp = target / ".from-wheel"
    if stamp.is_file() and stamp.read_text() == npu_wheel.name:
        return target
    staging = Path(tempfile.mkdtemp(prefix="npu_target.", dir=npu_wheel.parent))
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile",
             "--target", str(staging), str(npu_wheel)],
            capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
        assert result.returncode == 0, f"pip install --target failed: {result.stderr}"
        (staging / ".from-wheel").write_text(npu_wheel.name)
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


@pytest.fixture(scope="session")
def no_cann():
    """Skip when CANN's libhccl.so loads here: the no-CANN failure modes need it absent."""
    try:
        ctypes.CDLL("libhccl.so")
    except OSError:
        return
    pytest.skip("CANN (libhccl.so) is installed here; these tests observe a machine without it")


class WheelSources:
    """Read-only, static view of the Python sources inside a wheel (nothing is imported)."""

    def __init__(self, path):
        with zipfile.ZipFile(path) as archive:
            self.files = {name: archive.read(name).decode("utf-8", "replace")
                          for name in archive.namelist()
                          if name.endswith((".py", ".txt")) or name.endswith("/METADATA")}

    def python_files(self):
        """(path, source) for every .py file in the wheel."""
        return [(name, text) for name, text in self.files.items() if name.endswith(".py")]

    def dist_info(self, name):
        """The text of `name` in the wheel's .dist-info folder."""
        matches = [text for path, text in self.files.items()
                   if path.endswith(f".dist-info/{name}") and path.count("/") == 1]
        assert matches, f"the wheel has no .dist-info/{name}"
        return matches[0]

    def module_source(self, dotted):
        """The source of module `dotted` (package __init__ or plain module), or None."""
        base = dotted.replace(".", "/")
        return self.files.get(f"{base}/__init__.py", self.files.get(f"{base}.py"))

    def top_level_names(self, dotted):
        """Names module `dotted` binds at top level or lists in a literal __all__."""
        names = set()
        statements = list(ast.parse(self.module_source(dotted)).body)
        while statements:
            node = statements.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(target.id for target in targets if isinstance(target, ast.Name))
                is_all = any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets)
                if is_all and isinstance(node.value, (ast.List, ast.Tuple)):
                    names.update(item.value for item in node.value.elts
                                 if isinstance(item, ast.Constant))
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                for block in ("body", "orelse", "finalbody"):
                    statements.extend(getattr(node, block, []))
                for handler in getattr(node, "handlers", []):
                    statements.extend(handler.body)
        return names

    def resolves(self, dotted):
        """Whether `torch_npu.a.b.c` names a module in the wheel or a name such a module
        defines (attributes below a defined name are not followed)."""
        parts = dotted.split(".")
        assert parts[0] == "torch_npu", dotted
        module = "torch_npu"
        for part in parts[1:]:
            if self.module_source(f"{module}.{part}") is not None:
                module = f"{module}.{part}"
                continue
            return part in self.top_level_names(module)
        return True


def _dotted(node):
    """['a', 'b', 'c'] for the expression a.b.c, or None when it does not start at a name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id, *reversed(parts)] if isinstance(node, ast.Name) else None


class _NpuNameCollector(ast.NodeVisitor):
    """Collects, as "torch_npu.npu.X" / "torch_npu.X", the torch_npu names a devicekit
    source file uses.

    `torch.npu.X` and `torch_npu.X` chains count anywhere. `self.module.X` and
    `module.X` count inside the classes NpuKind is made of (its `module` is torch.npu);
    `<kind>.module.X` counts anywhere else (generic code driving whatever kind it got).
    """

    def __init__(self, path, npu_classes):
        self.path = path
        self.npu_classes = npu_classes
        self.in_npu_class = False
        self.names = set()

    def visit_ClassDef(self, node):
        outer = self.in_npu_class
        self.in_npu_class = (self.path, node.name) in self.npu_classes
        self.generic_visit(node)
        self.in_npu_class = outer

    def visit_Attribute(self, node):
        chain = _dotted(node)
        if chain is None:
            self.generic_visit(node)
            return
        head, rest = chain[:2], chain[2:]
        if head == ["torch", "npu"] and rest:
            self.names.add(".".join(["torch_npu", "npu", *rest]))
        elif chain[0] == "torch_npu" and len(chain) > 1:
            self.names.add(".".join(chain))
        elif chain[1:2] == ["module"] and rest and (chain[0] != "self" or self.in_npu_class):
            self.names.add(".".join(["torch_npu", "npu", *rest]))
        elif chain[0] == "module" and len(chain) > 1 and self.in_npu_class:
            self.names.add(".".join(["torch_npu", "npu", *chain[1:]]))


def npu_names_devicekit_uses():
    """Every torch_npu name devicekit's sources use, found by reading them with ast."""
    from devicekit.kinds.npu import NpuKind

    npu_classes = {(Path(inspect.getsourcefile(cls)).resolve(), cls.__name__)
                   for cls in NpuKind.__mro__ if cls.__module__.startswith("devicekit")}
    names = set()
    for path in sorted(DEVICEKIT.rglob("*.py")):
        collector = _NpuNameCollector(path.resolve(), npu_classes)
        collector.visit(ast.parse(path.read_text(), str(path)))
        names |= collector.names
    return names


# -- Test A: the names and registrations devicekit relies on exist in the wheel ---------------

def test_every_torch_npu_name_devicekit_calls_exists_in_the_wheel(wheel):
    used = npu_names_devicekit_uses()
    core = {f"torch_npu.npu.{name}" for name in
            ("set_device", "synchronize", "device_count", "is_available", "memory_allocated")}
    assert core <= used, f"the scan missed calls devicekit makes: {sorted(core - used)}"
    assert not wheel.resolves("torch_npu.npu.no_such_function"), "the wheel check cannot fail"
    missing = sorted(name for name in used if not wheel.resolves(name))
    assert not missing, f"devicekit calls names torch-npu {NPU_VERSION} lacks: {missing}"


def test_wheel_renames_privateuse1_and_registers_torch_npu(wheel):
    sources = "\n".join(text for _, text in wheel.python_files())
    assert 'rename_privateuse1_backend("npu")' in sources
    assert '_register_device_module("npu"' in sources


def _registers_hccl_for_npu(node):
    """Whether `node` is a call register_backend("hccl", ..., devices=[... "npu" ...])."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "register_backend" and node.args):
        return False
    first = node.args[0]
    if not (isinstance(first, ast.Constant) and first.value == "hccl"):
        return False
    devices = [kw.value for kw in node.keywords if kw.arg == "devices"]
    return bool(devices) and "npu" in {getattr(item, "value", None)
                                       for item in getattr(devices[0], "elts", [])}


def test_wheel_registers_hccl_for_the_npu_device(wheel):
    sources = [text for _, text in wheel.python_files() if "register_backend(" in text]
    calls = [node for text in sources for node in ast.walk(ast.parse(text))
             if _registers_hccl_for_npu(node)]
    assert calls, 'no register_backend("hccl", ..., devices=["npu"]) in the wheel'


def test_wheel_autoloads_through_the_torch_backends_entry_point(wheel):
    entry_points = configparser.ConfigParser()
    entry_points.read_string(wheel.dist_info("entry_points.txt"))
    assert entry_points.get("torch.backends", "torch_npu", fallback=None) == "torch_npu:_autoload"


def test_wheel_pins_the_installed_torch_release(wheel):
    """devicekit tells users `pip install torch-npu==<torch release>`: that wheel must fit."""
    metadata = email.parser.Parser().parsestr(wheel.dist_info("METADATA"))
    release = torch.__version__.split("+")[0]
    assert metadata["Version"] == NPU_VERSION == release
    assert f"torch=={release}.*" in metadata.get_all("Requires-Dist")


# -- Test B: the real wheel without CANN, in subprocesses ------------------------------------

def test_import_torch_fails_with_the_wheel_on_the_path(npu_target, no_cann):
    """The autoload pitfall devicekit works around: plain `import torch` breaks."""
    result = run_python(["-c", "import torch"], subprocess_env(npu_target))
    assert result.returncode != 0
    assert "torch_npu" in result.stderr
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD" in result.stderr


def test_importing_devicekit_first_keeps_torch_importable(npu_target, no_cann):
    code = "import devicekit, torch; import sys; assert 'torch_npu' not in sys.modules"
    result = run_python(["-c", code], subprocess_env(npu_target))
    assert result.returncode == 0, result.stderr


def test_check_on_npu_without_cann_prints_one_line(npu_target, no_cann):
    result = run_python(["-m", "devicekit", "check", "--device", "npu"],
                        subprocess_env(npu_target))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "CANN" in lines[0] and "libhccl.so" in lines[0] and "set_env.sh" in lines[0]
    assert "Traceback" not in result.stderr + result.stdout


def test_doctor_auto_without_cann_falls_back_to_cpu(npu_target, no_cann):
    result = run_python(["-m", "devicekit", "doctor", "--json"], subprocess_env(npu_target))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["torch_npu"]["state"] == "CANN missing"
    assert report["torch_npu"]["version"] == NPU_VERSION
    assert report["device"] == "cpu"
    assert report["problems"] == []
    for line in result.stderr.strip().splitlines():
        assert line.startswith("devicekit: warning:") and "skipped npu" in line, result.stderr


def test_doctor_on_npu_without_cann_reports_the_problem(npu_target, no_cann):
    result = run_python(["-m", "devicekit", "doctor", "--device", "npu"],
                        subprocess_env(npu_target))
    assert result.returncode == 2, result.stderr
    problems = [line for line in result.stdout.splitlines() if line.startswith("PROBLEM")]
    assert problems and "CANN" in problems[0], result.stdout
    assert "Traceback" not in result.stderr + result.stdout


# -- No wheel needed ---------------------------------------------------------------------------

@pytest.mark.parametrize("paths", [(), (FAKE_NPU,)], ids=["plain", "torch_npu-importable"])
def test_import_devicekit_does_not_import_torch_npu(paths):
    code = "import sys, devicekit; print('torch_npu' in sys.modules)"
    result = run_python(["-c", code], subprocess_env(*paths))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"

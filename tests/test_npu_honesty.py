"""devicekit's NPU code checked against the real torch-npu 2.13.0 wheel.

The wheel is downloaded (never imported, never installed into this environment: with
torch_npu in site-packages and no CANN, torch's backend autoload makes `import torch`
itself fail) and checked against its sha256, pinned in tests/support/npu_wheel.py. Its
sources show whether every `torch.npu.*` devicekit calls exists and whether it registers
what devicekit relies on. Installed with `pip --target` into a cache folder, it is then put
on PYTHONPATH of subprocesses to observe the real failure modes of a machine without CANN.

Where a test cannot run (no download, no wheel for this Python, CANN present) it skips with
the reason, except in CI (CI=true or CI=1), where the same condition fails the test: these
tests must not pass by skipping there.
"""

import ast
import configparser
import copy
import ctypes
import email.parser
import hashlib
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path

import pytest
import torch
from packaging.tags import sys_tags

from devicekit.environments import ALL_VARIABLES
from support.npu_wheel import (
    FALLBACK_TAG,
    NPU_VERSION,
    WHEEL_SHA256,
    fetch_wheel,
    native_tag,
    skip_or_fail,
    verify_sha256,
    wheel_name,
)
from support.processes import Processes, describe
from support.scenario_process import Scenario, outcome, result, start_batch

REPO = Path(__file__).resolve().parents[1]
DEVICEKIT = REPO / "devicekit"
FAKE_NPU = REPO / "tests" / "fake_npu"
TIMEOUT_S = 120
PIP_INSTALL_S = 300  # `pip install --target` of the wheel (npu_target)

# Variables that would change what a devicekit subprocess sees (every launcher variable
# devicekit reads, and more); the tests set their own.
_SCRUBBED = {
    "TORCH_DEVICE_BACKEND_AUTOLOAD",
    "CUDA_VISIBLE_DEVICES",
    "TORCH_TRANSFER_TO_NPU",
    *ALL_VARIABLES,
}
_SCRUBBED_PREFIXES = ("ASCEND_", "HCCL_", "DEVICEKIT_", "FAKE_NPU_")


def subprocess_env(*paths, **overrides):
    """os.environ without launcher/device variables, with `paths` then the repo root
    prepended to PYTHONPATH, and `overrides` applied."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in _SCRUBBED and not name.startswith(_SCRUBBED_PREFIXES)
    }
    inherited = [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []
    env["PYTHONPATH"] = os.pathsep.join([*map(str, paths), str(REPO), *inherited])
    env.update(overrides)
    return env


def run_python(args, env):
    """Run `python ARGS` from the repo root with a timeout; return the CompletedProcess."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


@pytest.fixture(scope="session")
def npu_wheel():
    """The pinned torch-npu wheel this Python and platform install; skips (fails in CI)
    when there is none or it cannot be downloaded."""
    tag = native_tag()
    if tag is None:
        skip_or_fail(
            f"no torch-npu {NPU_VERSION} wheel fits this interpreter "
            f"(best tag {next(iter(sys_tags()))}; pinned: {sorted(WHEEL_SHA256)})"
        )
    return fetch_wheel(tag)


@pytest.fixture(scope="session")
def wheel():
    """The wheel's sources, read from the archive: this machine's wheel, or the pinned
    cp311 x86_64 one where none fits (the .py files are the same)."""
    return WheelSources(fetch_wheel(native_tag() or FALLBACK_TAG))


@pytest.fixture(scope="session")
def npu_target(npu_wheel):
    """A folder holding the wheel installed with `pip install --no-deps --target`, reused
    while it comes from the same wheel. Never on this process's sys.path."""
    target = npu_wheel.parent / "npu_target"
    stamp = target / ".from-wheel"
    expected_stamp = f"{npu_wheel.name} sha256={WHEEL_SHA256[native_tag()]}"
    if stamp.is_file() and stamp.read_text() == expected_stamp:
        return target
    staging = Path(tempfile.mkdtemp(prefix="npu_target.", dir=npu_wheel.parent))
    try:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--no-deps",
                "--no-index",
                "--no-compile",
                "--disable-pip-version-check",
                "--target",
                str(staging),
                str(npu_wheel),
            ],
            capture_output=True,
            text=True,
            timeout=PIP_INSTALL_S,
            stdin=subprocess.DEVNULL,
        )
        assert result.returncode == 0, f"pip install --target failed: {result.stderr}"
        (staging / ".from-wheel").write_text(expected_stamp)
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


@pytest.fixture(scope="session")
def no_cann():
    """Skip (fail in CI) when CANN's libhccl.so loads here: the no-CANN failure modes need
    it absent."""
    try:
        ctypes.CDLL("libhccl.so")
    except OSError:
        return
    skip_or_fail("CANN (libhccl.so) is installed here; these tests observe a machine without it")


_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_BLOCKS = (ast.If, ast.Try, getattr(ast, "TryStar", ast.Try), ast.With)


def _flattened(statements):
    """`statements` in source order, with the blocks of if/try/with statements opened."""
    for node in statements:
        if not isinstance(node, _BLOCKS):
            yield node
            continue
        yield from _flattened(node.body)
        for handler in getattr(node, "handlers", []):
            yield from _flattened(handler.body)
        yield from _flattened(getattr(node, "orelse", []))
        yield from _flattened(getattr(node, "finalbody", []))


def _target_names(target):
    """The names an assignment to `target` binds (a name, or a tuple/list of them)."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for item in target.elts for name in _target_names(item)]
    return []


def _bindings(statements):
    """(name, node, imported) for each name the module body `statements` binds, in source
    order: `imported` is the name a `from M import` takes from M, else None; a
    `from M import *` appears with the name "*"."""
    for node in _flattened(statements):
        if isinstance(node, _DEFINITIONS):
            yield node.name, node, None
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield (alias.asname or alias.name).split(".")[0], node, None
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name == "*":
                    yield "*", node, None
                else:
                    yield alias.asname or alias.name, node, alias.name
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in _target_names(target):
                    yield name, node, None


class WheelSources:
    """Read-only, static view of the Python sources inside a wheel (nothing is imported)."""

    def __init__(self, path):
        with zipfile.ZipFile(path) as archive:
            self.files = {
                name: archive.read(name).decode("utf-8", "replace")
                for name in archive.namelist()
                if name.endswith((".py", ".txt", ".yaml")) or name.endswith("/METADATA")
            }

    def python_files(self):
        """(path, source) for every .py file in the wheel."""
        return [(name, text) for name, text in self.files.items() if name.endswith(".py")]

    def dist_info(self, name):
        """The text of `name` in the wheel's .dist-info folder."""
        matches = [
            text
            for path, text in self.files.items()
            if path.endswith(f".dist-info/{name}") and path.count("/") == 1
        ]
        assert matches, f"the wheel has no .dist-info/{name}"
        return matches[0]

    def module_source(self, dotted):
        """The source of module `dotted` (package __init__ or plain module), or None."""
        base = dotted.replace(".", "/")
        return self.files.get(f"{base}/__init__.py", self.files.get(f"{base}.py"))

    def top_level_names(self, dotted, _seen=None):
        """Names module `dotted` binds at top level, lists in a literal __all__, or takes in
        with `from M import *` from a module M of the wheel (M's __all__, else its public
        names, as Python does)."""
        seen = set() if _seen is None else _seen
        seen.add(dotted)
        names, star_modules = set(), []
        statements = list(ast.parse(self.module_source(dotted)).body)
        while statements:
            node = statements.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
                star_modules.append(self._star_module(dotted, node))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(target.id for target in targets if isinstance(target, ast.Name))
                is_all = any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets)
                if is_all and isinstance(node.value, (ast.List, ast.Tuple)):
                    names.update(
                        item.value for item in node.value.elts if isinstance(item, ast.Constant)
                    )
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                for block in ("body", "orelse", "finalbody"):
                    statements.extend(getattr(node, block, []))
                for handler in getattr(node, "handlers", []):
                    statements.extend(handler.body)
        for module in star_modules:
            if module in seen or self.module_source(module) is None:
                continue
            exported = self._literal_all(module)
            if exported is None:
                exported = {
                    name for name in self.top_level_names(module, seen) if not name.startswith("_")
                }
            names |= exported
        return names

    def operator_schemas(self):
        """{name: parameters} of each operator torch_npu binds from C++ (no Python def):
        `- func:` lines of the native-functions yaml files (the overload without a dot),
        then the signature line of each `_add_torch_npu_docstr` in _op_plugin_docs.py (the
        op-plugin's operators), parsed by schema_parameters."""
        if hasattr(self, "_schemas"):
            return self._schemas
        schemas = {}
        for path, text in sorted(self.files.items()):
            if path.startswith("torch_npu/") and path.endswith(".yaml"):
                for line in text.splitlines():
                    found = re.match(r"\s*- func: (\w+)\((.*)\)\s*->", line)
                    if found and found.group(1) not in schemas:
                        schemas[found.group(1)] = schema_parameters(found.group(2))
        with warnings.catch_warnings():  # the docs' LaTeX: "invalid escape sequence"
            warnings.simplefilter("ignore", (DeprecationWarning, SyntaxWarning))
            docs = ast.parse(self.files["torch_npu/_op_plugin_docs.py"])
        for call in ast.walk(docs):
            if not (
                isinstance(call, ast.Call)
                and getattr(call.func, "id", None) == "_add_torch_npu_docstr"
                and all(isinstance(arg, ast.Constant) for arg in call.args)
            ):
                continue
            name, doc = (arg.value for arg in call.args)
            signature = _signature_in(doc, f"torch_npu.{name}(")
            if signature is not None and name not in schemas:
                schemas[name] = schema_parameters(signature)
        self._schemas = schemas
        return schemas

    def module_path(self, dotted):
        """The path in the wheel of module `dotted`'s source file."""
        base = dotted.replace(".", "/")
        return f"{base}/__init__.py" if f"{base}/__init__.py" in self.files else f"{base}.py"

    def definition(self, dotted, _seen=None):
        """(path in the wheel, ast node) of the top-level `def` or `class` that the name
        `torch_npu.a.b.name` is bound to, following re-exports (`from .m import name`,
        `from .m import *`) through the wheel's modules; the module's last binding of the
        name counts, as in Python. None when that binding is no def or class of the wheel
        (an assignment, an import from outside the wheel) or there is none."""
        seen = set() if _seen is None else _seen
        module, _, name = dotted.rpartition(".")
        if dotted in seen or self.module_source(module) is None:
            return None
        seen.add(dotted)
        last = None
        for bound, node, imported in _bindings(ast.parse(self.module_source(module)).body):
            if bound == name or (
                bound == "*" and name in self._star_exports(self._star_module(module, node))
            ):
                last = node, imported or name
        if last is None:
            return None
        node, imported = last
        if isinstance(node, _DEFINITIONS):
            return self.module_path(module), node
        if isinstance(node, ast.ImportFrom):
            return self.definition(f"{self._star_module(module, node)}.{imported}", seen)
        return None

    def _star_exports(self, dotted):
        """The names `from <dotted> import *` takes from module `dotted` of the wheel."""
        if self.module_source(dotted) is None:
            return set()
        exported = self._literal_all(dotted)
        if exported is None:
            exported = {name for name in self.top_level_names(dotted) if not name.startswith("_")}
        return exported

    def _star_module(self, dotted, node):
        """The dotted name of the module that `from ... import` (`*` or names) in module
        `dotted` reads."""
        if not node.level:
            return node.module
        is_package = f"{dotted.replace('.', '/')}/__init__.py" in self.files
        package = dotted if is_package else dotted.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        return f"{package}.{node.module}" if node.module else package

    def _literal_all(self, dotted):
        """The names in module `dotted`'s top-level literal __all__, or None without one."""
        for node in ast.parse(self.module_source(dotted)).body:
            if (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
                and isinstance(node.value, (ast.List, ast.Tuple))
            ):
                return {item.value for item in node.value.elts if isinstance(item, ast.Constant)}
        return None

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
            names = self.top_level_names(module)
            if module == "torch_npu":
                names = names | set(self.operator_schemas())
            return part in names
        return True


def _signature_in(doc, opening):
    """The parameter text of the first `opening...)` in `doc` (it may span lines), or None."""
    start = doc.find(opening)
    if start < 0:
        return None
    depth, begin = 0, start + len(opening) - 1
    for index in range(begin, len(doc)):
        depth += {"(": 1, ")": -1}.get(doc[index], 0)
        if depth == 0:
            return doc[begin + 1 : index]
    return None


def _split_top_level(text):
    """`text` split at the commas outside brackets and quotes."""
    parts, depth, quote, current = [], 0, None, []
    for char in text:
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return [part.strip() for part in parts if part.strip()]


def schema_parameters(text):
    """parameters() of an operator schema's parameter text, typed ("Tensor self, float
    epsilon=1e-06, *, int? dim=None") or not ("x, mask, scale=1.0"): names, kinds and
    defaults in order; `*` starts the keyword-only ones."""
    found, kind = [], inspect.Parameter.POSITIONAL_OR_KEYWORD
    for item in _split_top_level(text):
        if item == "*":
            kind = inspect.Parameter.KEYWORD_ONLY
            continue
        head, equals, default = item.partition("=")
        found.append((kind.name, head.split()[-1], default.strip() if equals else None))
    return found


def _default_value(text):
    """A default's source compared by value where it is a literal ("1e-6" == "1e-06")."""
    if text is None:
        return None
    try:
        return ("value", ast.literal_eval({"true": "True", "false": "False"}.get(text, text)))
    except (ValueError, SyntaxError):
        return ("source", text)


def same_parameters(mine, theirs):
    """Whether two parameters() lists agree in names, kinds and defaults' values."""
    return [(kind, name, _default_value(d)) for kind, name, d in mine] == [
        (kind, name, _default_value(d)) for kind, name, d in theirs
    ]


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

    npu_classes = {
        (Path(inspect.getsourcefile(cls)).resolve(), cls.__name__)
        for cls in NpuKind.__mro__
        if cls.__module__.startswith("devicekit")
    }
    names = set()
    for path in sorted(DEVICEKIT.rglob("*.py")):
        collector = _NpuNameCollector(path.resolve(), npu_classes)
        collector.visit(ast.parse(path.read_text(), str(path)))
        names |= collector.names
    return names


# -- Test A: the names and registrations devicekit relies on exist in the wheel ---------------


def test_every_torch_npu_name_devicekit_calls_exists_in_the_wheel(wheel):
    used = npu_names_devicekit_uses()
    core = {
        f"torch_npu.npu.{name}"
        for name in (
            "set_device",
            "synchronize",
            "device_count",
            "is_available",
            "memory_allocated",
        )
    }
    assert core <= used, f"the scan missed calls devicekit makes: {sorted(core - used)}"
    assert not wheel.resolves("torch_npu.npu.no_such_function"), "the wheel check cannot fail"
    # Names torch.npu takes in only through `from ._backends import *` (no __all__ there).
    assert wheel.resolves("torch_npu.npu.get_soc_version"), "the check misses star imports"
    missing = sorted(name for name in used if not wheel.resolves(name))
    assert not missing, f"devicekit calls names torch-npu {NPU_VERSION} lacks: {missing}"


def test_wheel_renames_privateuse1_and_registers_torch_npu(wheel):
    sources = "\n".join(text for _, text in wheel.python_files())
    assert 'rename_privateuse1_backend("npu")' in sources
    assert '_register_device_module("npu"' in sources


def _registers_hccl_for_npu(node):
    """Whether `node` is a call register_backend("hccl", ..., devices=[... "npu" ...])."""
    if not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "register_backend"
        and node.args
    ):
        return False
    first = node.args[0]
    if not (isinstance(first, ast.Constant) and first.value == "hccl"):
        return False
    devices = [kw.value for kw in node.keywords if kw.arg == "devices"]
    return bool(devices) and "npu" in {
        getattr(item, "value", None) for item in getattr(devices[0], "elts", [])
    }


def test_wheel_registers_hccl_for_the_npu_device(wheel):
    sources = [text for _, text in wheel.python_files() if "register_backend(" in text]
    calls = [
        node
        for text in sources
        for node in ast.walk(ast.parse(text))
        if _registers_hccl_for_npu(node)
    ]
    assert calls, 'no register_backend("hccl", ..., devices=["npu"]) in the wheel'


def test_wheel_compiles_for_npu_through_its_own_inductor_package(wheel):
    """devicekit.compile on an NPU uses inductor, and finds torch_npu's compiler by its
    torch_npu._inductor package (devicekit/kinds/npu.py): the wheel has the package, and
    its dynamo set-up imports it on the first compile."""
    files = dict(wheel.python_files())
    assert "torch_npu/_inductor/__init__.py" in files, sorted(files)[:20]
    setup = files["torch_npu/utils/_dynamo.py"]
    assert 'importlib.import_module("torch_npu._inductor")' in setup
    assert "def _lazy_inductor_setup" in setup


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

# What the real torch_npu raises on a machine without CANN, and what devicekit says of it.
CANN_LOAD_ERROR = "libhccl.so: cannot open shared object file: No such file or directory"
AUTOLOAD_ERROR = "Failed to load the backend extension: torch_npu"
CANN_MISSING = "CANN libraries are not on the library path (libhccl.so not found)"
CANN_FIX = "set_env.sh"


def test_import_torch_fails_with_the_wheel_on_the_path(npu_target, no_cann):
    """The autoload pitfall devicekit works around: plain `import torch` breaks, because
    torch's autoload imports torch_npu, whose _C needs CANN's libhccl.so."""
    result = run_python(["-c", "import torch"], subprocess_env(npu_target))
    assert result.returncode != 0
    assert CANN_LOAD_ERROR in result.stderr, result.stderr
    assert AUTOLOAD_ERROR in result.stderr, result.stderr
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in result.stderr, result.stderr


def test_importing_devicekit_first_keeps_torch_importable(npu_target, no_cann):
    """Because devicekit switches the autoload off before torch loads."""
    code = (
        "import devicekit, torch, os, sys; assert 'torch_npu' not in sys.modules; "
        "print(os.environ['TORCH_DEVICE_BACKEND_AUTOLOAD'])"
    )
    result = run_python(["-c", code], subprocess_env(npu_target))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0", result.stdout


@pytest.mark.parametrize(
    "program", ["main.py", *sorted(p.name for p in (REPO / "examples").glob("*.py"))]
)
def test_main_and_the_examples_on_npu_without_cann_say_so_in_one_line(program, npu_target, no_cann):
    """They import devicekit before torch, so torch's autoload never reaches torch_npu."""
    args = [REPO / "main.py", "--dummy"] if program == "main.py" else [REPO / "examples" / program]
    result = run_python(args, subprocess_env(npu_target, DEVICEKIT_DEVICE="npu"))
    output = result.stderr + result.stdout
    assert AUTOLOAD_ERROR not in output and "Traceback" not in output, output
    assert result.returncode == 2, output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and CANN_MISSING in lines[0], lines


# `python -m devicekit ARGV` in the scenario process (support/scenario_process.py).
_COMMAND = "import runpy\nrunpy.run_module('devicekit', run_name='__main__', alter_sys=True)\n"
CLI_WITHOUT_CANN = {
    "check npu": ("check", "--device", "npu"),
    "doctor auto": ("doctor", "--json"),
    "doctor npu": ("doctor", "--device", "npu"),
}


@pytest.fixture(scope="module")
def cli_without_cann(npu_target, no_cann, tmp_path_factory):
    """{name: what it left} of each of CLI_WITHOUT_CANN's commands, with the wheel on the
    path: one process runs them one after another, each as `python -m devicekit` would
    (devicekit imported first, then torch; each command's devicekit tries torch_npu anew)."""
    folder = tmp_path_factory.mktemp("cli_without_cann")
    scenarios = [Scenario(name, _COMMAND, {}, argv) for name, argv in CLI_WITHOUT_CANN.items()]
    with Processes(folder / "processes") as procs:
        batch = start_batch(
            procs, "cli", scenarios, subprocess_env(npu_target), folder, "import devicekit, torch\n"
        )
        (finished,) = procs.finish_all([batch.process], TIMEOUT_S)
    assert finished.returncode == 0, describe([finished])
    return batch.results()


def test_check_on_npu_without_cann_prints_one_line(cli_without_cann):
    found = result(cli_without_cann, "check npu")
    assert found["exit"] == 2, found["stderr"]
    lines = found["stderr"].strip().splitlines()
    assert len(lines) == 1, found["stderr"]
    assert lines[0].startswith("error: --device npu: torch_npu is installed but"), lines[0]
    assert CANN_MISSING in lines[0] and CANN_FIX in lines[0], lines[0]
    assert "Traceback" not in found["stderr"] + found["stdout"]


def test_doctor_auto_without_cann_falls_back_to_cpu(cli_without_cann):
    found = result(cli_without_cann, "doctor auto")
    assert found["exit"] == 0, found["stderr"]
    report = json.loads(found["stdout"])
    assert report["torch_npu"]["state"] == "CANN missing"
    assert CANN_MISSING in report["torch_npu"]["detail"], report["torch_npu"]
    assert report["torch_npu"]["version"] == NPU_VERSION
    assert report["device"] == "cpu"
    assert report["problems"] == []
    lines = found["stderr"].strip().splitlines()
    assert len(lines) == 1, found["stderr"]
    assert lines[0].startswith("devicekit: warning:"), lines[0]
    assert CANN_MISSING in lines[0] and "(auto-detection skipped npu)" in lines[0], lines[0]


def test_doctor_on_npu_without_cann_reports_the_problem(cli_without_cann):
    found = result(cli_without_cann, "doctor npu")
    assert found["exit"] == 2, found["stderr"]
    problems = [line for line in found["stdout"].splitlines() if line.startswith("PROBLEM")]
    assert len(problems) == 1, found["stdout"]
    assert CANN_MISSING in problems[0] and CANN_FIX in problems[0], problems[0]
    assert "Traceback" not in found["stderr"] + found["stdout"]


# -- Test C: the stand-in npu device offers only torch_npu's names, with their signatures ------

SIMULATE = DEVICEKIT / "simulate"
# Each module of the stand-in device (DEVICEKIT_SIMULATE=npu) and the torch_npu module whose
# place it takes: npu_module.py is torch.npu, npu_amp.py torch.npu.amp.
STAND_IN_MODULES = {"npu_module.py": "torch_npu.npu", "npu_amp.py": "torch_npu.npu.amp"}


def literal_all(tree):
    """The names in a parsed module's top-level literal __all__ (annotated or not), or None."""
    for node in tree.body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else ([node.target] if isinstance(node, ast.AnnAssign) else [])
        )
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and isinstance(
            node.value, (ast.List, ast.Tuple)
        ):
            return [item.value for item in node.value.elts if isinstance(item, ast.Constant)]
    return None


def last_binding(tree, name):
    """The node of a parsed module's last top-level binding of `name`, or None."""
    nodes = [node for bound, node, _ in _bindings(tree.body) if bound == name]
    return nodes[-1] if nodes else None


def parameters(arguments):
    """[(kind, name, default's source or None)] of an ast.arguments, in order; the kinds
    are inspect.Parameter's. Annotations are left out."""
    positional = [*arguments.posonlyargs, *arguments.args]
    defaults = [None] * (len(positional) - len(arguments.defaults)) + [
        ast.unparse(default) for default in arguments.defaults
    ]
    kinds = [inspect.Parameter.POSITIONAL_ONLY] * len(arguments.posonlyargs) + [
        inspect.Parameter.POSITIONAL_OR_KEYWORD
    ] * len(arguments.args)
    found = [
        (kind.name, arg.arg, default)
        for kind, arg, default in zip(kinds, positional, defaults, strict=False)
    ]
    if arguments.vararg:
        found.append((inspect.Parameter.VAR_POSITIONAL.name, arguments.vararg.arg, None))
    found += [
        (
            inspect.Parameter.KEYWORD_ONLY.name,
            arg.arg,
            None if default is None else ast.unparse(default),
        )
        for arg, default in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=False)
    ]
    if arguments.kwarg:
        found.append((inspect.Parameter.VAR_KEYWORD.name, arguments.kwarg.arg, None))
    return found


def signature_text(function):
    """`name(parameters)` of a def as its source has it, annotations left out."""
    arguments = copy.deepcopy(function.args)
    for arg in [
        *arguments.posonlyargs,
        *arguments.args,
        *arguments.kwonlyargs,
        arguments.vararg,
        arguments.kwarg,
    ]:
        if arg is not None:
            arg.annotation = None
    return f"{function.name}({ast.unparse(arguments)})"


def _methods(cls):
    """{name: def} of the methods a class body defines."""
    return {
        node.name: node
        for node in cls.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }


def signature_mismatches(public_name, stand_in, wheel_def):
    """How the stand-in's definition of `public_name` differs from the wheel's: each of
    `stand_in` and `wheel_def` is (where, def or class node). Functions: their parameters
    (names, kinds, defaults' source, in order). Classes: the constructor (which the stand-in
    must define: __init__, or __new__ where the wheel's class defines only that) and every
    other public or dunder method the stand-in class defines, which the wheel's class must
    define alike. [] when they agree; else messages naming both
    signatures and where each is."""
    (stand_in_at, stand_in_node), (wheel_at, wheel_node) = stand_in, wheel_def
    is_class = isinstance(stand_in_node, ast.ClassDef)
    if is_class != isinstance(wheel_node, ast.ClassDef):
        kinds = [
            "a class" if isinstance(node, ast.ClassDef) else "a function"
            for node in (stand_in_node, wheel_node)
        ]
        return [
            f"{public_name}: the stand-in's is {kinds[0]} ({stand_in_at}), the wheel's "
            f"{kinds[1]} ({wheel_at})"
        ]
    if not is_class:
        pairs = [(public_name, stand_in_node, wheel_node)]
    else:
        own, theirs = _methods(stand_in_node), _methods(wheel_node)
        # The constructor whose parameters users pass: __new__ where the wheel's class
        # defines only that (its streams and events), else __init__.
        constructor = "__new__" if "__new__" in theirs and "__init__" not in theirs else "__init__"
        if constructor not in own and constructor not in theirs:
            constructor = None  # neither class constructs (constants, an Enum): methods only
        elif constructor not in own:
            return [
                f"{public_name}: the stand-in class defines no {constructor} ({stand_in_at}), "
                f"so its signature cannot be compared with the wheel's ({wheel_at})"
            ]
        pairs = [
            (f"{public_name}.{name}", method, theirs.get(name))
            for name, method in own.items()
            if name == constructor or not name.startswith("_") or name.endswith("__")
        ]
    problems = []
    for name, mine, real in pairs:
        mine_at = f"{stand_in_at.rpartition(':')[0]}:{mine.lineno}"
        if real is None:
            problems.append(
                f"{name}: the stand-in defines {signature_text(mine)} ({mine_at}); "
                f"the wheel's class ({wheel_at}) defines no "
                f"{name.rpartition('.')[2]}"
            )
        elif not same_parameters(parameters(mine.args), parameters(real.args)):
            real_at = f"{wheel_at.rpartition(':')[0]}:{real.lineno}"
            problems.append(
                f"{name}: stand-in {signature_text(mine)} ({mine_at}) != wheel "
                f"{signature_text(real)} ({real_at})"
            )
    return problems


def stand_in_tree(filename):
    """(path relative to the repo, parsed source) of a module of the stand-in device."""
    path = SIMULATE / filename
    return path.relative_to(REPO), ast.parse(path.read_text(), str(path))


def public_names_beyond_all(tree):
    """Each public name (with its line and how it is bound) that a parsed stand-in module
    binds at top level outside its __all__, save those that cannot stand for a torch_npu
    function or class: literal constants, modules (`import m`) and typing's names. Whatever
    else it binds would be offered as torch.npu.<name> unchecked."""
    exported = set(literal_all(tree) or [])
    found = []
    for name, node, _ in _bindings(tree.body):
        if name in exported or (name.startswith("_") and name != "*"):
            continue
        if isinstance(node, ast.Import):
            continue
        if isinstance(node, ast.ImportFrom) and node.module == "typing" and name != "*":
            continue
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Constant):
            continue
        how = (
            f"from {node.module or '.'} import"
            if isinstance(node, ast.ImportFrom)
            else type(node).__name__
        )
        found.append(f"{name} (line {node.lineno}: {how})")
    return found


def attributes_set_on(tree, module_name):
    """(attribute, line) for each `<module_name>.<attribute> = ...` in a parsed source."""
    return [
        (target.attr, node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == module_name
    ]


def test_every_name_the_npu_stand_in_offers_is_torch_npus_with_its_signature(wheel):
    """Each name in the __all__ of the stand-in's torch.npu (npu_module.py) and
    torch.npu.amp (npu_amp.py) exists there in the wheel, and the stand-in defines it with
    the signature of the wheel's def or class (found through torch_npu's re-exports)."""
    problems, listed = [], set()
    for filename, module in STAND_IN_MODULES.items():
        where, tree = stand_in_tree(filename)
        exported = literal_all(tree)
        assert exported, f"{where} has no literal __all__ to check"
        for name in exported:
            dotted = f"{module}.{name}"
            public_name = "torch" + dotted[len("torch_npu") :]
            listed.add(public_name)
            if not wheel.resolves(dotted):
                problems.append(f"{public_name}: torch-npu {NPU_VERSION} has no {dotted}")
                continue
            stand_in = last_binding(tree, name)
            if not isinstance(stand_in, _DEFINITIONS) and wheel.definition(dotted) is None:
                continue  # bound otherwise in the wheel too (torch.npu.config, an instance)
            if not isinstance(stand_in, _DEFINITIONS):
                problems.append(
                    f"{public_name}: {where} lists it in __all__ but does not "
                    "define it with def or class, so its signature cannot be "
                    "compared"
                )
                continue
            found = wheel.definition(dotted)
            if found is None:
                problems.append(
                    f"{public_name}: the wheel binds {dotted}, but to no def or "
                    "class in its sources; nothing to compare the stand-in with"
                )
                continue
            problems += signature_mismatches(
                public_name,
                (f"{where}:{stand_in.lineno}", stand_in),
                (f"{found[0]}:{found[1].lineno}", found[1]),
            )
    expected = {
        "torch.npu.device",
        "torch.npu.set_device",
        "torch.npu.synchronize",
        "torch.npu.amp.GradScaler",
        "torch.npu.amp.autocast",
    }
    assert expected <= listed, f"the check missed {sorted(expected - listed)}"
    assert not problems, (
        f"the stand-in npu device differs from torch-npu {NPU_VERSION}:\n" + "\n".join(problems)
    )


def test_the_npu_stand_in_offers_no_name_beyond_its_all(wheel):
    """No public function, class or callable of the stand-in's modules escapes the check
    above: each is in __all__. Attributes devicekit.simulate sets on them must be names the
    wheel has there."""
    problems = []
    for filename in STAND_IN_MODULES:
        where, tree = stand_in_tree(filename)
        problems += [f"{where}: {found}" for found in public_names_beyond_all(tree)]
    for path in sorted(SIMULATE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for filename, module in STAND_IN_MODULES.items():
            problems += [
                f"{path.relative_to(REPO)}:{line}: sets {filename[:-3]}.{attribute}, "
                f"but torch-npu {NPU_VERSION} has no {module}.{attribute}"
                for attribute, line in attributes_set_on(tree, filename[:-3])
                if not attribute.startswith("_") and not wheel.resolves(f"{module}.{attribute}")
            ]
    assert not problems, (
        "the stand-in npu device offers names outside its checked "
        "__all__ (list them there, make them private, or `import` the "
        "module instead):\n" + "\n".join(problems)
    )


STAND_IN_TORCH_NPU = SIMULATE / "site" / "torch_npu" / "__init__.py"


def test_the_stand_ins_torch_npu_binds_only_names_the_wheel_has(wheel):
    """What `import torch_npu` gives under `devicekit simulate`: each public name its
    module binds is one the wheel's torch_npu binds, and its __version__ is the wheel's
    release marked as the stand-in's."""
    tree = ast.parse(STAND_IN_TORCH_NPU.read_text(), str(STAND_IN_TORCH_NPU))
    public = sorted({name for name, _, _ in _bindings(tree.body) if not name.startswith("_")})
    assert public, "nothing to check"
    absent = [name for name in public if not wheel.resolves(f"torch_npu.{name}")]
    assert not absent, f"torch-npu {NPU_VERSION} has no torch_npu.{', torch_npu.'.join(absent)}"
    [version] = [
        node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and [getattr(target, "id", None) for target in node.targets] == ["__version__"]
    ]
    assert version == f"{NPU_VERSION}+devicekit.standin"


SITE_TORCH_NPU = SIMULATE / "site" / "torch_npu"


def site_modules():
    """(dotted name, path) of each module of the stand-in's torch_npu: site/torch_npu/a/b.py
    stands for the wheel's torch_npu.a.b."""
    for path in sorted(SITE_TORCH_NPU.rglob("*.py")):
        parts = path.relative_to(SITE_TORCH_NPU.parent).with_suffix("").parts
        yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def _module_file(dotted, importer, level):
    """The source file of the module an import in `importer` reads: `devicekit.*` from the
    repository, a relative import from beside `importer`; None for any other module."""
    if level:
        base = importer.parent
        for _ in range(level - 1):
            base = base.parent
        parts = dotted.split(".") if dotted else []
    elif dotted.split(".")[0] == "devicekit":
        base, parts = REPO, dotted.split(".")
    else:
        return None
    stem = base.joinpath(*parts)
    for candidate in (stem / "__init__.py", stem.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def stand_in_definition(path, name, _depth=0):
    """(where, node) of the def or class that the module at `path` binds `name` to,
    following `from devicekit... import` and relative imports; None when it binds the
    name otherwise (an assignment, an import from torch)."""
    tree = ast.parse(path.read_text(), str(path))
    found = [(node, imported) for bound, node, imported in _bindings(tree.body) if bound == name]
    if not found or _depth > 8:
        return None
    node, imported = found[-1]
    if isinstance(node, _DEFINITIONS):
        return f"{path.relative_to(REPO)}:{node.lineno}", node
    if isinstance(node, ast.ImportFrom):
        source = _module_file(node.module, path, node.level)
        if source is not None:
            return stand_in_definition(source, imported, _depth + 1)
    return None


def _schema_mismatch(public_name, where, node, schema):
    """How a stand-in def of a C++ operator differs from the wheel's schema, or None."""
    if isinstance(node, ast.ClassDef):
        return f"{public_name}: the stand-in's is a class ({where}), the wheel's an operator"
    if same_parameters(parameters(node.args), schema):
        return None
    wheel_text = ", ".join(
        ("*, " if kind == "KEYWORD_ONLY" else "") + name + ("" if d is None else f"={d}")
        for kind, name, d in schema
    )
    return (
        f"{public_name}: stand-in {signature_text(node)} ({where}) != the wheel's operator "
        f"schema {public_name.rpartition('.')[2]}({wheel_text})"
    )


def site_module_problems(wheel, dotted, path):
    """What is wrong with one module of the stand-in's torch_npu: no literal __all__, public
    names outside it, a listed name the wheel lacks there, or one defined with other
    parameters than the wheel's def, class or operator schema."""
    where = path.relative_to(REPO)
    tree = ast.parse(path.read_text(), str(path))
    exported = literal_all(tree)
    if exported is None:
        return [f"{where} has no literal __all__ to check"]
    problems = [f"{where}: {found}" for found in public_names_beyond_all(tree)]
    for name in exported:
        public_name = f"{dotted}.{name}"
        if not wheel.resolves(public_name):
            problems.append(f"{public_name}: torch-npu {NPU_VERSION} has no such name ({where})")
            continue
        mine = stand_in_definition(path, name)
        real = wheel.definition(public_name)
        schema = wheel.operator_schemas().get(name) if dotted == "torch_npu" else None
        if real is None and schema is None:
            continue  # bound otherwise in the wheel too (an assignment, torch's own name)
        if mine is None:
            problems.append(
                f"{public_name}: {where} does not define it with def or class (nor import "
                "one from devicekit), so its signature cannot be compared with the wheel's"
            )
        elif real is not None:
            problems += signature_mismatches(
                public_name, mine, (f"{real[0]}:{real[1].lineno}", real[1])
            )
        else:
            problems += filter(None, [_schema_mismatch(public_name, *mine, schema)])
    return problems


def test_every_module_of_the_stand_ins_torch_npu_offers_the_wheels_names_and_signatures(wheel):
    """Each module under site/torch_npu (torch_npu, torch_npu.optim, torch_npu.profiler,
    torch_npu.contrib.transfer_to_npu...) lists its public names in __all__; each exists
    at that path in the wheel and is defined with the wheel's parameters: its def's or
    class's, or for an operator bound from C++ its schema."""
    modules = dict(site_modules())
    assert "torch_npu" in modules, "nothing to check"
    problems = []
    for dotted, path in modules.items():
        problems += site_module_problems(wheel, dotted, path)
    assert not problems, (
        f"the stand-in's torch_npu differs from torch-npu {NPU_VERSION}:\n" + "\n".join(problems)
    )


def test_the_operator_schemas_are_read_from_the_wheel(wheel):
    """The check above compares operators with the schemas the wheel documents."""
    schemas = wheel.operator_schemas()
    assert schemas["npu_rms_norm"] == [
        ("POSITIONAL_OR_KEYWORD", "self", None),
        ("POSITIONAL_OR_KEYWORD", "gamma", None),
        ("POSITIONAL_OR_KEYWORD", "epsilon", "1e-06"),
    ]
    assert schemas["npu_format_cast"][2:] == [
        ("KEYWORD_ONLY", "customize_dtype", "None"),
        ("KEYWORD_ONLY", "input_dtype", "None"),
    ]
    assert [name for _, name, _ in schemas["npu_scaled_masked_softmax"]] == [
        "x",
        "mask",
        "scale",
        "fixed_triu_mask",
    ]
    assert wheel.resolves("torch_npu.npu_fusion_attention")
    assert not wheel.resolves("torch_npu.npu_no_such_operator")


def test_the_site_check_finds_a_wrong_operator_and_a_missing_name(wheel, tmp_path, monkeypatch):
    """A stand-in operator with a changed default, and a name the wheel lacks, are reported
    with the wheel's schema and the module's path."""
    module = tmp_path / "torch_npu.py"
    module.write_text(
        "__all__ = ['npu_rms_norm', 'npu_made_up']\n"
        "def npu_rms_norm(self, gamma, epsilon=1e-5): pass\n"
        "def npu_made_up(x): pass\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)  # where paths are told from
    problems = site_module_problems(wheel, "torch_npu", module)
    assert problems == [
        "torch_npu.npu_rms_norm: stand-in npu_rms_norm(self, gamma, epsilon=1e-05) "
        "(torch_npu.py:2) != the wheel's operator schema "
        "npu_rms_norm(self, gamma, epsilon=1e-06)",
        f"torch_npu.npu_made_up: torch-npu {NPU_VERSION} has no such name (torch_npu.py)",
    ], problems


# -- The guards themselves -------------------------------------------------------------------


@pytest.mark.parametrize("value", ["true", "1", "TRUE"])
def test_a_skip_fails_in_ci(monkeypatch, value):
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.fail.Exception, match="no wheel here"):
        skip_or_fail("no wheel here")


@pytest.mark.parametrize("value", [None, "", "false", "0"])
def test_a_skip_stays_a_skip_outside_ci(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.skip.Exception, match="no wheel here"):
        skip_or_fail("no wheel here")


def test_a_hash_mismatch_fails_naming_expected_and_actual(tmp_path):
    path = tmp_path / wheel_name(FALLBACK_TAG)
    path.write_bytes(b"not the wheel")
    actual = hashlib.sha256(b"not the wheel").hexdigest()
    expected = WHEEL_SHA256[FALLBACK_TAG]
    with pytest.raises(pytest.fail.Exception) as failure:
        verify_sha256(path, expected)
    assert f"expected {expected}" in str(failure.value)
    assert f"actual {actual}" in str(failure.value)


def test_this_machine_has_a_pinned_wheel():
    """The machines this project runs on (and CI's) are x86_64 Linux, CPython 3.10-3.14."""
    if native_tag() is None:
        skip_or_fail(f"no pinned torch-npu wheel for {next(iter(sys_tags()))}")
    assert native_tag() in WHEEL_SHA256


WHEEL_SYNCHRONIZE = "torch_npu/npu/utils.py"


def _compare_with_the_wheel(wheel, source, dotted="torch_npu.npu.synchronize"):
    """signature_mismatches for the first definition in `source` against the wheel's."""
    node = ast.parse(source).body[0]
    path, real = wheel.definition(dotted)
    return signature_mismatches(
        "torch" + dotted[len("torch_npu") :],
        ("stand_in.py:1", node),
        (f"{path}:{real.lineno}", real),
    )


@pytest.mark.parametrize(
    "wrong",
    [
        "def synchronize(device=0): pass",
        "def synchronize(dev=None): pass",
        "def synchronize(*, device=None): pass",
        "def synchronize(device=None, /): pass",
        "def synchronize(device): pass",
        "def synchronize(device=None, stream=None): pass",
        "def synchronize(*device): pass",
    ],
    ids=["default", "name", "keyword-only", "positional-only", "no-default", "extra", "star"],
)
def test_the_signature_check_can_fail(wheel, wrong):
    """A stand-in synchronize that differs from the wheel's in a name, kind or default
    fails, and the message names the function and both signatures."""
    problems = _compare_with_the_wheel(wheel, wrong)
    assert len(problems) == 1, problems
    stand_in = signature_text(ast.parse(wrong).body[0])
    assert problems[0].startswith("torch.npu.synchronize: "), problems[0]
    assert f"stand-in {stand_in} (stand_in.py:1)" in problems[0], problems[0]
    assert f"wheel synchronize(device=None) ({WHEEL_SYNCHRONIZE}:" in problems[0], problems[0]


def test_the_signature_check_passes_what_agrees_and_checks_classes(wheel):
    """Annotations do not count; a class's constructor and its other methods do."""
    assert _compare_with_the_wheel(wheel, "def synchronize(device: int = None) -> None: pass") == []
    # The re-exports followed: `from .utils import`, `from .random import *`, amp's package.
    assert wheel.definition("torch_npu.npu.set_device")[0] == "torch_npu/npu/utils.py"
    assert wheel.definition("torch_npu.npu.get_rng_state")[0] == "torch_npu/npu/random.py"
    assert wheel.definition("torch_npu.npu.amp.GradScaler")[0] == "torch_npu/npu/amp/grad_scaler.py"
    assert wheel.definition("torch_npu.npu.no_such_function") is None
    right = "class device:\n    def __init__(self, device): pass\n"
    assert _compare_with_the_wheel(wheel, right, "torch_npu.npu.device") == []
    for wrong, says in [
        (
            "class device:\n    def __init__(self, device=None): pass\n",
            "stand-in __init__(self, device=None)",
        ),
        ("class device:\n    pass\n", "defines no __init__"),
        (
            right + "    def __exit__(self, exc_type, exc, tb): pass\n",
            "wheel __exit__(self, *args)",
        ),
        (right + "    def no_such_method(self): pass\n", "defines no no_such_method"),
        ("def device(device): pass", "the stand-in's is a function"),
    ]:
        problems = _compare_with_the_wheel(wheel, wrong, "torch_npu.npu.device")
        assert len(problems) == 1 and says in problems[0], (wrong, problems)
    # A class the wheel constructs in __new__ (its streams) is compared by its __new__.
    stream = "class Stream:\n    def __new__(cls, device=None, priority=0, **kwargs): pass\n"
    assert _compare_with_the_wheel(wheel, stream, "torch_npu.npu.Stream") == []
    for wrong, says in [
        (stream.replace("priority=0", "priority=-1"), "stand-in __new__(cls, device=None"),
        ("class Stream:\n    def __init__(self): pass\n", "defines no __new__"),
    ]:
        problems = _compare_with_the_wheel(wheel, wrong, "torch_npu.npu.Stream")
        assert len(problems) == 1 and says in problems[0], (wrong, problems)


def test_the_name_check_sees_what_escapes_all():
    """Defs, classes, aliases, star and `from` imports outside __all__ are caught; literal
    constants, private names, modules and typing's names are not."""
    source = (
        "import collections\nfrom typing import List\nNAME = 'x'\n_private = len\n"
        "from collections import defaultdict\nfrom x import *\ndef listed(): pass\n"
        "def extra(): pass\nclass Extra: pass\nalias = listed\n"
        "__all__ = ['listed']\n"
    )
    found = public_names_beyond_all(ast.parse(source))
    assert [item.split(" ")[0] for item in found] == [
        "defaultdict",
        "*",
        "extra",
        "Extra",
        "alias",
    ], found
    tree = ast.parse("npu_module.amp = npu_amp\nnpu_module._native = 1\nother.x = 2\n")
    assert attributes_set_on(tree, "npu_module") == [("amp", 1), ("_native", 2)]


# -- No wheel needed ---------------------------------------------------------------------------


# `import devicekit` first where torch_npu can be imported (the fake's folder on the path
# from the start), then afresh where it cannot (the folder left out).
_IMPORTS = {
    "torch_npu-importable": "import devicekit\n",
    "plain": f"""
sys.path.remove({str(FAKE_NPU)!r})
for name in [m for m in sys.modules if m == "devicekit" or m.startswith("devicekit.")]:
    del sys.modules[name]
import devicekit
""",
}


@pytest.fixture(scope="module")
def imports(tmp_path_factory):
    """{case: whether torch_npu was imported} after each of _IMPORTS, in one process."""
    folder = tmp_path_factory.mktemp("imports")
    code = "{}out['torch_npu'] = 'torch_npu' in sys.modules\n"
    scenarios = [Scenario(case, code.format(text)) for case, text in _IMPORTS.items()]
    with Processes(folder / "processes") as procs:
        batch = start_batch(
            procs, "imports", scenarios, subprocess_env(FAKE_NPU), folder, "import sys\n"
        )
        (finished,) = procs.finish_all([batch.process], TIMEOUT_S)
    assert finished.returncode == 0, describe([finished])
    return batch.results()


@pytest.mark.parametrize("case", ["plain", "torch_npu-importable"])
def test_import_devicekit_does_not_import_torch_npu(imports, case):
    assert outcome(imports, case) == {"torch_npu": False}

"""Shared test helpers: a clean launcher environment and the repository root on the path."""

import functools
import os
import sys

import pytest
from hypothesis import HealthCheck, settings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


# Property-based tests (tests/test_fuzz_*.py). CI runs "ci": a fixed seed (the same examples
# on every run) and a budget that keeps the suite short; `pytest tests/test_fuzz_*.py
# --hypothesis-profile=long --hypothesis-show-statistics` tries many more, new each run.
settings.register_profile(
    "ci",
    max_examples=150,
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "long",
    max_examples=5000,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("ci")


@functools.cache
def _launcher_variables():
    # Imported when first needed, after the test modules imported torch: importing
    # devicekit before torch would set TORCH_DEVICE_BACKEND_AUTOLOAD for every subprocess.
    from devicekit import kinds
    from devicekit.environments import ALL_VARIABLES

    visible = {kinds.get(name).visible_devices_env for name in kinds.names()}
    return frozenset(ALL_VARIABLES) | (visible - {None})


def is_launcher_variable(key):
    """Whether `key` makes a process look started by a launcher or chooses its device: a
    variable some launch environment reads (devicekit.environments), a kind's
    visible-devices variable, or one of devicekit's own settings."""
    return key in _launcher_variables() or key.startswith("DEVICEKIT_")


def clean_environ(**extra):
    """os.environ without any launcher or device-selection variable, plus `extra`."""
    env = {key: value for key, value in os.environ.items() if not is_launcher_variable(key)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    env.update({key: str(value) for key, value in extra.items()})
    return env


@pytest.fixture(autouse=True)
def _no_launcher_environment(monkeypatch):
    """Tests start from an environment no launcher has touched."""
    for key in list(os.environ):
        if is_launcher_variable(key):
            monkeypatch.delenv(key)


@pytest.fixture(autouse=True)
def _fresh_devicekit_process_state():
    """Each test starts as a new process would: no kind, no context, no process group."""
    from devicekit import distributed, runtime

    runtime.adopt(None, None)
    yield
    distributed.destroy_process_group()
    runtime.adopt(None, None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing test of a module that draws its faults from FAULT_SEED names the seed."""
    outcome = yield
    report = outcome.get_result()
    seed = getattr(item.module, "FAULT_SEED", None)
    if report.failed and seed is not None:
        report.sections.append(
            (
                "fault seed",
                f"the faults of this run were drawn with seed "
                f"{seed}: DEVICEKIT_FAULT_SEED={seed} repeats them",
            )
        )


# -- running on several workers (pytest-xdist; setup.cfg asks for 2) ------------------------

NSSWITCH = "/etc/nsswitch.conf"


def _shares_a_run(item):
    """Whether `item` uses a fixture of this suite made once for several tests (a module's
    launcher runs, the bad-input pool): those tests run on one worker, where it is made once."""
    info = getattr(item, "_fixtureinfo", None)
    for definitions in info.name2fixturedefs.values() if info else ():
        for definition in definitions:
            module = getattr(definition.func, "__module__", "")
            ours = module == "conftest" or module.startswith(("test_", "support."))
            if ours and definition.scope != "function":
                return True
    return False


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The real multi-process runs first, so that the workers end together on short tests;
    a test that shares a run with others goes with them, any other test to whichever worker
    is free (setup.cfg: --dist loadgroup --no-loadscope-reorder). First among the hooks:
    xdist reads the xdist_group marks in its own, and a mark added after it splits the group
    over both workers, each making the shared run."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    for item in items:
        if _shares_a_run(item):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


@functools.cache
def _private_network_command():
    """The command that starts a worker in a network namespace of its own, with only a
    loopback: the workers' ranks, stores and default ports (29500) can never meet. None where
    the machine cannot make one (no `unshare`, `ip`, or the right to use them).

    There host names resolve from /etc/hosts alone (a private nsswitch.conf, bind-mounted in
    a mount namespace of the worker's own): the name server is out of reach, and asking it
    failed with EAI_AGAIN, which torch's stores print as a warning the tests do not expect."""
    import atexit
    import re
    import shutil
    import subprocess
    import tempfile

    if not (shutil.which("unshare") and shutil.which("ip") and os.path.isfile(NSSWITCH)):
        return None
    with open(NSSWITCH, encoding="utf-8") as handle:
        text = re.sub(r"^hosts:.*$", "hosts: files", handle.read(), flags=re.M)
    handle = tempfile.NamedTemporaryFile("w", prefix="nsswitch.", delete=False)
    with handle:
        handle.write(text)
    atexit.register(os.unlink, handle.name)
    command = [
        "unshare",
        "--net",
        "--mount",
        "sh",
        "-c",
        f'ip link set lo up && mount --bind "$0" {NSSWITCH} && exec "$@"',
        handle.name,
    ]
    try:
        subprocess.run([*command, "true"], check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return command


def pytest_xdist_auto_num_workers(config):
    """`-n auto` (setup.cfg): 2 workers, each in its own network namespace, on a machine of 2
    cores or more; without a namespace to give them, one process runs the tests in turn."""
    if len(os.sched_getaffinity(0)) < 2 or _private_network_command() is None:
        return 0
    return 2


def pytest_xdist_setupnodes(config, specs):
    """Each worker in its own network namespace, where the machine allows it."""
    import shlex

    command = _private_network_command()
    if command is None:
        return
    for spec in specs:
        spec.python = shlex.join([*command, spec.python or sys.executable])

"""Shared test helpers: a clean launcher environment and the repository root on the path."""

import contextlib
import functools
import os
import sys
from pathlib import Path

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

_COUNTER = pytest.StashKey()


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


@pytest.fixture(scope="session")
def torchrun_references(tmp_path_factory):
    """torchrun's 2-rank runs of main.py and of the flat-API example, started on first use
    and read by test_slurm.py and test_mpi_deepspeed.py (support/torchrun_references.py)."""
    from support.torchrun_references import References

    with contextlib.ExitStack() as stack:
        references = References(stack, tmp_path_factory.mktemp("torchrun"))
        yield references
        references.finished()


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


def _shared_runs(item):
    """The runs of this suite that `item` reads and that are made once for several tests
    (fixtures of module or session scope defined in tests/: a module's launcher runs, the
    bad-input pool, a run that several modules read), each as a key: (module, fixture) for
    a module's, the fixture's name for one of the whole session."""
    info = getattr(item, "_fixtureinfo", None)
    keys = []
    for name, definitions in info.name2fixturedefs.items() if info else ():
        for definition in definitions:
            module = getattr(definition.func, "__module__", "")
            ours = module == "conftest" or module.startswith(("test_", "support."))
            if not ours or definition.scope == "function":
                continue
            keys.append(name if definition.scope == "session" else (item.module.__name__, name))
    return keys


def _groups(items):
    """{item: group name} for the items that share a run: tests joined by any shared run,
    directly or through another test, form one group (so each run is made once, on one
    worker), named for the first test module among them."""
    parent = {}

    def find(key):
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    keys = {item: _shared_runs(item) for item in items}
    for shared in keys.values():
        for key in shared[1:]:
            parent[find(key)] = find(shared[0])
    names = {}
    for item in items:
        if keys[item]:
            names.setdefault(find(keys[item][0]), item.module.__name__)
    return {item: names[find(keys[item][0])] for item in items if keys[item]}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The README's demo first (the longest test: started last, it would keep one worker
    busy minutes after the other ran out of tests), then the npu stand-in's first build
    (with its module: every process on the stand-in waits for that build, and a worker
    that waits does nothing), then the other real multi-process runs, so that the workers
    end together on short tests; a test that shares a run with others goes with them, any
    other test to whichever worker is free (setup.cfg: --dist loadgroup
    --no-loadscope-reorder). First among the hooks: xdist reads the xdist_group marks in its
    own, and a mark added after it splits the group over both workers, each making the
    shared run."""
    items.sort(
        key=lambda item: (
            item.get_closest_marker("demo") is None,
            item.get_closest_marker("first_build") is None,
            item.get_closest_marker("slow") is None,
        )
    )
    for item, group in _groups(items).items():
        item.add_marker(pytest.mark.xdist_group(group))


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


# -- the process budget (tests/support/process_budget.py) ------------------------------------


def _is_controller(config):
    """Whether this is the process that runs the session (not an xdist worker)."""
    return not hasattr(config, "workerinput")


def pytest_configure(config):
    """On the controller, before any worker starts: fetch what the tests download (the
    workers have no network), then count every Python process that imports torch from now
    on (the workers are counted themselves)."""
    if not _is_controller(config):
        return
    from support import npu_wheel
    from support.process_budget import SESSION_ENV, Counter

    problem = npu_wheel.prefetch()
    if problem and npu_wheel.in_ci():
        pytest.exit(problem, returncode=pytest.ExitCode.USAGE_ERROR)
    if problem:
        config.issue_config_time_warning(pytest.PytestWarning(problem + " (these tests skip)"), 2)

    counter = Counter(Path(str(config.rootpath)) / ".pytest_cache")
    counter.start()
    os.environ[SESSION_ENV] = counter.session  # inherited by the workers and their children
    config.stash[_COUNTER] = counter


def pytest_unconfigure(config):
    counter = config.stash.get(_COUNTER, None)
    if counter is not None:
        counter.stop()


def pytest_sessionfinish(session, exitstatus):
    """A run whose processes pass the budget fails, every test passed or not."""
    counter = session.config.stash.get(_COUNTER, None)
    if counter is None:
        return
    counter.stop()
    from support.process_budget import over_budget, summary_lines

    # .ci/run repeats this line after the run's times
    counter.log.with_name("devicekit-process-budget.txt").write_text(
        summary_lines(counter)[0] + "\n"
    )
    if over_budget(counter) and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    counter = config.stash.get(_COUNTER, None)
    if counter is None:
        return
    from support.process_budget import summary_lines

    terminalreporter.section("process budget")
    for line in summary_lines(counter):
        terminalreporter.write_line(line)

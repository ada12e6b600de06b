"""Property-based tests of the device settings devicekit reads: every kind's visible-devices
variable (CUDA_VISIBLE_DEVICES, ASCEND_RT_VISIBLE_DEVICES, ZE_AFFINITY_MASK) and devicekit's
own DEVICEKIT_* variables. Any value either works or is refused with one UsageError line
naming the variable.

Where a reader takes a mapping the environment is passed explicitly; the few that read
os.environ get it set for one example by `environ_set` (conftest restores os.environ per
test, not per example). Nothing here compiles the npu stand-in."""

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from devicekit import accelerator, kinds, processes, simulate
from devicekit.environments import LaunchOptions
from devicekit.errors import UsageError
from devicekit.kinds import resolve
from devicekit.kinds.npu import JIT_COMPILE_ENV, jit_compile_override
from devicekit.simulate import build
from invariant import ENV_TEXT, NUMBER_LIKE, assert_usage_line, working_directory

VISIBLE = {
    name: kinds.get(name).visible_devices_env
    for name in kinds.names()
    if kinds.get(name).visible_devices_env
}


@contextlib.contextmanager
def environ_set(values: dict[str, str | None]) -> Iterator[None]:
    """os.environ with `values` set (None: unset) for the block, then as it was."""
    saved = {name: os.environ.get(name) for name in values}
    try:
        for name, value in values.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# -- visible devices, every kind ---------------------------------------------------------------

DEVICE_TEXT = st.one_of(
    ENV_TEXT,
    st.text("0123,. -GPUMIabx", max_size=16),
    st.lists(st.integers(0, 20).map(str), max_size=5).map(",".join),
)


@pytest.mark.parametrize("kind_name", sorted(VISIBLE))
@given(text=DEVICE_TEXT)
@example(text="0,²")
@example(text="٣")
@example(text="0,00")
@example(text="1" * 5000)
def test_any_visible_devices_value_is_a_list_or_names_the_variable(kind_name, text):
    kind, var = kinds.get(kind_name), VISIBLE[kind_name]
    try:
        devices = kind.visible_devices({var: text})
    except UsageError as error:
        assert_usage_line(error, [var])
        return
    assert isinstance(devices, list)
    ids = [device for device in devices if isinstance(device, int)]
    assert all(device >= 0 for device in ids)
    assert len(set(map(str, devices))) == len(devices), devices
    if kind_name == "npu":
        assert ids == devices and ids == sorted(ids)


@pytest.mark.parametrize("kind_name", sorted(VISIBLE))
@given(ids=st.lists(st.integers(0, 63), unique=True, max_size=8), spaces=st.booleans())
def test_a_list_of_device_ids_reads_as_written(kind_name, ids, spaces):
    kind, var = kinds.get(kind_name), VISIBLE[kind_name]
    if kind_name == "npu":
        ids = sorted(ids)  # the Ascend runtime takes ascending ids only
    text = (", " if spaces else ",").join(map(str, ids))
    assert kind.visible_devices({var: text}) == ids
    assert kind.visible_devices({}) is None


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["GPU", "MIG"]), st.text("0123456789abcdef-", min_size=1, max_size=12)
        ),
        unique=True,
        min_size=1,
        max_size=4,
    )
)
def test_cuda_gpu_uuids_read_as_written(uuids):
    entries = [f"{prefix}-{rest}" for prefix, rest in uuids]
    assume(len(set(entries)) == len(entries))
    assert kinds.get("cuda").visible_devices({"CUDA_VISIBLE_DEVICES": ",".join(entries)}) == entries


@given(
    st.lists(
        st.tuples(st.integers(0, 7), st.one_of(st.none(), st.integers(0, 3))),
        unique=True,
        min_size=1,
        max_size=6,
    )
)
def test_level_zero_devices_and_tiles_read_as_written(items):
    entries = [str(device) if tile is None else f"{device}.{tile}" for device, tile in items]
    parsed = kinds.get("xpu").visible_devices({"ZE_AFFINITY_MASK": ",".join(entries)})
    assert parsed == [int(entry) if "." not in entry else entry for entry in entries]


# -- DEVICEKIT_DEVICE and the device argument --------------------------------------------------

DEVICE_NAMES = st.one_of(
    ENV_TEXT,
    st.sampled_from(
        ["cpu", "CPU", " cpu ", "auto", "", "gpu", "cuda", "npu", "xpu", "tpu", "cpu\n", "cp u"]
    ),
)


@given(DEVICE_NAMES)
@example("0\r0")
def test_any_devicekit_device_is_a_kind_or_names_the_variable(value):
    try:
        kind = resolve.resolve_kind(None, {resolve.ENV_VAR: value})
    except UsageError as error:
        assert_usage_line(error, [resolve.ENV_VAR])
        return
    # Only the CPU runs on this machine: auto-detection or asking for it.
    assert kind.name == "cpu"


@given(DEVICE_NAMES, st.sampled_from(["--device", "device_type"]))
@example("0\r0", "--device")
def test_any_device_argument_is_a_kind_or_names_the_argument(value, source):
    assume(value.strip() not in ("", "auto") and value.strip() == value)
    try:
        kind = resolve.resolve_kind(value, {}, source=source)
    except UsageError as error:
        assert_usage_line(error, [source])
        return
    assert kind.name == "cpu"


@given(ENV_TEXT)
def test_any_device_name_is_or_is_not_an_accelerator(value):
    assert accelerator.is_accelerator(value) in (True, False)


# -- the npu stand-in: DEVICEKIT_SIMULATE and DEVICEKIT_SIMULATE_DEVICES -----------------------


@given(st.one_of(ENV_TEXT, st.sampled_from(["npu", "NPU", " npu ", "cuda", ""])))
def test_any_devicekit_simulate_is_npu_or_names_the_variable(value):
    try:
        wanted = simulate.requested({simulate.SIMULATE_ENV: value})
    except UsageError as error:
        assert_usage_line(error, [simulate.SIMULATE_ENV])
        return
    assert wanted == ("npu" if value.strip() else None) and wanted in (None, "npu")


@given(st.one_of(st.none(), NUMBER_LIKE, ENV_TEXT), st.one_of(st.none(), DEVICE_TEXT))
@example("²", None)
@example("2", "0,5")
def test_any_simulated_device_count_is_a_count_or_names_the_variable(devices, visible):
    environ = {
        name: value
        for name, value in ((simulate.DEVICES_ENV, devices), (simulate.VISIBLE_ENV, visible))
        if value is not None
    }
    try:
        count = simulate.visible_count(environ)
    except UsageError as error:
        assert_usage_line(error, list(environ))
        return
    assert 0 <= count <= simulate.MAX_DEVICES


# -- DEVICEKIT_NPU_JIT_COMPILE ------------------------------------------------------------------


@given(st.one_of(st.none(), NUMBER_LIKE, ENV_TEXT))
def test_any_jit_compile_override_is_a_choice_or_names_the_variable(value):
    environ = {} if value is None else {JIT_COMPILE_ENV: value}
    try:
        choice = jit_compile_override(environ)
    except UsageError as error:
        assert_usage_line(error, [JIT_COMPILE_ENV])
        return
    assert choice == (None if value is None else value.strip() == "1")


# -- DEVICEKIT_NPROC_PER_NODE and the process count ---------------------------------------------


@given(st.one_of(NUMBER_LIKE, ENV_TEXT))
@example("1" * 5000)
def test_any_nproc_per_node_variable_is_a_count_or_names_the_variable(value):
    with environ_set({processes.NPROC_ENV: value}):
        try:
            nprocs = processes._nprocs(None, LaunchOptions())
        except UsageError as error:
            assert_usage_line(error, [processes.NPROC_ENV])
            return
    assert nprocs >= 1 and nprocs == int(value)


@given(st.one_of(st.integers(), NUMBER_LIKE, ENV_TEXT), st.booleans(), st.booleans())
@example("\n", False, True)
@example(" 2", True, False)
def test_any_process_count_argument_is_a_count_or_names_it(value, as_option, cli):
    names = ["--nproc-per-node", "nprocs"]
    try:
        options = LaunchOptions(nproc_per_node=value if as_option else None, cli=cli)
        nprocs = processes._nprocs(None if as_option else value, options)
    except UsageError as error:
        assert_usage_line(error, names)
        return
    assert nprocs >= 1


# -- DEVICEKIT_CACHE and DEVICEKIT_LAUNCHER_PID -------------------------------------------------


@given(ENV_TEXT)
def test_any_cache_folder_is_taken_as_a_path(value):
    with environ_set({build.CACHE_ENV: value}):
        root = build.cache_root()
    assert isinstance(root, Path)
    assert str(root) == str(Path(value)) or not value


@given(st.one_of(ENV_TEXT, st.sampled_from(["x" * 300, "a\nb", "/proc/1/nope", "/dev/null/x"])))
@example("x" * 300)  # the check for a built extension failed with ENAMETOOLONG
@example("a\nb/" + "y" * 300)
def test_a_cache_folder_that_cannot_hold_the_build_is_one_line(tmp_path_factory, value):
    assume(value.strip() and not os.path.isdir(value))
    base = tmp_path_factory.mktemp("cache")  # relative names land here, not in the repo
    with (
        environ_set({build.CACHE_ENV: value}),
        working_directory(str(base)),
        mock.patch.object(build, "missing_tools", return_value="g++ (stopped here)"),
    ):
        with pytest.raises(UsageError) as error:
            build.load()  # a usable folder gets as far as the (stubbed) compiler check
    message = assert_usage_line(error.value, [build.CACHE_ENV, "stopped here"])
    # A usable folder got as far as the compiler check, which leaves nothing behind.
    assert build.CACHE_ENV in message or not os.path.lexists(os.path.join(base, value))


@given(st.one_of(NUMBER_LIKE, ENV_TEXT))
def test_any_launcher_pid_is_read_without_failing(value):
    assume(value != str(os.getppid()))  # that one would tie this process to its parent
    with environ_set({processes.LAUNCHER_PID_ENV: value}):
        processes.die_with_launcher()

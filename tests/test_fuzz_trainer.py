"""main.py's command line and YAML configuration, fuzzed: every flag the parser knows, with
values of every shape, and config files of every shape, either give a run that can start
(finite numbers, counts in range) or stop main.py before any rank starts with exit code 2
and one line naming the flag or the file. Nothing is written.

The flags are read from main.py's own parser, so a new flag is fuzzed the day it lands.
main() runs for real up to the launch, which is replaced by a recorder: the properties
check what main.py decides before it starts processes.
"""

import math
import os
import string

import pytest
import yaml
from hypothesis import event, example, given
from hypothesis import strategies as st

from invariant import ANY_TEXT, NUMBER_LIKE, UNWRITABLE_PATHS, assert_command_refused
from support.main_in_process import REFUSAL_RUN, run_main_until_launch
from trainer import options
from trainer.options import precision

PARSER = options.build_parser()
# Flags that do not take part: help prints and exits 0; the rest name files and folders,
# fuzzed below with paths that exist or not (random text as a path would be made).
LEFT_OUT = {
    "help",
    "output_dir",
    "tensorboard",
    "config",
    "data_dir",
    "data",
    "resume",
    "pretrained",
}
FLAG_ACTIONS = [
    action for action in PARSER._actions if action.option_strings and action.dest not in LEFT_OUT
]
# Every int flag is a count (at least 1) or an index (at least 0), but for the seed; -1 is
# the documented "not given" of --world-size and --rank.
INDICES = {"workers", "start_epoch", "warmup", "rank", "gpu", "local_rank"}
NOT_GIVEN = {"world_size": -1, "rank": -1}
FLOATS = st.one_of(
    st.floats().map(repr), st.sampled_from(["nan", "inf", "-inf", "1e400"]), NUMBER_LIKE
)


def values_of(action):
    """Text for one value of `action`: mostly of its type, sometimes anything."""
    if action.choices is not None:
        return st.one_of(st.sampled_from(list(action.choices)), ANY_TEXT)
    if action.type is int:
        return st.one_of(st.integers(-5, 70).map(str), NUMBER_LIKE)
    if action.type is float or action.type is precision.loss_scale:
        return st.one_of(st.floats(0, 2).map(repr), FLOATS)
    return st.one_of(NUMBER_LIKE, ANY_TEXT)


@st.composite
def command_lines(draw):
    """A tiny valid run's flags, then a few flags of main.py with drawn values."""
    argv = []
    for action in draw(st.lists(st.sampled_from(FLAG_ACTIONS), max_size=4)):
        flag = draw(st.sampled_from(action.option_strings))
        if action.nargs == 0:
            argv.append(flag)
            continue
        count = action.nargs if isinstance(action.nargs, int) else 1
        texts = [draw(values_of(action)) for _ in range(count)]
        if count == 1 and draw(st.booleans()):
            argv.append(f"{flag}={texts[0]}")
        else:
            argv += [flag, *texts]
    return argv


# The cheap run of the refusal tests (support.main_in_process, as test_bad_input.py's), on
# synthetic data.
DUMMY_RUN = ["--dummy", *REFUSAL_RUN]


def flags_in(argv):
    """What an error may call the input: each flag given (and its other spellings)."""
    names = {"--config", "DIR"}
    for token in argv:
        if token.startswith("-"):
            flag = token.split("=", 1)[0]
            names.add(flag)
            for action in PARSER._actions:
                if flag in action.option_strings:
                    names.update(action.option_strings)
    return names


ALL_FLAGS = {flag for action in PARSER._actions for flag in action.option_strings}


def assert_starts_or_is_refused(argv, folder, names=None):
    before = set(os.listdir(folder))
    code, stderr, launch = run_main_until_launch(argv, folder)
    assert set(os.listdir(folder)) == before, "main.py wrote before starting the run"
    event("started" if code == 0 else "refused")
    if code == 0:
        assert launch is not None and not stderr.strip(), stderr
        args = launch.kwargs["args"][0]
        for name, value in vars(args).items():
            if isinstance(value, float):
                assert math.isfinite(value), f"{name}={value} reached the run"
        for action in PARSER._actions:
            value = getattr(args, action.dest, None)
            if action.type is not int or action.dest == "seed" or value is None:
                continue
            least = 0 if action.dest in INDICES else 1
            assert value >= least or value == NOT_GIVEN.get(action.dest), (action.dest, value)
        return args
    assert launch is None
    assert_command_refused(code, stderr, flags_in(argv) if names is None else names)
    return None


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return str(tmp_path_factory.mktemp("fuzz_trainer"))


@given(argv=command_lines())
@example(argv=["--momentum", "nan"])
@example(argv=["--wd", "inf"])
@example(argv=["--crop-scale", "nan", "1"])
def test_any_command_line_starts_or_is_refused_in_one_line(folder, argv):
    assert_starts_or_is_refused(DUMMY_RUN + ["--output-dir", "out"] + argv, folder)


PATH_FLAGS = ["--output-dir", "--tensorboard", "--config", "--data", "--resume", "--pretrained"]
PATHS = st.one_of(
    st.sampled_from(
        [
            "",
            ".",
            "/",
            "/proc",
            "/dev/null",
            "a_file",
            "missing/deeper",
            "a_file/below",
            "x" * 300,
            "out",
        ]
    ),
    st.text(alphabet=string.ascii_letters + string.digits + "._-/", max_size=30),
    UNWRITABLE_PATHS,
)


@given(flag=st.sampled_from(PATH_FLAGS), path=PATHS, data_dir=st.booleans())
def test_a_path_flag_starts_or_is_refused_in_one_line(folder, flag, path, data_dir):
    with open(os.path.join(folder, "a_file"), "w", encoding="utf-8"):
        pass
    argv = DUMMY_RUN + ["--output-dir", "out", f"{flag}={path}"]
    if data_dir:
        argv.remove("--dummy")
    args = assert_starts_or_is_refused(argv, folder)
    if flag in ("--output-dir", "--tensorboard") and path.startswith(("/proc/", "/sys/")):
        assert args is None, f"{flag} {path} started a run that cannot write there"
    if args is not None and flag in ("--output-dir", "--tensorboard"):
        assert (
            not os.path.exists(os.path.join(folder, path))
            or path in (".", "/", "")
            or os.path.isdir(os.path.join(folder, path))
        )


# -- the YAML configuration ----------------------------------------------------------------

# The keys of the flags that take a path, as a config file spells them.
PATH_KEYS = ["output-dir", "tensorboard", "resume", "pretrained", "data"]


@given(
    key=st.sampled_from(PATH_KEYS),
    value=st.one_of(st.booleans(), st.integers(), st.floats(), st.lists(st.text(max_size=3))),
)
@example(key="tensorboard", value=True)  # wrote event files into a folder named True
@example(key="output-dir", value=1)
def test_a_path_given_a_non_string_in_a_config_is_refused(folder, key, value):
    path = os.path.join(folder, "paths.yaml")
    with open(path, "w", encoding="utf-8") as handle:
        yaml.safe_dump({key: value}, handle)
    code, stderr, launch = run_main_until_launch([*DUMMY_RUN, "--config", path], folder)
    assert launch is None, f"{key}: {value!r} started a run"
    line = assert_command_refused(code, stderr, [f"{key}:"])
    assert "is not text" in line, line


KNOWN = sorted({action.dest for action in PARSER._actions} - {"help", "config"})
YAML_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 300)
    | st.integers()
    | st.floats()
    | st.text(max_size=12)
    | st.sampled_from(["tinynet", "cosine", "O1", "dynamic", "cpu"]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=2)
    ),
    max_leaves=6,
)
KEYS = st.one_of(
    st.sampled_from(KNOWN),
    st.sampled_from(KNOWN).map(lambda key: key.replace("_", "-")),
    st.text(max_size=10),
)
HOSTILE_YAML = [
    "arch: !!python/object/apply:os.system ['touch ran']\n",
    "lr: !!python/name:os.system\n",
    "!!python/object/new:os.system ['touch ran']\n",
    "a: &a [*a]\n",
    "lr: 0.1\nlr: 0.2\n",
    "batch-size: 8\nbatch_size: 8\n",
    "\ufeffepochs: 1\n",
    "epochs: 1\x00\n",
    "- 1\n- 2\n",
    "{",
    "epochs: [1\n",
    "\t epochs: 1\n",
]


@given(
    config=st.one_of(
        st.dictionaries(KEYS, YAML_VALUES, max_size=4).map(
            lambda mapping: yaml.safe_dump(mapping, allow_unicode=True)
        ),
        st.sampled_from(HOSTILE_YAML),
        st.text(max_size=60),
    ),
    encoding=st.sampled_from(["utf-8", "utf-16", "latin-1"]),
)
@example(config="steps-per-epoch: .nan\n", encoding="utf-8")
@example(config="resume: {}\n", encoding="utf-8")  # was --resume '{}' does not exist
def test_any_config_file_starts_or_is_refused_in_one_line(folder, config, encoding):
    path = os.path.join(folder, "config.yaml")
    try:
        data = config.encode(encoding)
    except UnicodeEncodeError:
        data = config.encode("utf-8")
    with open(path, "wb") as handle:
        handle.write(data)
    # A value that passes its flag's type is then checked as the flag: the flag is named.
    assert_starts_or_is_refused(
        DUMMY_RUN + ["--output-dir", "out", "--config", path], folder, ALL_FLAGS | {"--config"}
    )
    assert not os.path.exists(os.path.join(folder, "ran")), "the config's code ran"

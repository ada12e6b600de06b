"""Checkpoint files, fuzzed: `--resume`, `--pretrained` and devicekit.load_checkpoint on any
file either load or are refused with one UsageError line naming the file; a file that
would run code never runs it; a checkpoint that loads trains on.

The files: random bytes, a real checkpoint cut at any offset or with bytes overwritten,
text, JSON, legacy-format and plain pickles, pickles whose globals would run a command,
and real checkpoints with keys dropped, values of another type, another arch or class
count, tensors of the wrong shape or dtype, and another optimizer's state.
"""

import functools
import io
import json
import os
import pickle
import subprocess
import warnings

import pytest
import torch
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

import devicekit
import models
from devicekit import checkpoint_files
from invariant import assert_usage_line
from support.trainer_files import write_checkpoint
from trainer import state

ARCH = "tinynet"
CLASSES = 10
# A slower property (a model, an optimizer and a training step per example) tries fewer.
FEWER = settings(max_examples=max(25, settings.default.max_examples // 3))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return str(tmp_path_factory.mktemp("fuzz_checkpoint"))


@functools.cache
def real(folder):
    """The bytes and the dict of a real checkpoint, as main.py writes it (a function, not a
    fixture: Hypothesis would print a fixture's megabyte with every falsifying example)."""
    path = write_checkpoint(os.path.join(folder, "real.pth.tar"), ARCH)
    with open(path, "rb") as handle:
        data = handle.read()
    return data, torch.load(path, weights_only=True)


def write(folder, data, name="fuzzed.pth.tar"):
    path = os.path.join(folder, name)
    with open(path, "wb") as handle:
        handle.write(data)
    return path


def load_or_refuse(path, what="--resume checkpoint"):
    """checkpoint_files.load(path): its object, or REFUSED after asserting the one-line refusal."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            loaded = checkpoint_files.load(path, what)
        except Exception as error:
            assert_usage_line(error, [repr(path)])
            assert what in str(error)
            loaded = REFUSED
    event("refused" if loaded is REFUSED else "loaded")
    # A torch warning would be a second line on the user's screen.
    assert not caught, [str(w.message) for w in caught]
    return loaded


REFUSED = object()


def damage(data, cut, overwrites):
    """`data` cut at the fraction `cut` of its length (None: whole), then bytes overwritten
    at fractions of it: (where, byte) pairs."""
    data = bytearray(data if cut is None else data[: int(cut * (len(data) - 1))])
    for where, byte in overwrites:
        if data:
            data[int(where * (len(data) - 1))] = byte
    return bytes(data)


FRACTIONS = st.floats(0, 1)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(
    data=st.one_of(
        st.binary(max_size=4096),
        st.text(max_size=200).map(str.encode),
        JSON.map(lambda value: json.dumps(value).encode()),
        st.tuples(JSON, st.integers(0, pickle.HIGHEST_PROTOCOL)).map(
            lambda value: pickle.dumps(value[0], protocol=value[1])
        ),
    )
)
@example(data=b"hello notes\n")  # torch's legacy path: KeyError: 101 from its unpickler
@example(data=b"{}")
@example(data=b"")
def test_any_bytes_load_or_are_refused_in_one_line(folder, data):
    load_or_refuse(write(folder, data))


@given(
    cut=st.none() | FRACTIONS,
    overwrites=st.lists(st.tuples(FRACTIONS, st.integers(0, 255)), max_size=8),
)
def test_a_damaged_checkpoint_loads_or_is_refused_in_one_line(folder, cut, overwrites):
    load_or_refuse(write(folder, damage(real(folder)[0], cut, overwrites)))


@given(value=JSON, legacy=st.booleans())
def test_plain_values_saved_by_torch_load_back_as_they_were(folder, value, legacy):
    buffer = io.BytesIO()
    torch.save(value, buffer, _use_new_zipfile_serialization=not legacy)
    assert load_or_refuse(write(folder, buffer.getvalue())) == value


# -- a file that would run code ----------------------------------------------------------


class Hostile:
    """Unpickling it calls `call(*args)`: each of these would create the marker file."""

    def __init__(self, call, args):
        self.call, self.args = call, args

    def __reduce__(self):
        return self.call, self.args


def hostile_calls(marker):
    return [
        (os.system, (f"touch {marker}",)),
        (subprocess.call, (["touch", marker],)),
        (eval, (f"open({marker!r}, 'w')",)),
        (exec, (f"open({marker!r}, 'w')",)),
        (open, (marker, "w")),
    ]


@given(
    choice=st.integers(0, 4),
    wrapped=st.booleans(),
    container=st.booleans(),
    protocol=st.integers(2, pickle.HIGHEST_PROTOCOL),
)
def test_a_file_that_would_run_code_is_refused_and_never_runs_it(
    folder, choice, wrapped, container, protocol
):
    marker = os.path.join(folder, "ran")
    hostile = Hostile(*hostile_calls(marker)[choice])
    obj = {"epoch": 1, "state_dict": hostile} if container else hostile
    if wrapped:
        buffer = io.BytesIO()
        torch.save(obj, buffer)
        data = buffer.getvalue()
    else:
        data = pickle.dumps(obj, protocol=protocol)
    path = write(folder, data)
    with pytest.raises(devicekit.UsageError) as error:
        checkpoint_files.load(path, "--resume checkpoint")
    assert_usage_line(error.value, [repr(path)])
    # A plain pickle of protocol 4 or 5 fails at its first FRAME opcode, before any global.
    assert "holds objects other than tensors" in str(error.value) or (
        not wrapped and "not written by torch.save" in str(error.value)
    )
    assert not os.path.exists(marker), "the file's code ran"


# -- real checkpoints, changed -----------------------------------------------------------

SMALL_TENSORS = st.builds(
    lambda shape, dtype: torch.zeros(shape, dtype=dtype),
    st.lists(st.integers(0, 3), max_size=3),
    st.sampled_from(
        [torch.float32, torch.float16, torch.int64, torch.uint8, torch.bool, torch.complex64]
    ),
)
VALUES = st.one_of(JSON, SMALL_TENSORS, st.lists(SMALL_TENSORS, max_size=3))
KEYS = [
    "epoch",
    "step",
    "arch",
    "state_dict",
    "best_acc1",
    "optimizer",
    "scheduler",
    "rng_states",
    "totals",
]


def other_state_dict(arch, classes):
    return models.create(arch, num_classes=classes).state_dict()


def adam_state():
    model = models.create(ARCH, num_classes=CLASSES)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 3, 32, 32)).sum().backward()
    optimizer.step()
    return optimizer.state_dict()


CHANGES = st.one_of(
    st.tuples(st.just("drop"), st.sampled_from(KEYS)),
    st.tuples(st.just("retype"), st.sampled_from(KEYS), VALUES),
    st.tuples(st.just("weight"), FRACTIONS, VALUES),
    st.tuples(
        st.just("arch"),
        st.sampled_from(["tinynet", "tinynet_nobn", "tinymlp"]),
        st.sampled_from([2, CLASSES]),
    ),
    st.tuples(st.just("adam")),
    st.tuples(
        st.just("mid-epoch"),
        st.integers(0, 3),
        st.integers(1, 2),
        st.sampled_from([(4,), (3,), ()]),
    ),
)


def changed(original, changes):
    """A real checkpoint with `changes` made, the ways files meet other code."""
    ckpt = dict(original)
    ckpt["state_dict"] = dict(ckpt["state_dict"])
    for change, *args in changes:
        if change == "drop":
            ckpt.pop(args[0], None)
        elif change == "retype":
            ckpt[args[0]] = args[1]
        elif change == "weight" and isinstance(ckpt.get("state_dict"), dict) and ckpt["state_dict"]:
            names = sorted(ckpt["state_dict"])
            ckpt["state_dict"][names[int(args[0] * (len(names) - 1))]] = args[1]
        elif change == "arch":
            ckpt["state_dict"] = other_state_dict(*args)
        elif change == "adam":
            ckpt["optimizer"] = adam_state()
        elif change == "mid-epoch":
            step, ranks, shape = args
            ckpt["step"] = step
            ckpt["rng_states"] = [torch.get_rng_state()] * ranks
            ckpt["totals"] = torch.zeros(shape)
    return ckpt


def train_one_step(model, optimizer, scheduler, position):
    """What main.py does with a resumed run's first step."""
    with torch.random.fork_rng():
        if position.rng_states is not None and len(position.rng_states) == 1:
            torch.set_rng_state(position.rng_states[0])
        totals = torch.zeros(4) if position.totals is None else position.totals.clone()
        images, target = torch.randn(2, 3, 32, 32), torch.tensor([0, 1])
        loss = torch.nn.functional.cross_entropy(model(images), target)
        loss.backward()
        optimizer.step()
        scheduler.step()
        totals += torch.stack([loss.detach(), loss.detach(), loss.detach(), totals.new_tensor(2)])


@FEWER
@given(changes=st.lists(CHANGES, min_size=1, max_size=3))
def test_resume_from_a_changed_checkpoint_trains_on_or_is_refused_in_one_line(folder, changes):
    path = write(folder, b"")
    torch.save(changed(real(folder)[1], changes), path)
    model = models.create(ARCH, num_classes=CLASSES)
    optimizer = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9)
    scheduler = state.make_scheduler(optimizer, 2, 0, "step", 2)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    try:
        position = state.resume(path, ARCH, model, optimizer, scheduler, scaler)
    except devicekit.UsageError as error:
        assert_usage_line(error, [f"--resume {path!r}", f"--resume checkpoint {path!r}"])
        event("refused")
        return
    event("resumed")
    assert position.epoch >= 0 and position.step >= 0
    train_one_step(model, optimizer, scheduler, position)


@FEWER
@given(changes=st.lists(CHANGES, min_size=1, max_size=3), wrapped=st.booleans())
def test_pretrained_weights_changed_load_or_are_refused_in_one_line(folder, changes, wrapped):
    weights = changed(real(folder)[1], changes).get("state_dict", {})
    path = write(folder, b"")
    torch.save({"state_dict": weights} if wrapped else weights, path)
    model = models.create(ARCH, num_classes=CLASSES)
    try:
        state.load_pretrained(path, model)
    except devicekit.UsageError as error:
        assert_usage_line(error, [f"--pretrained {path!r}", f"--pretrained file {path!r}"])
        event("refused")
        return
    event("loaded")
    model(torch.randn(2, 3, 32, 32))


@given(data=st.one_of(st.binary(max_size=512), st.text(max_size=100).map(str.encode)))
@example(data=b"hello notes\n")
def test_load_checkpoint_of_the_library_raises_usage_error_for_a_non_checkpoint(folder, data):
    path = write(folder, data, "library.pt")
    try:
        devicekit.load_checkpoint(path)
    except Exception as error:
        assert_usage_line(error, [repr(path)])

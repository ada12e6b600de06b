"""Every bad input to main.py is one line on stderr naming the problem, exit code 2, no
traceback, and nothing written; plus devicekit's atomic save and safe load of a checkpoint.

Most main.py cases are refused before main.py launches any rank (by the parser, the YAML
config, trainer.options.validate, or devicekit reading the launch settings for the batch
split): main() never reaches devicekit.launch. Those run in this process
(tests/support/main_in_process.py): main.main(argv) itself, with the case's environment
added to os.environ, in the files' folder, stderr captured and the launch replaced by a
recorder. That is the same check as `python main.py`: the code that refuses and the
decorator that prints "error: ..." and exits 2 are the same; every Python warning is
printed on the captured stderr, each case's anew (all categories: no fewer lines than a
new process would print); and the test asserts the launch was never called, so a case
the ranks refuse cannot pass for one refused before the launch. (For every in-process
case, stderr and the exit code were compared with the subprocess's when this split was
made: byte for byte the same.)

The cases marked `process=True` run as `python main.py` runs them: those refused inside a
rank or by the launch (in-process they would reach the recorder), those that put a
simulated torch_npu on PYTHONPATH before torch is imported, and one plain argument error
(unknown-flag), so that the real interpreter's path (argparse, one line, exit 2, no
traceback) stays proven end to end. unknown-flag is a process of its own; the others run
one after another in one process for the simulated torch_npu and one for the rest
(tests/support/run_scripts.py: each case's main.py as __main__, its own variables, its own
stderr and exit code), each `import torch` saved but one per process. The three processes
start together on a small thread pool when the first case is needed, and each test then
checks its own result.
"""

import collections
import concurrent.futures
import os
import pickle
import random
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import models
from conftest import ROOT, clean_environ
from devicekit import checkpoint, checkpoint_files
from devicekit.errors import UsageError
from support.main_in_process import REFUSAL_RUN, run_main_until_launch
from support.script_groups import run_group
from support.trainer_files import make_data_dir, write_checkpoint
from trainer import state

TIMEOUT_S = 120
MAIN = os.path.join(ROOT, "main.py")
FAKE_NPU = os.path.join(ROOT, "tests", "fake_npu")
ENV_LAUNCH = {
    "RANK": "0",
    "WORLD_SIZE": "2",
    "LOCAL_RANK": "0",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29531",
}


# -- fixture helpers ----------------------------------------------------------------------


class RunsCode:
    """Unpickling this runs `touch <marker>`: a stand-in for a malicious checkpoint."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def build_files(d):
    """Every file the cases point at, under `d` (placeholders {d} in the cases)."""
    os.makedirs(d, exist_ok=True)
    make_data_dir(os.path.join(d, "no_val"), val=())
    make_data_dir(os.path.join(d, "no_train"), train=())
    make_data_dir(os.path.join(d, "empty_class"), empty={("train", "b")})
    make_data_dir(os.path.join(d, "few"))  # 4 training images
    make_data_dir(os.path.join(d, "class_loop"))
    os.symlink("cycle", os.path.join(d, "class_loop", "train", "cycle"))
    make_data_dir(os.path.join(d, "image_loop"))
    os.symlink("2.png", os.path.join(d, "image_loop", "train", "a", "2.png"))
    os.symlink("self_loop", os.path.join(d, "self_loop"))
    open(os.path.join(d, "a_file"), "w").close()
    with open(os.path.join(d, "not_utf8.yaml"), "wb") as f:
        f.write(b"arch: tinynet\nlr: \xff\n")
    with open(os.path.join(d, "big.yaml"), "w") as f:
        f.write('batch-size: "big"\n')
    with open(os.path.join(d, "choice.yaml"), "w") as f:
        f.write("lr-schedule: linear\n")
    with open(os.path.join(d, "switch.yaml"), "w") as f:
        f.write("dummy: 3\n")
    with open(os.path.join(d, "duplicate.yaml"), "w") as f:
        f.write("lr: 0.1\narch: tinynet\nlr: 0.2\n")
    with open(os.path.join(d, "two_spellings.yaml"), "w") as f:
        f.write("batch_size: 4\nbatch-size: 8\n")
    with open(os.path.join(d, "bad.yaml"), "w") as f:
        f.write("arch: [tinynet\nlr: 0.1\n")
    with open(os.path.join(d, "unknown.yaml"), "w") as f:
        f.write("arch: tinynet\nbogus-key: 1\n")
    with open(os.path.join(d, "tag.yaml"), "w") as f:
        f.write(f'arch: !!python/object/apply:os.system ["touch {d}/yaml_marker"]\n')
    with open(os.path.join(d, "list.yaml"), "w") as f:
        f.write("- arch\n- tinynet\n")
    good = write_checkpoint(os.path.join(d, "good.pth.tar"))
    data = open(good, "rb").read()
    with open(os.path.join(d, "truncated.pth.tar"), "wb") as f:
        f.write(data[: len(data) // 2])
    with open(os.path.join(d, "random.pth.tar"), "wb") as f:
        f.write(random.Random(0).randbytes(4096))
    open(os.path.join(d, "empty.pth.tar"), "wb").close()
    torch.save(
        {"epoch": 1, "state_dict": RunsCode(f"{d}/torch_marker")},
        os.path.join(d, "evil_torch.pth.tar"),
    )
    with open(os.path.join(d, "evil_pickle.pth.tar"), "wb") as f:
        pickle.dump(RunsCode(f"{d}/pickle_marker"), f, protocol=2)
    torch.save({"weights": torch.ones(2)}, os.path.join(d, "not_a_checkpoint.pth.tar"))
    with open(os.path.join(d, "notes.txt"), "w") as f:
        f.write("hello notes\n")  # torch's legacy path fails on it with KeyError: 101
    saved = torch.load(good, weights_only=True)
    torch.save(dict(saved, epoch="1"), os.path.join(d, "epoch_text.pth.tar"))
    with open(os.path.join(d, "control.yaml"), "w") as f:
        f.write(r'"\x1e": 1' + "\n")  # YAML for a key that splits a line


# -- the cases ----------------------------------------------------------------------------

# Each case's needles are the words of its own cause ({d}: the folder of the files above).
# process=True: the case runs as `python main.py` (see the module's docstring), because
# main.py refuses it only in the rank or in devicekit.launch, because it needs a process
# of its own (fake_npu: the simulated torch_npu is found before torch is imported), or
# (unknown-flag) to keep the real interpreter's path proven end to end.
Case = collections.namedtuple(
    "Case",
    "id argv needles env dummy fake_npu marker process",
    defaults=(None, True, False, None, False),
)
MP_2 = ["--multiprocessing-distributed", "--nproc-per-node", "2"]

CASES = [
    Case(
        "unknown-arch",
        ["-a", "resnt50"],
        ["unknown architecture 'resnt50'", "did you mean 'resnet50'?"],
    ),
    Case(
        "batch-not-divisible",
        ["--multiprocessing-distributed", "--nproc-per-node", "2", "-b", "7"],
        ["--batch-size 7", "does not divide over 2 processes", "use 6 or 8"],
    ),
    Case(
        "batch-below-processes",
        ["--multiprocessing-distributed", "--nproc-per-node", "2", "-b", "1"],
        ["--batch-size 1 is smaller than the 2 processes", "--batch-size 2 or more"],
    ),
    Case(
        "rank-not-below-world",
        [],
        ["RANK=2 is not below WORLD_SIZE=2"],
        env={**ENV_LAUNCH, "RANK": "2"},
    ),
    Case(
        "local-rank-not-below-local-world",
        [],
        ["LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"],
        env={**ENV_LAUNCH, "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"},
    ),
    Case(
        "env-without-master-addr",
        [],
        ["MASTER_ADDR is not set", "torchrun"],
        env={k: v for k, v in ENV_LAUNCH.items() if k != "MASTER_ADDR"},
    ),
    Case(
        "mp-distributed-under-launcher",
        ["--multiprocessing-distributed"],
        [
            "--multiprocessing-distributed was given but a launcher already started this process",
            "drop --multiprocessing-distributed",
        ],
        env=ENV_LAUNCH,
    ),
    Case("world-size-without-rank", ["--world-size", "2"], ["--world-size 2 needs --rank"]),
    Case(
        "world-size-negative",
        ["--world-size", "-2"],
        ["--world-size -2 must be at least 1, or -1 for not given"],
    ),
    Case("rank-negative", ["--rank", "-3"], ["--rank -3 must be at least 0, or -1 for not given"]),
    Case("gpu-negative", ["--gpu", "-1"], ["--gpu -1 must be at least 0"]),
    Case("gpu-below-minus-one", ["--gpu", "-2"], ["--gpu -2 must be at least 0"]),
    Case("local-rank-negative", ["--local-rank", "-4"], ["--local-rank -4 must be at least 0"]),
    Case(
        "rank-without-world-size",
        ["--rank", "5"],
        [
            "--rank 5 needs --world-size (the number of processes) too",
            "a single process needs neither",
        ],
    ),
    Case(
        "nproc-without-mp-distributed",
        ["--nproc-per-node", "3"],
        [
            "--nproc-per-node 3 only means something with --multiprocessing-distributed",
            "add --multiprocessing-distributed or drop --nproc-per-node",
        ],
    ),
    Case(
        "dist-url-garbage",
        ["--dist-url", "garbage://"],
        ["--dist-url 'garbage://' is not understood: use tcp://HOST:PORT or env://"],
    ),
    Case(
        "dist-timeout-inf",
        ["--dist-timeout", "inf"],
        ["--dist-timeout inf must be a positive, finite number of seconds"],
    ),
    Case(
        "dist-timeout-nan",
        ["--dist-timeout", "nan"],
        ["--dist-timeout nan must be a positive, finite number of seconds"],
    ),
    Case(
        "dist-timeout-zero",
        ["--dist-timeout", "0"],
        ["--dist-timeout 0.0 must be a positive, finite number of seconds"],
    ),
    Case(
        "dist-timeout-negative",
        ["--dist-timeout", "-5"],
        ["--dist-timeout -5.0 must be a positive, finite number of seconds"],
    ),
    Case(
        "seed-2-to-the-70",
        ["--seed", str(2**70)],
        [f"--seed {2**70} is out of range", f"from {-(2**63)} to {2**63 - 1}"],
    ),
    Case(
        "seed-2-to-the-64-minus-1-two-ranks",
        MP_2 + ["--seed", str(2**64 - 1)],
        [f"--seed {2**64 - 1} is out of range", "the rank and the epoch are added to it"],
    ),
    Case(
        "output-dir-is-a-file",
        ["--output-dir", "{d}/a_file"],
        ["--output-dir '{d}/a_file' already exists and is not a folder"],
    ),
    Case(
        "output-dir-under-a-file",
        ["--output-dir", "{d}/a_file/out"],
        ["--output-dir '{d}/a_file/out' cannot be made: '{d}/a_file' exists and is not a folder"],
    ),
    Case(
        "output-dir-under-proc",
        ["--output-dir", "/proc/x/y"],
        ["--output-dir '/proc/x/y' is not writable: making a file in '/proc' fails"],
    ),
    Case(
        "output-dir-under-proc-mp-distributed",
        MP_2 + ["--output-dir", "/proc/x/y"],
        ["--output-dir '/proc/x/y' is not writable: making a file in '/proc' fails"],
    ),
    Case(
        "output-dir-name-too-long",
        ["--output-dir", "{d}/" + "n" * 300 + "/out"],
        [
            "--output-dir '{d}/" + "n" * 300 + "/out' cannot be made: the name "
            "'nnnnnnnnnnnnnnnnnnnn'... is 300 bytes, over the file system's limit of"
        ],
    ),
    # process: the device is resolved in devicekit.launch
    Case(
        "npu-not-installed",
        ["--device", "npu"],
        ["--device npu", "torch_npu is not installed"],
        process=True,
    ),
    # process: the device is resolved in devicekit.launch
    Case(
        "cuda-on-cpu-torch",
        ["--device", "cuda"],
        ["--device cuda", "no CUDA support"],
        process=True,
    ),
    # Without torch_npu, installing it is the first fix, whatever the device order says
    # (the order itself: fake-npu-visible-unordered).
    # process: the device is resolved in devicekit.launch
    Case(
        "ascend-visible-unordered",
        ["--device", "npu"],
        ["--device npu: torch_npu is not installed"],
        env={"ASCEND_RT_VISIBLE_DEVICES": "1,0"},
        process=True,
    ),
    # The simulated torch_npu lets a CPU machine express device-index problems.
    # process: fake_npu
    Case(
        "fake-npu-visible-unordered",
        ["--device", "npu"],
        [
            "ASCEND_RT_VISIBLE_DEVICES='1,0' is not in ascending order",
            "ASCEND_RT_VISIBLE_DEVICES=0,1",
        ],
        env={"ASCEND_RT_VISIBLE_DEVICES": "1,0"},
        fake_npu=True,
        process=True,
    ),
    # process: fake_npu
    Case(
        "fake-npu-gpu-out-of-range",
        ["--device", "npu", "--gpu", "1"],
        ["--gpu 1 but only 1 npu device(s) are visible", "below 1"],
        env={"FAKE_NPU_COUNT": "1"},
        fake_npu=True,
        process=True,
    ),
    # process: fake_npu (and the launcher's variables as a process starts with them)
    Case(
        "fake-npu-local-rank-out-of-range",
        ["--device", "npu"],
        ["LOCAL_RANK=1 but only 1 npu device(s) are visible"],
        env={**ENV_LAUNCH, "RANK": "1", "LOCAL_RANK": "1", "FAKE_NPU_COUNT": "1"},
        fake_npu=True,
        process=True,
    ),
    Case(
        "data-dir-missing",
        ["{d}/nowhere"],
        ["data directory '{d}/nowhere' does not exist"],
        dummy=False,
    ),
    Case("data-dir-not-given", [], ["no data directory given", "--dummy"], dummy=False),
    Case(
        "data-without-train",
        ["{d}/no_train"],
        ["data directory '{d}/no_train' has no train/ folder", "DIR/train/<class>"],
        dummy=False,
    ),
    Case(
        "data-without-val",
        ["{d}/no_val"],
        ["data directory '{d}/no_val' has no val/ folder", "DIR/val/<class>"],
        dummy=False,
    ),
    Case(
        "empty-class-folder",
        ["{d}/empty_class"],
        ["class folder {d}/empty_class/train/b has no images"],
        dummy=False,
    ),
    Case(
        "data-fewer-images-than-a-batch",
        ["{d}/few"],
        [
            "data directory '{d}/few' has 4 training images, fewer than one batch of "
            "--batch-size 8",
            "lower --batch-size or add images",
        ],
        dummy=False,
    ),
    Case(
        "data-symlink-loop-among-classes",
        ["{d}/class_loop"],
        ["data path {d}/class_loop/train/cycle cannot be read (Too many levels of symbolic links)"],
        dummy=False,
    ),
    Case(
        "data-symlink-loop-among-images",
        ["{d}/image_loop"],
        [
            "data path {d}/image_loop/train/a/2.png cannot be read (Too many levels of symbolic "
            "links)"
        ],
        dummy=False,
    ),
    Case(
        "data-dir-symlink-loop",
        ["{d}/self_loop"],
        ["data directory '{d}/self_loop' cannot be opened (Too many levels of symbolic links)"],
        dummy=False,
    ),
    Case(
        "config-missing",
        ["--config", "{d}/nowhere.yaml"],
        ["--config '{d}/nowhere.yaml' does not exist"],
    ),
    Case(
        "config-is-a-directory",
        ["--config", "{d}"],
        ["--config '{d}' is a directory: pass a YAML file"],
    ),
    Case(
        "config-not-utf8",
        ["--config", "{d}/not_utf8.yaml"],
        ["--config '{d}/not_utf8.yaml' is not UTF-8 text"],
    ),
    Case(
        "config-not-yaml",
        ["--config", "{d}/bad.yaml"],
        ["--config '{d}/bad.yaml' is not valid YAML at line 2"],
    ),
    Case(
        "config-value-not-an-int",
        ["--config", "{d}/big.yaml"],
        ["--config '{d}/big.yaml': batch-size: 'big' is not an int"],
    ),
    Case(
        "config-value-not-a-choice",
        ["--config", "{d}/choice.yaml"],
        ["--config '{d}/choice.yaml': lr-schedule: 'linear' is not one of step, cosine"],
    ),
    Case(
        "config-switch-not-a-bool",
        ["--config", "{d}/switch.yaml"],
        ["--config '{d}/switch.yaml': dummy: 3 is not true or false"],
    ),
    Case(
        "config-duplicate-key",
        ["--config", "{d}/duplicate.yaml"],
        ["--config '{d}/duplicate.yaml' gives lr twice (lines 1 and 3): keep one"],
    ),
    Case(
        "config-key-in-two-spellings",
        ["--config", "{d}/two_spellings.yaml"],
        ["--config '{d}/two_spellings.yaml' gives batch-size twice (as batch_size and batch-size)"],
    ),
    Case(
        "config-not-mapping",
        ["--config", "{d}/list.yaml"],
        ["--config '{d}/list.yaml' must be a mapping of option: value, not a list"],
    ),
    Case(
        "config-unknown-key",
        ["--config", "{d}/unknown.yaml"],
        ["--config '{d}/unknown.yaml' has unknown option(s): bogus-key"],
    ),
    Case(
        "config-python-tag",
        ["--config", "{d}/tag.yaml"],
        [
            "could not determine a constructor",
            "python/object/apply:os.system",
            "refused (safe_load)",
        ],
        marker="yaml_marker",
    ),
    Case("epochs-zero", ["--epochs", "0"], ["--epochs 0 must be at least 1"]),
    Case("epochs-negative", ["--epochs", "-1"], ["--epochs -1 must be at least 1"]),
    Case("lr-zero", ["--lr", "0"], ["--lr 0 must be a positive, finite number"]),
    Case("lr-negative", ["--lr", "-0.1"], ["--lr -0.1 must be a positive, finite number"]),
    Case("workers-negative", ["--workers", "-1"], ["--workers -1 must be at least 0"]),
    Case("batch-zero", ["-b", "0"], ["--batch-size 0 must be at least 1"]),
    Case(
        "resume-missing",
        ["--resume", "{d}/nowhere.pth.tar"],
        ["--resume '{d}/nowhere.pth.tar' does not exist"],
    ),
    Case(
        "resume-finished-run",
        ["--resume", "{d}/good.pth.tar"],
        [
            "--resume '{d}/good.pth.tar' finished at epoch 1, and --epochs 1 leaves nothing to "
            "train",
            "pass --epochs 2 or more to train on, or --evaluate",
        ],
    ),
    Case(
        "resume-random-bytes",
        ["--resume", "{d}/random.pth.tar"],
        [
            "--resume checkpoint '{d}/random.pth.tar' is corrupt or not written by torch.save",
            "intact copy",
        ],
    ),
    Case(
        "resume-empty-file",
        ["--resume", "{d}/empty.pth.tar"],
        ["--resume checkpoint '{d}/empty.pth.tar' is truncated or not a PyTorch checkpoint"],
    ),
    Case(
        "resume-truncated",
        ["--resume", "{d}/truncated.pth.tar"],
        [
            "--resume checkpoint '{d}/truncated.pth.tar' is truncated or not a PyTorch checkpoint",
            "intact copy",
        ],
    ),
    # process: the checkpoint is loaded into the model in the rank, after the launch
    Case(
        "resume-other-arch",
        ["-a", "tinynet_nobn", "--epochs", "2", "--resume", "{d}/good.pth.tar"],
        [
            "--resume '{d}/good.pth.tar' was written for --arch tinynet, not tinynet_nobn",
            "pass --arch tinynet",
        ],
        process=True,
    ),
    # process: the checkpoint's keys are read in the rank, after the launch
    Case(
        "resume-not-a-training-checkpoint",
        ["--resume", "{d}/not_a_checkpoint.pth.tar"],
        [
            "--resume '{d}/not_a_checkpoint.pth.tar' is not a training checkpoint",
            "epoch, arch, state_dict, optimizer",
        ],
        process=True,
    ),
    Case(
        "resume-malicious-torch-save",
        ["--resume", "{d}/evil_torch.pth.tar"],
        [
            "--resume checkpoint '{d}/evil_torch.pth.tar' holds objects other than tensors",
            "weights_only=True",
            "posix.system",
        ],
        marker="torch_marker",
    ),
    Case(
        "resume-malicious-pickle",
        ["--resume", "{d}/evil_pickle.pth.tar"],
        [
            "--resume checkpoint '{d}/evil_pickle.pth.tar' holds objects other than tensors",
            "weights_only=True",
        ],
        marker="pickle_marker",
    ),
    # process: --pretrained is loaded in the rank (build_model), after the launch
    Case(
        "pretrained-malicious",
        ["--pretrained", "{d}/evil_torch.pth.tar"],
        [
            "--pretrained file '{d}/evil_torch.pth.tar' holds objects other than tensors",
            "weights_only=True",
        ],
        marker="torch_marker",
        process=True,
    ),
    # process: --pretrained is loaded in the rank (build_model), after the launch
    Case(
        "pretrained-other-arch",
        ["-a", "tinynet_nobn", "--pretrained", "{d}/good.pth.tar"],
        [
            "--pretrained '{d}/good.pth.tar' does not fit this model",
            "missing (e.g.",
            "check --arch",
        ],
        process=True,
    ),
    Case(
        "pretrained-without-path",
        ["--pretrained"],
        ["--pretrained needs a PATH", "cannot download weights"],
    ),
    # process: the plain argument error kept end to end: argparse in a real `python main.py`
    Case("unknown-flag", ["--bogus"], ["unrecognized arguments: --bogus", "--help"], process=True),
    # Found by tests/test_fuzz_*.py: each was a traceback or a second line before.
    Case(
        "resume-text-file",
        ["--resume", "{d}/notes.txt"],
        [
            "--resume checkpoint '{d}/notes.txt' is truncated or not a PyTorch checkpoint "
            "(KeyError: 101)"
        ],
    ),
    # process: --pretrained is loaded in the rank (build_model), after the launch
    Case(
        "pretrained-text-file",
        ["--pretrained", "{d}/notes.txt"],
        ["--pretrained file '{d}/notes.txt' is truncated or not a PyTorch checkpoint"],
        process=True,
    ),
    # process: the checkpoint's epoch is checked in the rank, after the launch
    Case(
        "resume-epoch-not-a-count",
        ["--resume", "{d}/epoch_text.pth.tar"],
        [
            "--resume '{d}/epoch_text.pth.tar' is not a checkpoint main.py wrote (its epoch is "
            "'1', not a count)"
        ],
        process=True,
    ),
    Case("momentum-nan", ["--momentum", "nan"], ["--momentum nan must be a finite number"]),
    Case(
        "config-control-character",
        ["--config", "{d}/control.yaml"],
        ["has unknown option(s): \\x1e;"],
    ),
]
BY_ID = {case.id: case for case in CASES}
assert len(BY_ID) == len(CASES)
assert all(case.process for case in CASES if case.fake_npu), "fake_npu needs a process"


def main_environ(env=None, fake_npu=False):
    """The environment of a `python main.py`: clean_environ, `env`, the simulated torch_npu."""
    environ = clean_environ(**(env or {}))
    if fake_npu:
        environ["PYTHONPATH"] = os.pathsep.join([FAKE_NPU, environ["PYTHONPATH"]])
    return environ


def start_main(argv, environ, cwd=None):
    return subprocess.run(
        [sys.executable, MAIN, *argv],
        env=environ,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def case_command(case, d):
    """(argv, env) of a case: REFUSAL_RUN, its output folder, then the case's own (wins)."""
    argv = REFUSAL_RUN + ["--output-dir", os.path.join(d, f"out-{case.id}")]
    argv += (["--dummy"] if case.dummy else []) + [a.format(d=d) for a in case.argv]
    env = {key: value.format(d=d) for key, value in (case.env or {}).items()}
    return argv, env


def run_case_in_process(case, d):
    """The case as main.main in this process, in `d` as the subprocess runs in it: its
    CompletedProcess (stdout not kept) and the launch's call (None: not reached)."""
    argv, env = case_command(case, d)
    code, stderr, launch = run_main_until_launch(argv, d, env)
    return subprocess.CompletedProcess([MAIN, *argv], code, None, stderr), launch


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("bad_input"))
    build_files(d)
    return d


# The corrupt-image run: 4 training images, batch 2, no step cap: every image is read once.
CORRUPT_IMAGE_RUN = ["-a", "tinynet", "--num-classes", "2", "--image-size", "32", "-b", "2"]
CORRUPT_IMAGE_RUN += ["--epochs", "1", "-j", "0"]


@pytest.fixture(scope="module")
def outcomes(request, files, tmp_path_factory):
    """{case id: future of its CompletedProcess} for the process=True cases this session
    runs, and "corrupt-image" for the run of a data folder with a corrupt image.
    unknown-flag runs as `python main.py` itself; the others, one after another as
    `python main.py` runs them, in one process (support/run_scripts.py) for those with
    the simulated torch_npu and one for the rest, each case's variables its own. The three
    start together on a small thread pool; their environments are made here, on the
    test's thread: the in-process cases change os.environ while the pool runs."""
    wanted = [
        item.callspec.params["case_id"]
        for item in request.session.items
        if item.module.__name__ == __name__
        and hasattr(item, "callspec")
        and "case_id" in item.callspec.params
        and BY_ID[item.callspec.params["case_id"]].process
    ]
    data = tmp_path_factory.mktemp("corrupt_image")
    make_data_dir(data / "data", per_class=2)
    (data / "data" / "train" / "a" / "1.png").write_bytes(b"this is not a png")
    groups = {
        False: [
            (
                "corrupt-image",
                MAIN,
                [*CORRUPT_IMAGE_RUN, "--output-dir", data / "out", data / "data"],
            )
        ],
        True: [],
    }
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=3)
    futures = {}
    for case_id in wanted:
        argv, env = case_command(BY_ID[case_id], files)
        if case_id == "unknown-flag":
            futures[case_id] = pool.submit(start_main, argv, main_environ(env), files)
        else:
            groups[BY_ID[case_id].fake_npu].append((case_id, MAIN, argv, env))
    runs = {
        fake_npu: pool.submit(
            run_group,
            tmp_path_factory.mktemp("fake_npu" if fake_npu else "cases"),
            "python",
            entries,
            TIMEOUT_S * 3,
            main_environ(fake_npu=fake_npu),
        )
        for fake_npu, entries in groups.items()
        if entries
    }
    for fake_npu, entries in groups.items():
        for name, *_ in entries:
            futures[name] = pool.submit(
                lambda run, name: run.result().result(name), runs[fake_npu], name
            )
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


def assert_one_line_error(result, needles):
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.mark.parametrize("case_id", list(BY_ID))
def test_bad_input_is_one_line_exit_2_and_writes_nothing(case_id, outcomes, files):
    case = BY_ID[case_id]
    if case_id == "cuda-on-cpu-torch" and torch.accelerator.current_accelerator() is not None:
        pytest.skip("this torch has an accelerator")
    if case_id in ("npu-not-installed", "ascend-visible-unordered"):
        from devicekit.kinds.npu import NpuKind

        if NpuKind.is_installed():
            pytest.skip("torch_npu is installed here")
    if case.process:
        result = outcomes[case_id].result(timeout=TIMEOUT_S * 4)
    else:
        result, launch = run_case_in_process(case, files)
        assert launch is None, (
            f"case {case_id!r} reached devicekit.launch: main.py does not refuse it before "
            f"the launch, so in-process it proves nothing; mark it process=True "
            f"(exit code {result.returncode}, stderr {result.stderr!r})"
        )
    assert_one_line_error(result, [needle.format(d=files) for needle in case.needles])
    out = os.path.join(files, f"out-{case_id}")
    assert not os.path.exists(out) or not os.listdir(out), os.listdir(out)
    if case.marker:
        assert not os.path.exists(os.path.join(files, case.marker)), "the file's code ran"


# -- a corrupt image is not a usage error: skipped with a warning naming it -------------------


def test_corrupt_image_is_skipped_with_a_warning_and_training_completes(outcomes):
    result = outcomes["corrupt-image"].result(timeout=TIMEOUT_S * 4)
    data = Path(result.args[-1])
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    warnings_ = [line for line in result.stderr.splitlines() if "skipping unreadable image" in line]
    assert len(warnings_) == 1 and str(data / "train" / "a" / "1.png") in warnings_[0], (
        result.stderr
    )
    assert (data.parent / "out" / "checkpoint.pth.tar").is_file()


# -- devicekit.checkpoint_files and devicekit.checkpoint units ------------------------------


def test_save_atomic_failure_midway_keeps_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pth.tar"
    checkpoint_files.save_atomic({"epoch": 1, "w": torch.arange(4.0)}, str(path))
    before = path.read_bytes()

    def broken_save(obj, handle, *args, **kwargs):
        handle.write(b"PK\x03\x04 half a zip file")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="No space left"):
        checkpoint_files.save_atomic({"epoch": 2, "w": torch.zeros(4)}, str(path))
    monkeypatch.undo()
    assert path.read_bytes() == before
    loaded = checkpoint_files.load(str(path))
    assert loaded["epoch"] == 1 and torch.equal(loaded["w"], torch.arange(4.0))
    assert sorted(os.listdir(tmp_path)) == ["checkpoint.pth.tar"]  # no temporary file left


def test_save_atomic_interrupted_keeps_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pth.tar"
    checkpoint_files.save_atomic({"epoch": 1}, str(path))

    def interrupted(obj, handle, *args, **kwargs):
        handle.write(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        checkpoint_files.save_atomic({"epoch": 2}, str(path))
    monkeypatch.undo()
    assert checkpoint_files.load(str(path))["epoch"] == 1
    assert os.listdir(tmp_path) == ["checkpoint.pth.tar"]


def test_save_atomic_replaces_and_creates_the_folder(tmp_path):
    path = tmp_path / "new" / "checkpoint.pth.tar"
    checkpoint_files.save_atomic({"epoch": 1}, str(path))
    checkpoint_files.save_atomic({"epoch": 2}, str(path))
    assert checkpoint_files.load(str(path))["epoch"] == 2
    assert os.listdir(path.parent) == ["checkpoint.pth.tar"]


def test_strip_prefix():
    one = torch.ones(1)
    assert checkpoint_files.strip_prefix({"module.a": one, "module.b.c": one}) == {
        "a": one,
        "b.c": one,
    }
    mixed = {"module.a": one, "b": one}
    assert checkpoint_files.strip_prefix(mixed) == mixed  # only when every key carries it
    assert checkpoint_files.strip_prefix({}) == {}
    assert checkpoint_files.strip_prefix({"a.module.b": one}) == {"a.module.b": one}
    assert checkpoint_files.strip_prefix({"x.a": one}, prefix="x.") == {"a": one}


def test_load_state_dict_into_mismatch_names_the_keys():
    model = models.create("tinynet", num_classes=10)
    other = models.create("tinynet_nobn", num_classes=10).state_dict()
    with pytest.raises(UsageError) as error:
        checkpoint.load_state_dict_into(model, other, "--pretrained 'x.pth'")
    message = str(error.value)
    assert message.startswith("--pretrained 'x.pth' does not fit this model: ")
    # tinynet has batch norm where tinynet_nobn has conv biases.
    assert "15 missing (e.g. features.1.bias)" in message
    assert "3 unexpected (e.g. features.0.bias)" in message
    assert message.endswith("; check --arch and --num-classes")
    with pytest.raises(UsageError, match=r"2 wrong shape \(e\.g\. fc\.bias\)"):
        checkpoint.load_state_dict_into(
            model, models.create("tinynet", num_classes=5).state_dict(), "src"
        )


def test_load_state_dict_into_accepts_a_ddp_prefix():
    model = models.create("tinynet", num_classes=10)
    source = models.create("tinynet", num_classes=10).state_dict()
    checkpoint.load_state_dict_into(model, {f"module.{k}": v for k, v in source.items()}, "src")
    assert all(torch.equal(model.state_dict()[k], v) for k, v in source.items())


@pytest.mark.parametrize(
    "name,needle",
    [
        (
            "random.pth.tar",
            "is corrupt or not written by torch.save (weights_only=True unpickling "
            "failed: Unsupported operand",
        ),
        (
            "truncated.pth.tar",
            "is truncated or not a PyTorch checkpoint (PytorchStreamReader failed "
            "reading zip archive: failed finding central directory)",
        ),
        ("empty.pth.tar", "is truncated or not a PyTorch checkpoint (EOFError)"),
        ("evil_torch.pth.tar", "holds objects other than tensors"),
        ("evil_pickle.pth.tar", "holds objects other than tensors"),
    ],
)
def test_load_refuses_bad_files_in_one_line(files, name, needle):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's own warnings would be a second line
        with pytest.raises(UsageError) as error:
            checkpoint_files.load(os.path.join(files, name), "--resume checkpoint")
    message = str(error.value)
    assert needle in message and "\n" not in message, message
    assert not os.path.exists(os.path.join(files, "torch_marker"))
    assert not os.path.exists(os.path.join(files, "pickle_marker"))


def test_load_plain_pickle_protocol_4_is_refused_without_a_torch_warning(tmp_path):
    path = tmp_path / "plain.pkl"
    with open(path, "wb") as f:
        pickle.dump(RunsCode(str(tmp_path / "marker")), f, protocol=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UsageError, match="weights_only=True"):
            checkpoint_files.load(str(path))
    assert not (tmp_path / "marker").exists()


def test_load_names_a_global_that_is_not_allowlisted(tmp_path):
    # e.g. a checkpoint from another script that stored best_acc1 as a numpy scalar.
    path = tmp_path / "numpy.pth.tar"
    torch.save({"best_acc1": np.float64(1.0)}, path)
    with pytest.raises(UsageError) as error:
        checkpoint_files.load(str(path), "--resume checkpoint")
    message = str(error.value)
    assert "holds objects other than tensors" in message and "\n" not in message
    assert "GLOBAL numpy._core.multiarray.scalar was not an allowed global" in message


def test_a_usage_error_is_one_printable_line_whatever_the_input_brought():
    # A config key "\x1e" (found by test_fuzz_trainer.py) split the printed line in two.
    message = str(UsageError("unknown option(s): \x1e, a\nb, \x1b[2J, é, 中"))
    assert message == "unknown option(s): \\x1e, a\\nb, \\x1b[2J, é, 中"
    assert message.splitlines() == [message]


def test_resume_with_another_optimizers_state_names_the_optimizer(tmp_path):
    # Found by test_fuzz_checkpoint.py: an optimizer state without SGD's momentum loaded,
    # and the first step failed with KeyError: 'momentum' on every rank.
    path = write_checkpoint(str(tmp_path / "c.pth.tar"))
    saved = torch.load(path, weights_only=True)
    model = models.create("tinynet", num_classes=10)
    adam = torch.optim.Adam(model.parameters())
    torch.save(dict(saved, optimizer=adam.state_dict()), path)
    sgd = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9)
    with pytest.raises(UsageError) as error:
        state.resume(
            path,
            "tinynet",
            model,
            sgd,
            state.make_scheduler(sgd, 2, 0, "step", 2),
            torch.amp.GradScaler("cpu", enabled=False),
        )
    assert str(error.value).startswith(
        f"--resume {path!r}: its optimizer state does not fit this run (ValueError: "
        "it has no momentum)"
    )

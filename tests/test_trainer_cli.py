"""main.py's command line: the reference ImageNet example's and Ascend's ResNet50 script
lines parse with their meanings, the YAML config sits under the flags (each value checked
against its flag, naming the file and key), values and paths are validated before any rank
starts, the launch flags reach devicekit, and a config-driven --dummy run trains end to end."""

import json
import os
import re
import subprocess
import sys

import pytest
import torch
import yaml

import devicekit
from conftest import ROOT, clean_environ
from devicekit import LaunchOptions, UsageError, kinds
from devicekit.environments import REFERENCE_DIST_URL, resolve_launch
from trainer import config
from trainer.config import DuplicateKeyError, UniqueKeyLoader
from trainer.options import build_parser, parse_args
from trainer.options.processes import launch_options

TIMEOUT_S = 120


def write_yaml(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


# -- the reference ImageNet example's command lines ---------------------------------------
# parse_args checks the data directory; --dummy lets these lines name one that is not here.


def test_reference_multiprocessing_line():
    args = parse_args(
        [
            "-a",
            "resnet50",
            "--dist-url",
            "tcp://127.0.0.1:23456",
            "--dist-backend",
            "nccl",
            "--multiprocessing-distributed",
            "--world-size",
            "1",
            "--rank",
            "0",
            "/data/imagenet",
            "--dummy",
        ]
    )
    assert args.arch == "resnet50"
    assert args.dist_url == "tcp://127.0.0.1:23456"
    assert args.dist_backend == "nccl"
    assert args.multiprocessing_distributed is True
    assert (args.world_size, args.rank) == (1, 0)
    assert args.data_dir == "/data/imagenet"
    # The reference defaults.
    assert (args.epochs, args.batch_size, args.lr, args.momentum, args.weight_decay) == (
        90,
        256,
        0.1,
        0.9,
        1e-4,
    )
    assert (args.workers, args.print_freq, args.start_epoch) == (4, 10, 0)
    assert not args.evaluate and args.pretrained is None and args.resume == ""


def test_reference_single_gpu_line():
    args = parse_args(["-a", "resnet18", "--gpu", "0", "/data", "--dummy"])
    assert (args.arch, args.gpu, args.data_dir) == ("resnet18", 0, "/data")
    assert args.multiprocessing_distributed is False and args.world_size == -1


def test_reference_hyperparameter_flags(tmp_path):
    resume = tmp_path / "x"
    torch.save({"epoch": 1}, resume)  # an unfinished run: --resume reads its epoch
    args = parse_args(
        [
            "--lr",
            "0.1",
            "--momentum",
            "0.9",
            "--wd",
            "1e-4",
            "-b",
            "256",
            "-j",
            "8",
            "-p",
            "10",
            "--epochs",
            "90",
            "--start-epoch",
            "0",
            "--seed",
            "1",
            "--resume",
            str(resume),
            "--dummy",
        ]
    )
    assert (args.lr, args.momentum, args.weight_decay) == (0.1, 0.9, 1e-4)
    assert (args.batch_size, args.workers, args.print_freq) == (256, 8, 10)
    assert (args.epochs, args.start_epoch, args.seed) == (90, 0, 1)
    assert args.resume == str(resume)
    assert args.dummy is True


@pytest.mark.parametrize(
    "argv,dest,value",
    [
        (["--evaluate"], "evaluate", True),
        (["-e"], "evaluate", True),
        (["--dummy"], "dummy", True),
        (["--no-accel"], "device", "cpu"),
        (["--learning-rate", "0.3"], "lr", 0.3),
        (["--weight-decay", "5e-5"], "weight_decay", 5e-5),
        (["--mom", "0.8"], "momentum", 0.8),  # argparse prefixes keep working
        (["--learning", "0.2"], "lr", 0.2),
        (["--local-rank=1"], "local_rank", 1),  # torch.distributed.launch, new and old spelling
        (["--local_rank=1"], "local_rank", 1),
        (["--local_rank", "1"], "local_rank", 1),
        (["--local-rank", "1"], "local_rank", 1),
    ],
)
def test_reference_flags(argv, dest, value):
    args = parse_args(argv + ["--dummy"])
    assert getattr(args, dest) == value


def test_no_accel_overrides_device():
    assert parse_args(["--no-accel", "--device", "cuda", "--dummy"]).device == "cpu"


# -- Ascend's ResNet50 8p script -----------------------------------------------------------

ASCEND_8P = [
    "--data",
    "/data/imagenet",
    "--addr",
    "127.0.0.1",
    "--port",
    "29688",
    "--device",
    "npu",
    "--device-list",
    "0,1,2,3",
    "--amp",
    "--loss-scale",
    "1024",
    "--opt-level",
    "O2",
    "--warmup",
    "8",
    "--label-smoothing",
    "0.1",
    "--num_classes",
    "1000",
    "--gpu",
    "0",
    "--rank",
    "0",
    "--world-size",
    "1",
    "--multiprocessing-distributed",
    "--dist-backend",
    "hccl",
    "--lr",
    "1.6",
    "-b",
    "4096",
    "--epochs",
    "90",
]


def test_ascend_8p_line():
    args = parse_args(ASCEND_8P + ["--dummy"])
    assert args.data_dir == "/data/imagenet"
    assert (args.addr, args.port) == ("127.0.0.1", 29688)
    assert args.device == "npu"
    assert args.device_list == [0, 1, 2, 3]
    assert args.amp is True
    assert args.loss_scale == 1024.0 and isinstance(args.loss_scale, float)
    assert args.opt_level == "O2"
    assert (args.warmup, args.label_smoothing, args.num_classes) == (8, 0.1, 1000)
    assert (args.gpu, args.rank, args.world_size) == (0, 0, 1)
    assert args.multiprocessing_distributed is True
    assert args.dist_backend == "hccl"
    assert (args.lr, args.batch_size, args.epochs) == (1.6, 4096, 90)


@pytest.mark.parametrize("device", ["auto", "npu", "cuda", "cpu", "gpu"])
def test_device_choices(device):
    assert parse_args(["--device", device, "--dummy"]).device == device


def test_unknown_device_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--device", "tpu", "--dummy"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "--device" in err and "'tpu'" in err and "npu" in err


@pytest.mark.parametrize(
    "argv,amp,loss_scale",
    [
        ([], None, None),  # None: the device's default (bf16 on a CPU with native bf16, ...)
        (["--amp"], True, None),
        (["--no-amp"], False, None),
        (["--no-amp", "--loss-scale", "128"], False, 128.0),
        (["--loss-scale", "dynamic"], True, "dynamic"),
        (["--loss-scale", "DYNAMIC"], True, "dynamic"),
        (["--loss-scale", "128"], True, 128.0),
        (["--loss-scale", "1024", "--amp"], True, 1024.0),
        (["--opt-level", "O0"], False, None),
        (["--opt-level", "O0", "--amp"], False, None),  # O0 means "no mixed precision"
        (["--opt-level", "O1"], True, None),
        (["--opt-level", "O2"], True, None),
        (["--opt-level", "O2", "--loss-scale", "dynamic"], True, "dynamic"),
    ],
)
def test_amp_flags(argv, amp, loss_scale):
    args = parse_args(argv + ["--dummy"])
    assert (args.amp, args.loss_scale) == (amp, loss_scale)


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--loss-scale", "big"], "'big' is not a number or 'dynamic'"),
        (["--loss-scale", "0"], "'0' must be a positive, finite number"),
        (["--opt-level", "O4"], "--opt-level"),
        (["--device-list", "0,0"], "must list distinct device ids"),
        (["--device-list", "a,b"], "is not a comma-separated list of device ids"),
    ],
)
def test_bad_ascend_values_are_one_line(argv, needle, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv + ["--dummy"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and needle in err, err


# -- launch flags reach devicekit ----------------------------------------------------------


def test_launch_options_carry_the_ascend_flags():
    options = launch_options(parse_args(ASCEND_8P + ["--dummy"]))
    assert isinstance(options, LaunchOptions)
    assert list(options.device_list) == [0, 1, 2, 3]
    assert (options.addr, options.port, options.gpu) == ("127.0.0.1", 29688, 0)
    assert (options.rank, options.world_size) == (0, 1)
    assert options.multiprocessing_distributed is True
    assert options.local_rank is None and options.dist_url is None
    # devicekit answers for the spawning parent: four processes on devices 0..3.
    ctx = resolve_launch(options, environ={}, kind=None)
    assert (ctx.mode, ctx.world_size, ctx.local_world_size) == ("spawn", 4, 4)
    assert (ctx.master_addr, ctx.master_port) == ("127.0.0.1", 29688)
    assert tuple(ctx.device_list) == (0, 1, 2, 3)
    assert ctx.for_spawned_rank(3).device_index == 3


def test_launch_options_carry_the_reference_flags():
    args = parse_args(
        [
            "-a",
            "resnet50",
            "--dist-url",
            "tcp://127.0.0.1:23456",
            "--multiprocessing-distributed",
            "--world-size",
            "1",
            "--rank",
            "0",
            "--nproc-per-node",
            "2",
            "--dummy",
        ]
    )
    options = launch_options(args)
    assert options.dist_url == "tcp://127.0.0.1:23456"
    assert (options.nproc_per_node, options.device_list) == (2, None)
    ctx = resolve_launch(options, environ={}, kind=kinds.get("cpu"))
    assert (ctx.mode, ctx.world_size, ctx.master_port) == ("spawn", 2, 23456)


def test_launch_options_carry_local_rank_and_gpu():
    options = launch_options(parse_args(["--local_rank=1", "--gpu", "1", "--dummy"]))
    assert (options.local_rank, options.gpu) == (1, 1)
    env = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    ctx = resolve_launch(options, environ=env, kind=kinds.get("cpu"))
    assert (ctx.mode, ctx.rank, ctx.local_rank) == ("launch", 1, 1)


# -- the YAML config ----------------------------------------------------------------------


def test_config_values_are_applied(tmp_path):
    path = write_yaml(
        tmp_path / "cfg.yaml",
        "arch: resnet34\nbatch-size: 64\ndummy: true\ndevice-list: [0, 1]\nlr: 0.05\n",
    )
    args = parse_args(["--config", path])
    assert (args.arch, args.batch_size, args.dummy, args.lr) == ("resnet34", 64, True, 0.05)
    assert args.device_list == [0, 1]


def test_config_underscore_keys(tmp_path):
    path = write_yaml(
        tmp_path / "cfg.yaml", "batch_size: 32\nnum_classes: 10\nsteps_per_epoch: 3\ndummy: true\n"
    )
    args = parse_args(["--config", path])
    assert (args.batch_size, args.num_classes, args.steps_per_epoch) == (32, 10, 3)


def test_command_line_wins_over_config(tmp_path):
    path = write_yaml(tmp_path / "cfg.yaml", "lr: 0.05\nbatch-size: 64\ndummy: true\n")
    args = parse_args(["--config", path, "--lr", "0.2"])
    assert (args.lr, args.batch_size) == (0.2, 64)
    args = parse_args(["--lr", "0.2", "--config", path])  # order on the line does not matter
    assert args.lr == 0.2


@pytest.mark.parametrize("key", ["data", "data_dir", "data-dir"])
def test_config_gives_the_data_dir(tmp_path, key):
    path = write_yaml(tmp_path / "cfg.yaml", f"{key}: /x\n")
    assert parse_args(["--config", path, "--dummy"]).data_dir == "/x"


def test_empty_config_changes_nothing(tmp_path):
    path = write_yaml(tmp_path / "cfg.yaml", "# nothing\n")
    assert parse_args(["--config", path, "--dummy"]).arch == "resnet18"


@pytest.mark.parametrize(
    "text,problem",
    [
        ('batch-size: "big"\n', "batch-size: 'big' is not an int"),
        ("epochs: 2.5\n", "epochs: 2.5 is not an int"),
        ("lr: [1, 2]\n", "lr: [1, 2] is not a number"),
        ("lr-schedule: linear\n", "lr-schedule: 'linear' is not one of step, cosine"),
        ("device-list: a,b\n", "device-list: 'a,b' is not a comma-separated list of device ids"),
        ("loss-scale: 0\n", "loss-scale: '0' must be a positive, finite number"),
        ("amp: 1\n", "amp: 1 is not true or false"),
    ],
)
def test_config_values_are_checked_naming_the_file_and_key(tmp_path, text, problem):
    path = write_yaml(tmp_path / "cfg.yaml", text)
    with pytest.raises(UsageError) as error:
        parse_args(["--config", path, "--dummy"])
    assert str(error.value) == f"--config {path!r}: {problem}"


def test_unique_key_loader_is_safe_load_without_duplicate_keys():
    merged = "base: &b {x: 1, y: 2}\nrun:\n  <<: *b\n  x: 3\n"  # a merge may be overridden
    assert yaml.load(merged, Loader=UniqueKeyLoader) == yaml.safe_load(merged)
    with pytest.raises(DuplicateKeyError, match=r"gives x twice \(lines 2 and 3\)"):
        yaml.load("run:\n  x: 1\n  x: 2\n", Loader=UniqueKeyLoader)
    with pytest.raises(yaml.constructor.ConstructorError, match="python/object/apply"):
        yaml.load("a: !!python/object/apply:os.system ['true']\n", Loader=UniqueKeyLoader)


def test_unreadable_config_is_one_usage_error(tmp_path, monkeypatch):
    path = write_yaml(tmp_path / "cfg.yaml", "lr: 0.1\n")

    def denied(*args, **kwargs):  # what a user without read permission gets (root reads all)
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(config, "open", denied, raising=False)
    with pytest.raises(UsageError) as error:
        parse_args(["--config", path, "--dummy"])
    assert str(error.value) == (
        f"--config {path!r} cannot be read (Permission denied): check its permissions"
    )


# -- validation of values and paths ------------------------------------------------------


def test_output_dir_is_checked_without_being_made(tmp_path):
    parse_args(["--dummy", "--output-dir", str(tmp_path / "new" / "run")])
    parse_args(["--dummy", "--output-dir", str(tmp_path)])
    assert os.listdir(tmp_path) == []  # not made, and the probe left nothing


def test_evaluate_needs_no_writable_output_dir():
    assert parse_args(["--dummy", "--evaluate", "--output-dir", "/proc/x/y"]).evaluate


@pytest.mark.parametrize("seed", [-(2**63), 0, 2**63 - 1])
def test_seed_range_holds_with_rank_and_epoch_added(seed):
    assert parse_args(["--dummy", "--seed", str(seed)]).seed == seed
    devicekit.seed_everything(seed, rank=1023)  # seed + rank, as main.py seeds a rank
    torch.Generator().manual_seed(seed + 100_000)  # DistributedSampler: seed + epoch


@pytest.mark.parametrize("seed", [-(2**63) - 1, 2**63])
def test_seed_out_of_range_is_refused(seed):
    with pytest.raises(
        UsageError,
        match=f"--seed {seed} is out of range: use a whole number from {-(2**63)} to {2**63 - 1}",
    ):
        parse_args(["--dummy", "--seed", str(seed)])


@pytest.mark.parametrize(
    "url", ["env://", "tcp://127.0.0.1:23456", "tcp://[::1]:29500", REFERENCE_DIST_URL]
)
def test_dist_url_forms_are_accepted(url):
    assert parse_args(["--dummy", "--dist-url", url]).dist_url == url


def test_dist_timeout_accepts_seconds():
    assert parse_args(["--dummy", "--dist-timeout", "5"]).dist_timeout == 5.0


def test_resume_of_a_finished_run_is_refused_unless_evaluating(tmp_path):
    path = str(tmp_path / "checkpoint.pth.tar")
    torch.save({"epoch": 3}, path)
    with pytest.raises(UsageError) as error:
        parse_args(["--dummy", "--epochs", "3", "--resume", path])
    assert str(error.value) == (
        f"--resume {path!r} finished at epoch 3, and --epochs 3 leaves "
        "nothing to train: pass --epochs 4 or more to train on, or "
        "--evaluate to only validate it"
    )
    assert parse_args(["--dummy", "--epochs", "4", "--resume", path]).resume == path
    assert parse_args(["--dummy", "--epochs", "3", "--resume", path, "--evaluate"]).evaluate


def test_tensorboard_folder_is_checked_without_being_made(tmp_path):
    board = tmp_path / "new" / "board"
    assert parse_args(["--dummy", "--tensorboard", str(board)]).tensorboard == str(board)
    assert os.listdir(tmp_path) == []


def test_tensorboard_without_its_package_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as if not installed
    with pytest.raises(UsageError) as error:
        parse_args(["--dummy", "--tensorboard", "board"])
    assert str(error.value) == (
        "--tensorboard needs the tensorboard package, which is not "
        "installed: pip install 'devicekit[tensorboard]'"
    )


def test_observing_flags_come_from_the_config_too(tmp_path):
    path = write_yaml(tmp_path / "c.yaml", f"tensorboard: {tmp_path / 'board'}\nprofile-steps: 3\n")
    args = parse_args(["--config", path, "--dummy"])
    assert (args.tensorboard, args.profile_steps) == (str(tmp_path / "board"), 3)


def test_profile_steps_count_the_epochs_left_to_train(tmp_path):
    # 1 step to wait + 1 to warm up + 2 recorded: 4 of the 2 x 3 steps of epochs 1 and 2.
    line = ["--dummy", "--epochs", "3", "--steps-per-epoch", "3", "--profile-steps"]
    assert parse_args(line + ["2", "--start-epoch", "1"]).profile_steps == 2
    with pytest.raises(UsageError, match=r"needs 6 training steps .* at most 3: "):
        parse_args(line + ["4", "--start-epoch", "2"])
    # A resumed run may start at any epoch: --start-epoch does not count then.
    resume = str(tmp_path / "checkpoint.pth.tar")
    torch.save({"epoch": 0}, resume)
    assert parse_args(line + ["4", "--start-epoch", "2", "--resume", resume]).profile_steps == 4
    # Without --steps-per-epoch the rank counts the loader's steps.
    assert parse_args(["--dummy", "--profile-steps", "10000"]).profile_steps == 10000


def test_help_says_where_the_trace_goes():
    assert "OUTPUT_DIR/profile/" in " ".join(build_parser().format_help().split())


# -- end to end ---------------------------------------------------------------------------


def test_config_driven_dummy_run_end_to_end(tmp_path):
    out = tmp_path / "out"
    config = write_yaml(
        tmp_path / "cfg.yaml",
        f"""\
dummy: true
arch: tinynet
num-classes: 10
image-size: 32
batch-size: 8
epochs: 1
steps-per-epoch: 2
val-steps: 1
workers: 0
output-dir: {out}
""",
    )
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "main.py"), "--config", config],
        cwd=tmp_path,
        env=clean_environ(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    for name in ("checkpoint.pth.tar", "model_best.pth.tar", "metrics.jsonl"):
        assert (out / name).is_file(), name
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["epoch"] == 0 and rows[0]["world_size"] == 1
    lines = result.stdout.splitlines()
    assert any(re.match(r"^Epoch: \[0\]\[\s*\d+/\d+\]\tTime", line) for line in lines), (
        result.stdout
    )
    assert any(re.match(r"^ \* Acc@1 [\d.]+ Acc@5 [\d.]+$", line) for line in lines), result.stdout
    assert not list(out.glob("*.tmp")) and not list(out.glob(".*.tmp"))

"""The trainer's command line: the reference ImageNet example's flags, Ascend's ResNet50
script flags, and a few of our own; a YAML config underneath; validation with one-line
errors."""

import argparse
import importlib.util
import math
import os
import sys

import models
from devicekit import LaunchOptions, UsageError, checkpoint, writable
from devicekit.distributed import timeout_seconds
from devicekit.environments.reading import REFERENCE_DIST_URL, parse_dist_url
from devicekit.errors import ArgumentParser
from devicekit.kinds import device_choices
from trainer import data, observe, state
from trainer.config import load_config

# Torch seeds are 64 bits and rank or epoch are added to --seed: a signed 64-bit seed
# keeps every such sum in range whatever the world size and epoch count.
SEED_RANGE = (-(2**63), 2**63 - 1)


def _device_list(text):
    try:
        ids = [int(item) for item in str(text).split(",") if item.strip() != ""]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of device ids"
        ) from None
    if not ids or len(set(ids)) != len(ids) or min(ids) < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must list distinct device ids, e.g. 0,1,2,3")
    return ids


def _loss_scale(text):
    if str(text).lower() == "dynamic":
        return "dynamic"
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number or 'dynamic'") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive, finite number")
    return value


def build_parser():
    """The argparse parser for main.py."""
    p = ArgumentParser(prog="main.py", description="ImageNet-style training on cuda, npu or cpu.")
    p.add_argument(
        "data_dir",
        metavar="DIR",
        nargs="?",
        default=None,
        help="dataset root with train/ and val/ ImageFolder trees",
    )
    p.add_argument("--data", metavar="DIR", default=None, help="same as DIR (Ascend scripts)")
    p.add_argument(
        "-a",
        "--arch",
        default="resnet18",
        help=f"model: {', '.join(models.names())} (default resnet18)",
    )
    p.add_argument(
        "-j", "--workers", type=int, default=4, help="data loading workers per node (default 4)"
    )
    p.add_argument("--epochs", type=int, default=90, help="total epochs (default 90)")
    p.add_argument("--start-epoch", type=int, default=0, help="epoch to start at (default 0)")
    p.add_argument(
        "-b",
        "--batch-size",
        type=int,
        default=256,
        help="total batch size of all processes of a node (default 256)",
    )
    p.add_argument(
        "--lr",
        "--learning-rate",
        type=float,
        default=0.1,
        dest="lr",
        help="initial learning rate (default 0.1)",
    )
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (default 0.9)")
    p.add_argument(
        "--wd",
        "--weight-decay",
        type=float,
        default=1e-4,
        dest="weight_decay",
        help="weight decay (default 1e-4)",
    )
    p.add_argument(
        "-p", "--print-freq", type=int, default=10, help="print every N steps (default 10)"
    )
    p.add_argument(
        "--resume",
        default="",
        metavar="PATH",
        help="checkpoint to resume from; 'auto': the run's own checkpoint in "
        "--output-dir when there is one, else start afresh",
    )
    p.add_argument("-e", "--evaluate", action="store_true", help="only validate")
    p.add_argument(
        "--pretrained",
        nargs="?",
        const="",
        default=None,
        metavar="PATH",
        help="start from a torchvision-format state_dict file",
    )
    p.add_argument(
        "--world-size",
        type=int,
        default=-1,
        help="nodes (with --multiprocessing-distributed) or processes (default -1: not given)",
    )
    p.add_argument(
        "--rank",
        type=int,
        default=-1,
        help="node rank (with --multiprocessing-distributed) or process rank "
        "(default -1: not given)",
    )
    p.add_argument("--dist-url", default=None, help="tcp://HOST:PORT or env://")
    p.add_argument(
        "--dist-backend",
        default=None,
        help="collective backend (default: the device's: nccl, hccl or gloo)",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--gpu", type=int, default=None, help="device index to use")
    p.add_argument("--no-accel", action="store_true", help="run on the CPU")
    p.add_argument(
        "--multiprocessing-distributed",
        action="store_true",
        help="start one process per device of this node",
    )
    p.add_argument("--dummy", action="store_true", help="synthetic data, no files")
    p.add_argument(
        "--local-rank",
        "--local_rank",
        type=int,
        default=None,
        dest="local_rank",
        help=argparse.SUPPRESS,
    )  # appended by torch.distributed.launch
    # Ascend's ResNet50 scripts
    p.add_argument("--addr", default=None, help="master address")
    p.add_argument("--port", type=int, default=None, help="master port")
    p.add_argument(
        "--device",
        default="auto",
        choices=device_choices(),
        help="device kind (default auto: npu, then cuda, then xpu, then cpu)",
    )
    p.add_argument(
        "--device-list",
        type=_device_list,
        default=None,
        metavar="IDS",
        help="device ids for this node's processes, e.g. 0,1,2,3",
    )
    p.add_argument(
        "--amp",
        action="store_const",
        const=True,
        default=None,
        help="mixed precision (autocast); default: on where it pays on the device "
        "(CPUs with native bf16, CUDA GPUs)",
    )
    p.add_argument("--no-amp", action="store_const", const=False, dest="amp", help="full fp32")
    p.add_argument(
        "--loss-scale",
        type=_loss_scale,
        default=None,
        help="float16 loss scale: a number (initial scale) or 'dynamic'",
    )
    p.add_argument(
        "--opt-level",
        default=None,
        choices=["O0", "O1", "O2", "O3"],
        help="apex-style level: O0 turns AMP off, O1..O3 turn autocast on",
    )
    p.add_argument("--warmup", type=int, default=0, help="linear warmup epochs (default 0)")
    p.add_argument("--label-smoothing", type=float, default=0.0, help="(default 0)")
    p.add_argument(
        "--num-classes",
        "--num_classes",
        type=int,
        default=1000,
        dest="num_classes",
        help="classes the model predicts (default 1000)",
    )
    # ours
    p.add_argument(
        "--nproc-per-node",
        type=int,
        default=None,
        help="processes per node with --multiprocessing-distributed "
        "(default: the device count; 2 on cpu)",
    )
    p.add_argument("--image-size", type=int, default=224, help="training crop (default 224)")
    p.add_argument(
        "--crop-scale",
        type=float,
        nargs=2,
        default=data.DEFAULT_CROP_SCALE,
        metavar=("MIN", "MAX"),
        help="training crops cover MIN to MAX of the image's area "
        "(default 0.08 1.0, the reference's)",
    )
    p.add_argument(
        "--no-flip",
        action="store_false",
        dest="flip",
        help="no random horizontal flip in training (default: half the images)",
    )
    p.add_argument(
        "--no-augment",
        action="store_false",
        dest="augment",
        help="train on the validation transform (resize + center crop): no random crop, no flip",
    )
    p.add_argument("--steps-per-epoch", type=int, default=None, help="cap training steps")
    p.add_argument("--val-steps", type=int, default=None, help="cap validation steps")
    p.add_argument("--output-dir", default=".", help="checkpoints and metrics.jsonl (default .)")
    p.add_argument(
        "--config",
        default=None,
        metavar="FILE.yaml",
        help="YAML file of flags; the command line wins",
    )
    p.add_argument(
        "--dist-timeout",
        type=float,
        default=None,
        help="seconds to wait for ranks and collectives (default 300)",
    )
    p.add_argument(
        "--lr-schedule",
        default="step",
        choices=["step", "cosine"],
        help="step: x0.1 every 30 epochs; cosine: to 0 (default step)",
    )
    p.add_argument(
        "--grad-accum", type=int, default=1, help="accumulate gradients over N steps (default 1)"
    )
    p.add_argument(
        "--clip-grad", type=float, default=None, metavar="NORM", help="clip the gradient norm"
    )
    p.add_argument(
        "--channels-last",
        action="store_const",
        const=True,
        default=None,
        help="channels_last memory format; default: where the device prefers it",
    )
    p.add_argument(
        "--no-channels-last",
        action="store_const",
        const=False,
        dest="channels_last",
        help="keep NCHW",
    )
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument(
        "--shard",
        action="store_true",
        help="split the model's parameters, gradients and optimizer state across the "
        "ranks (devicekit.shard, FSDP2) instead of a copy on each (DDP); checkpoints "
        "stay one file that either way resumes",
    )
    p.add_argument(
        "--save-every",
        type=int,
        default=None,
        metavar="N",
        help="also checkpoint every N training steps within an epoch, for a "
        "resume that loses fewer steps (default: at epoch ends only)",
    )
    p.add_argument(
        "--tensorboard",
        default=None,
        metavar="DIR",
        help="TensorBoard event files from rank 0 in DIR: train loss, top-1 and lr "
        "every --print-freq steps, validation loss, top-1, top-5 and images/s "
        "every epoch, the run's flags as text (needs pip install "
        "'devicekit[tensorboard]')",
    )
    p.add_argument(
        "--profile-steps",
        type=int,
        default=None,
        metavar="N",
        help=f"profile N training steps on rank 0, after {observe.PROFILE_WAIT} "
        f"step to wait and {observe.PROFILE_WARMUP} to warm up; the trace goes "
        f"to OUTPUT_DIR/{observe.PROFILE_FOLDER}/",
    )
    return p


def _config_argv(parser, config, path):
    """The config's values as command-line tokens, placed before the real command line so
    that a flag given there wins. Each value is checked against its flag's type and
    choices here, so that a bad one is named with the file and key (argparse's message
    would name neither)."""
    tokens = []
    for key, value in config.items():
        key = "data" if key == "data_dir" else key
        where = f"--config {path!r}: {key.replace('_', '-')}:"
        actions = [
            action for action in parser._actions if action.dest == key and action.option_strings
        ]
        switches = [action for action in actions if action.nargs == 0]  # --x / --no-x
        if switches:
            if not isinstance(value, bool):
                raise UsageError(f"{where} {value!r} is not true or false")
            tokens += [_long_flag(action) for action in switches if action.const is value][:1]
        elif value is not None and isinstance(actions[0].nargs, int):  # --x A B: a list
            tokens += [_long_flag(actions[0]), *_config_list(actions[0], value, where)]
        elif value is not None:
            if isinstance(value, dict) or (
                isinstance(value, list) and any(isinstance(item, (dict, list)) for item in value)
            ):
                raise UsageError(
                    f"{where} {value!r} is not a value for a flag: write a "
                    "number, a word or a list of them"
                )
            if actions[0].type is None and not isinstance(value, str):  # a path, a name
                raise UsageError(
                    f"{where} {value!r} is not text: give {_long_flag(actions[0])} a string "
                    "(in quotes where YAML would read a number or true/false)"
                )
            text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
            _check_config_value(actions[0], text, value, where)
            tokens.append(f"{_long_flag(actions[0])}={text}")
    return tokens


def _config_list(action, value, where):
    """The tokens for a flag that takes ``action.nargs`` values, from a YAML list."""
    if not isinstance(value, list) or len(value) != action.nargs:
        raise UsageError(
            f"{where} {value!r} is not a list of {action.nargs} values, "
            f"[{', '.join(action.metavar)}]"
        )
    texts = [str(item) for item in value]
    for text, item in zip(texts, value, strict=False):
        _check_config_value(action, text, item, where)
    return texts


_TYPE_NAMES = {int: "an int", float: "a number"}


def _check_config_value(action, text, value, where):
    """Refuse `value` (given as `text`) where `action`'s type or choices would."""
    try:
        converted = action.type(text) if action.type else text
    except (argparse.ArgumentTypeError, TypeError, ValueError) as error:
        reason = (
            f"{value!r} is not {_TYPE_NAMES[action.type]}"
            if action.type in _TYPE_NAMES
            else str(error)
        )
        raise UsageError(f"{where} {reason}") from None
    if action.choices is not None and converted not in action.choices:
        raise UsageError(f"{where} {value!r} is not one of {', '.join(action.choices)}")


def _long_flag(action):
    return next(
        (flag for flag in action.option_strings if flag.startswith("--")), action.option_strings[0]
    )


def _positive(name, value, minimum=1):
    if value is None:
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise UsageError(f"{name} {value} must be a finite number, at least {minimum}")
    if value < minimum:
        raise UsageError(f"{name} {value} must be at least {minimum}")


def _check_writable_dir(path, flag="--output-dir"):
    """Refuse a folder `flag` names that the run could not create or write in, without
    creating it: its nearest existing ancestor must be a folder that can hold files (a
    file made and removed there proves it), and every component still to be made must fit
    the file system's NAME_MAX."""
    ancestor, missing = writable.nearest_existing(path)
    named = f"{flag} {path!r}"
    if not os.path.isdir(ancestor):
        where = f"cannot be made: {ancestor!r}" if missing else "already"
        raise UsageError(f"{named} {where} exists and is not a folder: choose another {flag}")
    limit = os.pathconf(ancestor, "PC_NAME_MAX")
    for name in missing:
        if len(os.fsencode(name)) > limit:
            raise UsageError(
                f"{named} cannot be made: the name {name[:20]!r}... is "
                f"{len(os.fsencode(name))} bytes, over the file system's limit "
                f"of {limit}: use a shorter name"
            )
    reason = writable.cannot_hold_files(ancestor)
    if reason is not None:
        raise UsageError(
            f"{named} is not writable: making a file in {ancestor!r} fails "
            f"({reason}): choose another {flag}"
        )


def _check_file(flag, path, what):
    """Refuse a `flag` path that is not a file, naming what it is instead."""
    if os.path.isdir(path):
        raise UsageError(f"{flag} {path!r} is a folder: name the {what} in it")
    if not os.path.isfile(path):  # False for a name too long to be one, as for a missing file
        raise UsageError(f"{flag} {path!r} does not exist: check the path")


def _check_observing(args):
    """Refuse --tensorboard and --profile-steps where they cannot do their job: with
    --evaluate (nothing trains), TensorBoard not installed or its folder unwritable, fewer
    training steps than the profiler's schedule needs (counted here when --steps-per-epoch
    bounds them; otherwise each rank counts them once its loader exists)."""
    for flag, value in (
        ("--tensorboard", args.tensorboard),
        ("--profile-steps", args.profile_steps),
    ):
        if value is not None and args.evaluate:
            raise UsageError(
                f"{flag} records training, and --evaluate trains nothing: drop one of them"
            )
    if args.tensorboard is not None:
        if importlib.util.find_spec("tensorboard") is None:
            raise UsageError(
                "--tensorboard needs the tensorboard package, which is not "
                "installed: pip install 'devicekit[tensorboard]'"
            )
        _check_writable_dir(args.tensorboard, "--tensorboard")
    _positive("--profile-steps", args.profile_steps)
    if args.profile_steps is not None and args.steps_per_epoch is not None:
        # A resumed run starts at its checkpoint's epoch, not --start-epoch: at most --epochs.
        epochs = args.epochs - (0 if args.resume else args.start_epoch)
        observe.check_profile_steps(args.profile_steps, epochs * args.steps_per_epoch)


def _check_resume_not_finished(path, epochs):
    """Refuse resuming from a checkpoint that already reached --epochs (it would train
    nothing). This reads the whole checkpoint once more, before any rank starts: as long
    as the resume's own read (0.2-0.4 s for ResNet-50's 205 MB with its optimizer state,
    from the page cache), the price of one line instead of a run that silently does
    nothing. A file that is not a training checkpoint is left to state.resume to name."""
    saved = checkpoint.load(path, "--resume checkpoint")
    if isinstance(saved, dict) and isinstance(saved.get("epoch"), int):
        state.check_not_finished(saved["epoch"], epochs, path)


def validate(args):
    """Check values a parser cannot, and the paths the run will read and write; raise
    UsageError naming the flag. Runs before any rank starts (with
    --multiprocessing-distributed, once in the parent)."""
    # main.py has no -1 default for these: leave the flag out for "not given".
    for name, value in (("--gpu", args.gpu), ("--local-rank", args.local_rank)):
        _positive(name, value, 0)
    launch_options(args)  # a malformed rank, device index or count, named before any work
    for name, value in (
        ("--epochs", args.epochs),
        ("--batch-size", args.batch_size),
        ("--print-freq", args.print_freq),
        ("--grad-accum", args.grad_accum),
        ("--num-classes", args.num_classes),
        ("--steps-per-epoch", args.steps_per_epoch),
        ("--val-steps", args.val_steps),
        ("--nproc-per-node", args.nproc_per_node),
    ):
        _positive(name, value)
    _positive("--image-size", args.image_size, 32)
    for name, value in (
        ("--workers", args.workers),
        ("--start-epoch", args.start_epoch),
        ("--warmup", args.warmup),
        ("--momentum", args.momentum),
        ("--weight-decay", args.weight_decay),
    ):
        _positive(name, value, 0)
    if not 0 < args.lr < math.inf:
        raise UsageError(f"--lr {args.lr:g} must be a positive, finite number")
    if not 0 <= args.label_smoothing < 1:
        raise UsageError(f"--label-smoothing {args.label_smoothing:g} must be in [0, 1)")
    low, high = args.crop_scale
    if not 0 < low <= high <= 1:
        raise UsageError(
            f"--crop-scale {low:g} {high:g} must satisfy 0 < MIN <= MAX <= 1 "
            "(fractions of the image's area)"
        )
    if not args.augment and tuple(args.crop_scale) != data.DEFAULT_CROP_SCALE:
        raise UsageError(
            f"--crop-scale {low:g} {high:g} does nothing with --no-augment (which "
            "crops no random area): drop one of them"
        )
    if args.clip_grad is not None and not 0 < args.clip_grad < math.inf:
        raise UsageError(f"--clip-grad {args.clip_grad:g} must be a positive, finite number")
    if args.start_epoch >= args.epochs and not args.evaluate and not args.resume:
        raise UsageError(
            f"--start-epoch {args.start_epoch} leaves nothing to train with --epochs {args.epochs}"
        )
    if args.warmup and args.warmup >= args.epochs:
        raise UsageError(f"--warmup {args.warmup} must be below --epochs {args.epochs}")
    if args.save_every is not None and args.save_every < 1:
        raise UsageError(f"--save-every {args.save_every} must be at least 1 (steps)")
    if args.resume and args.resume != "auto":
        _check_file("--resume", args.resume, "checkpoint.pth.tar written by main.py")
    if args.pretrained == "":
        raise UsageError(
            "--pretrained needs a PATH to a state_dict file: this machine cannot "
            "download weights (e.g. --pretrained resnet50-0676ba61.pth)"
        )
    if args.pretrained:
        _check_file("--pretrained", args.pretrained, "state_dict file")
    for flag, path in (
        ("--output-dir", args.output_dir),
        ("--tensorboard", args.tensorboard),
        ("--config", args.config),
    ):
        if path == "":
            raise UsageError(f"{flag} '': name a {'file' if flag == '--config' else 'folder'}")
    if args.data_dir and args.data and os.path.abspath(args.data_dir) != os.path.abspath(args.data):
        raise UsageError(f"DIR {args.data_dir!r} and --data {args.data!r} disagree: give one")
    models.check_name(args.arch, "--arch")
    if not SEED_RANGE[0] <= args.seed <= SEED_RANGE[1]:
        raise UsageError(
            f"--seed {args.seed} is out of range: use a whole number from "
            f"{SEED_RANGE[0]} to {SEED_RANGE[1]} (64 bits; the rank and the "
            "epoch are added to it)"
        )
    if args.dist_timeout is not None:
        timeout_seconds(args.dist_timeout, "--dist-timeout")
    if args.nproc_per_node is not None and not args.multiprocessing_distributed:
        raise UsageError(
            f"--nproc-per-node {args.nproc_per_node} only means something with "
            "--multiprocessing-distributed (without it main.py is one process): "
            "add --multiprocessing-distributed or drop --nproc-per-node"
        )
    if (
        args.dist_url
        and args.dist_url != REFERENCE_DIST_URL
        and not args.dist_url.startswith("env://")
    ):
        parse_dist_url(args.dist_url, "--dist-url")
    # --evaluate writes nothing (no checkpoint, no metrics), so where its output would go
    # does not matter: a run that only validates needs no writable --output-dir.
    if not args.evaluate:
        _check_writable_dir(args.output_dir)
    _check_observing(args)
    data.check_data_dir(args.data_dir, args.dummy, args.batch_size)
    if args.resume and args.resume != "auto" and not args.evaluate:
        _check_resume_not_finished(args.resume, args.epochs)


def parse_args(argv=None):
    """Parse `argv` (default sys.argv[1:]) with the YAML config underneath; return args."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    first = parser.parse_args(argv)
    if first.config:
        known = {action.dest for action in parser._actions if action.dest not in ("help", "config")}
        tokens = _config_argv(parser, load_config(first.config, known), first.config)
        args = parser.parse_args(tokens + argv)
    else:
        args = first
    args.data_dir = args.data_dir or args.data
    if args.opt_level == "O0":
        args.amp = False
    elif args.amp is None and (args.opt_level is not None or args.loss_scale is not None):
        args.amp = True
    if args.no_accel:
        args.device = "cpu"
    validate(args)
    return args


def launch_options(args):
    """The launch-related flags as devicekit LaunchOptions."""
    return LaunchOptions(
        local_rank=args.local_rank,
        gpu=args.gpu,
        rank=args.rank,
        world_size=args.world_size,
        dist_url=args.dist_url,
        addr=args.addr,
        port=args.port,
        multiprocessing_distributed=args.multiprocessing_distributed,
        nproc_per_node=args.nproc_per_node,
        device_list=args.device_list,
        cli=True,
    )

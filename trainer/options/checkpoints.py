"""main.py's checkpoint and output flags: where the run writes, the checkpoint it resumes
from, and checkpoints within an epoch."""

import argparse

from devicekit import UsageError, checkpoint_files
from trainer import state
from trainer.options.checks import check_file, check_named, check_writable_dir
from trainer.train_config import TrainConfig

TITLE = "checkpoints and output"


def add_flags(group: argparse._ArgumentGroup) -> None:
    """--resume, --output-dir, --save-every."""
    group.add_argument(
        "--resume",
        default="",
        metavar="PATH",
        help="checkpoint to resume from; 'auto': the run's own checkpoint in "
        "--output-dir when there is one, else start afresh",
    )
    group.add_argument(
        "--output-dir", default=".", help="checkpoints and metrics.jsonl (default .)"
    )
    group.add_argument(
        "--save-every",
        type=int,
        default=None,
        metavar="N",
        help="also checkpoint every N training steps within an epoch, for a "
        "resume that loses fewer steps (default: at epoch ends only)",
    )


def check(config: TrainConfig) -> None:
    """A --save-every of at least one step, a --resume file that exists and has epochs left
    to train, and an --output-dir the run can write in (unless it only validates)."""
    check_named("--output-dir", config.output_dir)
    if config.save_every is not None and config.save_every < 1:
        raise UsageError(f"--save-every {config.save_every} must be at least 1 (steps)")
    resume_file = config.resume and config.resume != "auto"
    if resume_file:
        check_file("--resume", config.resume, "checkpoint.pth.tar written by main.py")
    # --evaluate writes nothing (no checkpoint, no metrics), so where its output would go
    # does not matter: a run that only validates needs no writable --output-dir.
    if not config.evaluate:
        check_writable_dir(config.output_dir)
    if resume_file and not config.evaluate:
        _check_resume_not_finished(config.resume, config.epochs)


def _check_resume_not_finished(path: str, epochs: int) -> None:
    """Refuse resuming from a checkpoint that already reached --epochs (it would train
    nothing). This reads the whole checkpoint once more, before any rank starts: as long
    as the resume's own read (0.2-0.4 s for ResNet-50's 205 MB with its optimizer state,
    from the page cache), the price of one line instead of a run that silently does
    nothing. A file that is not a training checkpoint is left to state.resume to name."""
    saved = checkpoint_files.load(path, "--resume checkpoint")
    if isinstance(saved, dict) and isinstance(saved.get("epoch"), int):
        state.check_not_finished(saved["epoch"], epochs, path)

"""The per-node batch and workers split over the processes of a node."""

import pytest

from devicekit.errors import UsageError
from trainer.loaders import split_per_process


def test_even_split_and_workers_round_up():
    assert split_per_process(256, 10, 8) == (32, 2)
    assert split_per_process(64, 0, 2) == (32, 0)
    assert split_per_process(7, 4, 1) == (7, 4)


def test_size_that_does_not_divide_names_the_nearest_valid_sizes():
    with pytest.raises(
        UsageError, match=r"--batch-size 100 does not divide over 8 .* use 96 or 104"
    ):
        split_per_process(100, 4, 8)


def test_batch_smaller_than_processes():
    with pytest.raises(UsageError, match="smaller than the 8 processes"):
        split_per_process(4, 4, 8)


@pytest.mark.parametrize(
    "batch,workers,match",
    [(0, 1, "--batch-size 0"), (-4, 1, "--batch-size -4"), (8, -1, "--workers -1")],
)
def test_nonsense_values(batch, workers, match):
    with pytest.raises(UsageError, match=match):
        split_per_process(batch, workers, 2)

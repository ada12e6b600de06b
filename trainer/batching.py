"""Per-node batch size and workers -> per-process values."""

import math

from devicekit import UsageError


def split_per_process(batch_size, workers, processes):
    """Split a node's `batch_size` and loader `workers` over its `processes`.

    Returns (batch per process, workers per process). Like the reference ImageNet
    example, workers round up; unlike it, a batch that does not divide is refused with
    the nearest sizes that do, instead of being truncated silently.
    """
    if batch_size < 1:
        raise UsageError(f"--batch-size {batch_size} must be at least 1")
    if workers < 0:
        raise UsageError(f"--workers {workers} must be 0 or more")
    if batch_size < processes:
        raise UsageError(
            f"--batch-size {batch_size} is smaller than the {processes} processes on this node: "
            f"each needs at least one sample; use --batch-size {processes} or more"
        )
    if batch_size % processes:
        lower = batch_size // processes * processes
        upper = lower + processes
        raise UsageError(
            f"--batch-size {batch_size} does not divide over {processes} processes per node "
            f"(it is the total for the node): use {lower} or {upper}"
        )
    return batch_size // processes, math.ceil(workers / processes)

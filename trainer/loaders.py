"""DataLoaders for a rank: the node's batch and workers split per process, a shuffled,
dropping shard for training, and an exact shard for validation (every sample evaluated
once, whatever the world size)."""

import gc
import itertools
import math

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler

import devicekit
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


class EpochSeededSampler(Sampler):
    """DistributedSampler's shard, yielding (epoch, index) so each sample's augmentation
    can be seeded from (seed, epoch, index) alone; it can start an epoch part-way (a
    resume from a mid-epoch checkpoint)."""

    def __init__(self, dataset, world_size, rank, seed):
        self.inner = DistributedSampler(
            dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True
        )
        self.epoch = 0
        self.skip = 0

    def set_epoch(self, epoch, skip=0):
        """Reshuffle for `epoch` (the same order on every rank and under every launcher),
        leaving out its first `skip` samples of this rank's shard."""
        self.epoch, self.skip = epoch, skip
        self.inner.set_epoch(epoch)

    def __iter__(self):
        return ((self.epoch, index) for index in itertools.islice(self.inner, self.skip, None))

    def __len__(self):
        return max(0, len(self.inner) - self.skip)


class EpochSeededDataset(Dataset):
    """Runs the wrapped dataset's random augmentation under a seed made of
    (seed, epoch, index): the same image for a sample whatever the worker count, the
    launcher, or a resume, and without touching the caller's random state."""

    def __init__(self, dataset, seed):
        self.dataset = dataset
        self.seed = seed

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, key):
        epoch, index = key
        # Wrapped to 64 bits: torch.manual_seed refuses anything wider (--seed 2000000 did).
        key = ((self.seed * 1_000_003 + epoch) * 10_000_019 + index) & 0xFFFF_FFFF_FFFF_FFFF
        # Augmentation draws from torch's global CPU generator: seed only that one and put
        # its state back (torch.manual_seed would also reseed every device, ~3x the cost of
        # producing a 64 px sample).
        state = torch.get_rng_state()
        torch.default_generator.manual_seed(key)
        try:
            return self.dataset[index]
        finally:
            torch.set_rng_state(state)


class ShardSampler(Sampler):
    """Indices rank, rank + world, rank + 2 world, ...: no padding, no duplicates."""

    def __init__(self, length, world_size, rank):
        self.indices = range(rank, length, world_size)

    def __iter__(self):
        return iter(self.indices)

    def __len__(self):
        return len(self.indices)


def freeze_inherited_objects(worker_id):
    """DataLoader worker start: keep the objects inherited from the parent out of the garbage
    collector's reach. Its first full collection would write to every one of them, copying
    their pages into each forked worker (~35 MiB per worker measured, see docs/performance.md)."""
    gc.freeze()


def build_loaders(train_set, val_set, batch_size, workers, ctx, seed):
    """(train_loader, val_loader) for the rank described by `ctx`."""
    common = {
        "batch_size": batch_size,
        "num_workers": workers,
        "pin_memory": devicekit.pin_memory(),
        "persistent_workers": workers > 0,
    }
    if workers > 0:
        common.update(
            prefetch_factor=4,
            worker_init_fn=freeze_inherited_objects,
            multiprocessing_context=devicekit.worker_context(),
        )
    train_loader = DataLoader(
        EpochSeededDataset(train_set, seed),
        sampler=EpochSeededSampler(train_set, ctx.world_size, ctx.rank, seed),
        drop_last=True,
        **common,
    )
    val_loader = DataLoader(
        val_set,
        sampler=ShardSampler(len(val_set), ctx.world_size, ctx.rank),
        drop_last=False,
        **common,
    )
    return train_loader, val_loader


def start_epoch(loader: DataLoader, epoch: int, skip: int = 0) -> None:
    """Start `epoch` of a training loader that build_loaders made, `skip` samples of this
    rank's shard into it (a resumed epoch)."""
    sampler = loader.sampler
    if not isinstance(sampler, EpochSeededSampler):
        raise TypeError(f"{loader!r} is not a training loader of build_loaders")
    sampler.set_epoch(epoch, skip)

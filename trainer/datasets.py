"""The (train, val) datasets of a run: an image folder through the reference transforms, or
synthetic ImageNet-shaped data (``--dummy``).

Every dataset here returns ``(image, label)``: ``image`` is a **uint8** tensor, CHW,
3 channels, ``image_size`` x ``image_size``; ``label`` is an int. Nothing here
normalises (trainer.transforms.normalize does, on the device).

- :class:`DummyImageNet`: synthetic samples, each a pure function of (index, seed).
- :func:`build_datasets`: the (train, val) pair for a data directory or ``--dummy``, with
  :class:`trainer.image_folder.ImageFolder` and the transforms of trainer.transforms.
"""

import os

import torch

from devicekit.errors import UsageError, warn
from trainer.image_folder import ImageFolder, check_data_dir
from trainer.transforms import DEFAULT_CROP_SCALE, positive_int, train_transform, val_transform

VAL_SEED_OFFSET = 1_000_003  # dummy val samples use seed + this, so they differ from train

_MASK64 = (1 << 64) - 1


def _mix64(value):
    """splitmix64's finaliser: a well-spread 64-bit integer from any integer."""
    value = (value + 0x9E3779B97F4A7C15) & _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


class DummyImageNet(torch.utils.data.Dataset):
    """Synthetic ImageNet-shaped data for throughput runs: no files, no decoding.

    Sample ``index`` is a pure function of ``(index, seed)``: a torch.Generator seeded
    from both draws the label (uniform in ``[0, num_classes)``) and then the uint8 pixels
    (uniform noise, 3 x image_size x image_size). Every process, worker and launcher
    therefore sees the same sample for the same index, whatever the global RNG state.
    """

    def __init__(self, length, num_classes, image_size, seed=0):
        if isinstance(length, bool) or not isinstance(length, int) or length < 0:
            raise UsageError(f"dataset length must be a whole number >= 0, got {length!r}")
        self.length = length
        self.num_classes = positive_int(num_classes, "num_classes")
        self.image_size = positive_int(image_size, "image size")
        self.seed = int(seed)
        self._seed_key = _mix64(self.seed & _MASK64)

    @property
    def classes(self):
        return [f"class{index}" for index in range(self.num_classes)]

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        index = int(index)
        if index < 0:
            index += self.length
        if not 0 <= index < self.length:
            raise IndexError(f"index {index} out of range for {self.length} samples")
        generator = torch.Generator()
        generator.manual_seed(_mix64((self._seed_key + index) & _MASK64))
        label = int(torch.randint(self.num_classes, (1,), generator=generator))
        size = self.image_size
        image = torch.randint(0, 256, (3, size, size), dtype=torch.uint8, generator=generator)
        return image, label

    def __repr__(self):
        return (
            f"DummyImageNet(length={self.length}, num_classes={self.num_classes}, "
            f"image_size={self.image_size}, seed={self.seed})"
        )


def check_num_classes(dataset, num_classes):
    """The dataset's class count; UsageError if it exceeds the model's ``num_classes``."""
    count = getattr(dataset, "num_classes", None)
    if count is None:
        count = len(dataset.classes)
    if count > num_classes:
        where = getattr(dataset, "root", None)
        name = f"dataset {where!r}" if where else "the dataset"
        raise UsageError(
            f"{name} has {count} classes but the model has only {num_classes} "
            f"outputs: pass --num-classes {count} (or more)"
        )
    return count


def _names(names, limit=5):
    names = sorted(names)
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def build_datasets(
    data_dir,
    dummy,
    image_size,
    num_classes,
    seed,
    train_length=1281167,
    val_length=50000,
    *,
    crop_scale=DEFAULT_CROP_SCALE,
    flip=True,
    augment=True,
):
    """The (train_dataset, val_dataset) pair.

    ``dummy``: :class:`DummyImageNet` for both (``num_classes`` of them, 1000 if None;
    val seeded with ``seed + VAL_SEED_OFFSET`` so its samples differ from train's), and
    ``data_dir`` is ignored (with a warning when one was given). Otherwise ``data_dir``
    must hold ``train/`` and ``val/`` class folders with the same class names, read by
    :class:`ImageFolder` with :func:`train_transform` (``crop_scale``, ``flip``) /
    :func:`val_transform`, or val_transform for both when not ``augment``; when
    ``num_classes`` is given, it must be at least the number of classes found.
    """
    if dummy:
        if data_dir is not None:
            warn(f"--dummy given: ignoring the data directory {os.fspath(data_dir)!r}")
        classes = 1000 if num_classes is None else num_classes
        train = DummyImageNet(train_length, classes, image_size, seed)
        val = DummyImageNet(val_length, classes, image_size, int(seed) + VAL_SEED_OFFSET)
        return train, val
    train_dir, val_dir = check_data_dir(data_dir, dummy)
    data_dir = os.fspath(data_dir)
    train = ImageFolder(
        train_dir,
        train_transform(image_size, crop_scale, flip) if augment else val_transform(image_size),
    )
    val = ImageFolder(val_dir, val_transform(image_size))
    if train.classes != val.classes:
        only_train = set(train.classes) - set(val.classes)
        only_val = set(val.classes) - set(train.classes)
        parts = []
        if only_train:
            parts.append(f"only in train/: {_names(only_train)}")
        if only_val:
            parts.append(f"only in val/: {_names(only_val)}")
        raise UsageError(
            f"train/ and val/ class folders differ in {data_dir!r} "
            f"({'; '.join(parts)}): give val/ the same class folders as train/"
        )
    if num_classes is not None:
        check_num_classes(train, num_classes)
    return train, val

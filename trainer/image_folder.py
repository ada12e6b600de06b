"""The image folder a run reads, ``DIR/{train,val}/<class>/*.jpg``: the dataset, and the
checks of its layout made before any rank starts."""

import os
import stat

import numpy as np
import torch
from PIL import Image

from devicekit.errors import UsageError, warn
from trainer.decoding import pil_to_tensor

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp")
LAYOUT_HINT = "expected DIR/train/<class>/*.jpg and DIR/val/<class>/*.jpg"


def _is_image_file(name):
    return not name.startswith(".") and name.lower().endswith(IMAGE_EXTENSIONS)


def _folder_problem(path):
    """Why `path` is not a folder ("does not exist", ...), or "" when it is one."""
    try:
        return "" if stat.S_ISDIR(os.stat(path).st_mode) else "is not a folder"
    except FileNotFoundError:
        return "does not exist"
    except OSError as error:  # e.g. a symlink loop, no permission
        return f"cannot be opened ({error.strerror})"


def _scan(folder, keep):
    """The sorted names of the entries of `folder` for which `keep(entry)` holds; an entry
    that cannot be examined (a symlink loop, no permission) is a UsageError naming it."""
    try:
        with os.scandir(folder) as entries:
            return sorted(entry.name for entry in entries if keep(entry))
    except OSError as error:
        raise UsageError(
            f"data path {error.filename or folder} cannot be read "
            f"({error.strerror}): fix it or remove it"
        ) from None


def _class_folders(root):
    """The class folder names under `root`, sorted; UsageError when there is none."""
    classes = _scan(root, lambda entry: not entry.name.startswith(".") and entry.is_dir())
    if not classes:
        raise UsageError(
            f"image folder {root!r} has no class folders: put the images in "
            f"one sub-folder per class, {root}/<class>/*.jpg"
        )
    return classes


def _image_files(folder):
    """The image file names in `folder`, sorted; UsageError when there is none."""
    files = _scan(folder, lambda entry: _is_image_file(entry.name) and entry.is_file())
    if not files:
        raise UsageError(
            f"class folder {folder} has no images "
            f"({'/'.join(IMAGE_EXTENSIONS)}): add images or remove the folder"
        )
    return files


# What Pillow raises for a file that is not a readable image (corrupt, truncated, not an
# image at all, or too large to be one).
UNREADABLE_IMAGE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError)


class ImageFolder(torch.utils.data.Dataset):
    """Images in ``root/<class>/*.{jpg,jpeg,png,bmp,webp}`` (any case), labelled by folder.

    Classes are the sub-folders of ``root`` sorted by name (their index is the label);
    samples are sorted by (class, file name), so every process sees the same order.
    Hidden entries (names starting with ".") are ignored. Images are opened with Pillow
    and handed to ``transform`` as ``Image.open`` returns them, pixels not yet decoded
    and in the file's own mode, so that a transform can decode no more than it needs
    (:class:`RandomResizedCrop` does); the default transform decodes them to a uint8 RGB
    CHW tensor at the image's own size.

    The file list is held in numpy arrays (the class-relative paths as one byte string
    with offsets, the labels as int64), not as a Python object per file: DataLoader
    workers forked from the process that built it then keep sharing its pages, where
    reading a list's objects writes their reference counts and so copies every page of
    the list into every worker as it goes (for ImageNet's 1.28 million files, about
    250 MB per worker). :meth:`sample` gives one entry.

    A missing root, a root with no class folders, or a class folder with no images raise
    :class:`UsageError` here, at construction.

    An image that cannot be read at load time (corrupt, truncated, not an image) is
    **skipped rather than fatal**: one warning naming the file (once per file per process),
    and the next readable sample in the dataset is returned instead (wrapping around to
    the start), with that sample's label. One bad file among a million should not end a
    days-long run; the cost is that the substitute sample is seen twice that epoch. If no
    image in the dataset can be read, :class:`UsageError` is raised.
    """

    def __init__(self, root, transform=None):
        self.root = os.fspath(root)
        self.transform = transform
        problem = _folder_problem(self.root)
        if problem:
            raise UsageError(
                f"image folder {self.root!r} {problem}: point to a folder of class "
                "folders, root/<class>/*.jpg"
            )
        self.classes = _class_folders(self.root)
        self.class_to_idx = {name: index for index, name in enumerate(self.classes)}
        paths, counts = [], []
        for name in self.classes:
            files = _image_files(os.path.join(self.root, name))
            paths.extend(os.fsencode(os.path.join(name, file)) for file in files)
            counts.append(len(files))
        self._path_bytes = np.frombuffer(b"".join(paths), dtype=np.uint8)
        self._path_offsets = np.cumsum([0] + [len(path) for path in paths], dtype=np.int64)
        self.targets = np.repeat(np.arange(len(self.classes), dtype=np.int64), counts)
        self._unreadable = set()

    @property
    def num_classes(self):
        return len(self.classes)

    def __len__(self):
        return len(self.targets)

    def sample(self, index):
        """``(path, label)`` of sample ``index`` (0 <= index < len(self))."""
        start, end = self._path_offsets[index], self._path_offsets[index + 1]
        name = os.fsdecode(self._path_bytes[start:end].tobytes())
        return os.path.join(self.root, name), int(self.targets[index])

    def read(self, path):
        """The image at ``path`` through the transform, or None (after one warning) if
        Pillow cannot read it."""
        try:
            with Image.open(path) as image:
                return self.transform(image) if self.transform is not None else pil_to_tensor(image)
        except UNREADABLE_IMAGE_ERRORS as error:
            warn(f"skipping unreadable image {path}: {type(error).__name__}: {error}")
            return None

    def __getitem__(self, index):
        count = len(self)
        index = int(index)
        if index < 0:
            index += count
        if not 0 <= index < count:
            raise IndexError(f"index {index} out of range for {count} samples")
        for step in range(count):
            current = (index + step) % count
            if current in self._unreadable:
                continue
            path, label = self.sample(current)
            tensor = self.read(path)
            if tensor is None:
                self._unreadable.add(current)
                continue
            return tensor, label
        raise UsageError(
            f"none of the {count} images under {self.root} could be read: "
            "check the files (see the warnings above)"
        )

    def __repr__(self):
        return (
            f"ImageFolder({self.root!r}, {len(self)} images, "
            f"{len(self.classes)} classes, transform={self.transform!r})"
        )


def _split_dir(data_dir, split):
    path = os.path.join(data_dir, split)
    problem = _folder_problem(path)
    if problem == "does not exist":
        raise UsageError(
            f"data directory {data_dir!r} has no {split}/ folder: {LAYOUT_HINT} (or pass --dummy)"
        )
    if problem:
        raise UsageError(f"{path!r} {problem}: {LAYOUT_HINT} (or pass --dummy)")
    return path


def _count_images(root, enough):
    """The images under ``root/<class>/`` as :class:`ImageFolder` finds them, counted class
    folder by class folder until there are ``enough``."""
    count = 0
    for name in _class_folders(root):
        count += len(_image_files(os.path.join(root, name)))
        if count >= enough:
            break
    return count


def check_data_dir(data_dir, dummy, batch_size=None):
    """Check the layout cheaply (no image is opened): unless ``dummy``, ``data_dir`` must
    hold ``train/`` and ``val/`` folders, and with ``batch_size`` (the node's) ``train/``
    must hold at least one batch of images, or no training step could be drawn (counting
    stops at the class folder that completes a batch: a few directory listings even for
    ImageNet). Returns the folders' paths (None, None with ``dummy``)."""
    if dummy:
        return None, None
    if data_dir is None:
        raise UsageError(
            f"no data directory given: pass DIR (or --data DIR), {LAYOUT_HINT}, "
            "or pass --dummy for synthetic data"
        )
    data_dir = os.fspath(data_dir)
    problem = _folder_problem(data_dir)
    if problem:
        raise UsageError(f"data directory {data_dir!r} {problem}: {LAYOUT_HINT} (or pass --dummy)")
    train, val = _split_dir(data_dir, "train"), _split_dir(data_dir, "val")
    if batch_size is not None:
        count = _count_images(train, batch_size)
        if count < batch_size:
            raise UsageError(
                f"data directory {data_dir!r} has {count} training images, fewer "
                f"than one batch of --batch-size {batch_size}: lower --batch-size "
                "or add images"
            )
    return train, val

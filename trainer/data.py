"""Datasets and transforms for ImageNet-style training; device-agnostic.

Every dataset here returns ``(image, label)``: ``image`` is a **uint8** tensor, CHW,
3 channels, ``image_size`` x ``image_size``; ``label`` is an int. Nothing here
normalises: batches travel to the device as uint8 (4x less to copy) and
:func:`normalize` turns them into float32 there.

- :class:`DummyImageNet`: synthetic samples, each a pure function of (index, seed).
- :class:`ImageFolder`: ``root/<class>/*.jpg`` (and .jpeg/.png/.bmp/.webp) via Pillow.
- :func:`train_transform` / :func:`val_transform`: the reference ImageNet recipe
  (RandomResizedCrop + flip; resize to 256/224 of the size + center crop), PIL in,
  uint8 CHW tensor out; the training crop is resized by torch's uint8 kernel. Their
  randomness comes from torch's global RNG, so DataLoader worker seeding makes it
  reproducible. RandomResizedCrop decodes a JPEG at 1/2, 1/4 or 1/8 of its size (in the
  DCT domain) when its crop still has enough pixels there.
- :func:`build_datasets`: the (train, val) pair for a data directory or ``--dummy``.

The transforms are module-level classes (not closures) so that datasets pickle into
DataLoader workers under any multiprocessing start method.
"""

import math
import os
import stat

import numpy as np
import torch
from PIL import Image

from devicekit.errors import UsageError, warn

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp")
VAL_SEED_OFFSET = 1_000_003  # dummy val samples use seed + this, so they differ from train
LAYOUT_HINT = "expected DIR/train/<class>/*.jpg and DIR/val/<class>/*.jpg"


# ----------------------------------------------------------------------------- normalise


def normalize(batch_uint8, mean=IMAGENET_MEAN, std=IMAGENET_STD):
    """``(x / 255 - mean) / std`` per channel, as float32 on the input's device.

    Takes a uint8 NCHW batch (a single CHW image works too) and keeps its memory format
    (a channels_last batch gives a channels_last result).
    """
    if batch_uint8.dtype != torch.uint8:
        raise TypeError(f"normalize expects a uint8 tensor, got {batch_uint8.dtype}")
    if batch_uint8.dim() not in (3, 4):
        raise ValueError(f"normalize expects CHW or NCHW, got shape {tuple(batch_uint8.shape)}")
    device = batch_uint8.device
    mean_t = torch.as_tensor(mean, dtype=torch.float32, device=device).view(-1, 1, 1)
    std_t = torch.as_tensor(std, dtype=torch.float32, device=device).view(-1, 1, 1)
    # .float() keeps the strides (memory format); the in-place ops below keep them too.
    out = batch_uint8.float()
    out.div_(255.0).sub_(mean_t).div_(std_t)
    return out


# ----------------------------------------------------------------------------- dummy data

_MASK64 = (1 << 64) - 1


def _mix64(value):
    """splitmix64's finaliser: a well-spread 64-bit integer from any integer."""
    value = (value + 0x9E3779B97F4A7C15) & _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


def _positive_int(value, what):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{what} must be a whole number >= 1, got {value!r}")
    return value


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
        self.num_classes = _positive_int(num_classes, "num_classes")
        self.image_size = _positive_int(image_size, "image size")
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


# ----------------------------------------------------------------------------- transforms


def _rgb_pixels(image):
    """A PIL image -> uint8 RGB tensor, HWC, contiguous."""
    array = np.array(image.convert("RGB") if image.mode != "RGB" else image, dtype=np.uint8)
    return torch.from_numpy(array)


def pil_to_tensor(image):
    """A PIL image -> uint8 RGB tensor, CHW, contiguous."""
    return _rgb_pixels(image).permute(2, 0, 1).contiguous()


def resize_uint8(image, size):
    """An RGB PIL image resized to size x size, bilinear with antialiasing, as a uint8 CHW
    tensor (contiguous).

    Pillow's BILINEAR filter (a triangle as wide as the reduction) computed by torch's
    uint8 kernel, about 3x faster than Pillow's own on one core; the two agree to
    within a level on nearly every pixel.
    """
    batch = _rgb_pixels(image).permute(2, 0, 1).unsqueeze(0)  # NCHW, channels_last strides
    resized = torch.nn.functional.interpolate(
        batch, size=(size, size), mode="bilinear", antialias=True, align_corners=False
    )
    return resized[0].contiguous()


def decode(image, at_least=None):
    """``(rgb_image, factor)``: ``image`` in RGB, decoded at 1/factor of its stored size.

    ``factor`` is 1 unless ``image`` is a JPEG whose pixels are not decoded yet (as
    ``Image.open`` returns it) and ``at_least=(width, height)`` allows a reduction: then
    libjpeg downscales while decoding, in the DCT domain (Pillow's draft mode), by the
    largest of 2, 4 or 8 that leaves the image at least that size. Pixel (x, y) of the
    result covers (x * factor, y * factor) to ((x + 1) * factor, (y + 1) * factor) of
    the stored image.
    """
    factor = 1.0
    if at_least is not None:
        width = image.width
        drafted = image.draft("RGB", at_least)  # None for decoded and non-JPEG images
        if drafted is not None:
            factor = width / drafted[1][2]
    return (image if image.mode == "RGB" else image.convert("RGB")), factor


class Compose:
    """Apply transforms in order."""

    def __init__(self, transforms):
        self.transforms = list(transforms)

    def __call__(self, image):
        for transform in self.transforms:
            image = transform(image)
        return image

    def __repr__(self):
        return f"Compose({', '.join(repr(t) for t in self.transforms)})"


class RandomResizedCrop:
    """Crop a random area and aspect ratio, then resize it (bilinear, antialiased) to
    size x size: a PIL image in, a uint8 CHW tensor out (:func:`resize_uint8`).

    The area is drawn uniformly from ``scale`` times the image area and the aspect ratio
    log-uniformly from ``ratio``; a draw that does not fit is retried, 10 times in all,
    then a central crop (the whole image, trimmed to the ratio range) is used instead.

    Given a JPEG not decoded yet (as ``Image.open`` returns it), the box is drawn in the
    stored image's coordinates as always, then the image is decoded only as large as the
    box needs: reduced by 2, 4 or 8 (:func:`decode`) when the box still spans at least
    size x size pixels there, so the resize never has to enlarge what it would have
    reduced. The box then snaps to the nearest pixels of the reduced image, which moves
    each edge by at most half a reduced pixel (under half an output pixel). The draws,
    and so the crops' statistics, are those of a full decode; the pixels differ slightly
    (DCT-domain instead of bilinear reduction for part of the way, and the snap).
    """

    ATTEMPTS = 10

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
        self.size = int(size)
        self.scale = (float(scale[0]), float(scale[1]))
        self.ratio = (float(ratio[0]), float(ratio[1]))

    def box(self, width, height):
        """(left, top, crop_width, crop_height) for an image of width x height."""
        area = width * height
        log_low, log_high = math.log(self.ratio[0]), math.log(self.ratio[1])
        for _ in range(self.ATTEMPTS):
            target = area * (self.scale[0] + (self.scale[1] - self.scale[0]) * torch.rand(1).item())
            aspect = math.exp(log_low + (log_high - log_low) * torch.rand(1).item())
            crop_w = round(math.sqrt(target * aspect))
            crop_h = round(math.sqrt(target / aspect))
            if 0 < crop_w <= width and 0 < crop_h <= height:
                top = int(torch.randint(0, height - crop_h + 1, (1,)))
                left = int(torch.randint(0, width - crop_w + 1, (1,)))
                return left, top, crop_w, crop_h
        # Fallback: the whole image, cut down to the nearest allowed aspect ratio.
        aspect = width / height
        if aspect < self.ratio[0]:
            crop_w, crop_h = width, round(width / self.ratio[0])
        elif aspect > self.ratio[1]:
            crop_w, crop_h = round(height * self.ratio[1]), height
        else:
            crop_w, crop_h = width, height
        return (width - crop_w) // 2, (height - crop_h) // 2, crop_w, crop_h

    def __call__(self, image):
        width, height = image.size
        left, top, crop_w, crop_h = self.box(width, height)
        # decode() reduces by at most stored // at_least <= crop / size each way: the box
        # keeps at least size x size pixels.
        image, factor = decode(
            image,
            at_least=(
                math.ceil(width * self.size / crop_w),
                math.ceil(height * self.size / crop_h),
            ),
        )
        box = (left, top, left + crop_w, top + crop_h)
        if factor > 1:  # to the nearest pixel of the reduced image
            box = tuple(round(edge / factor) for edge in box)
        return resize_uint8(image.crop(box), self.size)

    def __repr__(self):
        return f"RandomResizedCrop(size={self.size}, scale={self.scale}, ratio={self.ratio})"


class RandomHorizontalFlip:
    """Mirror left-right with probability p (drawn from torch's RNG): a PIL image, or a
    CHW tensor as :class:`RandomResizedCrop` gives."""

    def __init__(self, p=0.5):
        self.p = float(p)

    def __call__(self, image):
        if torch.rand(1).item() < self.p:
            if isinstance(image, torch.Tensor):
                return image.flip(-1)
            return image.transpose(Image.FLIP_LEFT_RIGHT)
        return image

    def __repr__(self):
        return f"RandomHorizontalFlip(p={self.p})"


class ResizeShorter:
    """Resize (bilinear) so the shorter side is ``size``, keeping the aspect ratio."""

    def __init__(self, size):
        self.size = int(size)

    def __call__(self, image):
        image, _ = decode(image)
        width, height = image.size
        if width <= height:
            new_w, new_h = self.size, max(1, int(self.size * height / width))
        else:
            new_w, new_h = max(1, int(self.size * width / height)), self.size
        if (new_w, new_h) == (width, height):
            return image
        return image.resize((new_w, new_h), Image.BILINEAR)

    def __repr__(self):
        return f"ResizeShorter({self.size})"


class CenterCrop:
    """The central size x size region (zero-padded where the image is smaller)."""

    def __init__(self, size):
        self.size = int(size)

    def __call__(self, image):
        width, height = image.size
        left = round((width - self.size) / 2.0)
        top = round((height - self.size) / 2.0)
        return image.crop((left, top, left + self.size, top + self.size))

    def __repr__(self):
        return f"CenterCrop({self.size})"


class ToTensor:
    """PIL image -> uint8 CHW tensor (no scaling, no normalisation); a tensor passes as
    it is."""

    def __call__(self, image):
        return image if isinstance(image, torch.Tensor) else pil_to_tensor(image)

    def __repr__(self):
        return "ToTensor()"


DEFAULT_CROP_SCALE = (0.08, 1.0)


def train_transform(image_size, scale=DEFAULT_CROP_SCALE, flip=True):
    """RandomResizedCrop(image_size, ``scale``, ratio 3/4-4/3, bilinear), a horizontal flip
    with probability 0.5 unless not ``flip``, uint8. The defaults are the reference's."""
    size = _positive_int(image_size, "image size")
    steps = [RandomResizedCrop(size, scale=scale)]
    if flip:
        steps.append(RandomHorizontalFlip(0.5))
    return Compose(steps + [ToTensor()])


def val_transform(image_size):
    """Shorter side to int(image_size * 256 / 224), CenterCrop(image_size), uint8."""
    size = _positive_int(image_size, "image size")
    return Compose([ResizeShorter(int(size * 256 / 224)), CenterCrop(size), ToTensor()])


# ----------------------------------------------------------------------------- image folder


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


# ----------------------------------------------------------------------------- building


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


def _names(names, limit=5):
    names = sorted(names)
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


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

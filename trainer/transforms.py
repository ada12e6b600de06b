"""The reference ImageNet recipe's transforms: PIL image in, uint8 CHW tensor out, and the
normalisation that turns a uint8 batch into float32 on the device.

- :func:`train_transform` / :func:`val_transform`: RandomResizedCrop + flip; resize to
  256/224 of the size + center crop. The training crop is resized by torch's uint8 kernel
  and RandomResizedCrop decodes a JPEG at 1/2, 1/4 or 1/8 of its size (in the DCT domain)
  when its crop still has enough pixels there (trainer.decoding). Their randomness comes
  from torch's global RNG, so DataLoader worker seeding makes it reproducible.
- :func:`normalize`: batches travel to the device as uint8 (4x less to copy) and are
  normalised there.

The transforms are module-level classes (not closures) so that datasets pickle into
DataLoader workers under any multiprocessing start method.
"""

import math

import torch
from PIL import Image

from devicekit.errors import UsageError
from trainer.decoding import decode, pil_to_tensor, resize_uint8

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


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


def positive_int(value, what):
    """`value` when it is a whole number >= 1; UsageError naming `what` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{what} must be a whole number >= 1, got {value!r}")
    return value


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
    size = positive_int(image_size, "image size")
    steps = [RandomResizedCrop(size, scale=scale)]
    if flip:
        steps.append(RandomHorizontalFlip(0.5))
    return Compose(steps + [ToTensor()])


def val_transform(image_size):
    """Shorter side to int(image_size * 256 / 224), CenterCrop(image_size), uint8."""
    size = positive_int(image_size, "image size")
    return Compose([ResizeShorter(int(size * 256 / 224)), CenterCrop(size), ToTensor()])

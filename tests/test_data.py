"""Datasets, transforms and the demo data of the trainer (trainer.datasets, .decoding,
.transforms, .image_folder, .demo_data)."""

import math
import os
import pickle
import socket
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import ROOT, clean_environ
from devicekit.errors import UsageError
from trainer import demo_data
from trainer.datasets import DummyImageNet, build_datasets, check_num_classes
from trainer.decoding import decode, resize_uint8
from trainer.demo_data import MARKER, SHAPES, make_demo_dataset
from trainer.image_folder import ImageFolder, check_data_dir
from trainer.options import parse_args
from trainer.transforms import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    RandomHorizontalFlip,
    RandomResizedCrop,
    normalize,
    train_transform,
    val_transform,
)


def write_image(path, colour=(10, 20, 30), size=(12, 9)):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.new("RGB", size, colour).save(path)


def make_tree(root, classes=("dog", "cat"), per_class=2, ext=".png"):
    for name in classes:
        for index in range(per_class):
            write_image(os.path.join(root, name, f"img{index}{ext}"), colour=(index, 0, 0))
    return root


def make_data_dir(root, train_classes=("cat", "dog"), val_classes=("cat", "dog")):
    make_tree(os.path.join(root, "train"), train_classes)
    make_tree(os.path.join(root, "val"), val_classes, per_class=1)
    return str(root)


# --------------------------------------------------------------------- dummy data


def test_dummy_is_a_function_of_index_and_seed():
    first, second = DummyImageNet(100, 10, 24, seed=3), DummyImageNet(100, 10, 24, seed=3)
    torch.manual_seed(1)
    image, label = first[7]
    torch.manual_seed(2)  # the global RNG state plays no part
    again, label_again = second[7]
    assert image.dtype == torch.uint8 and image.shape == (3, 24, 24)
    assert torch.equal(image, again) and label == label_again
    assert isinstance(label, int) and 0 <= label < 10
    assert not torch.equal(image, first[8][0])
    assert not torch.equal(image, DummyImageNet(100, 10, 24, seed=4)[7][0])
    assert all(0 <= first[i][1] < 10 for i in range(50))
    assert len({first[i][1] for i in range(50)}) > 1
    assert len(first) == 100
    with pytest.raises(IndexError):
        first[100]


def test_dummy_train_and_val_differ():
    train, val = build_datasets(None, True, 16, 5, seed=0, train_length=10, val_length=4)
    assert (len(train), len(val)) == (10, 4)
    assert isinstance(train, DummyImageNet) and isinstance(val, DummyImageNet)
    assert not torch.equal(train[0][0], val[0][0])
    assert train.num_classes == val.num_classes == 5


# --------------------------------------------------------------------- normalize


def test_normalize_matches_hand_computation():
    batch = torch.tensor([0, 51, 255, 128], dtype=torch.uint8).view(1, 1, 2, 2).repeat(2, 3, 1, 1)
    out = normalize(batch)
    assert out.dtype == torch.float32 and out.shape == batch.shape
    for channel in range(3):
        for value, got in zip((0, 51, 255, 128), out[1, channel].flatten().tolist(), strict=False):
            expected = (value / 255.0 - IMAGENET_MEAN[channel]) / IMAGENET_STD[channel]
            assert got == pytest.approx(expected, abs=1e-5)
    custom = normalize(batch, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
    assert custom[0, 0, 0, 0].item() == pytest.approx(-1.0)
    assert custom[0, 0, 1, 0].item() == pytest.approx(1.0)


def test_normalize_keeps_memory_format_and_device():
    batch = torch.randint(0, 256, (2, 3, 5, 5), dtype=torch.uint8)
    channels_last = batch.contiguous(memory_format=torch.channels_last)
    out = normalize(channels_last)
    assert out.is_contiguous(memory_format=torch.channels_last)
    assert out.device == batch.device
    assert torch.allclose(out, normalize(batch))
    with pytest.raises(TypeError):
        normalize(batch.float())


# --------------------------------------------------------------------- image folder


def test_image_folder_classes_sorted_and_labels(tmp_path):
    root = make_tree(str(tmp_path / "data"), classes=("zebra", "ant", "mole"))
    write_image(str(tmp_path / "data" / "ant" / "UPPER.JPG"))
    (tmp_path / "data" / "ant" / "notes.txt").write_text("not an image")
    (tmp_path / "data" / "ant" / ".hidden.png").write_bytes(b"")
    dataset = ImageFolder(root)
    assert dataset.classes == ["ant", "mole", "zebra"]
    assert dataset.class_to_idx == {"ant": 0, "mole": 1, "zebra": 2}
    names = [
        (os.path.relpath(path, root), label)
        for path, label in map(dataset.sample, range(len(dataset)))
    ]
    assert names == [
        ("ant/UPPER.JPG", 0),
        ("ant/img0.png", 0),
        ("ant/img1.png", 0),
        ("mole/img0.png", 1),
        ("mole/img1.png", 1),
        ("zebra/img0.png", 2),
        ("zebra/img1.png", 2),
    ]
    assert dataset.targets.tolist() == [0, 0, 0, 1, 1, 2, 2]
    image, label = dataset[3]
    assert label == 1 and image.dtype == torch.uint8 and image.shape == (3, 9, 12)
    assert image[:, 0, 0].tolist() == [0, 0, 0]
    image, _ = ImageFolder(root, val_transform(8))[0]
    assert image.shape == (3, 8, 8) and image.dtype == torch.uint8
    pickle.loads(pickle.dumps(ImageFolder(root, train_transform(8))))  # goes to workers


def test_image_folder_holds_no_python_object_per_file(tmp_path):
    """Forked DataLoader workers keep sharing the file list's pages only if reading it
    writes no reference counts: numpy arrays, not a list of (path, label) per file."""
    root = make_tree(str(tmp_path / "data"), classes=("a", "b", "c"), per_class=30)
    write_image(os.path.join(root, "b", "\u00fcber.png"), colour=(5, 6, 7))
    undecodable = os.path.join(os.fsencode(root), b"c", b"caf\xe9.png")  # not UTF-8
    Image.new("RGB", (12, 9), (8, 9, 10)).save(undecodable, format="PNG")
    dataset = ImageFolder(root)
    assert len(dataset) == 92
    for name, value in vars(dataset).items():
        if isinstance(value, (list, tuple, dict, set, str, bytes)):
            assert len(value) < len(dataset), name  # per class, not per file
        elif isinstance(value, np.ndarray):
            assert value.dtype != object, name
    assert isinstance(dataset.targets, np.ndarray)
    assert dataset.targets.tolist() == [0] * 30 + [1] * 31 + [2] * 31
    expected = [
        (os.path.join(root, name, file), label)
        for label, name in enumerate("abc")
        for file in sorted(os.listdir(os.path.join(root, name)))
    ]
    assert [dataset.sample(index) for index in range(len(dataset))] == expected
    assert dataset[60][0][:, 0, 0].tolist() == [5, 6, 7]  # b/über.png, the last of b
    assert dataset[61][0][:, 0, 0].tolist() == [8, 9, 10]  # c/caf\xe9.png, the first of c
    assert os.fsencode(dataset.sample(61)[0]) == undecodable
    copy = pickle.loads(pickle.dumps(dataset))  # goes to spawned workers
    assert copy.sample(61) == dataset.sample(61) and len(copy) == len(dataset)


def test_image_folder_errors(tmp_path):
    with pytest.raises(UsageError, match=r"nowhere.*does not exist"):
        ImageFolder(str(tmp_path / "nowhere"))
    (tmp_path / "flat").mkdir()
    write_image(str(tmp_path / "flat" / "a.jpg"))
    with pytest.raises(UsageError, match=r"flat.*no class folders"):
        ImageFolder(str(tmp_path / "flat"))
    root = make_tree(str(tmp_path / "data"))
    os.makedirs(os.path.join(root, "cat2"))
    with pytest.raises(
        UsageError,
        match=r"class folder .*data/cat2 has no images \(.jpg/.jpeg/"
        r".png.*add images or remove the folder",
    ):
        ImageFolder(root)


def test_corrupt_image_is_skipped_with_one_warning(tmp_path, capsys):
    root = str(tmp_path / "data")
    write_image(os.path.join(root, "a", "0.png"), colour=(1, 1, 1))
    bad = os.path.join(root, "a", "1.jpg")
    with open(bad, "wb") as handle:
        handle.write(b"this is not a jpeg at all")
    write_image(os.path.join(root, "b", "0.png"), colour=(7, 7, 7))
    dataset = ImageFolder(root)
    image, label = dataset[1]
    assert label == 1 and image[:, 0, 0].tolist() == [7, 7, 7]
    err = capsys.readouterr().err
    assert err.count("warning") == 1 and bad in err
    dataset[1]
    assert capsys.readouterr().err == ""  # once per file
    assert dataset[0][1] == 0


def test_wrap_around_and_nothing_readable(tmp_path, capsys):
    root = str(tmp_path / "data")
    write_image(os.path.join(root, "a", "0.png"), colour=(3, 3, 3))
    for name in ("b/0.png", "b/1.png"):
        os.makedirs(os.path.join(root, "b"), exist_ok=True)
        with open(os.path.join(root, name), "wb") as handle:
            handle.write(b"\x00garbage")
    image, label = ImageFolder(root)[2]  # last sample bad -> wraps to the first
    assert label == 0 and image[:, 0, 0].tolist() == [3, 3, 3]
    os.remove(os.path.join(root, "a", "0.png"))
    with open(os.path.join(root, "a", "0.png"), "wb") as handle:
        handle.write(b"junk")
    with pytest.raises(UsageError, match="none of the 3 images"):
        ImageFolder(root)[0]
    capsys.readouterr()


# --------------------------------------------------------------------- build_datasets


def test_build_datasets_real_folders(tmp_path):
    data = make_data_dir(tmp_path / "data")
    train, val = build_datasets(data, False, 16, 2, seed=0)
    assert train.classes == val.classes == ["cat", "dog"]
    assert (len(train), len(val)) == (4, 2)
    for dataset in (train, val):
        image, label = dataset[0]
        assert image.shape == (3, 16, 16) and image.dtype == torch.uint8 and label == 0


def test_build_datasets_errors(tmp_path):
    with pytest.raises(UsageError, match=r"pass DIR \(or --data DIR\).*--dummy"):
        build_datasets(None, False, 16, 2, seed=0)
    missing = str(tmp_path / "missing")
    with pytest.raises(UsageError, match=r"missing.*does not exist"):
        build_datasets(missing, False, 16, 2, seed=0)
    only_train = tmp_path / "only_train"
    make_tree(str(only_train / "train"))
    with pytest.raises(
        UsageError,
        match=r"only_train' has no val/ folder: expected "
        r"DIR/train/<class>/\*.jpg.*--dummy",
    ):
        build_datasets(str(only_train), False, 16, 2, seed=0)
    only_val = tmp_path / "only_val"
    make_tree(str(only_val / "val"))
    with pytest.raises(UsageError, match="has no train/ folder"):
        build_datasets(str(only_val), False, 16, 2, seed=0)
    mismatch = make_data_dir(tmp_path / "mismatch", ("cat", "dog"), ("cat", "cow"))
    with pytest.raises(UsageError, match="only in train/: dog; only in val/: cow"):
        build_datasets(mismatch, False, 16, 2, seed=0)
    empty_class = make_data_dir(tmp_path / "empty_class")
    os.makedirs(os.path.join(empty_class, "train", "eel"))
    with pytest.raises(UsageError, match="train/eel has no images"):
        build_datasets(empty_class, False, 16, 2, seed=0)
    too_many = make_data_dir(tmp_path / "too_many")
    with pytest.raises(UsageError, match="has 2 classes but the model has only 1 outputs"):
        build_datasets(too_many, False, 16, 1, seed=0)


def test_check_data_dir_wants_one_batch_of_training_images(tmp_path):
    data = make_data_dir(tmp_path / "data")  # train/: 2 cats, 2 dogs
    for name in ("notes.txt", ".hidden.png"):  # not images, as ImageFolder sees them
        open(os.path.join(data, "train", "cat", name), "w").close()
    folders = (os.path.join(data, "train"), os.path.join(data, "val"))
    assert check_data_dir(data, False, batch_size=4) == folders
    with pytest.raises(UsageError) as error:
        check_data_dir(data, False, batch_size=5)
    assert str(error.value) == (
        f"data directory {data!r} has 4 training images, fewer than one "
        "batch of --batch-size 5: lower --batch-size or add images"
    )
    # Counting stops at the class folder that completes a batch: a later empty one is left
    # to ImageFolder, and named when the count reaches it.
    os.makedirs(os.path.join(data, "train", "eel"))
    assert check_data_dir(data, False, batch_size=2) == folders
    with pytest.raises(UsageError, match=r"class folder .*train/eel has no images"):
        check_data_dir(data, False, batch_size=5)
    assert check_data_dir(None, True, batch_size=10**9) == (None, None)  # --dummy: no files


def test_symlink_loops_are_one_usage_error_naming_the_path(tmp_path):
    data = make_data_dir(tmp_path / "data")
    loop = os.path.join(data, "train", "cat", "loop.png")
    os.symlink("loop.png", loop)
    for check in (
        lambda: ImageFolder(os.path.join(data, "train")),
        lambda: check_data_dir(data, False, batch_size=4),
    ):
        with pytest.raises(UsageError) as error:
            check()
        assert str(error.value) == (
            f"data path {loop} cannot be read (Too many levels of "
            "symbolic links): fix it or remove it"
        )
    looped = tmp_path / "looped"
    os.symlink("looped", looped)
    with pytest.raises(
        UsageError,
        match=r"data directory '.*looped' cannot be opened \(Too "
        r"many levels of symbolic links\)",
    ):
        check_data_dir(str(looped), False)
    with pytest.raises(UsageError, match=r"image folder '.*looped' cannot be opened"):
        ImageFolder(str(looped))


def test_check_num_classes(tmp_path):
    dataset = ImageFolder(make_tree(str(tmp_path / "data"), classes=("a", "b", "c")))
    assert check_num_classes(dataset, 3) == 3
    assert check_num_classes(dataset, 1000) == 3
    with pytest.raises(UsageError, match=r"3 classes.*only 2 outputs.*--num-classes 3"):
        check_num_classes(dataset, 2)
    with pytest.raises(UsageError, match="10 classes"):
        check_num_classes(DummyImageNet(4, 10, 8), 5)


# --------------------------------------------------------------------- transforms


def gradient_image(width=40, height=30):
    x = np.arange(width, dtype=np.uint8)[None, :, None] * 5
    y = np.arange(height, dtype=np.uint8)[:, None, None] * 7
    return Image.fromarray(np.broadcast_to(x + y, (height, width, 3)).copy())


def test_transform_shapes_and_reproducibility():
    image = gradient_image()
    for transform in (train_transform(24), val_transform(24)):
        out = transform(image)
        assert out.dtype == torch.uint8 and out.shape == (3, 24, 24) and out.is_contiguous()
    torch.manual_seed(5)
    first = [train_transform(16)(image) for _ in range(4)]
    torch.manual_seed(5)
    second = [train_transform(16)(image) for _ in range(4)]
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=False))
    assert not all(torch.equal(first[0], other) for other in first[1:])
    val = val_transform(16)
    assert torch.equal(val(image), val(image))


def test_flip_and_crop_pieces():
    image = gradient_image()
    tensor = torch.from_numpy(np.array(image)).permute(2, 0, 1)
    flipped = torch.from_numpy(np.array(RandomHorizontalFlip(1.0)(image))).permute(2, 0, 1)
    assert torch.equal(flipped, tensor.flip(-1))
    assert RandomHorizontalFlip(0.0)(image) is image
    assert torch.equal(RandomHorizontalFlip(1.0)(tensor), tensor.flip(-1))
    crop = RandomResizedCrop(16)
    torch.manual_seed(0)
    boxes = [crop.box(40, 30) for _ in range(20)]
    torch.manual_seed(0)
    assert boxes == [crop.box(40, 30) for _ in range(20)]
    for left, top, w, h in boxes:
        assert 0 <= left and left + w <= 40 and 0 <= top and top + h <= 30
        assert 0.08 * 1200 * 0.8 <= w * h <= 1200
    # a ratio no crop can meet: the fallback is the central crop trimmed to the ratio
    assert RandomResizedCrop(8, scale=(1.0, 1.0), ratio=(2.0, 2.0)).box(40, 30) == (0, 5, 40, 20)


def test_resize_matches_pillows_bilinear_whatever_the_thread_count(tmp_path):
    """The training crop's resize agrees with Pillow's BILINEAR resize of the same crop
    (within a level, on average far less), and gives the same bytes on 1 thread (a loader
    worker) as on several (the training process with --workers 0)."""
    with Image.open(smooth_jpeg(str(tmp_path / "photo.jpg"))) as image:
        crop = image.convert("RGB").crop((37, 20, 437, 320))
    threads = torch.get_num_threads()
    try:
        for size in (224, 64, 500):  # down a little, down a lot, up
            pillow = torch.from_numpy(np.array(crop.resize((size, size), Image.BILINEAR)))
            torch.set_num_threads(1)
            one = resize_uint8(crop, size)
            torch.set_num_threads(4)
            assert torch.equal(resize_uint8(crop, size), one), size
            difference = (one.permute(1, 2, 0).int() - pillow.int()).abs()
            assert one.is_contiguous() and one.shape == (3, size, size)
            assert difference.float().mean() < 0.1 and difference.max() <= 1, size
    finally:
        torch.set_num_threads(threads)


def smooth_jpeg(path, size=(500, 375)):
    """A photo-sized JPEG (quality 90) of smooth colour waves, as a photo's content."""
    x = np.linspace(0, 6 * np.pi, size[0])[None, :, None]
    y = np.linspace(0, 4 * np.pi, size[1])[:, None, None]
    phase = np.array([0.0, 2.0, 4.0])
    pixels = 128 + 60 * np.sin(x + phase) * np.cos(y * 0.7 + phase) + 40 * np.sin(x * 0.3 + y)
    Image.fromarray(np.uint8(np.clip(pixels, 0, 255))).save(path, quality=90)
    return path


def test_decode_reduces_an_undecoded_jpeg_only_as_far_as_asked(tmp_path):
    path = smooth_jpeg(str(tmp_path / "photo.jpg"))
    for at_least, factor, size in (
        ((120, 90), 4, (125, 94)),
        ((100, 40), 4, (125, 94)),
        ((200, 150), 2, (250, 188)),
        ((60, 40), 8, (63, 47)),
        ((300, 100), 1, (500, 375)),
        (None, 1, (500, 375)),
    ):
        with Image.open(path) as image:
            decoded, got = decode(image, at_least)
            assert (got, decoded.size, decoded.mode) == (factor, size, "RGB"), at_least
    with Image.open(path) as image:
        assert decode(image.convert("RGB"), (60, 40))[1] == 1  # already decoded: as it is
    png = str(tmp_path / "photo.png")
    Image.open(path).save(png)
    with Image.open(png) as image:
        assert decode(image, (60, 40))[1] == 1  # no DCT to reduce in


@pytest.mark.parametrize("size", [32, 64, 112])
def test_reduced_decode_keeps_the_crops_and_flips_and_nearly_the_pixels(tmp_path, size):
    """The same random draws as a full decode (the same boxes, flips and generator state
    after), the same output size, and pixels within a level of the full decode's crop of
    the same box: the box is mapped into the reduced image (to its nearest pixels), not
    merely taken from it."""
    path = smooth_jpeg(str(tmp_path / "photo.jpg"))
    transform = train_transform(size)
    crop = transform.transforms[0]
    with Image.open(path) as image:
        full_image = image.convert("RGB")
    differences, reduced_count = [], 0
    for seed in range(12):
        torch.manual_seed(seed)
        left, top, width, height = crop.box(*full_image.size)
        flip = torch.rand(1).item() < 0.5
        after_full = torch.get_rng_state()
        torch.manual_seed(seed)
        with Image.open(path) as image:
            reduced = transform(image)
        assert torch.equal(torch.get_rng_state(), after_full), seed
        with Image.open(path) as image:
            factor = decode(image, (math.ceil(500 * size / width), math.ceil(375 * size / height)))[
                1
            ]
        reduced_count += factor > 1
        box = [round(edge / factor) * factor for edge in (left, top, left + width, top + height)]
        full = resize_uint8(full_image.crop(box), size)
        full = full.flip(-1) if flip else full
        assert reduced.shape == full.shape == (3, size, size) and reduced.dtype == torch.uint8
        differences.append((reduced.int() - full.int()).abs().float().mean().item())
    assert max(differences) < 1.0, differences
    assert reduced_count > 0  # some crops were reduced


def test_transforms_take_any_image_mode(tmp_path):
    """ImageFolder hands the transforms images in the file's own mode (not yet decoded):
    each gives RGB."""
    root = str(tmp_path / "data")
    os.makedirs(os.path.join(root, "a"))
    Image.new("L", (40, 30), 77).save(os.path.join(root, "a", "grey.jpg"), quality=100)
    Image.new("RGBA", (40, 30), (10, 20, 30, 255)).save(os.path.join(root, "a", "rgba.png"))
    Image.new("RGB", (40, 30), (204, 102, 0)).convert("P").save(os.path.join(root, "a", "p.png"))
    expected = {"grey.jpg": [77] * 3, "rgba.png": [10, 20, 30], "p.png": [204, 102, 0]}
    for transform in (None, train_transform(16), val_transform(16)):
        dataset = ImageFolder(root, transform)
        for index in range(len(dataset)):
            image, _ = dataset[index]
            name = os.path.basename(dataset.sample(index)[0])
            assert image.dtype == torch.uint8 and image.shape[0] == 3, name
            assert image[:, 2, 2].tolist() == expected[name], (name, transform)


def test_val_transform_resizes_shorter_side_then_center_crops():
    image = Image.new("RGB", (300, 100), (0, 0, 0))
    image.paste((255, 255, 255), (140, 0, 160, 100))  # a white stripe in the middle
    out = val_transform(56)(image)  # shorter side -> 64, so 192 x 64, then the centre 56 x 56
    assert out.shape == (3, 56, 56)
    assert out[:, :, 28].min().item() == 255 and out[:, :, 0].max().item() == 0


# --------------------------------------------------------------------- the training recipe


def test_recipe_options_reach_the_training_samples(tmp_path):
    """--crop-scale, --no-flip and --no-augment as build_datasets applies them: on a square
    image, crops of the whole area leave only the flip to chance."""
    root = str(tmp_path / "data")
    for split in ("train", "val"):
        os.makedirs(os.path.join(root, split, "a"))
        gradient_image(40, 40).save(os.path.join(root, split, "a", "0.png"))

    def samples(**recipe):
        train, val = build_datasets(root, False, 16, 1, seed=0, **recipe)
        outputs = []
        for seed in range(16):
            torch.manual_seed(seed)
            outputs.append(train[0][0])
        return outputs, val[0][0]

    whole, _ = samples(crop_scale=(1.0, 1.0), flip=False)
    assert all(torch.equal(image, whole[0]) for image in whole)
    flipped, _ = samples(crop_scale=(1.0, 1.0))
    assert {torch.equal(image, whole[0]) for image in flipped} == {True, False}
    assert all(
        torch.equal(image, whole[0]) or torch.equal(image, whole[0].flip(-1)) for image in flipped
    )
    reference, _ = samples()  # 0.08-1 of the area: other crops
    assert sum(torch.equal(image, whole[0]) for image in reference) < 4
    plain, val = samples(augment=False)  # the validation transform
    assert all(torch.equal(image, val) for image in plain)


def test_recipe_flags_and_yaml_keys(tmp_path):
    out = ["--dummy", "--output-dir", str(tmp_path)]
    args = parse_args(out)
    assert (tuple(args.crop_scale), args.flip, args.augment) == ((0.08, 1.0), True, True)
    args = parse_args(out + ["--crop-scale", "0.35", "1", "--no-flip"])
    assert (tuple(args.crop_scale), args.flip, args.augment) == ((0.35, 1.0), False, True)
    assert parse_args(out + ["--no-augment"]).augment is False
    config = tmp_path / "recipe.yaml"
    config.write_text("crop-scale: [0.5, 1]\nflip: false\n")
    args = parse_args(out + ["--config", str(config)])
    assert (tuple(args.crop_scale), args.flip) == ((0.5, 1.0), False)
    args = parse_args(out + ["--config", str(config), "--crop-scale", "0.2", "0.9"])
    assert tuple(args.crop_scale) == (0.2, 0.9)  # the command line wins
    config.write_text("augment: false\n")
    assert parse_args(out + ["--config", str(config)]).augment is False


@pytest.mark.parametrize(
    "argv, yaml_text, message",
    [
        (["--crop-scale", "0", "1"], None, "--crop-scale 0 1 must satisfy 0 < MIN <= MAX <= 1"),
        (["--crop-scale", "0.9", "0.5"], None, "--crop-scale 0.9 0.5 must satisfy"),
        (["--crop-scale", "0.5", "1.5"], None, "--crop-scale 0.5 1.5 must satisfy"),
        (
            ["--crop-scale", "0.5", "1", "--no-augment"],
            None,
            "--crop-scale 0.5 1 does nothing with --no-augment",
        ),
        ([], "crop-scale: 0.5\n", "crop-scale: 0.5 is not a list of 2 values, [MIN, MAX]"),
        ([], "crop-scale: [0.5, big]\n", "crop-scale: 'big' is not a number"),
        ([], "flip: no thanks\n", "flip: 'no thanks' is not true or false"),
    ],
)
def test_bad_recipe_values_are_one_usage_error(tmp_path, argv, yaml_text, message):
    if yaml_text is not None:
        (tmp_path / "recipe.yaml").write_text(yaml_text)
        argv = argv + ["--config", str(tmp_path / "recipe.yaml")]
    with pytest.raises(UsageError) as error:
        parse_args(argv + ["--dummy", "--output-dir", str(tmp_path)])
    assert message in str(error.value)


def test_bad_crop_scale_exits_2_with_one_line(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "main.py"),
            "--dummy",
            "--crop-scale",
            "0",
            "1",
            "--output-dir",
            str(tmp_path),
        ],
        env=clean_environ(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: --crop-scale 0 1 must satisfy 0 < MIN <= MAX <= 1 (fractions of the image's area)"
    ]


# --------------------------------------------------------------------- demo data


def test_demo_dataset_tree_and_second_call_is_a_no_op(tmp_path, capsys):
    root = str(tmp_path / "demo")
    assert (
        make_demo_dataset(
            root, num_classes=3, train_per_class=3, val_per_class=2, image_size=32, seed=1
        )
        == root
    )
    assert sorted(os.listdir(root)) == sorted([MARKER, "train", "val"])
    assert sorted(os.listdir(tmp_path)) == ["demo"]  # no temporary folder left behind
    for split, count in (("train", 3), ("val", 2)):
        assert sorted(os.listdir(os.path.join(root, split))) == sorted(SHAPES[:3])
        for shape in SHAPES[:3]:
            files = sorted(os.listdir(os.path.join(root, split, shape)))
            assert len(files) == count and all(name.endswith(".png") for name in files)
    first = os.path.join(
        root, "train", SHAPES[0], os.listdir(os.path.join(root, "train", SHAPES[0]))[0]
    )
    with Image.open(first) as image:
        assert image.size == (32, 32) and image.mode == "RGB"
    before = {
        path: os.stat(os.path.join(dirpath, path)).st_mtime_ns
        for dirpath, _, files in os.walk(root)
        for path in files
    }
    make_demo_dataset(
        root, num_classes=3, train_per_class=3, val_per_class=2, image_size=32, seed=1
    )
    after = {
        path: os.stat(os.path.join(dirpath, path)).st_mtime_ns
        for dirpath, _, files in os.walk(root)
        for path in files
    }
    assert before == after
    train, val = build_datasets(root, False, 24, 3, seed=0)
    assert train.classes == list(SHAPES[:3]) and len(train) == 9 and len(val) == 6
    capsys.readouterr()


def test_demo_dataset_is_deterministic_and_refuses_foreign_folders(tmp_path):
    a = make_demo_dataset(
        str(tmp_path / "a"),
        num_classes=2,
        train_per_class=1,
        val_per_class=1,
        image_size=24,
        seed=7,
    )
    b = make_demo_dataset(
        str(tmp_path / "b"),
        num_classes=2,
        train_per_class=1,
        val_per_class=1,
        image_size=24,
        seed=7,
    )
    name = os.path.join("train", SHAPES[1], f"{SHAPES[1]}_00000.png")
    with Image.open(os.path.join(a, name)) as first, Image.open(os.path.join(b, name)) as second:
        assert np.array_equal(np.array(first), np.array(second))
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("user data")
    with pytest.raises(UsageError, match="not a complete demo dataset"):
        make_demo_dataset(str(foreign), num_classes=2, train_per_class=1, val_per_class=1)
    assert os.listdir(foreign) == ["keep.txt"]


def test_interrupted_generation_leaves_no_dataset(tmp_path, monkeypatch):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".demo.partial-{socket.gethostname()}-{dead.pid}-abc"
    (stale / "train").mkdir(parents=True)
    calls = []

    def failing_render(shape, image_size, rng):
        calls.append(shape)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return Image.new("RGB", (image_size, image_size))

    monkeypatch.setattr(demo_data, "render", failing_render)
    root = str(tmp_path / "demo")
    with pytest.raises(KeyboardInterrupt):
        make_demo_dataset(root, num_classes=2, train_per_class=2, val_per_class=1, image_size=16)
    assert os.listdir(tmp_path) == []  # no root, no partial folder, the stale one removed
    monkeypatch.undo()
    make_demo_dataset(root, num_classes=2, train_per_class=2, val_per_class=1, image_size=16)
    assert os.path.exists(os.path.join(root, MARKER))

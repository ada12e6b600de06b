"""Files main.py reads, made for tests: image folders in the ImageFolder layout and a real
training checkpoint as main.py writes it after epoch 1."""

import os

import torch
from PIL import Image

import models
from trainer import state


def write_image(path, colour=(10, 20, 30), size=(40, 36)):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.new("RGB", size, colour).save(path)


def make_data_dir(root, train=("a", "b"), val=("a", "b"), per_class=2, empty=()):
    """root/{train,val}/<class>/*.png; the classes in `empty` get a folder with no image."""
    for split, classes in (("train", train), ("val", val)):
        for index, name in enumerate(classes):
            os.makedirs(os.path.join(root, split, name), exist_ok=True)
            if (split, name) in empty:
                continue
            for n in range(per_class):
                write_image(os.path.join(root, split, name, f"{n}.png"), (40 * index, 7 * n, 99))
    return str(root)


def write_checkpoint(path, arch="tinynet"):
    """A real training checkpoint, as main.py writes it after epoch 1."""
    model = models.create(arch, num_classes=10)
    optimizer = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9)
    scheduler = state.make_scheduler(optimizer, 1, 0, "step", 2)
    state.save(
        os.path.dirname(path),
        state.checkpoint_state(
            state.Position(1, 0, 12.5),
            arch,
            model,
            optimizer,
            scheduler,
            torch.amp.GradScaler("cpu", enabled=False),
        ),
        True,
    )
    os.replace(os.path.join(os.path.dirname(path), state.CHECKPOINT), path)
    os.unlink(os.path.join(os.path.dirname(path), state.BEST))
    return path

"""The architecture registry: a name -> builder table that the model modules fill in.

A module registers a builder with one decorator::

    @register("tinynet")
    def tinynet(num_classes=1000, **kwargs):
        return TinyNet(num_classes=num_classes, **kwargs)

Every builder takes ``num_classes`` and returns an ``nn.Module``. This module imports no
model module itself, so the model modules can import ``register`` from here freely.
"""

import difflib
import re
from collections.abc import Callable

import torch

from devicekit.errors import UsageError

_BUILDERS: dict[str, Callable[..., torch.nn.Module]] = {}


def register(name):
    """Decorator: record ``builder`` under ``name``; a second builder for a name is a bug."""

    def decorate(builder):
        if name in _BUILDERS:
            raise ValueError(f"architecture {name!r} is registered twice")
        _BUILDERS[name] = builder
        return builder

    return decorate


def _natural_key(name):
    """Sort digits as numbers: resnet18 < resnet34 < resnet50 < resnet101."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def names():
    """The registered architecture names, sorted (numbers in names sort by value)."""
    return sorted(_BUILDERS, key=_natural_key)


def check_name(name, flag=""):
    """Raise :class:`UsageError` unless ``name`` is registered: one line that lists the
    choices (and the closest name, when one is close), naming ``flag`` when it is given."""
    if name not in _BUILDERS:
        choices = names()
        given = f" ({flag} {name})" if flag else ""
        message = f"unknown architecture {name!r}{given}: choose one of {', '.join(choices)}"
        close = difflib.get_close_matches(str(name), choices, n=1)
        if close:
            message += f" (did you mean {close[0]!r}?)"
        raise UsageError(message)


def create(name, num_classes=1000, **kwargs):
    """Build the architecture ``name`` with a ``num_classes``-way classifier head.

    An unknown name, or a class count below 1, raises :class:`UsageError`.
    """
    check_name(name)
    builder = _BUILDERS[name]
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise UsageError(f"num_classes must be a whole number >= 1, got {num_classes!r}")
    return builder(num_classes=num_classes, **kwargs)

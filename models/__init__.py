"""Image classification models behind one registry.

- ``names()``: the architecture names, sorted.
- ``create(name, num_classes=1000, **kwargs)``: build one as an ``nn.Module``.

Every model takes an NCHW float batch of any spatial size >= 32 (they end in adaptive
average pooling) and returns ``(N, num_classes)`` logits. The models never choose where
they run; the caller places them, as with any module.

To add an architecture, decorate its builder with ``@register("name")`` in the module
that defines it, and import that module below.
"""

# Importing the model modules runs their @register decorators.
from models import resnet, small  # noqa: F401
from models.registry import check_name, create, names, register

__all__ = ["check_name", "create", "names", "register"]

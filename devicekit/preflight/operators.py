"""The operators preflight singles out (data-dependent shapes, reads of a value to the host,
sparse gradients) and how a dispatched call is read: its tensors, its arguments."""

from collections.abc import Iterable, Iterator

import torch


def tensors(values: Iterable[object]) -> Iterator[torch.Tensor]:
    """The tensors among `values`, and inside the lists and tuples among them."""
    for value in values:
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from tensors(value)


DATA_DEPENDENT = {
    "aten::nonzero",
    "aten::masked_select",
    "aten::_unique2",
    "aten::unique_dim",
    "aten::unique_consecutive",
    "aten::_unique",
    "aten::repeat_interleave.Tensor",
    "aten::argwhere",
    "aten::nonzero_static",
}
LOCAL_SCALAR = "aten::_local_scalar_dense"
# Operators whose flag makes the gradient a sparse tensor: (the flag, what the user wrote).
SPARSE_GRADIENT = {
    "aten::embedding": ("sparse", "nn.Embedding(sparse=True)"),
    "aten::_embedding_bag": ("sparse", "nn.EmbeddingBag(sparse=True)"),
    "aten::gather": ("sparse_grad", "torch.gather(sparse_grad=True)"),
}


def argument(
    func: torch._ops.OpOverload, args: tuple[object, ...], kwargs: dict[str, object], name: str
) -> object:
    """The value of `func`'s argument `name` in this call (its default when not passed)."""
    if name in kwargs:
        return kwargs[name]
    for position, declared in enumerate(func._schema.arguments):
        if declared.name == name:
            return args[position] if position < len(args) else declared.default_value
    return None


def names_device(args: tuple[object, ...], kwargs: dict[str, object]) -> bool:
    """Whether Tensor.to(*args, **kwargs) names a device (a device, its name or index, or
    a tensor whose device to take), not only a dtype or memory format."""
    first = args[0] if args else kwargs.get("device", kwargs.get("other"))
    return isinstance(first, (str, int, torch.device, torch.Tensor)) and not isinstance(first, bool)

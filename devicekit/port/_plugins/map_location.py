"""Rule `map-location-dict`: where `torch.load` maps a checkpoint's tensors, given as a
dict: `{"cuda:0": f"cuda:{rank}"}` -> `{"cuda:0": str(devicekit.device(rank))}`: the keys
name where tensors were saved and stay; the values say where to load them now (strings, as
torch.load wants in a dict). (`map_location=` itself is a row of keyword_arguments.)
"""

import libcst as cst

from devicekit.port.nodes import (
    NOT_DEVICE,
    parse_device_string,
)
from devicekit.port.rule import Port

RULES = ("map-location-dict",)


def leave_Dict(port: Port, original: cst.Dict, updated: cst.Dict) -> cst.Dict | None:
    """{"cuda:0": f"cuda:{rank}"} -> {"cuda:0": str(devicekit.device(rank))}."""
    pairs = [e for e in updated.elements if isinstance(e, cst.DictElement)]
    if (
        not pairs
        or len(pairs) != len(updated.elements)
        or any(parse_device_string(e.key) is NOT_DEVICE for e in pairs)
    ):
        return None
    elements = []
    for element in pairs:
        target = port.value(element.value, element.value, "string")
        elements.append(element if target is None else element.with_changes(value=target))
    if all(a is b for a, b in zip(elements, pairs, strict=False)):
        return None
    return port.changed(original, "map-location-dict", updated.with_changes(elements=elements))

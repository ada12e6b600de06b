"""Where `torch.load` maps a checkpoint's tensors:

- rule `map-location`: `map_location="cuda:0"` -> `map_location=devicekit.device(0)`, and
  `map_location=lambda storage, loc: storage.cuda(i)` -> `map_location=devicekit.device(i)`;
- rule `map-location-dict`: `{"cuda:0": f"cuda:{rank}"}` -> `{"cuda:0":
  str(devicekit.device(rank))}`: the keys name where tensors were saved and stay; the
  values say where to load them now (strings, as torch.load wants in a dict).
"""

from typing import TYPE_CHECKING

import libcst as cst
import libcst.matchers as m

from devicekit.port._plugins import keyword, leave
from devicekit.port.nodes import (
    NOT_DEVICE,
    is_devicekit_call,
    parse_device_string,
    replace_arg_value,
)

if TYPE_CHECKING:
    from devicekit.port.transformer import PortTransformer


@keyword("map_location", "map-location")
def map_location(
    port: "PortTransformer",
    original: cst.Call,
    updated: cst.Call,
    arg: cst.Arg,
    qualified: set[str],
    method: str | None,
) -> cst.Call | None:
    """map_location="cuda:0" or a lambda that moves each storage -> devicekit.device(...)."""
    value = arg.value
    if isinstance(value, cst.Lambda) and value.params.params:
        # lambda storage, loc: storage.cuda(i) -- by now storage.to(devicekit.device(i))
        body, first = value.body, value.params.params[0].name.value
        if (
            isinstance(body, cst.Call)
            and m.matches(body.func, m.Attribute(value=m.Name(first), attr=m.Name("to")))
            and len(body.args) == 1
            and is_devicekit_call(body.args[0].value, "device")
        ):
            return replace_arg_value(updated, arg, body.args[0].value)
        return None
    return port.port_arg(original, updated, arg, "device")


@leave(cst.Dict)
def map_location_dict(
    port: "PortTransformer", original: cst.Dict, updated: cst.Dict
) -> cst.Dict | None:
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

"""The keyword arguments ported in any call, one row each in KEYWORD_ARGUMENTS:

- rule `backend`: `backend="nccl"` (`init_process_group`, `new_group`, a user's own setup
  function) -> `backend=devicekit.backend()`, "nccl" on a GPU;
- rule `argparse-default`: `parser.add_argument(..., default="nccl")` ->
  `default=devicekit.backend()`, `default="cuda"` -> `default=devicekit.device_type()`:
  the option's default is the device's own, and still a string;
- rule `device-argument`: `torch.zeros(3, device="cuda")` -> `device=devicekit.device()`,
  `device=local_rank` -> `device=devicekit.device(local_rank)` for torch's functions and
  tensor methods; elsewhere (a user's own function may expect the string) the string form,
  `device=devicekit.device_type()`;
- rule `map-location`: `torch.load(..., map_location="cuda:0")` ->
  `map_location=devicekit.device(0)`, and `map_location=lambda storage, loc:
  storage.cuda(i)` -> `map_location=devicekit.device(i)`;
- rule `pin-memory`: `DataLoader(..., pin_memory=True)` ->
  `pin_memory=devicekit.pin_memory()`, and `pin_memory_device="cuda"` (or "npu") ->
  `pin_memory_device=devicekit.device_type()`.
"""

import libcst as cst
import libcst.matchers as m

from devicekit.port.nodes import devicekit_call, is_devicekit_call, replace_arg_value
from devicekit.port.rule import Port

# (keyword, rule id, kind): the rule that ports `keyword=value` in any call, reported as
# the rule id, and what its value becomes, by kind:
# - "name": a device or backend name, still a string ("nccl" -> devicekit.backend(),
#   "cuda" -> devicekit.device_type());
# - "option-default": a "name", in `add_argument(...)` only;
# - "device": a torch.device for torch's functions and tensor methods (a rank-like integer
#   too: devicekit.device(local_rank)), a "name" in any other call;
# - "map-location": a torch.device, also from a lambda that moves each storage there;
# - "pin-memory": True -> devicekit.pin_memory().
KEYWORD_ARGUMENTS = (
    ("backend", "backend", "name"),
    ("default", "argparse-default", "option-default"),
    ("device", "device-argument", "device"),
    ("map_location", "map-location", "map-location"),
    ("pin_memory", "pin-memory", "pin-memory"),
    ("pin_memory_device", "pin-memory", "name"),
)
RULES = tuple(dict.fromkeys(rule for _, rule, _ in KEYWORD_ARGUMENTS))
KEYWORDS = {keyword: rule for keyword, rule, _ in KEYWORD_ARGUMENTS}
_KINDS = {keyword: kind for keyword, _, kind in KEYWORD_ARGUMENTS}

# `device=` on these methods takes a device.
_DEVICE_METHODS = {"to", "new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"}


def on_keyword(
    port: Port,
    original: cst.Call,
    updated: cst.Call,
    arg: cst.Arg,
    qualified: set[str],
    method: str | None,
) -> cst.Call | None:
    """The call with `arg` ported as its row says, or None."""
    assert arg.keyword is not None
    kind = _KINDS[arg.keyword.value]
    if kind == "name" or (kind == "option-default" and method == "add_argument"):
        return port.port_arg(original, updated, arg, "string")
    if kind == "device":
        torch_call = any(q.startswith("torch.") for q in qualified) or method in _DEVICE_METHODS
        return port.port_arg(
            original, updated, arg, "device" if torch_call else "string", allow_int=torch_call
        )
    if kind == "map-location":
        return _map_location(port, original, updated, arg)
    if kind == "pin-memory" and m.matches(arg.value, m.Name("True")):
        return replace_arg_value(updated, arg, devicekit_call("pin_memory"))
    return None


def _map_location(
    port: Port, original: cst.Call, updated: cst.Call, arg: cst.Arg
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

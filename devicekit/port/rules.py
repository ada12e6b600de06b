"""The rewrites: one libcst transformer that ports CUDA-only idioms onto devicekit.

Every rewrite keeps what the script computes on a GPU: `x.cuda(i)` becomes
`x.to(devicekit.device(i))` (cuda:i there), `backend="nccl"` becomes
`devicekit.backend()` ("nccl" there), `torch.cuda.amp.autocast()` becomes
`devicekit.autocast(enabled=True)` (float16 autocast there). Strings stay strings
(`device = "cuda"` becomes `devicekit.device_type()`, "cuda" on a GPU) and devices stay
devices. What has no portable equivalent is left alone and reported (see names.MANUAL).

Rules match on the original tree (qualified names come from its metadata) and build from
the updated one, so nested rewrites compose: `torch.device("cuda" if
torch.cuda.is_available() else "cpu")` ends as `devicekit.device()`.
"""

from typing import Dict, List, Optional, Set, Tuple, Union

import libcst as cst
from libcst.metadata import ParentNodeProvider, PositionProvider, QualifiedNameProvider

from devicekit.port import names
from devicekit.port.facts import Facts
from devicekit.port.nodes import (
    NOT_DEVICE, bound_args, code, device_call, device_str, devicekit_call, is_devicekit_call,
    keyword, parse_device_string, replace_arg_value, string_value, with_arg_after,
    without_args)
from devicekit.port.report import Change, Info, Manual

# `device=` on these methods takes a device (elsewhere a user's own function may expect
# the string, so it gets the string form).
_DEVICE_METHODS = {"to", "new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"}
_TRUE = cst.Name("True")
_KEYWORD_RULES = {"device": "device-argument", "map_location": "map-location",
                  "backend": "backend", "default": "argparse-default", "pin_memory": "pin-memory"}


def _is_name(node: cst.CSTNode, value: str) -> bool:
    return isinstance(node, cst.Name) and node.value == value


def _method(call: cst.Call) -> Optional[str]:
    return call.func.attr.value if isinstance(call.func, cst.Attribute) else None


def _short(text: str, limit: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


class PortTransformer(cst.CSTTransformer):
    """Ports one module; `changes`, `manual` and `info` say what it did and left."""

    METADATA_DEPENDENCIES = (QualifiedNameProvider, PositionProvider, ParentNodeProvider)

    def __init__(self, module: cst.Module, facts: Facts):
        super().__init__()
        self.module, self.facts = module, facts
        # id(original node) -> (line, rule, before, after, id()s of its ancestors)
        self._rewrites: Dict[int, Tuple[int, str, str, str, List[int]]] = {}
        self._manual: Dict[Tuple[int, str], Manual] = {}
        self._info: Dict[Tuple[int, str], Info] = {}

    # -- bookkeeping -----------------------------------------------------------------

    def qualified(self, node: cst.CSTNode) -> Set[str]:
        """The qualified names `node` may refer to."""
        return {q.name for q in self.get_metadata(QualifiedNameProvider, node, set())}

    def _line(self, node: cst.CSTNode) -> int:
        return self.get_metadata(PositionProvider, node).start.line

    def _changed(self, original: cst.CSTNode, rule: str, updated: cst.CSTNode) -> cst.CSTNode:
        ancestors = []
        parent = self.get_metadata(ParentNodeProvider, original, None)
        while parent is not None:
            ancestors.append(id(parent))
            parent = self.get_metadata(ParentNodeProvider, parent, None)
        self._rewrites[id(original)] = (self._line(original), rule,
                                        self.module.code_for_node(original), code(updated),
                                        ancestors)
        return updated

    def _report(self, original: cst.CSTNode, why_fix: Tuple[str, str]) -> None:
        construct = _short(self.module.code_for_node(original))
        line = self._line(original)
        self._manual.setdefault((line, construct), Manual(line, construct, *why_fix))

    def _keep(self, original: cst.CSTNode, note: str) -> None:
        construct = _short(self.module.code_for_node(original))
        line = self._line(original)
        self._info.setdefault((line, construct), Info(line, construct, note))

    def changes(self) -> List[Change]:
        """One Change per outermost rewritten node; nested rewrites add their rule ids."""
        outer: Dict[int, Change] = {}
        nested: List[Tuple[int, str]] = []
        for key, (line, rule, before, after, ancestors) in self._rewrites.items():
            rewritten = [a for a in ancestors if a in self._rewrites]
            if rewritten:
                nested.append((rewritten[-1], rule))  # the outermost one
            else:
                outer[key] = Change(line, rule, before, after, [rule])
        for ancestor, rule in nested:
            outer[ancestor].rules.append(rule)
        return sorted(outer.values(), key=lambda c: c.line)

    def manual(self) -> List[Manual]:
        """Constructs left alone that need a change by hand, by line."""
        return sorted(self._manual.values(), key=lambda m: m.line)

    def info(self) -> List[Info]:
        """Constructs kept on purpose, by line."""
        return sorted(self._info.values(), key=lambda i: i.line)

    # -- values: device strings, backends, ranks ------------------------------------

    def _value(self, original: cst.BaseExpression, updated: cst.BaseExpression, want: str,
               allow_int: bool = False) -> Optional[cst.BaseExpression]:
        """The ported form of a value in a position that wants a "device" (torch.device),
        a "string" (a device or backend name) or a "backend"; None when nothing to port."""
        index = parse_device_string(updated)
        if index is not NOT_DEVICE and want != "backend":
            return device_call(index) if want == "device" else device_str(index)
        if string_value(updated) == "nccl" and want != "device":
            return devicekit_call("backend")
        if want == "device" and updated is not original:
            # a string form made inside this value (the IfExp idiom) in a device position
            if is_devicekit_call(updated, "device_type") and not updated.args:
                return device_call(None)
            if isinstance(updated, cst.Call) and _is_name(updated.func, "str") and \
                    len(updated.args) == 1 and is_devicekit_call(updated.args[0].value, "device"):
                return updated.args[0].value
        if want == "device" and allow_int and self.facts.holds_rank(updated):
            return device_call(updated)
        return None

    def _port_arg(self, original: cst.Call, updated: cst.Call, arg: cst.Arg, want: str,
                  allow_int: bool = False) -> Optional[cst.Call]:
        position = next(i for i, a in enumerate(updated.args) if a is arg)
        value = self._value(original.args[position].value, arg.value, want, allow_int)
        return None if value is None else replace_arg_value(updated, arg, value)

    def leave_IfExp(self, original_node: cst.IfExp, updated_node: cst.IfExp
                    ) -> cst.BaseExpression:
        body = self._value(original_node.body, updated_node.body, "string")
        orelse = self._value(original_node.orelse, updated_node.orelse, "string")
        if body is None and orelse is None:
            return updated_node
        fallback = string_value(updated_node.orelse)
        accelerated = is_devicekit_call(updated_node.test, "is_available")
        if body is not None and orelse is None and accelerated and fallback in ("cpu", "gloo"):
            # "cuda" if torch.cuda.is_available() else "cpu": the device's own answer
            return self._changed(original_node, "device-if-available", body)
        return self._changed(original_node, "device-string", updated_node.with_changes(
            body=body or updated_node.body, orelse=orelse or updated_node.orelse))

    def _assigned(self, original, updated, rule="device-string"):
        if updated.value is None:
            return updated
        value = self._value(original.value, updated.value, "string")
        return updated if value is None else self._changed(
            original, rule, updated.with_changes(value=value))

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign
                     ) -> Union[cst.Assign, cst.Expr]:
        environ = self._launcher_variable(original_node)
        if environ is not None:
            target = updated_node.targets[0].target
            setdefault = cst.Call(
                func=cst.Attribute(value=target.value, attr=cst.Name("setdefault")),
                args=[cst.Arg(target.slice[0].slice.value,
                              comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                      cst.Arg(updated_node.value)])
            return self._changed(original_node, "master-env-setdefault",
                                 cst.Expr(setdefault, semicolon=updated_node.semicolon))
        return self._assigned(original_node, updated_node)

    def _launcher_variable(self, node: cst.Assign) -> Optional[str]:
        """"MASTER_ADDR"/"MASTER_PORT" for `os.environ[...] = value`, else None."""
        if len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Subscript):
            return None
        target = node.targets[0].target
        environ = names.OS_ENVIRON in self.qualified(target.value) or \
            code(target.value) == names.OS_ENVIRON
        if not environ or len(target.slice) != 1 or \
                not isinstance(target.slice[0].slice, cst.Index):
            return None
        key = string_value(target.slice[0].slice.value)
        return key if key in names.LAUNCHER_OWNED else None

    def leave_AnnAssign(self, original_node: cst.AnnAssign, updated_node: cst.AnnAssign
                        ) -> cst.AnnAssign:
        return self._assigned(original_node, updated_node)

    def leave_Return(self, original_node: cst.Return, updated_node: cst.Return) -> cst.Return:
        return self._assigned(original_node, updated_node)

    def leave_Param(self, original_node: cst.Param, updated_node: cst.Param) -> cst.Param:
        if updated_node.default is None:
            return updated_node
        value = self._value(original_node.default, updated_node.default, "string")
        return updated_node if value is None else self._changed(
            original_node, "device-string", updated_node.with_changes(default=value))

    def leave_Comparison(self, original_node: cst.Comparison, updated_node: cst.Comparison
                         ) -> cst.Comparison:
        operands = [original_node.left] + [c.comparator for c in original_node.comparisons]
        if any(parse_device_string(o) is not NOT_DEVICE or string_value(o) == "nccl"
               for o in operands):
            self._keep(original_node, "a comparison with a CUDA name is kept: it is simply "
                                      "false on other devices; check the branch it guards")
        return updated_node

    # -- torch.cuda names that are not called here, imports, decorators -------------

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def leave_Import(self, original_node: cst.Import, updated_node: cst.Import) -> cst.Import:
        for alias in original_node.names:
            self._manual_import(original_node, code(alias.name))
        return updated_node

    def leave_ImportFrom(self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom
                         ) -> cst.ImportFrom:
        if original_node.module is not None and not original_node.relative:
            self._manual_import(original_node, code(original_node.module))
        return updated_node

    def _manual_import(self, node, module: str) -> None:
        if module.split(".")[0] in names.MANUAL_IMPORTS:
            self._report(node, names.manual_reason(module))

    def leave_Decorator(self, original_node: cst.Decorator, updated_node: cst.Decorator
                        ) -> cst.Decorator:
        target = original_node.decorator
        target = target.func if isinstance(target, cst.Call) else target
        for name in self.qualified(target):
            if name.split(".")[0] in names.MANUAL_IMPORTS:
                self._report(original_node, names.manual_reason(name))
        return updated_node

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute
                        ) -> cst.BaseExpression:
        return self._reference(original_node, updated_node)

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        parent = self.get_metadata(ParentNodeProvider, original_node, None)
        if isinstance(parent, cst.Attribute) and parent.attr is original_node:
            return updated_node
        return self._reference(original_node, updated_node)

    def _reference(self, original, updated):
        """A torch.cuda / torch.backends name, at the end of its attribute chain."""
        parent = self.get_metadata(ParentNodeProvider, original, None)
        if isinstance(parent, cst.Attribute) and parent.value is original:
            return updated  # not the end of the chain: `torch.cuda` in `torch.cuda.amp`
        called = isinstance(parent, cst.Call) and parent.func is original
        for name in self.qualified(original):
            note = names.harmless_note(name)
            if note:
                self._keep(self._statement_of(original), f"kept, harmless: {note}")
            if not name.startswith("torch.cuda."):
                continue
            short = name[len("torch.cuda."):]
            if called and (short in names.DEVICEKIT_FUNCTIONS or name in names.AUTOCAST
                           or name in names.CUDA_GRAD_SCALER):
                continue  # leave_Call ports it with its arguments
            if short in names.DEVICEKIT_FUNCTIONS:
                return self._changed(original, "torch-cuda-api", cst.Attribute(
                    value=cst.Name("devicekit"), attr=cst.Name(short)))
            if name == names.OUT_OF_MEMORY and isinstance(updated, cst.Attribute) and \
                    isinstance(updated.value, cst.Attribute) and \
                    _is_name(updated.value.value, "torch"):
                return self._changed(original, "out-of-memory-error",
                                     updated.with_changes(value=cst.Name("torch")))
            self._report(parent if called else original, names.manual_reason(name))
        return updated

    def _statement_of(self, node: cst.CSTNode) -> cst.CSTNode:
        while True:
            parent = self.get_metadata(ParentNodeProvider, node, None)
            if parent is None or isinstance(parent, (cst.SimpleStatementLine,
                                                     cst.BaseCompoundStatement)):
                return node
            node = parent

    # -- calls ------------------------------------------------------------------------

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        qualified = self.qualified(original_node.func)
        method = _method(original_node)
        for matches, rule in self._CALL_RULES:
            if matches(self, qualified, method):
                result = rule(self, original_node, updated_node, qualified)
                if result is not None:
                    return result
                break
        for name in qualified:
            reason = names.manual_reason(name)
            if reason and not name.startswith("torch.cuda."):  # torch.cuda: _reference
                self._report(original_node, reason)
        result, rule = self._keywords(original_node, updated_node, qualified, method)
        return updated_node if rule is None else self._changed(original_node, rule, result)

    def _keywords(self, original, updated, qualified, method):
        """`updated` with the keyword arguments that name a device, a backend or pinned
        memory ported (any call: DataLoader(pin_memory=True), torch.load(map_location=...),
        torch.zeros(..., device="cuda"), add_argument(default="nccl"), ...), and the rule
        of the first one ported (None: nothing was)."""
        result, rule = updated, None
        torch_call = any(q.startswith("torch.") for q in qualified) or method in _DEVICE_METHODS
        for arg in updated.args:
            name = arg.keyword.value if arg.keyword is not None else None
            ported = None
            if name == "device":
                ported = self._port_arg(original, result, arg, "device" if torch_call
                                        else "string", allow_int=torch_call)
            elif name == "map_location":
                ported = self._map_location(original, result, arg)
            elif name == "backend" or (name == "default" and method == "add_argument"):
                ported = self._port_arg(original, result, arg, "string")
            elif name == "pin_memory" and _is_name(arg.value, "True"):
                ported = replace_arg_value(result, arg, devicekit_call("pin_memory"))
            if ported is not None:
                result, rule = ported, rule or _KEYWORD_RULES[name]
        return result, rule

    def leave_Dict(self, original_node: cst.Dict, updated_node: cst.Dict) -> cst.Dict:
        """{"cuda:0": f"cuda:{rank}"} (a map_location): the keys name where tensors were
        saved and stay; the values say where to load them now (strings, as torch.load
        wants in a dict)."""
        pairs = [e for e in updated_node.elements if isinstance(e, cst.DictElement)]
        if not pairs or len(pairs) != len(updated_node.elements) or any(
                parse_device_string(e.key) is NOT_DEVICE for e in pairs):
            return updated_node
        elements = []
        for element in pairs:
            target = self._value(element.value, element.value, "string")
            elements.append(element if target is None else element.with_changes(value=target))
        if all(a is b for a, b in zip(elements, pairs)):
            return updated_node
        return self._changed(original_node, "map-location-dict",
                             updated_node.with_changes(elements=elements))

    def _map_location(self, original, updated, arg):
        value = arg.value
        if isinstance(value, cst.Lambda) and value.params.params:
            # lambda storage, loc: storage.cuda(i) -- by now storage.to(devicekit.device(i))
            body, first = value.body, value.params.params[0].name.value
            if isinstance(body, cst.Call) and _method(body) == "to" and \
                    _is_name(body.func.value, first) and len(body.args) == 1 and \
                    is_devicekit_call(body.args[0].value, "device"):
                return replace_arg_value(updated, arg, body.args[0].value)
            return None
        return self._port_arg(original, updated, arg, "device")

    def _cuda_method(self, original, updated, qualified):
        """x.cuda(), x.cuda(i), x.cuda(i, non_blocking=True) -> x.to(devicekit.device(i), ...)."""
        bound = bound_args(updated, ("device", "non_blocking", "memory_format"))
        if len(bound) != len(updated.args):
            self._report(original, names.REASONS["cuda-args"])
            return updated
        index = bound.get("device")
        parsed = NOT_DEVICE if index is None else parse_device_string(index.value)
        if index is None or _is_name(index.value, "None"):
            target = device_call(None)
        elif parsed is not NOT_DEVICE:
            target = device_call(parsed)  # x.cuda("cuda:1")
        elif self.facts.holds_device(index.value):
            target = index.value  # x.cuda(device) with device = torch.device(...)
        else:
            target = device_call(index.value)
        rest = [keyword(name, bound[name].value) if bound[name].keyword is None
                else bound[name].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                for name in ("non_blocking", "memory_format") if name in bound]
        args = [cst.Arg(target)] + rest
        args = [a.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
                for a in args[:-1]] + args[-1:]
        spacing = {} if updated.args else {"whitespace_before_args": cst.SimpleWhitespace("")}
        return self._changed(original, "cuda-method", updated.with_changes(
            func=updated.func.with_changes(attr=cst.Name("to")), args=args, **spacing))

    def _to_method(self, original, updated, qualified):
        """x.to("cuda"), x.to(f"cuda:{i}"), x.to(local_rank) -> x.to(devicekit.device(...))."""
        for position, arg in enumerate(updated.args):
            if (arg.keyword is None and position == 0) or \
                    (arg.keyword is not None and arg.keyword.value == "device"):
                ported = self._port_arg(original, updated, arg, "device", allow_int=True)
                if ported is not None:
                    return self._changed(original, "to-device", ported)
        return None

    def _pin_memory_method(self, original, updated, qualified):
        """x.pin_memory() -> (x.pin_memory() if devicekit.pin_memory() else x)."""
        receiver = updated.func.value
        parent = self.get_metadata(ParentNodeProvider, original, None)
        if updated.args or _is_name(receiver, "devicekit") or (
                isinstance(parent, cst.IfExp) and is_devicekit_call(parent.test, "pin_memory")):
            return None  # ported already
        if not isinstance(receiver, (cst.Name, cst.Attribute)):
            self._report(original, names.REASONS["pin-memory-call"])
            return updated
        return self._changed(original, "pin-memory-call", cst.IfExp(
            test=devicekit_call("pin_memory"), body=updated, orelse=receiver,
            lpar=[cst.LeftParen()], rpar=[cst.RightParen()]))

    def _add_argument(self, original, updated, qualified):
        """parser.add_argument("--local_rank", ...) also accepts "--local-rank" (and the
        other way round): torch.distributed.launch passes one, older docs the other."""
        flags = {string_value(a.value): a for a in updated.args if a.keyword is None}
        present = [f for f in names.LOCAL_RANK_FLAGS if f in flags]
        if len(present) != 1 or set(names.LOCAL_RANK_FLAGS) <= self.facts.flags:
            return None
        missing = next(f for f in names.LOCAL_RANK_FLAGS if f not in flags)
        result, _ = self._keywords(original, updated, qualified, "add_argument")
        anchor = next(a for a in result.args
                      if a.keyword is None and string_value(a.value) == present[0])
        alias = cst.Arg(cst.SimpleString(f"{anchor.value.quote}{missing}{anchor.value.quote}"))
        return self._changed(original, "local-rank-alias", with_arg_after(result, anchor, alias))

    def _torch_device(self, original, updated, qualified):
        """torch.device("cuda"), torch.device("cuda", i), torch.device(f"cuda:{i}"),
        torch.device(local_rank) -> devicekit.device(...)."""
        bound = bound_args(updated, names.TORCH_DEVICE_PARAMS)
        kind = bound.get("type")
        if kind is None or len(bound) != len(updated.args):
            return None
        if "index" in bound:
            if parse_device_string(kind.value) is None:
                return self._changed(original, "torch-device", device_call(bound["index"].value))
            return None
        position = next(i for i, a in enumerate(updated.args) if a is kind)
        # torch.device(0) is cuda:0; a name passed to torch.device may hold a device already
        value = self._value(original.args[position].value, kind.value, "device",
                            allow_int=isinstance(kind.value, cst.Integer))
        if value is None:
            return None
        return self._changed(original, "torch-device", value)

    def _first_arg_device(self, original, updated, qualified):
        """torch.set_default_device("cuda") -> torch.set_default_device(devicekit.device())."""
        if not updated.args or updated.args[0].keyword is not None:
            return None
        ported = self._port_arg(original, updated, updated.args[0], "device")
        return None if ported is None else self._changed(original, "device-argument", ported)

    def _autocast(self, original, updated, qualified):
        """torch.cuda.amp.autocast(...), torch.autocast("cuda", ...) -> devicekit.autocast(
        enabled=..., dtype=...), on (enabled=True) unless the script said otherwise."""
        params = (names.AUTOCAST_PARAMS if qualified & names.AUTOCAST
                  else names.DEVICE_AUTOCAST_PARAMS)
        bound = bound_args(updated, params)
        if len(bound) != len(updated.args):
            self._report(original, names.REASONS["autocast-args"])
            return updated
        if params is names.DEVICE_AUTOCAST_PARAMS:
            device = bound.get("device_type")
            if device is None or not (parse_device_string(device.value) is None or (
                    is_devicekit_call(device.value, "device_type")
                    and device.value is not original.args[0].value)):
                return None
        if "cache_enabled" in bound:
            self._report(original, names.REASONS["autocast-args"])
            return updated
        args = [keyword("enabled", bound["enabled"].value if "enabled" in bound else _TRUE)]
        if "dtype" in bound:
            args.append(keyword("dtype", bound["dtype"].value))
        return self._changed(original, "autocast", devicekit_call("autocast", *args))

    def _grad_scaler(self, original, updated, qualified):
        """torch.cuda.amp.GradScaler(...), torch.amp.GradScaler("cuda", ...) ->
        devicekit.GradScaler(enabled=True, ...): a real scaler on a GPU, as before."""
        cuda_only = bool(qualified & names.CUDA_GRAD_SCALER)
        params = names.CUDA_GRAD_SCALER_PARAMS if cuda_only else names.DEVICE_GRAD_SCALER_PARAMS
        bound = bound_args(updated, params)
        if len(bound) != len(updated.args):
            self._report(original, names.REASONS["grad-scaler-args"])
            return updated
        device = bound.pop("device", None)
        if device is not None and parse_device_string(device.value) is not None:
            return None
        args = [keyword("enabled", bound["enabled"].value if "enabled" in bound else _TRUE)]
        args += [keyword(name, bound[name].value) for name in params
                 if name in bound and name != "enabled"]
        return self._changed(original, "grad-scaler", devicekit_call("GradScaler", *args))

    def _init_process_group(self, original, updated, qualified):
        """init_process_group("nccl", ...) -> init_process_group(devicekit.backend(), ...):
        the script's own rank, world size and init_method are kept; a `device_id=` (which
        must be an accelerator) is passed only where there is one."""
        result = updated
        if updated.args and updated.args[0].keyword is None:
            result = self._port_arg(original, updated, updated.args[0], "backend") or updated
        result = self._keywords(original, result, qualified, None)[0]
        result = self._accelerator_only(result, {"device_id": bound_args(result, ()).get(
            "device_id")})
        return None if result is updated else self._changed(original, "init-process-group",
                                                            result)

    def _ddp(self, original, updated, qualified):
        """DDP(model, device_ids=[i], output_device=i): the same ids where there is an
        accelerator, none on a CPU (where DDP refuses them)."""
        bound = bound_args(updated, names.DDP_PARAMS)
        result = self._accelerator_only(updated, {name: bound.get(name)
                                                  for name in ("device_ids", "output_device")})
        if result is updated:
            return None
        return self._changed(original, "ddp-device-ids",
                             self._keywords(original, result, qualified, None)[0])

    @staticmethod
    def _accelerator_only(call: cst.Call, args: Dict[str, Optional[cst.Arg]]) -> cst.Call:
        """`call` with each of `args` (if given and not None already) passed as
        `value if devicekit.is_available() else None`."""
        for arg in args.values():
            if not arg or _is_name(arg.value, "None") or isinstance(arg.value, cst.IfExp):
                continue
            guarded = cst.IfExp(test=devicekit_call("is_available"), body=arg.value,
                                orelse=cst.Name("None"))
            call = replace_arg_value(call, arg, guarded)
        return call

    def _spawn(self, original, updated, qualified):
        """mp.spawn(fn, args=..., nprocs=torch.cuda.device_count()) -> devicekit.launch(fn,
        args=...): the same ranks without a launcher, one rank here under torchrun & co."""
        bound = bound_args(updated, names.SPAWN_PARAMS)
        if "fn" not in bound:
            return None
        join, daemon, method = (bound.get(n) for n in ("join", "daemon", "start_method"))
        if (join is not None and not _is_name(join.value, "True")) or \
                (daemon is not None and not _is_name(daemon.value, "False")) or \
                (method is not None and string_value(method.value) != "spawn"):
            self._report(original, names.REASONS["spawn-args"])
            return updated
        removed = [a for a in (join, daemon, method) if a is not None]
        nprocs = bound.get("nprocs")
        if nprocs is not None:
            position = next(i for i, a in enumerate(updated.args) if a is nprocs)
            count = original.args[position].value
            if isinstance(count, cst.Call) and \
                    names.DEVICE_COUNT in self.qualified(count.func):
                removed.append(nprocs)  # launch's default: one rank per device
        result = without_args(updated, removed).with_changes(
            func=cst.Attribute(value=cst.Name("devicekit"), attr=cst.Name("launch")))
        if nprocs is None:
            result = result.with_changes(args=list(result.args[:-1]) + [
                result.args[-1].with_changes(
                    comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                keyword("nprocs", cst.Integer("1"))])
        return self._changed(original, "spawn-launch", result)

    def _destroy(self, original, updated, qualified):
        """destroy_process_group() -> devicekit.destroy_process_group(): the same, and it
        lets gloo's worker threads finish before the interpreter exits (else a finished
        CPU run can still abort at exit)."""
        if updated.args:
            return None
        return self._changed(original, "destroy-process-group",
                             devicekit_call("destroy_process_group"))

    def _torch_cuda_call(self, original, updated, qualified):
        """torch.cuda.synchronize() & co. -> devicekit.synchronize() (same arguments)."""
        short = next(q for q in qualified if q.startswith("torch.cuda."))[len("torch.cuda."):]
        takes = names.DEVICEKIT_FUNCTIONS[short]
        if len(updated.args) > takes or any(a.keyword or a.star for a in updated.args):
            self._report(original, names.REASONS["arguments"])
            return updated
        args = list(updated.args)
        if short == "set_device" and args:
            index = parse_device_string(args[0].value)
            if index is not NOT_DEVICE and index is not None:
                args[0] = args[0].with_changes(value=index)  # set_device(f"cuda:{i}")
        if short == "device_count" and id(original) in self.facts.spawn_counts:
            short = "default_ranks_per_node"  # it sizes an mp.spawn: ranks, not devices
        return self._changed(original, "torch-cuda-api", updated.with_changes(
            func=cst.Attribute(value=cst.Name("devicekit"), attr=cst.Name(short)), args=args))

    @staticmethod
    def _is_torch_cuda_function(qualified):
        return any(q.startswith("torch.cuda.") and q[len("torch.cuda."):]
                   in names.DEVICEKIT_FUNCTIONS for q in qualified)

    _CALL_RULES = [
        (lambda self, q, m: m == "cuda" and "torch.cuda" not in q, _cuda_method),
        (lambda self, q, m: m == "to", _to_method),
        (lambda self, q, m: m == "pin_memory" and "devicekit.pin_memory" not in q,
         _pin_memory_method),
        (lambda self, q, m: m == "add_argument", _add_argument),
        (lambda self, q, m: bool(q & names.TORCH_DEVICE), _torch_device),
        (lambda self, q, m: bool(q & names.SET_DEFAULT_DEVICE), _first_arg_device),
        (lambda self, q, m: bool(q & (names.AUTOCAST | names.DEVICE_AUTOCAST)), _autocast),
        (lambda self, q, m: bool(q & (names.CUDA_GRAD_SCALER | names.DEVICE_GRAD_SCALER)),
         _grad_scaler),
        (lambda self, q, m: bool(q & names.INIT_PROCESS_GROUP), _init_process_group),
        (lambda self, q, m: bool(q & names.DDP), _ddp),
        (lambda self, q, m: bool(q & names.SPAWN), _spawn),
        (lambda self, q, m: bool(q & names.DESTROY), _destroy),
        (lambda self, q, m: self._is_torch_cuda_function(q), _torch_cuda_call),
    ]

"""What a first pass over a script learns before anything is rewritten.

- Which names hold a rank or device index (so `x.to(gpu_id)` can be ported): by name
  (local_rank, gpu, device_id, ...), by what was assigned (`int(os.environ["LOCAL_RANK"])`,
  `dist.get_rank()`), and the first parameter of an `mp.spawn` target. Names assigned a
  torch.device or a string are never taken for integers.
- Which `torch.cuda.device_count()` calls size an `mp.spawn` (`nprocs=world_size` with
  `world_size = torch.cuda.device_count()`, or a world size given in its `args=`): they
  become `devicekit.default_ranks_per_node()`, the number of ranks `devicekit.launch()`
  starts (one per device on a GPU, as before).

- Which function parameters hold a rank because every call of the function in this file
  passes one (`calc_loss_batch(x, y, model, rank)` makes `device` in
  `def calc_loss_batch(x, y, model, device)` a rank, so its `x.to(device)` is ported), to a
  fixed point, so a rank passed on through several functions is followed.

Other names are matched across the whole module, not per scope: a script that reuses one
name for a rank and for a device object is left alone rather than guessed at.
"""

import re
from collections import defaultdict

import libcst as cst
from libcst.metadata import (
    ExpressionContext,
    ExpressionContextProvider,
    FunctionScope,
    QualifiedNameProvider,
    ScopeProvider,
)

from devicekit.port import names
from devicekit.port.nodes import ACCELERATOR_TYPES, bound_args, code, string_value

# Rank-like integers: `x.to(local_rank)` means `x.to("cuda:<local_rank>")`.
_RANK_LIKE = re.compile(
    r"^(ddp_|global_|local_)?(rank|gpu|gpus?_?id|gpu_?idx|gpu_?index|npu|npu_?id|npu_?idx"
    r"|npu_?index|device_?id|device_?idx|device_?index|dev_?id|local_?rank|local_?gpu"
    r"|local_?npu|local_?device)$"
)
# Calls whose integer result is a rank or a device index.
_RANK_SOURCES = {
    "torch.distributed.get_rank",
    "torch.distributed.get_node_local_rank",
    "torch.cuda.current_device",
    "devicekit.rank",
    "devicekit.local_rank",
    "devicekit.current_device",
}
_RANK_VARIABLES = {
    "RANK",
    "LOCAL_RANK",
    "RANK_ID",
    "SLURM_LOCALID",
    "SLURM_PROCID",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_RANK",
    "ASCEND_DEVICE_ID",
    "DEVICE_ID",
    "NPU_CALCULATE_DEVICE",
}


def _is_rank_like(name: str) -> bool:
    """Whether a variable or attribute called `name` conventionally holds a rank or a
    device index (local_rank, gpu, gpu_id, device_id, rank, ...)."""
    return bool(_RANK_LIKE.match(name.lower()))


def _target_name(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return node.attr.value
    return None


def _dest(call: cst.Call) -> str | None:
    """The attribute an argparse add_argument call stores into."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "dest":
            return string_value(arg.value)
    flags = [string_value(arg.value) for arg in call.args if arg.keyword is None]
    longs = [f for f in flags if f and f.startswith("--")]
    first = longs[0] if longs else (flags[0] if flags else None)
    return first.lstrip("-").replace("-", "_") if first else None


class Facts(cst.BatchableCSTVisitor):
    """Collects assignments by name and the spawn calls of one module."""

    METADATA_DEPENDENCIES = (ExpressionContextProvider, QualifiedNameProvider, ScopeProvider)

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, list[cst.BaseExpression]] = defaultdict(list)
        self.kinds: dict[str, set[str]] = defaultdict(set)  # name -> {"device", "rank"}
        self.rank_params: set[str] = set()
        self.spawn_counts: set[int] = set()  # id() of device_count() calls sizing a spawn
        self.flags: set[str] = set()  # every option string given to add_argument
        self._spawned: list[cst.Call] = []
        self._functions: dict[str, cst.FunctionDef] = {}
        # calls of a plain name (that name, the call): maybe a function here
        self._calls: list[tuple[str, cst.Call]] = []
        self._plain_functions: dict[str, cst.FunctionDef] = {}
        self._defined_twice: set[str] = set()  # and method names: calls are not followed
        # id() of a Name that can only be a function's parameter -> (id(function), param)
        self._parameter_of: dict[int, tuple[int, str]] = {}
        self.rank_parameters: set[tuple[int, str]] = set()
        self.compared_kinds: set[str] = set()  # "cuda", "npu": what comparisons name
        self.names_a_scaler = False  # a name with "scaler" in it, or apex's scale_loss
        self.names_backward = False  # `.backward`: the file trains, not only evaluates
        # `self` where the script sets `self.is_cuda = ...`: its own flag, not a tensor's
        self.own_device_flags: set[str] = set()
        self._rank_calls: set[int] = set()  # id() of calls that give a rank

    def qualified(self, node: cst.CSTNode) -> set[str]:
        """The qualified names `node` may refer to, with the CUDA twins of Ascend names."""
        return names.with_twins(
            {q.name for q in self.get_metadata(QualifiedNameProvider, node, set())}
        )

    def _assigned(self, name: str | None, value: cst.BaseExpression) -> None:
        if name:
            self.values[name].append(value)
            if self._is_device_object(value):
                self.kinds[name].add("device")
            alias = _target_name(value)
            if self._is_rank_source(value) or (  # device = rank: an alias of a rank
                alias is not None and _is_rank_like(alias)
            ):
                self.kinds[name].add("rank")

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._assigned(_target_name(target.target), node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._assigned(_target_name(node.target), node.value)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._functions.setdefault(node.name.value, node)
        if isinstance(self.get_metadata(ScopeProvider, node, None), cst.metadata.ClassScope):
            self._defined_twice.add(node.name.value)  # a method: not called by a plain name
        elif node.name.value in self._plain_functions:
            self._defined_twice.add(node.name.value)
        self._plain_functions[node.name.value] = node

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value in ("is_cuda", "is_npu") and self.get_metadata(
            ExpressionContextProvider, node, None
        ) in (ExpressionContext.STORE, ExpressionContext.DEL):
            self.own_device_flags.add(code(node.value))

    def visit_Comparison(self, node: cst.Comparison) -> None:
        for operand in [node.left] + [c.comparator for c in node.comparisons]:
            kind = string_value(operand)
            if kind is not None and kind in ACCELERATOR_TYPES:
                self.compared_kinds.add(kind)

    def visit_Name(self, node: cst.Name) -> None:
        if "scaler" in node.value.lower() or node.value == "scale_loss":
            self.names_a_scaler = True
        self.names_backward |= node.value == "backward"
        scope = self.get_metadata(ScopeProvider, node, None)
        if scope is None or node.value not in scope:
            return
        assignments = list(scope[node.value])  # of this scope, or one it is nested in
        owners = {id(a.scope) for a in assignments}
        owner = assignments[0].scope if len(owners) == 1 else None
        if isinstance(owner, FunctionScope) and all(
            isinstance(a, cst.metadata.Assignment) and isinstance(a.node, cst.Param)
            for a in assignments
        ):
            self._parameter_of[id(node)] = (id(owner.node), node.value)

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Name):
            self._calls.append((node.func.value, node))
        if self._is_rank_source(node):  # x.to(int(os.environ["LOCAL_RANK"])), written inline
            self._rank_calls.add(id(node))
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "add_argument":
            dest = _dest(node)
            flags = (string_value(a.value) for a in node.args if a.keyword is None)
            self.flags.update(flag for flag in flags if flag is not None)
            for arg in node.args:
                if arg.keyword is not None and arg.keyword.value == "default":
                    self._assigned(dest, arg.value)
        if self.qualified(node.func) & (names.SPAWN | {"devicekit.launch"}):
            self._spawned.append(node)

    def leave_Module(self, original_node: cst.Module) -> None:
        self._spawn_facts()
        self._follow_ranks_through_calls()

    def _follow_ranks_through_calls(self) -> None:
        """Mark the parameters every call in this file passes a rank (or a parameter
        already marked), until nothing changes."""
        passed: dict[tuple[int, str], list[cst.BaseExpression]] = defaultdict(list)
        for called, call in self._calls:
            function = self._plain_functions.get(called)
            if function is None or called in self._defined_twice:
                continue
            params = [p.name.value for p in function.params.params]
            keywords = params + [p.name.value for p in function.params.kwonly_params]
            for position, arg in enumerate(call.args):
                if arg.star:
                    break
                name = (
                    arg.keyword.value
                    if arg.keyword is not None
                    else (params[position] if position < len(params) else None)
                )
                if name in keywords:
                    passed[(id(function), name)].append(arg.value)
        changed = True
        while changed:
            changed = False
            for key, values in passed.items():
                if key not in self.rank_parameters and all(map(self.holds_rank, values)):
                    self.rank_parameters.add(key)
                    changed = True

    def _spawn_facts(self) -> None:
        for call in self._spawned:
            bound = bound_args(call, names.SPAWN_PARAMS)
            fn = bound.get("fn")
            if fn is not None and isinstance(fn.value, cst.Name):
                target = self._functions.get(fn.value.value)
                if target is not None and target.params.params:
                    self.rank_params.add(target.params.params[0].name.value)
            nprocs = bound.get("nprocs")
            if nprocs is None:
                continue
            self._mark_counts(nprocs.value, depth=3)
            # a world size passed in args= counts the same ranks
            passed = bound.get("args")
            if passed is not None and isinstance(passed.value, cst.Tuple):
                for element in passed.value.elements:
                    self._mark_counts(element.value, depth=3)

    def _mark_counts(self, node: cst.BaseExpression, depth: int) -> None:
        """Note the device_count() calls `node` is, or names hold (following `a = b`)."""
        if self._is_device_count(node):
            self.spawn_counts.add(id(node))
            return
        name = _target_name(node)
        if name is not None and depth > 0:
            for value in self.values.get(name, []):
                self._mark_counts(value, depth - 1)

    def _is_device_count(self, node: cst.BaseExpression) -> bool:
        return isinstance(node, cst.Call) and names.DEVICE_COUNT in self.qualified(node.func)

    def _is_rank_source(self, node: cst.BaseExpression) -> bool:
        if isinstance(node, cst.Integer):
            return True
        if not isinstance(node, cst.Call):
            return False
        if self.qualified(node.func) & _RANK_SOURCES:
            return True
        # int(os.environ["LOCAL_RANK"]), int(os.environ.get("RANK", 0)), int(os.getenv(...))
        if isinstance(node.func, cst.Name) and node.func.value == "int" and node.args:
            inner = node.args[0].value
            key = None
            if isinstance(inner, cst.Subscript) and len(inner.slice) == 1:
                index = inner.slice[0].slice
                key = string_value(index.value) if isinstance(index, cst.Index) else None
            elif isinstance(inner, cst.Call) and inner.args:
                key = string_value(inner.args[0].value)
            return key in _RANK_VARIABLES
        return False

    def holds_rank(self, node: cst.BaseExpression) -> bool:
        """Whether `node` (an int literal, a name or an attribute of the tree this visitor
        saw) holds a rank or a device index rather than a device, a dtype or a tensor."""
        if isinstance(node, cst.Integer):
            return True
        if self._parameter_of.get(id(node)) in self.rank_parameters or id(node) in self._rank_calls:
            return True
        name = _target_name(node)
        if name is None or "device" in self.kinds.get(name, ()):
            return False
        return _is_rank_like(name) or name in self.rank_params or "rank" in self.kinds.get(name, ())

    def holds_device(self, node: cst.BaseExpression) -> bool:
        """Whether `node` is a name assigned a torch.device or a device string."""
        name = _target_name(node)
        return name is not None and "device" in self.kinds.get(name, ())

    def _is_device_object(self, node: cst.BaseExpression) -> bool:
        if isinstance(node, cst.IfExp):
            return self._is_device_object(node.body) or self._is_device_object(node.orelse)
        if isinstance(node, (cst.SimpleString, cst.FormattedString)):
            return True
        return isinstance(node, cst.Call) and bool(
            self.qualified(node.func) & {"torch.device", "devicekit.device"}
        )

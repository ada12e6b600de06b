"""What a script dispatched, recorded while it runs: every operator with the user's line
that called it, per optimizer step.

The recorder is a TorchDispatchMode, so it sees operators after autograd and after
torch's CompositeImplicitAutograd decompositions, as a device backend receives them, and
it leaves nn.TransformerEncoder's fast path alone (a TorchFunctionMode would switch it off).

Each operator is placed on the device or on the host. On the npu stand-in the tensors'
devices say it. On the CPU, where everything is on the host, an operator is the device's
when a tensor it takes reaches the device: computed from the model's parameters, or moved
with `.to(device)` (a move to the CPU is no copy here, but it names the tensor as the
device's); it is the host's when it runs inside a DataLoader's iteration (a Dataset's
`__getitem__`, its transforms, collate) on no such tensor; anything else was not seen
reaching the device, and its shape findings are reported apart as host-side.
"""

import collections
import dataclasses
import enum
import sys
from collections.abc import Callable, Sequence

import torch
import torch.optim.optimizer as optimizer_module
import torch.utils.data.dataloader as dataloader_module
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakIdKeyDictionary

import devicekit
from devicekit.preflight.operators import (
    DATA_DEPENDENT,
    LOCAL_SCALAR,
    SPARSE_GRADIENT,
    argument,
    names_device,
    tensors,
)
from devicekit.preflight.sites import Site, Where

SHAPES_KEPT = 12  # distinct shapes kept per line and operator

Shapes = tuple[tuple[int, ...], ...]  # the shapes of one call's input tensors


class StopRecording(BaseException):
    """Raised as the step after the last one --steps asked for begins: stops the user's
    script there."""


@dataclasses.dataclass
class Calls:
    """How often something happened at one site, and the user's frames the first time."""

    count: int = 0
    stack: tuple[str, ...] = ()
    steps: set[int] = dataclasses.field(default_factory=set)
    detail: str = ""
    via: str = ""  # the installed library's line that ran it ("timm/utils/cuda.py:42")


@dataclasses.dataclass
class Recording:
    """Everything a run dispatched, keyed by (what, where)."""

    steps: int = 0
    ops: dict[tuple[str, Site], Calls] = dataclasses.field(default_factory=dict)
    float64: dict[tuple[str, Site], Calls] = dataclasses.field(default_factory=dict)
    data_dependent: dict[tuple[str, Site], Calls] = dataclasses.field(default_factory=dict)
    host_reads: dict[tuple[str, Site], Calls] = dataclasses.field(default_factory=dict)
    autocast: dict[tuple[str, Site], Calls] = dataclasses.field(default_factory=dict)
    sparse_gradients: dict[tuple[str, Site], Calls] = dataclasses.field(default_factory=dict)
    # (operator, site) -> step -> the input shapes seen in that step
    shapes: dict[tuple[str, Site], dict[int, set[Shapes]]] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(dict)
    )
    # The same two for operators on tensors not seen reaching the device (Placement.UNSEEN):
    # reported apart, as host-side.
    host_side_data_dependent: dict[tuple[str, Site], Calls] = dataclasses.field(
        default_factory=dict
    )
    host_side_shapes: dict[tuple[str, Site], dict[int, set[Shapes]]] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(dict)
    )
    files: set[str] = dataclasses.field(default_factory=set)

    def note(
        self,
        table: dict[tuple[str, Site], Calls],
        key: tuple[str, Site],
        where: Where,
        detail: str = "",
    ) -> None:
        calls = table.get(key)
        if calls is None:
            calls = table[key] = Calls(stack=where.stack(), detail=detail, via=where.via())
            self.files.update(entry.rpartition(":")[0] for entry in calls.stack)
        calls.count += 1
        calls.steps.add(self.steps)


def _kept_on_host(tensor: torch.Tensor, internal: bool, on_device: WeakIdKeyDictionary) -> bool:
    """Whether reading `tensor`'s value reads a tensor that stays on the host on an NPU
    too. Where tensors live on a device (the npu stand-in), a CPU tensor does. On the CPU,
    one not computed from the model's parameters nor moved with .to(device) does (batches
    a data pipeline builds), and so do torch.optim's step counts (read by torch's own code:
    `internal`)."""
    if Recorder.device_seen:
        return tensor.device.type == "cpu"
    return internal or not (
        tensor.requires_grad or tensor.grad_fn is not None or tensor in on_device
    )


class Placement(enum.Enum):
    """Where an operator runs when the script runs on an NPU (see the module's docstring)."""

    DEVICE = "device"
    HOST = "host"  # known: no device finding
    UNSEEN = "unseen"  # on tensors not seen reaching the device: its shapes are host-side


class Recorder(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch's is unannotated
    """Records into `recording` while active; also counts optimizer steps and stops the
    run after `max_steps` of them, notes host reads (`.tolist()`) and waits for the device
    (`synchronize()`: devicekit's, torch.accelerator's, torch.cuda's, torch.npu's), and the
    device type of every autocast region opened."""

    device_seen = False  # a tensor off the CPU was dispatched (the npu stand-in)

    def __init__(self, recording: Recording, max_steps: int | None = None):
        super().__init__()  # type: ignore[no-untyped-call]  # torch's TorchDispatchMode
        self.recording = recording
        self.max_steps = max_steps
        self._autocast: list[tuple[str, Where]] = []
        # Tensors on the device: computed from parameters, or moved with .to(device).
        self._on_device = WeakIdKeyDictionary()
        self._in_backward = 0
        self._loading = 0  # inside a DataLoader's iteration
        self._synchronizing = False
        self._undo: list[Callable[[], object]] = []

    # -- the operators ----------------------------------------------------------------------
    def __torch_dispatch__(
        self,
        func: torch._ops.OpOverload,
        types: Sequence[type],
        args: tuple[object, ...] = (),
        kwargs: dict[str, object] | None = None,
    ) -> object:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self._record(func, args, kwargs, out)
        return out

    def _record(
        self,
        func: torch._ops.OpOverload,
        args: tuple[object, ...],
        kwargs: dict[str, object],
        out: object,
    ) -> None:
        rec = self.recording
        name: str = func.name()  # type: ignore[no-untyped-call]  # torch's OpOverload.name
        where = Where(sys._getframe(2))
        site = where.site
        inputs = list(tensors(args))
        if kwargs:
            inputs += tensors(kwargs.values())
        outputs = list(tensors((out,)))
        float64 = reaches = off_cpu = False
        for t in inputs:
            float64 = float64 or t.dtype == torch.float64
            reaches = reaches or t.requires_grad or t.grad_fn is not None or t in self._on_device
            off_cpu = off_cpu or t.device.type != "cpu"
        if off_cpu:
            Recorder.device_seen = True
        if reaches:
            for t in outputs:
                self._on_device[t] = True
        if name == LOCAL_SCALAR and not _kept_on_host(inputs[0], where.internal, self._on_device):
            rec.note(rec.host_reads, (".item()", site), where)
        elif name == "aten::_to_copy" and off_cpu and str(kwargs.get("device")) == "cpu":
            rec.note(rec.host_reads, (".cpu()", site), where)
        placement = self._placement(reaches, off_cpu, outputs)
        if placement is Placement.HOST:
            rec.files.add(site[0])  # still the user's file, for the checks that read files
            return
        if any(t.layout != torch.strided for t in (*inputs, *outputs)):
            # Sparse tensors: torch_npu refuses these operators rather than running them on
            # the CPU; the sparse-gradient finding names the layer that makes them.
            return
        rec.note(rec.ops, (name, site), where)
        if float64 or any(t.dtype == torch.float64 for t in outputs):
            rec.note(rec.float64, (name, site), where)
        if self._autocast and inputs:
            wanted, opened = self._autocast[-1]
            devices = {t.device.type for t in inputs if t.dim() > 0} or {inputs[0].device.type}
            if wanted not in devices:
                rec.note(
                    rec.autocast, (f"{wanted}:{'/'.join(sorted(devices))}", opened.site), opened
                )
        # Backward mirrors the forward, whose line has its shapes and data dependence
        # already; optimizers and DDP's buckets have the parameters' shapes.
        if self._in_backward or where.internal:
            return
        device = placement is Placement.DEVICE
        if name in DATA_DEPENDENT or (
            name == "aten::index.Tensor" and any(t.dtype == torch.bool for t in tensors(args[1:2]))
        ):
            rec.note(
                rec.data_dependent if device else rec.host_side_data_dependent, (name, site), where
            )
        sparse = SPARSE_GRADIENT.get(name)
        if (
            sparse is not None
            and inputs[0].requires_grad
            and torch.is_grad_enabled()
            and argument(func, args, kwargs, sparse[0])
        ):
            rec.note(rec.sparse_gradients, (sparse[1], site), where)
        shapes = rec.shapes if device else rec.host_side_shapes
        seen = shapes[(name, site)].setdefault(rec.steps, set())
        if len(seen) < SHAPES_KEPT:
            seen.add(tuple(tuple(t.shape) for t in inputs))

    def _placement(self, reaches: bool, off_cpu: bool, outputs: list[torch.Tensor]) -> Placement:
        """Where an operator runs on an NPU: `reaches`, whether a tensor it takes is known
        to be on the device; `off_cpu`, whether one is off the CPU (the stand-in)."""
        if Recorder.device_seen:
            on_device = off_cpu or any(t.device.type != "cpu" for t in outputs)
            return Placement.DEVICE if on_device else Placement.HOST
        if reaches:
            return Placement.DEVICE
        return Placement.HOST if self._loading else Placement.UNSEEN

    # -- steps, host reads, autocast regions ---------------------------------------------------
    def _step_taken(self, *_: object) -> None:
        self.recording.steps += 1

    def _step_starts(self, *_: object) -> None:
        # Stopped as the step after the last one begins: the step asked for completes
        # with the rest of its iteration (logging, checkpoints).
        if self.max_steps is not None and self.recording.steps >= self.max_steps:
            raise StopRecording()

    def _patch(
        self,
        owner: object,
        name: str,
        make: Callable[[Callable[..., object]], Callable[..., object]],
    ) -> None:
        original = getattr(owner, name)
        setattr(owner, name, make(original))
        self._undo.append(lambda: setattr(owner, name, original))

    def __enter__(self) -> "Recorder":
        for handle in (
            optimizer_module.register_optimizer_step_post_hook(self._step_taken),
            optimizer_module.register_optimizer_step_pre_hook(self._step_starts),
        ):
            self._undo.append(handle.remove)
        recorder = self

        def tolist(original: Callable[..., object]) -> Callable[..., object]:
            def wrapper(tensor: torch.Tensor, *args: object, **kwargs: object) -> object:
                where = Where(sys._getframe(1))
                if not _kept_on_host(tensor, where.internal, recorder._on_device):
                    recorder.recording.note(
                        recorder.recording.host_reads, (".tolist()", where.site), where
                    )
                return original(tensor, *args, **kwargs)

            return wrapper

        def enter(original: Callable[..., object]) -> Callable[..., object]:
            def wrapper(region: torch.autocast, *args: object, **kwargs: object) -> object:
                recorder._autocast.append((region.device, Where(sys._getframe(1))))
                return original(region, *args, **kwargs)

            return wrapper

        def exit_(original: Callable[..., object]) -> Callable[..., object]:
            def wrapper(region: torch.autocast, *args: object, **kwargs: object) -> object:
                if recorder._autocast:
                    recorder._autocast.pop()
                return original(region, *args, **kwargs)

            return wrapper

        def to(original: Callable[..., object]) -> Callable[..., object]:
            def wrapper(tensor: torch.Tensor, *args: object, **kwargs: object) -> object:
                moved = original(tensor, *args, **kwargs)
                if names_device(args, kwargs):
                    recorder._on_device[moved] = True
                return moved

            return wrapper

        def loading(original: Callable[..., object]) -> Callable[..., object]:
            def wrapper(*args: object, **kwargs: object) -> object:
                recorder._loading += 1
                try:
                    return original(*args, **kwargs)
                finally:
                    recorder._loading -= 1

            return wrapper

        def backward(original: Callable[..., object]) -> Callable[..., object]:
            def wrapper(*args: object, **kwargs: object) -> object:
                recorder._in_backward += 1
                try:
                    return original(*args, **kwargs)
                finally:
                    recorder._in_backward -= 1

            return wrapper

        def synchronize(original: Callable[..., object]) -> Callable[..., object]:
            def wrapper(*args: object, **kwargs: object) -> object:
                if recorder._synchronizing:  # devicekit's call reaching torch's: one wait
                    return original(*args, **kwargs)
                where = Where(sys._getframe(1))
                if not where.internal:
                    recorder.recording.note(
                        recorder.recording.host_reads, ("synchronize()", where.site), where
                    )
                recorder._synchronizing = True
                try:
                    return original(*args, **kwargs)
                finally:
                    recorder._synchronizing = False

            return wrapper

        for owner in (devicekit, devicekit.accelerator, torch.accelerator, torch.cuda):
            self._patch(owner, "synchronize", synchronize)
        if hasattr(torch, "npu"):  # torch_npu's, or the stand-in's
            self._patch(torch.npu, "synchronize", synchronize)
        self._patch(torch.Tensor, "tolist", tolist)
        self._patch(torch.Tensor, "to", to)
        self._patch(dataloader_module._BaseDataLoaderIter, "__next__", loading)
        self._patch(torch.autograd, "backward", backward)
        self._patch(torch.amp.autocast_mode.autocast, "__enter__", enter)
        self._patch(torch.amp.autocast_mode.autocast, "__exit__", exit_)
        super().__enter__()  # type: ignore[no-untyped-call]  # torch's TorchDispatchMode
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            super().__exit__(*exc)  # type: ignore[no-untyped-call]  # torch's TorchDispatchMode
        finally:
            while self._undo:
                self._undo.pop()()

"""`devicekit port`: the rewrites, what is reported, the command's modes and exit codes.

Fast tests port snippets in memory (`port_source`) and run the command in-process
(`cli.main`). Slow tests port the corpus in tests/port_corpus/ (CUDA-only scripts in the
styles people write) with the command, then run the ported copies unchanged on the CPU, with
2 ranks under torchrun and under each script's own launcher, and check that they train.
"""

import ast
import codecs
import importlib.util
import inspect
import json
import os
import pkgutil
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torch

from conftest import ROOT, clean_environ
from devicekit.environments import find_free_port
from devicekit.port import ParseFailure, _plugins, port_source, registry, source_bytes
from devicekit.port.cli import main
from devicekit.port.rule import LEAVE_TYPES
from devicekit.port.transformer import PortTransformer
from invariant import assert_usage_line
from support import device_questions
from support.launchers import child_env, start
from support.paths import CORPUS, TESTS
from support.processes import Processes, describe
from support.script_groups import run_group

HEADER = "import torch\n"
PORTED_HEADER = "import torch\nimport devicekit\n"


def ported(snippet: str) -> str:
    """`snippet` (after `import torch`) ported, without the import lines."""
    out, _ = port_source((HEADER + textwrap.dedent(snippet)).encode())
    text = out.decode()
    if text.startswith(PORTED_HEADER):
        return text[len(PORTED_HEADER) :]
    assert text.startswith(HEADER), text
    return text[len(HEADER) :]


def report_of(snippet: str):
    return port_source((HEADER + textwrap.dedent(snippet)).encode())[1]


# (rule, CUDA-only line, ported line): one line each, after `import torch`.
REWRITES = (
    [
        ("cuda()", "y = x.cuda()", "y = x.to(devicekit.device())"),
        ("cuda(i)", "y = x.cuda(args.gpu)", "y = x.to(devicekit.device(args.gpu))"),
        (
            "cuda(non_blocking)",
            "y = x.cuda(non_blocking=True)",
            "y = x.to(devicekit.device(), non_blocking=True)",
        ),
        (
            "cuda(i, non_blocking)",
            "y = x.cuda(gpu, non_blocking=True)",
            "y = x.to(devicekit.device(gpu), non_blocking=True)",
        ),
        (
            "cuda(i, True)",
            "y = x.cuda(gpu, True)",
            "y = x.to(devicekit.device(gpu), non_blocking=True)",
        ),
        ("cuda(device=i)", "y = x.cuda(device=rank)", "y = x.to(devicekit.device(rank))"),
        ("cuda('cuda:1')", "y = x.cuda('cuda:1')", "y = x.to(devicekit.device(1))"),
        ("to('cuda')", "y = x.to('cuda')", "y = x.to(devicekit.device())"),
        (
            "to('cuda:1')",
            "y = x.to('cuda:1', non_blocking=True)",
            "y = x.to(devicekit.device(1), non_blocking=True)",
        ),
        ("to(f'cuda:{i}')", "y = x.to(f'cuda:{rank}')", "y = x.to(devicekit.device(rank))"),
        ("to('cuda:%d' % i)", "y = x.to('cuda:%d' % rank)", "y = x.to(devicekit.device(rank))"),
        (
            "to('cuda:{}'.format(i))",
            "y = x.to('cuda:{}'.format(gpu))",
            "y = x.to(devicekit.device(gpu))",
        ),
        ("to('cuda:' + str(i))", "y = x.to('cuda:' + str(gpu))", "y = x.to(devicekit.device(gpu))"),
        (
            "to(device='cuda')",
            "y = x.to(device='cuda', dtype=torch.half)",
            "y = x.to(device=devicekit.device(), dtype=torch.half)",
        ),
        ("to(local_rank)", "y = x.to(local_rank)", "y = x.to(devicekit.device(local_rank))"),
        ("to(self.gpu_id)", "y = x.to(self.gpu_id)", "y = x.to(devicekit.device(self.gpu_id))"),
        (
            "to(args.local_rank)",
            "y = x.to(args.local_rank)",
            "y = x.to(devicekit.device(args.local_rank))",
        ),
        ("to(0)", "y = x.to(0)", "y = x.to(devicekit.device(0))"),
        ("torch.device('cuda')", "d = torch.device('cuda')", "d = devicekit.device()"),
        ("torch.device('cuda', i)", "d = torch.device('cuda', rank)", "d = devicekit.device(rank)"),
        (
            "torch.device(type, index)",
            "d = torch.device(type='cuda', index=rank)",
            "d = devicekit.device(rank)",
        ),
        ("torch.device('cuda:0')", "d = torch.device('cuda:0')", "d = devicekit.device(0)"),
        (
            "torch.device(f'cuda:{i}')",
            "d = torch.device(f'cuda:{local_rank}')",
            "d = devicekit.device(local_rank)",
        ),
        (
            "torch.device(if available)",
            'd = torch.device("cuda" if torch.cuda.is_available() else "cpu")',
            "d = devicekit.device()",
        ),
        (
            "torch.device(if flag)",
            'd = torch.device("cuda" if use_cuda else "cpu")',
            'd = torch.device(devicekit.device_type() if use_cuda else "cpu")',
        ),
        (
            "if available",
            'device = "cuda" if torch.cuda.is_available() else "cpu"',
            "device = devicekit.device_type()",
        ),
        ("'cuda' string", "device = 'cuda'", "device = devicekit.device_type()"),
        ("'cuda:0' string", "device = 'cuda:0'", "device = str(devicekit.device(0))"),
        ("f'cuda:{i}' string", "device = f'cuda:{rank}'", "device = str(devicekit.device(rank))"),
        (
            "default='cuda'",
            "def run(model, device='cuda'): pass",
            "def run(model, device=devicekit.device_type()): pass",
        ),
        (
            "device= of a torch call",
            "t = torch.zeros(3, device='cuda')",
            "t = torch.zeros(3, device=devicekit.device())",
        ),
        (
            "device= rank of a torch call",
            "t = torch.ones(3, device=local_rank)",
            "t = torch.ones(3, device=devicekit.device(local_rank))",
        ),
        (
            "set_default_device",
            "torch.set_default_device('cuda')",
            "torch.set_default_device(devicekit.device())",
        ),
        (
            "set_device(f'cuda:{i}')",
            "torch.cuda.set_device(f'cuda:{rank}')",
            "devicekit.set_device(rank)",
        ),
        (
            "amp.autocast()",
            "with torch.cuda.amp.autocast(): pass",
            "with devicekit.autocast(enabled=devicekit.is_available()): pass",
        ),
        (
            "amp.autocast(enabled)",
            "with torch.cuda.amp.autocast(enabled=args.amp): pass",
            "with devicekit.autocast(enabled=args.amp): pass",
        ),
        (
            "amp.autocast(dtype)",
            "with torch.cuda.amp.autocast(dtype=torch.bfloat16): pass",
            "with devicekit.autocast(enabled=devicekit.is_available(), dtype=torch.bfloat16): pass",
        ),
        (
            "amp.autocast(positional)",
            "with torch.cuda.amp.autocast(use_amp): pass",
            "with devicekit.autocast(enabled=use_amp): pass",
        ),
        (
            "autocast('cuda')",
            "with torch.autocast('cuda'): pass",
            "with devicekit.autocast(enabled=devicekit.is_available()): pass",
        ),
        (
            "autocast(device_type, dtype)",
            "with torch.autocast(device_type='cuda', dtype=torch.float16): pass",
            "with devicekit.autocast(enabled=devicekit.is_available(), dtype=torch.float16): pass",
        ),
        (
            "amp.autocast('cuda', enabled)",
            "with torch.amp.autocast('cuda', enabled=False): pass",
            "with devicekit.autocast(enabled=False): pass",
        ),
        (
            "amp.GradScaler()",
            "s = torch.cuda.amp.GradScaler()",
            "s = devicekit.GradScaler(enabled=True)",
        ),
        (
            "timm's NativeScaler()",
            "from timm.utils import NativeScaler; loss_scaler = NativeScaler()",
            "from timm.utils import NativeScaler; "
            "loss_scaler = NativeScaler(device=devicekit.device_type())",
        ),
        (
            "amp.GradScaler(enabled)",
            "s = torch.cuda.amp.GradScaler(enabled=use_amp)",
            "s = devicekit.GradScaler(enabled=use_amp)",
        ),
        (
            "amp.GradScaler(init_scale)",
            "s = torch.cuda.amp.GradScaler(2.0**10, growth_interval=100)",
            "s = devicekit.GradScaler(enabled=True, init_scale=2.0**10, growth_interval=100)",
        ),
        (
            "torch.amp.GradScaler('cuda')",
            "s = torch.amp.GradScaler('cuda')",
            "s = devicekit.GradScaler(enabled=True)",
        ),
        (
            "torch.amp.GradScaler()",
            "s = torch.amp.GradScaler(enabled=amp)",
            "s = devicekit.GradScaler(enabled=amp)",
        ),
        (
            "init_process_group('nccl')",
            "torch.distributed.init_process_group('nccl', rank=r, world_size=n)",
            "torch.distributed.init_process_group(devicekit.backend(), rank=r, world_size=n)",
        ),
        (
            "init_process_group(backend='nccl')",
            "torch.distributed.init_process_group(backend='nccl', init_method='env://')",
            "torch.distributed.init_process_group(backend=devicekit.backend(), init_method='env://')",
        ),
        (
            "init_process_group(device_id)",
            "torch.distributed.init_process_group('nccl', "
            "device_id=torch.device('cuda', local_rank))",
            "torch.distributed.init_process_group(devicekit.backend(), device_id=devicekit.device("
            "local_rank) if devicekit.is_available() else None)",
        ),
        (
            "backend if available",
            'b = "nccl" if torch.cuda.is_available() else "gloo"',
            "b = devicekit.backend()",
        ),
        (
            "add_argument(default='nccl')",
            "p.add_argument('--dist-backend', default='nccl')",
            "p.add_argument('--dist-backend', default=devicekit.backend())",
        ),
        (
            "destroy_process_group",
            "torch.distributed.destroy_process_group()",
            "devicekit.destroy_process_group()",
        ),
        (
            "DDP device_ids",
            "m = torch.nn.parallel.DistributedDataParallel(m, device_ids=[gpu])",
            "m = torch.nn.parallel.DistributedDataParallel(m, device_ids=[gpu] if "
            "devicekit.is_available() else None)",
        ),
        (
            "DDP output_device",
            "m = torch.nn.parallel.DistributedDataParallel(m, device_ids=[i], output_device=i)",
            "m = torch.nn.parallel.DistributedDataParallel(m, device_ids=[i] if "
            "devicekit.is_available() else None, output_device=i if devicekit.is_available() "
            "else None)",
        ),
        (
            "FSDP device_id, sync_module_states",
            "m = torch.distributed.fsdp.FullyShardedDataParallel(m, "
            "device_id=torch.cuda.current_device(), sync_module_states=True)",
            "m = torch.distributed.fsdp.FullyShardedDataParallel(m, "
            "device_id=devicekit.device(), sync_module_states=devicekit.is_available())",
        ),
        (
            "FSDP device_id rank, sync flag",
            "m = torch.distributed.fsdp.FullyShardedDataParallel(m, device_id=local_rank, "
            "sync_module_states=args.sync)",
            "m = torch.distributed.fsdp.FullyShardedDataParallel(m, "
            "device_id=devicekit.device(local_rank), "
            "sync_module_states=args.sync and devicekit.is_available())",
        ),
        (
            "FullStateDictConfig offload_to_cpu",
            "c = torch.distributed.fsdp.FullStateDictConfig(offload_to_cpu=True, rank0_only=True)",
            "c = torch.distributed.fsdp.FullStateDictConfig("
            "offload_to_cpu=devicekit.is_available(), rank0_only=True)",
        ),
        (
            "map_location='cuda:0'",
            "c = torch.load(p, map_location='cuda:0')",
            "c = torch.load(p, map_location=devicekit.device(0))",
        ),
        (
            "map_location=f'cuda:{i}'",
            "c = torch.load(p, map_location=f'cuda:{rank}')",
            "c = torch.load(p, map_location=devicekit.device(rank))",
        ),
        (
            "map_location dict",
            "c = torch.load(p, map_location={'cuda:0': f'cuda:{rank}'})",
            "c = torch.load(p, map_location={'cuda:0': str(devicekit.device(rank))})",
        ),
        (
            "map_location lambda",
            "c = torch.load(p, map_location=lambda s, loc: s.cuda(gpu))",
            "c = torch.load(p, map_location=devicekit.device(gpu))",
        ),
        (
            "pin_memory=True",
            "dl = DataLoader(ds, batch_size=8, pin_memory=True)",
            "dl = DataLoader(ds, batch_size=8, pin_memory=devicekit.pin_memory())",
        ),
        (
            "pin_memory in a dict of DataLoader arguments",
            "kw = {'pin_memory': True, 'pin_memory_device': 'npu'}",
            "kw = {'pin_memory': devicekit.pin_memory(), 'pin_memory_device': "
            "devicekit.device_type()}",
        ),
        (
            ".pin_memory()",
            "x = batch.pin_memory().to(device)",
            "x = (batch.pin_memory() if devicekit.pin_memory() else batch).to(device)",
        ),
        (
            "MASTER_ADDR",
            "os.environ['MASTER_ADDR'] = 'localhost'",
            "os.environ.setdefault('MASTER_ADDR', 'localhost')",
        ),
        (
            "MASTER_PORT",
            'os.environ["MASTER_PORT"] = str(port)  # fixed',
            'os.environ.setdefault("MASTER_PORT", str(port))  # fixed',
        ),
        (
            "--local_rank",
            "p.add_argument('--local_rank', type=int, default=-1)",
            "p.add_argument('--local_rank', '--local-rank', type=int, default=-1)",
        ),
        (
            "--local-rank",
            'p.add_argument("--local-rank", type=int)',
            'p.add_argument("--local-rank", "--local_rank", type=int)',
        ),
        ("OutOfMemoryError", "E = torch.cuda.OutOfMemoryError", "E = torch.OutOfMemoryError"),
    ]
    + [
        (f"torch.cuda.{name}", f"v = torch.cuda.{name}()", f"v = devicekit.{name}()")
        for name in (
            "device_count",
            "is_available",
            "current_device",
            "synchronize",
            "is_bf16_supported",
            "empty_cache",
            "memory_allocated",
            "max_memory_allocated",
            "memory_reserved",
            "max_memory_reserved",
            "reset_peak_memory_stats",
        )
    ]
    + [
        (f"torch.cuda.{name}(x)", f"torch.cuda.{name}(x)", f"devicekit.{name}(x)")
        for name in ("set_device", "manual_seed", "manual_seed_all")
    ]
)


@pytest.mark.parametrize("rule, before, after", REWRITES, ids=[r[0] for r in REWRITES])
def test_rewrite(rule, before, after):
    assert ported(before + "\n") == after + "\n"
    again, report = port_source((PORTED_HEADER + after + "\n").encode())
    assert report.changes == [] and again.decode() == PORTED_HEADER + after + "\n"


def test_each_plugin_registers_rules_and_names_their_ids():
    """One module per idiom in _plugins/, each once in registry.PLUGINS with hooks the
    transformer reaches; its RULES are the rule ids it reports, each named in its
    docstring; and the call rules keep their order (the first one that matches a call gets
    it)."""
    files = {f"{_plugins.__name__}.{m.name}" for m in pkgutil.iter_modules(_plugins.__path__)}
    assert files == {m.__name__ for m in registry.PLUGINS}
    assert len(registry.PLUGINS) == len(files)
    assert all(  # leave_Attribute offers the node to _leave, then to the reference rules
        getattr(PortTransformer, f"leave_{node_type}") is PortTransformer._leave
        for node_type in LEAVE_TYPES
        if node_type != "Attribute"
    )
    hooks = {"matches_call", "on_call", "on_unported_call", "on_keyword", "on_reference"}
    hooks |= {f"leave_{node_type}" for node_type in LEAVE_TYPES}
    for module in registry.PLUGINS:
        defined = {name for name in vars(module) if name.startswith(("leave_", "on_", "matches_"))}
        assert defined and defined <= hooks, (module.__name__, defined)
        assert ("on_call" in defined) == ("matches_call" in defined), module.__name__
        assert ("on_keyword" in defined) == hasattr(module, "KEYWORDS"), module.__name__
        ids = set(getattr(module, "KEYWORDS", {}).values())
        for node in ast.walk(ast.parse(inspect.getsource(module))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) in (
                "changed",
                "removed",
            ):
                arg = node.args[1]
                ids.add(getattr(module, arg.id) if isinstance(arg, ast.Name) else arg.value)
        assert ids == set(module.RULES), (module.__name__, ids)
        assert all(f"`{rule_id}`" in module.__doc__ for rule_id in ids), (module.__name__, ids)
    assert [m.__name__.rsplit(".", 1)[1] for m in registry.PLUGINS if hasattr(m, "on_call")] == [
        "cuda_method",
        "to_device",
        "pin_memory",
        "local_rank_alias",
        "torch_device",
        "device_argument",
        "autocast",
        "grad_scaler",
        "library_scaler",
        "init_process_group",
        "ddp_device_ids",
        "fsdp_device_id",
        "fsdp_state_dict_offload",
        "spawn_launch",
        "destroy_process_group",
        "torch_cuda_api",
        "nccl_available",
        "accelerator_branch",
    ]


UNCHANGED = [
    "y = x.to(device)",
    "y = x.to(torch.float16)",
    "y = x.to(other)",
    "y = x.to('cpu')",
    "d = torch.device('cpu')",
    "d = torch.device(args.device)",
    "d = torch.device(device_id)",
    "with torch.autocast('cpu', dtype=torch.bfloat16): pass",
    "s = torch.amp.GradScaler('cpu')",
    "dist.init_process_group('gloo')",
    "dist.init_process_group(backend=args.dist_backend)",
    "c = torch.load(p, map_location='cpu')",
    "c = torch.load(p, map_location=lambda s, loc: s)",
    "dl = DataLoader(ds, pin_memory=False)",
    "kw = {'pin_memory': False, 'pin_memory_device': device_type}",
    "m = DDP(m)",
    "m = torch.distributed.fsdp.FullyShardedDataParallel(m, sync_module_states=False)",
    "c = torch.distributed.fsdp.FullOptimStateDictConfig(offload_to_cpu=True)",
    "os.environ['NCCL_DEBUG'] = 'INFO'",
    "p.add_argument('--local_rank', '--local-rank', type=int)",
    "mp.spawn(f, args=(1,), nprocs=2)",
    "x = devicekit.pin_memory()",
]


@pytest.mark.parametrize("line", UNCHANGED)
def test_left_alone(line):
    source = (HEADER + line + "\n").encode()
    out, report = port_source(source)
    assert out == source and report.changes == [] and report.manual == []


def test_to_a_device_variable_is_not_taken_for_a_rank():
    before = """\
    gpu = torch.device(f"cuda:{local_rank}")
    y = x.to(gpu)
    z = x.cuda(gpu)
    """
    assert (
        ported(before)
        == """\
    gpu = devicekit.device(local_rank)
    y = x.to(gpu)
    z = x.to(gpu)
    """.replace("    ", "")
    )


def test_rank_by_provenance():
    before = textwrap.dedent("""\
    import os
    here = int(os.environ["LOCAL_RANK"])
    y = x.to(here)
    def worker(proc, cfg):
        model.to(proc)
    torch.multiprocessing.spawn(worker, args=(cfg,), nprocs=2)
    """)
    after = ported(before)
    assert "y = x.to(devicekit.device(here))" in after
    assert "model.to(devicekit.device(proc))" in after


def test_spawn_becomes_launch():
    before = """\
    import torch.multiprocessing as mp
    if __name__ == "__main__":
        world_size = torch.cuda.device_count()
        mp.spawn(main, args=(world_size,), nprocs=world_size, join=True)
        mp.spawn(main, args=(cfg,), nprocs=torch.cuda.device_count())
        mp.spawn(
            main,
            args=(cfg,),
            nprocs=torch.cuda.device_count(),
        )
    """
    assert ported(before) == textwrap.dedent("""\
    if __name__ == "__main__":
        world_size = devicekit.default_ranks_per_node()
        devicekit.launch(main, args=(world_size,), nprocs=world_size)
        devicekit.launch(main, args=(cfg,))
        devicekit.launch(
            main,
            args=(cfg,),
        )
    """)


def test_device_count_that_sizes_a_spawn_through_an_alias():
    before = """\
    import torch.multiprocessing as mp
    n_gpus = torch.cuda.device_count()
    assert n_gpus >= 2
    world_size = n_gpus
    print(torch.cuda.device_count())
    mp.spawn(main, args=(world_size,), nprocs=world_size)
    """
    after = ported(before)
    assert "n_gpus = devicekit.default_ranks_per_node()" in after
    assert "print(devicekit.device_count())" in after


def test_from_imports_are_resolved_and_orphans_removed():
    before = textwrap.dedent("""\
    import torch
    from torch.cuda.amp import autocast, GradScaler
    from torch.cuda import amp as cuda_amp
    scaler = GradScaler()
    with autocast():
        pass
    with cuda_amp.autocast():
        pass
    """)
    out, _ = port_source(before.encode())
    assert out.decode() == textwrap.dedent("""\
    import torch
    import devicekit
    scaler = devicekit.GradScaler(enabled=True)
    with devicekit.autocast(enabled=devicekit.is_available()):
        pass
    with devicekit.autocast(enabled=devicekit.is_available()):
        pass
    """)


@pytest.mark.parametrize(
    "source, expected",
    [
        (
            'import torch\nif torch.__version__ >= "1.8":\n    import torch_npu\nx = 1\n',
            "import torch\nx = 1\n",
        ),
        # a test that may do something stays: it was removed, and setup() with it
        ("if setup():\n    import torch_npu\n", "if setup():\n    pass\n"),
        # an else: branch stays: it was removed with the try
        (
            "try:\n    import torch_npu\nexcept ImportError:\n    ok = False\n"
            "else:\n    ok = True\n",
            "try:\n    pass\nexcept ImportError:\n    ok = False\nelse:\n    ok = True\n",
        ),
    ],
    ids=["version test", "a call in the test", "try with else"],
)
def test_what_held_a_torch_npu_import_goes_only_when_it_did_nothing_else(source, expected):
    assert port_source(source.encode())[0].decode() == expected


def test_an_import_still_used_is_kept():
    before = textwrap.dedent("""\
    import torch
    from torch.cuda.amp import autocast, custom_fwd
    with autocast():
        pass
    f = custom_fwd(g)
    """)
    out, report = port_source(before.encode())
    assert "from torch.cuda.amp import custom_fwd\n" in out.decode()
    assert [m.construct for m in report.manual] == ["custom_fwd(g)"]


# (construct, a line using it, what the manual fix mentions)
MANUAL = [
    (
        "cpp_extension.load",
        "from torch.utils.cpp_extension import load\nk = load('k', ['k.cu'])",
        "fallback",
    ),
    (
        "load_inline",
        "import torch.utils.cpp_extension as ext\nk = ext.load_inline('k', cpp_sources='')",
        "fallback",
    ),
    (
        "CUDAExtension",
        "from torch.utils.cpp_extension import CUDAExtension\ne = CUDAExtension('k', [])",
        "fallback",
    ),
    ("Event", "start = torch.cuda.Event(enable_timing=True)", "perf_counter"),
    ("graph", "g = torch.cuda.CUDAGraph()", "eagerly"),
    ("graph context", "with torch.cuda.graph(g):\n    pass", "eagerly"),
    ("make_graphed_callables", "f = torch.cuda.make_graphed_callables(f, (x,))", "eagerly"),
    ("nvtx", "torch.cuda.nvtx.range_push('step')", "record_function"),
    ("nvtx module", "import nvtx", "record_function"),
    ("apex", "from apex import amp", "devicekit.autocast"),
    (
        "amp.initialize",
        "from apex import amp\nmodel, opt = amp.initialize(model, opt)",
        "devicekit.autocast",
    ),
    (
        "amp.initialize(combine_ddp=True)",
        "from apex import amp\nmodel, opt = amp.initialize(model, opt, combine_ddp=True)",
        "model = devicekit.wrap_ddp(model)",
    ),
    ("cupy", "import cupy as cp", "fallback"),
    ("triton", "import triton\n@triton.jit\ndef k(x): pass", "fallback"),
    ("DataParallel", "m = torch.nn.DataParallel(m)", "devicekit.wrap_ddp"),
    (
        "replicate",
        "from torch.nn.parallel import replicate\nreplicas = replicate(m, [0, 1])",
        "devicekit.wrap_ddp",
    ),
    ("scatter", "chunks = torch.nn.parallel.scatter(x, [0, 1])", "devicekit.wrap_ddp"),
    (
        "parallel_apply",
        "from torch.nn.parallel.parallel_apply import parallel_apply\ny = parallel_apply(r, c)",
        "devicekit.wrap_ddp",
    ),
    ("gather", "y = torch.nn.parallel.gather(outputs, 0)", "devicekit.wrap_ddp"),
    (
        "broadcast_coalesced",
        "import torch.nn.parallel.comm as comm\nc = comm.broadcast_coalesced(ts, [0, 1])",
        "devicekit.wrap_ddp",
    ),
    ("capability", "major, minor = torch.cuda.get_device_capability()", "device_type"),
    ("properties", "p = torch.cuda.get_device_properties(0)", "device_type"),
    ("unknown torch.cuda", "torch.cuda.ipc_collect()", "device_type"),
    ("tensor type", "t = torch.cuda.FloatTensor(3)", "device=devicekit.device()"),
    ("argument devicekit does not take", "torch.cuda.synchronize(device)", "without the argument"),
    (
        "autocast cache_enabled",
        "with torch.cuda.amp.autocast(cache_enabled=False): pass",
        "cache_enabled",
    ),
    ("autocast(**kwargs)", "with torch.cuda.amp.autocast(**amp_args): pass", "by name"),
    ("GradScaler(*args)", "s = torch.cuda.amp.GradScaler(*scaler_args)", "by name"),
    ("cuda(*args)", "y = x.cuda(*where)", "devicekit.device(i)"),
    ("torch.cuda.device(i)", "with torch.cuda.device(1): pass", "devicekit.set_device(i)"),
    (
        "mp.spawn(join=False)",
        "ctx = torch.multiprocessing.spawn(f, nprocs=2, join=False)",
        "devicekit.launch",
    ),
]


@pytest.mark.parametrize("name, snippet, fix", MANUAL, ids=[m[0] for m in MANUAL])
def test_reported_for_a_manual_change(name, snippet, fix):
    source = (HEADER + snippet + "\n").encode()
    out, report = port_source(source)
    assert out == source, "left alone"
    assert report.changes == [] and report.manual, report
    item = report.manual[-1]
    assert item.line >= 2 and item.why and fix in item.fix
    assert all(part in HEADER + snippet for part in item.construct.split("; "))


@pytest.mark.parametrize(
    "snippet, named",
    [
        ("with torch.autocast('cuda'):\n    loss = model(x)\nloss.backward()", True),
        ("with torch.cuda.amp.autocast(dtype=torch.float16):\n    model(x).sum().backward()", True),
        (
            "scaler = torch.cuda.amp.GradScaler()\nwith torch.autocast('cuda'):\n"
            "    loss = model(x)\nscaler.scale(loss).backward()",
            False,
        ),
        (
            "with torch.autocast('cuda', dtype=torch.bfloat16):\n    model(x).sum().backward()",
            False,
        ),
        ("with torch.autocast('cuda'):\n    y = model(x)", False),  # evaluation only
    ],
)
def test_a_float16_autocast_in_a_file_with_no_loss_scaler_is_named(snippet, named):
    """Ported, the autocast computes in fp16 on an NPU too: a file that trains through it
    and builds or calls no scaler gets an item saying so."""
    report = report_of(snippet + "\n")
    assert "autocast" in {c.rule for c in report.changes}
    unscaled = [m for m in report.manual if "loss scaler" in m.why]
    assert bool(unscaled) == named, report.manual
    if named:
        assert "underflow" in unscaled[0].why
        assert "devicekit.GradScaler(enabled=True)" in unscaled[0].fix


APEX_USES = """\
{imports}
def train(model, optimizer, loss):
    with amp.scale_loss(loss, optimizer) as scaled:
        scaled.backward()
    torch.nn.utils.clip_grad_norm_(amp.master_params(optimizer), 1.0)
    return amp.state_dict()
"""


def test_one_reason_is_one_manual_item_with_its_lines(tmp_path, capsys):
    """Four apex constructs are one item, at the first, naming the other lines."""
    script = tmp_path / "apex_uses.py"
    script.write_text(HEADER + APEX_USES.format(imports="from apex import amp"))
    assert main([str(script)]) == 1
    out = capsys.readouterr().out
    [item] = port_source(script.read_bytes())[1].manual
    assert (item.line, item.also) == (2, [4, 6, 7])
    assert "amp.scale_loss(loss, optimizer); amp.master_params(optimizer)" in item.construct
    assert f"{script}:2: manual (also lines 4, 6, 7): from apex import amp;" in out
    assert "1 manual item(s)" in out


def test_a_package_imported_with_its_own_fallback_is_kept_not_manual():
    """timm's `try: from apex import amp` / `except ImportError: amp = None`: its uses run
    only where apex is there and chosen, so they are kept, with the reason, not manual."""
    imports = "try:\n    from apex import amp\nexcept ImportError:\n    amp = None"
    report = report_of(APEX_USES.format(imports=imports))
    assert report.manual == []
    [kept] = report.info
    assert "apex is optional here" in kept.note and kept.also == [9, 10]


def test_functional_data_parallel_is_named_though_its_devices_were_ported():
    """nn.DataParallel by hand: the device strings in the block are ported, and each call
    that needs several CUDA devices in one process is still an item to change by hand."""
    source = (
        HEADER + "from torch.nn import parallel\n"
        "device = torch.device('cuda:0')\n"
        "replicas = parallel.replicate(model.to(device), [0, 1])\n"
        "outputs = parallel.parallel_apply(replicas, parallel.scatter(x.cuda(), [0, 1]))\n"
        "y = parallel.gather(outputs, 0)\n"
    ).encode()
    out, report = port_source(source)
    assert b"cuda" not in out and len(report.changes) == 2, out.decode()
    [item] = report.manual  # one reason: one item, naming each call and line
    assert (item.line, item.also) == (4, [5, 6]), item
    assert [call.split("(")[0] for call in item.construct.split("; ")] == [
        "parallel.replicate",
        "parallel.scatter",
        "parallel.parallel_apply",
        "parallel.gather",
    ], item.construct
    assert "nn.DataParallel by hand" in item.why


def test_cudnn_is_kept_and_reported_as_harmless():
    source = (
        HEADER + "torch.backends.cudnn.benchmark = True\n"
        "torch.backends.cuda.matmul.allow_tf32 = True\n"
    ).encode()
    out, report = port_source(source)
    assert out == source and report.manual == []
    assert [(i.line, i.construct) for i in report.info] == [
        (2, "torch.backends.cudnn.benchmark = True"),
        (3, "torch.backends.cuda.matmul.allow_tf32 = True"),
    ]
    assert all("harmless" in i.note for i in report.info)


FORMATTED = '''\
#!/usr/bin/env python
# -*- coding: utf-8 -*-
"""A script   with  odd   formatting; it must survive."""
from __future__ import annotations

import os   # two spaces before this comment
import torch  ;  import torch.nn as nn

# a comment block
#   indented inside


class Net(nn.Module):   # trailing
    def __init__(self) :
        super().__init__()
        self.fc = nn.Linear( 4 ,
                             2 )  # weird spacing


def main( ) :
    model = Net( ).cuda( )   # move it
    x = torch.randn(8, 4).cuda(  non_blocking = True  )
    total = (1 +
             2)   \\
        + 3
    print( "done" , total )


if __name__ == "__main__" :
    main( )
'''


def test_untouched_code_is_byte_for_byte_the_same():
    out, report = port_source(FORMATTED.encode())
    before, after = FORMATTED.splitlines(), out.decode().splitlines()
    assert "import devicekit" == after[7]  # after the last top-of-file import
    del after[7]
    differing = [i + 1 for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b]
    assert len(before) == len(after) and differing == [21, 22]
    assert after[20] == "    model = Net( ).to(devicekit.device())   # move it"
    assert after[21] == "    x = torch.randn(8, 4).to(  devicekit.device(), non_blocking = True  )"
    assert [c.line for c in report.changes] == [21, 22]


def test_line_endings_and_encoding_are_kept():
    source = "# -*- coding: latin-1 -*-\r\nimport torch\r\nname = 'caf\xe9'\r\ny = x.cuda()\r\n"
    out, _ = port_source(source.encode("latin-1"))
    assert out.decode("latin-1") == (
        "# -*- coding: latin-1 -*-\r\nimport torch\r\nimport devicekit"
        "\r\nname = 'caf\xe9'\r\ny = x.to(devicekit.device())\r\n"
    )


def test_the_line_endings_of_a_mixed_file_are_kept():
    # libcst failed on this mix ("Internal error while parsing whitespace")
    source = b"import torch\r\nx = 1\r\n\ny = x.cuda()\n\rz = 3\r"
    out, report = port_source(source)
    assert out == (
        b"import torch\r\nimport devicekit\r\nx = 1\r\n\ny = x.to(devicekit.device())\n\rz = 3\r"
    )
    assert [c.line for c in report.changes] == [4]


def test_a_file_of_lone_carriage_returns_keeps_them():
    out, _ = port_source(b"import torch\rx = 1\ry = x.cuda()\r")
    assert out == b"import torch\rimport devicekit\rx = 1\ry = x.to(devicekit.device())\r"


@pytest.mark.parametrize(
    "source, expected",
    [
        (
            b"import torch\nx = y.cuda()\n  # the end\n",
            b"import torch\nimport devicekit\nx = y.to(devicekit.device())\n  # the end\n",
        ),
        (b"import torch_npu\nx = 1\n\t# the end\n\n  ", b"x = 1\n\t# the end\n\n  "),
        # libcst kept the last comment and dropped the lines before it
        (
            b"x = y.cuda()\n\n\n #\r#\n",
            b"import devicekit\nx = y.to(devicekit.device())\n\n\n #\r#\n",
        ),
    ],
    ids=["indented comment", "tab, blank lines, no newline", "lines before the last comment"],
)
def test_comments_after_the_last_statement_are_kept(source, expected):
    # libcst drops indented comment and blank lines after the last top-level statement
    assert port_source(source)[0] == expected


def test_a_file_libcst_panics_at_is_ported():
    # lone \r after backslashes, characters of 4 bytes: libcst's native parser panicked
    # (pyo3's PanicException, a BaseException) until the line endings were made one
    source = "try:\n\\\r\r class V\U0002e1e0\u0134:\\\ns\nexcept \\\r :\n p".encode()
    assert port_source(source) == (source, port_source(source)[1])


def test_a_panic_of_libcst_is_a_one_line_refusal(monkeypatch):
    class PanicException(BaseException):
        pass

    def panics(text):
        raise PanicException("byte index 9 is not a char boundary")

    monkeypatch.setattr(source_bytes.cst, "parse_module", panics)
    with pytest.raises(ParseFailure) as error:
        port_source(b"x = 1\ny = 2\n", "train.py")
    assert str(error.value) == (
        "train.py: does not parse with libcst, the parser devicekit port "
        "uses, though Python reads it: its parser failed (line 2): port "
        "this file by hand"
    )


def test_a_form_feed_is_kept():
    # libcst drops a form feed that starts a line
    source = b"import torch\n\x0c\ndef f():\n\x0c    return x.cuda()\n\x0cy = 1\n"
    out, _ = port_source(source)
    assert out == (
        b"import torch\nimport devicekit\n\x0c\ndef f():\n"
        b"\x0c    return x.to(devicekit.device())\n\x0cy = 1\n"
    )


@pytest.mark.parametrize(
    "source, expected",
    [
        (
            '"""Doc."""\nfrom __future__ import annotations\ny = x.cuda()\n',
            '"""Doc."""\nfrom __future__ import annotations\nimport devicekit\n'
            "y = x.to(devicekit.device())\n",
        ),
        (
            '"""Doc."""\ny = x.cuda()\n',
            '"""Doc."""\nimport devicekit\ny = x.to(devicekit.device())\n',
        ),
        ("y = x.cuda()\n", "import devicekit\ny = x.to(devicekit.device())\n"),
        (
            "import os\nimport devicekit\ny = x.cuda()\n",
            "import os\nimport devicekit\ny = x.to(devicekit.device())\n",
        ),
        (
            "import os\nd = torch.device('cuda')\nimport torch\n",
            "import os\nimport devicekit\nd = devicekit.device()\nimport torch\n",
        ),
        (
            "import os\ntry:\n    import apex\nexcept ImportError:\n    apex = None\n\n"
            "def f():\n    return x.cuda()\n",
            "import os\ntry:\n    import apex\nexcept ImportError:\n    apex = None\n"
            "import devicekit\n\ndef f():\n    return x.to(devicekit.device())\n",
        ),
    ],
)
def test_import_devicekit_added_once_where_a_reader_expects_it(source, expected):
    out, _ = port_source(source.encode())
    assert out.decode() == expected


def test_no_import_when_nothing_changes():
    source = b"import torch\nprint(torch.__version__)\n"
    assert port_source(source) == (source, port_source(source)[1])
    assert port_source(source)[1].changes == []


@pytest.mark.parametrize("script", sorted(p.name for p in CORPUS.glob("*.py")))
def test_porting_twice_changes_nothing(script):
    once, first = port_source((CORPUS / script).read_bytes(), script)
    twice, second = port_source(once, script)
    assert first.changes and twice == once and second.changes == []
    assert [(m.line, m.construct) for m in second.manual] == [
        (m.line, m.construct) for m in first.manual
    ] or "import devicekit" in once.decode()


# -- the command -----------------------------------------------------------------------

SCRIPT = """\
import torch
import torch.distributed as dist


def main():
    dist.init_process_group(backend="nccl")  # keep this comment
    model = torch.nn.Linear(4, 2).cuda()
    torch.backends.cudnn.benchmark = True
    return model
"""
MANUAL_SCRIPT = "import torch\nmodel = torch.nn.DataParallel(torch.nn.Linear(2, 2)).cuda()\n"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def run_port(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def run_port_exit(capsys, *argv):
    """run_port, with argparse's exit taken for the exit code."""
    try:
        return run_port(capsys, *argv)
    except SystemExit as stop:
        out, err = capsys.readouterr()
        return stop.code, out, err


def test_default_prints_a_diff_and_a_summary_and_writes_nothing(tmp_path, capsys):
    script = write(tmp_path / "train.py", SCRIPT)
    code, out, err = run_port(capsys, script)
    assert code == 0 and err == ""
    assert out.startswith(f"--- {script}\n+++ {script}\n@@")
    assert '-    dist.init_process_group(backend="nccl")  # keep this comment\n' in out
    assert "+    dist.init_process_group(backend=devicekit.backend())  # keep this comment\n" in out
    assert "+    model = torch.nn.Linear(4, 2).to(devicekit.device())\n" in out
    assert f"{script}:8: kept: torch.backends.cudnn.benchmark = True" in out
    assert out.rstrip().endswith(
        "1 file(s), 1 changed, 2 change(s), 0 manual item(s), 1 kept as harmless"
    )
    assert script.read_text() == SCRIPT


def test_manual_items_are_listed_and_exit_1(tmp_path, capsys):
    script = write(tmp_path / "dp.py", MANUAL_SCRIPT)
    code, out, _ = run_port(capsys, script)
    assert code == 1
    assert re.search(
        rf"^{re.escape(str(script))}:2: manual: torch.nn.DataParallel\(torch.nn.Linear"
        r"\(2, 2\)\): .*Fix: .*devicekit.wrap_ddp",
        out,
        re.M,
    )


def test_check_exit_codes_and_changes_nothing(tmp_path, capsys):
    cuda = write(tmp_path / "cuda.py", SCRIPT)
    clean = write(tmp_path / "clean.py", "import torch\nprint(torch.ones(2))\n")
    code, out, _ = run_port(capsys, "--check", cuda)
    assert code == 1 and "---" not in out
    assert f"{cuda}:6: init-process-group: " in out and cuda.read_text() == SCRIPT
    assert run_port(capsys, "--check", clean)[0] == 0
    assert run_port(capsys, "--write", cuda)[0] == 0
    assert run_port(capsys, "--check", cuda)[0] == 0, "a ported file passes the check"
    manual = write(tmp_path / "dp.py", MANUAL_SCRIPT)
    run_port(capsys, "--write", manual)
    assert run_port(capsys, "--check", manual)[0] == 1, "what needs a hand stays flagged"


def test_write_rewrites_in_place(tmp_path, capsys):
    script = write(tmp_path / "train.py", SCRIPT)
    script.chmod(0o750)
    code, out, _ = run_port(capsys, "--write", tmp_path)
    assert code == 0 and "---" not in out
    text = script.read_text()
    assert "import devicekit\n" in text and ".to(devicekit.device())" in text
    assert (script.stat().st_mode & 0o777) == 0o750
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"], "no temporary left"


def test_out_keeps_the_layout_and_leaves_inputs_alone(tmp_path, capsys):
    src = tmp_path / "project"
    write(src / "train.py", SCRIPT)
    write(src / "pkg" / "model.py", "import torch\nnet = torch.nn.Linear(2, 2).cuda()\n")
    write(src / "pkg" / "util.py", "def f():\n    return 1\n")
    write(src / "notes.txt", "not python")
    write(src / "__pycache__" / "skip.py", "x = y.cuda()\n")
    out_dir = tmp_path / "ported"
    code, _out, _ = run_port(capsys, "--out", out_dir, src)
    assert code == 0
    written = sorted(str(p.relative_to(out_dir)) for p in out_dir.rglob("*") if p.is_file())
    assert written == ["pkg/model.py", "pkg/util.py", "train.py"]
    assert (out_dir / "pkg" / "util.py").read_text() == "def f():\n    return 1\n"
    assert ".to(devicekit.device())" in (out_dir / "pkg" / "model.py").read_text()
    assert (src / "train.py").read_text() == SCRIPT


def test_report_json(tmp_path, capsys):
    script = write(tmp_path / "a.py", SCRIPT)
    dp = write(tmp_path / "b.py", MANUAL_SCRIPT)
    report_path = tmp_path / "report.json"
    code, _, _ = run_port(capsys, "--report", report_path, script, dp)
    assert code == 1
    report = json.loads(report_path.read_text())
    assert report["mode"] == "diff"
    first, second = report["files"]
    assert first["path"] == str(script) and first["changed"] is True
    assert first["changes"] == [
        {
            "line": 6,
            "rule": "init-process-group",
            "before": 'dist.init_process_group(backend="nccl")',
            "after": "dist.init_process_group(backend=devicekit.backend())",
            "rules": ["init-process-group"],
        },
        {
            "line": 7,
            "rule": "cuda-method",
            "before": "torch.nn.Linear(4, 2).cuda()",
            "after": "torch.nn.Linear(4, 2).to(devicekit.device())",
            "rules": ["cuda-method"],
        },
    ]
    assert first["info"] == [
        {
            "line": 8,
            "construct": "torch.backends.cudnn.benchmark = True",
            "note": first["info"][0]["note"],
            "also": [],
        }
    ]
    [manual] = second["manual"]
    assert manual["line"] == 2 and manual["construct"].startswith("torch.nn.DataParallel(")
    assert "DDP" in manual["why"] and "devicekit.wrap_ddp" in manual["fix"]
    assert report["summary"] == {
        "files": 2,
        "files_changed": 2,
        "changes": 3,
        "manual": 1,
        "info": 1,
        "exit_code": 1,
        "by_rule": {"cuda-method": 2, "init-process-group": 1},
    }


@pytest.mark.parametrize("mode", [[], ["--write"], ["--check"]])
def test_missing_path_is_bad_input(tmp_path, capsys, mode):
    good = write(tmp_path / "good.py", SCRIPT)
    report = tmp_path / "r.json"
    code, out, err = run_port(capsys, *mode, "--report", report, good, tmp_path / "nope.py")
    assert code == 2 and out == ""
    assert err == f"devicekit port: error: {tmp_path / 'nope.py'}: no such file or directory\n"
    assert good.read_text() == SCRIPT and not report.exists()


@pytest.mark.parametrize("mode", [["--write"], ["--out", "OUT"]])
def test_a_file_that_does_not_parse_stops_everything(tmp_path, capsys, mode):
    first = write(tmp_path / "src" / "a_first.py", SCRIPT)
    broken = write(tmp_path / "src" / "b_broken.py", "def f(:\n    pass\n")
    last = write(tmp_path / "src" / "c_last.py", SCRIPT)
    mode = [str(tmp_path / "out") if m == "OUT" else m for m in mode]
    code, out, err = run_port(capsys, *mode, "--report", tmp_path / "r.json", tmp_path / "src")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"devicekit port: error: {broken}: does not parse: ")
    assert "(line 1)" in err
    assert first.read_text() == SCRIPT and last.read_text() == SCRIPT
    assert not (tmp_path / "out").exists() and not (tmp_path / "r.json").exists()


def test_a_nul_byte_is_refused_with_its_line():
    # was "does not parse: source code string cannot contain null bytes (line None)"
    with pytest.raises(ParseFailure) as error:
        port_source(b"import torch\nx = 1\n\x00\n", "train.py")
    message = assert_usage_line(error.value, ["train.py"])
    assert message == (
        "train.py: does not parse: it contains a NUL byte (line 3): it is not a "
        "Python source file, or it was saved as UTF-16: save it as UTF-8 text"
    )


@pytest.mark.parametrize(
    "source, says",
    [
        (b"x = 1\ny = '\xe9'\n", "is not UTF-8 text: byte 0xe9 at line 2 cannot be decoded"),
        (b"# \xff\nx = 1\n", "is not UTF-8 text: byte 0xff at line 1"),  # was a traceback
        (
            b"#!/usr/bin/env python\n# coding: nope\n",
            "declares an encoding Python does not know, 'nope' (line 2)",
        ),  # was "(line 0)"
        (
            codecs.BOM_UTF8 + b"# coding: latin-1\n",
            "starts with a UTF-8 byte-order mark but declares encoding 'latin-1' (line 1)",
        ),
        ("x = 1\n".encode("utf-16"), "NUL byte (line 1)"),
        (
            b"\n\t \\\r\n",
            "does not parse with libcst, the parser devicekit port uses, though "
            "Python reads it: tokenizer error: unexpected end of file after a line "
            "continuation (line 2)",
        ),
        # RecursionError tracebacks: from Python's parser, and from libcst's visitors
        (
            b"x = " + b"+".join([b"a"] * 5000) + b"\n",
            "nests too deeply for Python's parser (line 1)",
        ),
        (b"y = 1\nx = " + b"-" * 900 + b"1\n", "nests too deeply for devicekit port (line 2)"),
        (
            b"if x:\n    a = 0\n"
            + b"".join(b"elif x == %d:\n    a = %d\n" % (i, i) for i in range(1, 1000)),
            "(line 2000)",
        ),
    ],
    ids=[
        "latin-1 byte",
        "byte in a comment",
        "unknown encoding",
        "BOM and latin-1",
        "UTF-16",
        "backslash at the end",
        "a+a+...",
        "----1",
        "elif x 1000",
    ],
)
def test_unreadable_sources_say_what_and_where(source, says):
    # Python's default recursion limit, as `devicekit port` runs with: how deep the parser
    # and libcst may nest depends on it, and a Hypothesis test that ran before in this
    # worker may have left it raised.
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        with pytest.raises(ParseFailure) as error:
            port_source(source, "train.py")
    finally:
        sys.setrecursionlimit(limit)
    assert says in assert_usage_line(error.value, ["train.py"])


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--report", "a.py", "a.py"], "a.py: --report would overwrite an input"),
        (
            ["--report", "b.py", "a.py"],
            "b.py: --report would write JSON over a Python file: name a .json file",
        ),
        (
            ["--report", "a.py/r.json", "a.py"],
            "a.py/r.json: --report cannot be written: a.py is not a folder",
        ),
        # root passes os.access there: the diff was printed, then the write failed
        (
            ["--report", "/proc/r.json", "a.py"],
            "/proc/r.json: --report cannot be written: /proc cannot hold files "
            "(No such file or directory)",
        ),
        (
            ["--out", "/proc/o", "a.py"],
            "/proc/o: --out cannot be written: /proc cannot hold files (No such file or directory)",
        ),
        (["--out", "", "a.py"], "--out '': give a folder"),
        (
            ["--out", "o/p", "--report", "o", "a.py"],
            "o: --report would stand where --out o/p "
            "writes a folder: name a file outside it, or "
            "in it",
        ),  # was refused after writing o/p/a.py
        (
            ["--report", "r\0.json", "a.py"],
            "r\\x00.json: --report is not a usable path (embedded null byte)",
        ),  # was a ValueError traceback
        # was refused only when writing, after making the folder o/
        (
            ["--out", "o/" + "x" * 300, "a.py"],
            "o/" + "x" * 300 + ": --out is not a usable path (File name too long)",
        ),
        (["a\nb.py"], "a\\nb.py: no such file or directory"),
        (["a\0b.py"], "a\\x00b.py: no such file or directory"),
        ([""], "'': an empty path: give .py files or folders of them"),  # it ported the folder
        (["x" * 300 + ".py"], "x" * 300 + ".py: not a usable path (File name too long)"),
        (
            ["--wr", "--check", "a.py"],
            "argument --check: not allowed with argument --write (see: devicekit port --help)",
        ),
    ],
    ids=[
        "report over the input",
        "report over a script",
        "report under a file",
        "report where no file can be made",
        "out where no file can be made",
        "empty out",
        "report where out writes",
        "NUL in report",
        "out name too long",
        "newline in a name",
        "NUL in a name",
        "empty path",
        "name too long",
        "two modes",
    ],
)
def test_bad_command_lines_are_one_line_and_change_nothing(
    tmp_path, monkeypatch, capsys, argv, says
):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "a.py", SCRIPT)
    code, out, err = run_port_exit(capsys, *argv)
    assert (code, out) == (2, "") and err.count("\n") == 1, (code, out, err)
    assert err == f"devicekit port: error: {says}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.py"]
    assert (tmp_path / "a.py").read_text() == SCRIPT


def test_paths_may_come_after_a_flag(tmp_path, capsys):
    # argparse took a path after --check for an unrecognized argument
    cuda, clean = write(tmp_path / "cuda.py", SCRIPT), write(tmp_path / "clean.py", "x = 1\n")
    code, out, err = run_port(capsys, clean, "--check", cuda)
    assert (code, err) == (1, "") and f"{cuda}:6: init-process-group: " in out


def test_out_where_a_file_stands_for_a_folder_is_refused_before_writing(tmp_path, capsys):
    write(tmp_path / "src" / "a.py", SCRIPT)
    write(tmp_path / "src" / "pkg" / "b.py", SCRIPT)
    write(tmp_path / "out" / "pkg", "a file")
    code, _, err = run_port(capsys, "--out", tmp_path / "out", tmp_path / "src")
    assert code == 2 and err == (
        f"devicekit port: error: {tmp_path / 'out' / 'pkg' / 'b.py'}: "
        f"--out cannot write it: {tmp_path / 'out' / 'pkg'} is a file\n"
    )
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["pkg"]


def test_out_where_a_folder_stands_for_a_later_file_writes_nothing(tmp_path, capsys):
    write(tmp_path / "src" / "a.py", SCRIPT)
    write(tmp_path / "src" / "pkg" / "b.py", SCRIPT)
    (tmp_path / "out" / "pkg" / "b.py").mkdir(parents=True)
    code, _, err = run_port(capsys, "--out", tmp_path / "out", tmp_path / "src")
    assert code == 2 and err == (
        f"devicekit port: error: {tmp_path / 'out' / 'pkg' / 'b.py'}: "
        "--out cannot write it: a folder stands there\n"
    )
    assert not (tmp_path / "out" / "a.py").exists()  # was written before the refusal


def test_write_refuses_a_pipe(tmp_path, capsys):
    pipe = tmp_path / "pipe.py"
    os.mkfifo(pipe)

    def feed():
        with open(pipe, "wb") as stream:  # opens once the port opens the pipe to read it
            stream.write(SCRIPT.encode())

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    code, _, err = run_port(capsys, "--write", pipe)
    feeder.join(timeout=10)
    assert code == 2 and err == (
        f"devicekit port: error: {pipe}: --write rewrites regular files "
        "only (this is a pipe or a device): use --out DIR\n"
    )
    assert pipe.is_fifo()


def test_out_over_the_inputs_is_refused(tmp_path, capsys):
    write(tmp_path / "train.py", SCRIPT)
    code, _, err = run_port(capsys, "--out", tmp_path, tmp_path / "train.py")
    assert code == 2 and "--out would overwrite an input" in err


def test_a_folder_without_python_is_bad_input(tmp_path, capsys):
    write(tmp_path / "notes.txt", "text")
    code, _, err = run_port(capsys, tmp_path)
    assert code == 2 and err == f"devicekit port: error: {tmp_path}: no .py files in this folder\n"


def test_the_porting_code_does_not_import_torch():
    # devicekit/__init__.py imports torch; the port package alone must not.
    probe = textwrap.dedent(f"""\
        import sys, types
        package = types.ModuleType("devicekit")
        package.__path__ = [{str(Path(ROOT) / "devicekit")!r}]
        sys.modules["devicekit"] = package
        from devicekit.port.cli import main
        from devicekit.port import port_source
        port_source(b"import torch\\nx = y.cuda()\\n")
        print("torch" in sys.modules)
    """)
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_environ(),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


# -- the corpus --------------------------------------------------------------------------

# What `devicekit port` reports for each corpus script: manual items and kept constructs.
CORPUS_REPORTS = {
    "ddp_trainer.py": ([], []),
    "gpt_amp.py": (
        [],
        ["torch.backends.cuda.matmul.allow_tf32 = True", "torch.backends.cudnn.allow_tf32 = True"],
    ),
    "imagenet_style.py": (
        ["torch.nn.DataParallel(model)"],
        ["cudnn.deterministic = True; cudnn.benchmark = True"],
    ),
    "spawn_checkpoint.py": ([], []),
    # the CUDA-only originals of examples/
    "spawn_config.py": ([], []),
    "launch_local_rank.py": ([], []),
    "gpt_pretrain.py": ([], ["torch.backends.cuda.matmul.allow_tf32 = True"]),
    "finetune_sampler.py": ([], []),
    "nanogpt_style.py": (
        [],
        ["torch.backends.cuda.matmul.allow_tf32 = True", "torch.backends.cudnn.allow_tf32 = True"],
    ),
    "rank_as_device.py": ([], []),
    "fsdp2_blocks.py": ([], []),
    "fsdp1_wrap.py": ([], []),
    "device_questions.py": ([], []),
    # a project on a model library (timm's idioms): ported, not run
    "library_project.py": (
        [],
        [
            "apex_amp.scale_loss(loss, optimizer); apex_amp.state_dict(); "
            'apex_amp.initialize(model, optimizer, opt_level="O1")'
        ],
    ),
    # Ascend-only, in the style of ModelZoo's scripts
    "ascend_ddp.py": ([], []),
}


def test_corpus_reports(tmp_path, capsys):
    code, _, _ = run_port(capsys, "--report", tmp_path / "r.json", CORPUS)
    assert code == 1, "imagenet_style.py keeps its nn.DataParallel branch"
    report = json.loads((tmp_path / "r.json").read_text())
    seen = {Path(f["path"]).name: f for f in report["files"]}
    for name, (manual, info) in CORPUS_REPORTS.items():
        assert seen[name]["changes"], name
        assert [m["construct"] for m in seen[name]["manual"]] == manual, name
        assert [i["construct"] for i in seen[name]["info"]] == info, name
    for entry in report["files"]:
        code = ast.parse(port_source(Path(entry["path"]).read_bytes())[0])
        left = {
            ast.unparse(node)
            for node in ast.walk(code)
            if (isinstance(node, ast.Attribute) and ast.unparse(node) == "torch.cuda")
            or (isinstance(node, ast.Name) and node.id == "torch_npu")
            or (isinstance(node, ast.alias) and node.name.startswith("torch_npu"))
            or (isinstance(node, ast.Constant) and node.value in ("nccl", "hccl", "cuda"))
        }
        assert left == set(), entry["path"]


# -- the corpus, ported and run on the CPU --------------------------------------------------

RUN_TIMEOUT_S = 240
GROUP_TIMEOUT_S = 900  # a group runs up to ten scripts one after another


@pytest.fixture(scope="module")
def ported_corpus(tmp_path_factory):
    """The corpus ported by the command into a fresh folder (no hand edits)."""
    out = tmp_path_factory.mktemp("ported")
    assert main(["--out", str(out), str(CORPUS)]) == 1  # 1: the DataParallel branch
    return out


@pytest.fixture(scope="module")
def on_torchrun(ported_corpus, tmp_path_factory):
    """The ported scripts that torchrun starts, each with 2 CPU ranks under one torchrun
    (support/run_scripts.py): ddp_trainer's, imagenet_style's, gpt_amp's,
    launch_local_rank's, gpt_pretrain's, finetune_sampler's, nanogpt_style's and
    fsdp1_wrap's runs; ddp_trainer and gpt_pretrain run again, resuming."""
    folder = tmp_path_factory.mktemp("on_torchrun")
    # the pretrained backbone file finetune_sampler loads
    sys.path.insert(0, str(CORPUS))
    try:
        from finetune_sampler import backbone
    finally:
        sys.path.remove(str(CORPUS))
    torch.manual_seed(5)
    torch.save(backbone().state_dict(), folder / "backbone.pt")
    snapshot, gpt = folder / "ddp_trainer" / "snapshot.pt", folder / "gpt_pretrain" / "gpt.pt"
    script = ported_corpus.joinpath
    return run_group(
        folder,
        "torchrun",
        [
            (
                "ddp_trainer",
                script("ddp_trainer.py"),
                ["--epochs", 3, "--save-every", 3, "--snapshot", snapshot],
            ),
            (
                "ddp_trainer_resumed",
                script("ddp_trainer.py"),
                ["--epochs", 5, "--snapshot", snapshot],
            ),
            (
                "imagenet_style",
                script("imagenet_style.py"),
                [
                    "--dist-url",
                    "env://",
                    "--epochs",
                    2,
                    "-b",
                    32,
                    "--seed",
                    0,
                    "--checkpoint",
                    folder / "imagenet_style" / "checkpoint.pth.tar",
                ],
            ),
            ("gpt_amp", script("gpt_amp.py"), []),
            (
                "launch_local_rank",
                script("launch_local_rank.py"),
                ["--out", folder / "launch_local_rank" / "model.pt"],
            ),
            (
                "gpt_pretrain",
                script("gpt_pretrain.py"),
                ["--iters", 20, "--save-every", 10, "--out", gpt],
            ),
            (
                "gpt_pretrain_resumed",
                script("gpt_pretrain.py"),
                ["--iters", 30, "--save-every", 10, "--out", gpt, "--resume"],
            ),
            (
                "finetune_sampler",
                script("finetune_sampler.py"),
                [
                    "--pretrained",
                    folder / "backbone.pt",
                    "--out",
                    folder / "finetune_sampler" / "finetuned.pt",
                ],
            ),
            (
                "nanogpt_style",
                script("nanogpt_style.py"),
                [f"--out_dir={folder / 'nanogpt_style'}"],
            ),
            ("fsdp1_wrap", script("fsdp1_wrap.py"), ["--save", folder / "fsdp1_wrap" / "full.pt"]),
        ],
        GROUP_TIMEOUT_S,
    )


def spawned(port):
    """The arguments with which imagenet_style and ascend_ddp spawn a rank per device."""
    args = ["--multiprocessing-distributed", "--world-size", 1, "--rank", 0]
    return [*args, "--dist-url", f"tcp://127.0.0.1:{port}"]


@pytest.fixture(scope="module")
def on_their_own(ported_corpus, tmp_path_factory):
    """The ported scripts started plainly, one after another in one process (support/
    run_scripts.py), each starting its ranks its own way (mp.spawn, now devicekit.launch:
    2 CPU ranks) or running alone: imagenet_style's (and its resumed run), gpt_amp's,
    spawn_checkpoint's, spawn_config's, nanogpt_style's, rank_as_device's and ascend_ddp's
    (alone and spawned). The hard-coded master ports (spawn_config's 8888,
    rank_as_device's 12345) yield to a free one given in the environment."""
    folder = tmp_path_factory.mktemp("on_their_own")
    script = ported_corpus.joinpath
    imagenet = folder / "imagenet_style" / "checkpoint.pth.tar"
    common = ["--epochs", 2, "--amp"]
    return run_group(
        folder,
        "python",
        [
            (
                "imagenet_style",
                script("imagenet_style.py"),
                [
                    *spawned(find_free_port()),
                    "--epochs",
                    2,
                    "-b",
                    32,
                    "--seed",
                    0,
                    "--checkpoint",
                    imagenet,
                ],
            ),
            (
                "imagenet_style_resumed",
                script("imagenet_style.py"),
                [
                    *spawned(find_free_port()),
                    "--resume",
                    imagenet,
                    "--epochs",
                    3,
                    "--checkpoint",
                    folder / "imagenet_style_resumed" / "again.pth.tar",
                ],
            ),
            ("gpt_amp", script("gpt_amp.py"), []),
            (
                "spawn_checkpoint",
                script("spawn_checkpoint.py"),
                [folder / "spawn_checkpoint" / "ckpt.pt"],
            ),
            (
                "spawn_config",
                script("spawn_config.py"),
                ["--out", folder / "spawn_config" / "model.pt"],
            ),
            (
                "nanogpt_style",
                script("nanogpt_style.py"),
                [f"--out_dir={folder / 'nanogpt_style'}"],
            ),
            ("rank_as_device", script("rank_as_device.py"), []),
            (
                "ascend_ddp_alone",
                script("ascend_ddp.py"),
                [*common, "--save", folder / "ascend_ddp_alone" / "model.pt"],
            ),
            (
                "ascend_ddp",
                script("ascend_ddp.py"),
                [*spawned(find_free_port()), *common, "--save", folder / "ascend_ddp" / "model.pt"],
            ),
        ],
        GROUP_TIMEOUT_S,
        environ=child_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=find_free_port()),
    )


def standin_env():
    return child_env(DEVICEKIT_SIMULATE="npu", DEVICEKIT_DEVICE=None)


PROBE = TESTS / "npu_standin" / "branch_probe.py"
DEVICE_QUESTIONS = TESTS / "support" / "device_questions.py"


@pytest.fixture(scope="module")
def on_the_npu_stand_in(ported_corpus, tmp_path_factory):
    """The ported scripts under one torchrun with 2 ranks of the npu stand-in
    (support/run_scripts.py): fsdp2_blocks's run, and nanogpt_style's and ascend_ddp's
    under branch_probe.py (which autocasts they entered, how often they synchronized)."""
    folder = tmp_path_factory.mktemp("on_the_npu_stand_in")
    script = ported_corpus.joinpath
    return run_group(
        folder,
        "torchrun",
        [
            (
                "fsdp2_blocks",
                script("fsdp2_blocks.py"),
                ["--ckpt", folder / "fsdp2_blocks" / "ckpt"],
            ),
            (
                "nanogpt_style",
                [PROBE, script("nanogpt_style.py")],
                ["--max_iters=10", f"--out_dir={folder / 'nanogpt_style'}"],
            ),
            (
                "ascend_ddp",
                [PROBE, script("ascend_ddp.py")],
                [
                    "--dist-url",
                    "env://",
                    "--epochs",
                    2,
                    "--amp",
                    "--save",
                    folder / "ascend_ddp" / "model.pt",
                ],
            ),
        ],
        GROUP_TIMEOUT_S,
        environ=standin_env(),
    )


def losses(pattern, text):
    """The numbers `pattern` captures in `text` (ranks share one stdout: lines may run
    together, so patterns are not anchored)."""
    return [float(x) for x in re.findall(pattern, text)]


@pytest.mark.slow
def test_check_is_clean_on_the_ported_corpus(ported_corpus, tmp_path, capsys):
    code, out, _ = run_port(capsys, "--check", "--report", tmp_path / "r.json", ported_corpus)
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["summary"]["changes"] == 0, out
    assert [m["construct"] for f in report["files"] for m in f["manual"]] == [
        "torch.nn.DataParallel(model)"
    ] and code == 1


@pytest.mark.slow
def test_ddp_trainer_runs_under_torchrun_and_resumes(on_torchrun):
    first = on_torchrun.ran("ddp_trainer")
    for rank in (0, 1):
        values = losses(
            rf"\[rank {rank}\] epoch \d \| steps 8 \| loss (\d+\.\d{{5}})", first.stdout
        )
        assert len(values) == 3 and values[-1] < values[0] / 5, first.stdout
    assert (on_torchrun.folder / "ddp_trainer" / "snapshot.pt").exists()
    second = on_torchrun.ran("ddp_trainer_resumed")
    assert second.stdout.count("resumed from the snapshot at epoch 3") == 2, second.stdout
    assert re.findall(r"\[rank \d\] epoch (\d)", second.stdout).count("4") == 2


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torchrun", "own"])
def test_imagenet_style_runs(on_torchrun, on_their_own, launcher):
    group = on_torchrun if launcher == "torchrun" else on_their_own
    result, folder = group.ran("imagenet_style"), group.folder / "imagenet_style"
    accuracies = re.findall(r"validation top-1 (\d+\.\d+) % of 128 images", result.stdout)
    # two ranks, two epochs: each epoch's accuracy the same on both ranks, whichever order
    # their lines come in (one rank's after the other's under torchrun, mixed when spawned)
    pairs = sorted(accuracies)
    assert len(accuracies) == 4 and pairs[0::2] == pairs[1::2], result.stdout
    checkpoint = folder / "checkpoint.pth.tar"
    assert checkpoint.exists() and (folder / "model_best.pth.tar").exists()
    if launcher == "own":  # resume: the checkpoint is mapped to each rank's device
        resumed = group.ran("imagenet_style_resumed")
        assert resumed.stdout.count(f"resumed {checkpoint} at epoch 2") == 2


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torchrun", "own"])
def test_gpt_amp_runs(on_torchrun, on_their_own, launcher):
    result = (on_torchrun if launcher == "torchrun" else on_their_own).ran("gpt_amp")
    processes = 2 if launcher == "torchrun" else 1
    assert "60 iterations in " in result.stdout and f"on {processes} process(es)" in result.stdout
    [(final, first)] = re.findall(r"final loss (\d+\.\d+) \(first (\d+\.\d+)\)", result.stdout)
    assert float(final) < float(first) / 4, result.stdout


# The scripts that start their own ranks (mp.spawn, now devicekit.launch) run their own way
# only: a ported script under torchrun is imagenet_style's, gpt_amp's, gpt_pretrain's,
# finetune_sampler's, nanogpt_style's and ascend_ddp's run (on the npu stand-in).


@pytest.mark.slow
def test_spawn_checkpoint_runs(on_their_own):
    result = on_their_own.ran("spawn_checkpoint")
    for rank in (0, 1):
        [(first, last)] = re.findall(
            rf"rank {rank}: loss (\d+\.\d{{4}}) -> (\d+\.\d{{4}})", result.stdout
        )
        assert float(last) < float(first), result.stdout
    path = on_their_own.folder / "spawn_checkpoint" / "ckpt.pt"
    assert not path.exists(), "rank 0 removed the checkpoint after both reloaded it"


def digests(text):
    """{rank: weights digest} from the examples' `rank R/N done: weights H` lines."""
    return dict(re.findall(r"rank (\d+)/2 done: weights ([0-9a-f]{16})", text))


def assert_same_weights(result):
    found = digests(result.stdout)
    assert sorted(found) == ["0", "1"] and len(set(found.values())) == 1, result.stdout


@pytest.mark.slow
def test_spawn_config_runs(on_their_own):
    # its own mp.spawn, now devicekit.launch; the hard-coded MASTER_PORT 8888 yields to one
    # given in the environment (a free one, so that runs never collide)
    assert_same_weights(on_their_own.ran("spawn_config"))
    assert (on_their_own.folder / "spawn_config" / "model.pt").exists()


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torchrun", "launch"])
def test_launch_local_rank_runs(ported_corpus, on_torchrun, tmp_path, launcher):
    if launcher == "torchrun":
        result = on_torchrun.ran("launch_local_rank")
    else:  # torch.distributed.launch appends --local-rank=N (the script parsed only --local_rank)
        script, out = ported_corpus / "launch_local_rank.py", tmp_path / "model.pt"
        with Processes(tmp_path / launcher) as procs:
            started = start(procs, launcher, script, ["--out", out], 2, tmp_path, name=launcher)
            [result] = procs.finish_all(started, RUN_TIMEOUT_S)
        assert result.returncode == 0 and "Traceback" not in result.stderr, describe([result])
    assert_same_weights(result)
    [first, last] = losses(r"step (?:0|20) loss (\d+\.\d+)", result.stdout)
    assert last < first, result.stdout


@pytest.mark.slow
def test_gpt_pretrain_runs_and_resumes(on_torchrun):
    first = on_torchrun.ran("gpt_pretrain")
    assert_same_weights(first)
    values = losses(r"iter (?:0|10) loss (\d+\.\d+)", first.stdout)
    assert len(values) == 2 and values[1] < values[0], first.stdout
    resumed = on_torchrun.ran("gpt_pretrain_resumed")
    assert "iter 20 loss" in resumed.stdout and "iter 0 loss" not in resumed.stdout
    assert_same_weights(resumed)


@pytest.mark.slow
def test_finetune_sampler_runs(on_torchrun):
    result = on_torchrun.ran("finetune_sampler")
    assert_same_weights(result)
    accuracies = losses(r"val acc (\d+\.\d)%", result.stdout)
    assert len(accuracies) == 3 and accuracies[-1] > 50, result.stdout


def test_the_projects_own_application_code_has_nothing_cuda_only(capsys):
    """main.py, trainer/, models/ and examples/ ask devicekit for every device decision:
    `port --check` finds nothing to port in them."""
    code = main(
        [
            "--check",
            *(str(Path(ROOT) / name) for name in ("main.py", "trainer", "models", "examples")),
        ]
    )
    assert code == 0, capsys.readouterr()


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["python", "torchrun"])
def test_nanogpt_style_runs(on_torchrun, on_their_own, launcher):
    group = on_torchrun if launcher == "torchrun" else on_their_own
    result, out = group.ran("nanogpt_style"), group.folder / "nanogpt_style"
    processes = 2 if launcher == "torchrun" else 1
    [(final, first)] = re.findall(
        rf"trained on cpu in float16 on {processes} process\(es\): val loss (\d+\.\d+) "
        r"\(first (\d+\.\d+)\)",
        result.stdout,
    )
    assert float(final) < float(first) - 0.1, result.stdout
    assert (out / "ckpt.pt").exists()


@pytest.mark.slow
def test_fsdp2_blocks_runs_sharded_on_the_npu_stand_in(on_the_npu_stand_in):
    """FSDP2 per block with a bf16 policy, clip_grad_norm_ on the shards and a
    torch.distributed.checkpoint folder, ported, under torchrun on 2 ranks of the npu
    stand-in, whose allocator gives the peak memory the script prints."""
    result = on_the_npu_stand_in.ran("fsdp2_blocks")
    [(final, first, peak)] = re.findall(
        r"final loss (\d+\.\d+) \(first (\d+\.\d+)\); peak memory (\d+\.\d+) MiB",
        result.stdout,
    )
    assert float(final) < float(first) / 2, result.stdout
    assert float(peak) > 0, "the stand-in counted no npu memory"
    assert (on_the_npu_stand_in.folder / "fsdp2_blocks" / "ckpt" / ".metadata").is_file()


@pytest.mark.slow
def test_fsdp2_blocks_preflights_clean_on_the_npu_stand_in(ported_corpus, tmp_path):
    """preflight runs the torchrun script (it reads LOCAL_RANK itself) as one rank of the
    npu stand-in, over its hccl: FSDP's collectives are not reported as CPU fallbacks."""
    report = tmp_path / "report.json"
    script = ported_corpus / "fsdp2_blocks.py"
    args = ["--json", report, "--npu-stand-in", script, "--steps", 3, "--ckpt", tmp_path / "c"]
    result = subprocess.run(
        [sys.executable, "-m", "devicekit", "preflight", *map(str, args)],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "final loss" in result.stdout, result.stdout
    findings = json.loads(report.read_text())
    assert (findings["steps"], findings["findings"]) == (3, []), findings


@pytest.mark.slow
def test_fsdp1_wrap_runs_sharded_on_the_cpu(on_torchrun):
    """FSDP1 with device_id=torch.cuda.current_device(), sync_module_states=True and a
    full state dict offloaded to the host, ported, under torchrun on 2 CPU ranks; the
    saved weights load with plain torch.load."""
    result = on_torchrun.ran("fsdp1_wrap")
    [(final, first)] = re.findall(r"final loss (\d+\.\d+) \(first (\d+\.\d+)\)", result.stdout)
    assert float(final) < float(first) / 2, result.stdout
    weights = torch.load(on_torchrun.folder / "fsdp1_wrap" / "full.pt", weights_only=True)["model"]
    assert weights["out.weight"].shape == (1, 48) and len(weights) == 20, list(weights)


@pytest.mark.slow
def test_rank_as_device_runs(on_their_own):
    # its MASTER_PORT 12345 yields to a free one given in the environment
    result = on_their_own.ran("rank_as_device")
    accuracies = re.findall(r"\[GPU(\d)\] Training accuracy (\d\.\d+)", result.stdout)
    assert sorted(rank for rank, _ in accuracies) == ["0", "1"], result.stdout
    assert all(float(value) > 0.9 for _, value in accuracies), result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["alone", "own"])
def test_ascend_ddp_runs_without_torch_npu(ported_corpus, on_their_own, launcher):
    assert "torch_npu" not in (ported_corpus / "ascend_ddp.py").read_text().split('"""')[2]
    # own: its mp.spawn, now devicekit.launch: one rank per device
    name = "ascend_ddp" if launcher == "own" else "ascend_ddp_alone"
    result = on_their_own.ran(name)
    ranks = 1 if launcher == "alone" else 2
    finals = re.findall(
        r"\[rank (\d)\] epoch 1 loss \d\.\d+ accuracy (\d+\.\d) % in [\d.]+ s "
        r"on cpu",
        result.stdout,
    )
    assert len(finals) == ranks and all(float(a) > 90 for _, a in finals), result.stdout
    assert (on_their_own.folder / name / "model.pt").exists()


@pytest.fixture(scope="module")
def alone_on_the_npu_stand_in(tmp_path_factory):
    """One process on the npu stand-in (support/run_scripts.py) running, one after another:
    the unported nanogpt_style.py for 2 iterations (first: nothing imported devicekit
    before it), and support/device_questions.py."""
    folder = tmp_path_factory.mktemp("alone_on_the_npu_stand_in")
    nanogpt = ["--max_iters=2", f"--out_dir={folder / 'original'}"]
    return run_group(
        folder,
        "python",
        [
            ("original", CORPUS / "nanogpt_style.py", nanogpt),
            ("device_questions", DEVICE_QUESTIONS, []),
        ],
        RUN_TIMEOUT_S,
        environ=standin_env(),
    )


@pytest.mark.slow
def test_the_device_questions_answer_as_the_original_here_and_as_an_npu_on_the_stand_in(
    alone_on_the_npu_stand_in,
):
    """A backend chosen by dist.is_nccl_available(), `if y.is_cuda: synchronize()`, a
    loss scaler for `device.type in ("cuda",)`, an autocast without enabled=. On a CPU the
    ported code answers as the original did (gloo, fp32: a CUDA autocast does nothing
    here). On the npu stand-in the original picks gloo, computes in fp32, skips the
    synchronize and the scaler; ported, it picks hccl, autocasts in fp16 as on a GPU,
    synchronizes and scales."""
    host = ["gloo", "torch.float32", False, False]
    assert device_questions.ask() == {"original": host, "ported": host}
    result = alone_on_the_npu_stand_in.result("device_questions")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "original": host,
        "ported": ["hccl", "torch.float16", True, True],
    }


@pytest.mark.slow
def test_nanogpt_style_takes_the_accelerators_branch_on_the_npu_stand_in(
    on_the_npu_stand_in, alone_on_the_npu_stand_in
):
    """On an NPU the ported trainer autocasts on npu (in bfloat16: the NPU has it) and
    synchronizes before each timing; the original, on the same machine, cannot run."""
    result = on_the_npu_stand_in.ran("nanogpt_style")
    assert "trained on npu in bfloat16 on 2 process(es)" in result.stdout, result.stdout
    assert "using fused AdamW: True" in result.stdout
    for rank in (0, 1):
        assert (
            f"PROBE rank={rank} autocast=['npu:torch.bfloat16'] synchronize=10" in result.stdout
        ), result.stdout
    original = alone_on_the_npu_stand_in.result("original")
    assert original.returncode != 0 and "Torch not compiled with CUDA enabled" in original.stderr


@pytest.mark.slow
def test_ascend_ddp_runs_on_the_npu_stand_in_under_torchrun(on_the_npu_stand_in):
    result = on_the_npu_stand_in.ran("ascend_ddp")
    assert (on_the_npu_stand_in.folder / "ascend_ddp" / "model.pt").exists()
    for rank in (0, 1):
        [accuracy] = re.findall(
            rf"\[rank {rank}\] epoch 1 loss \d\.\d+ accuracy (\d+\.\d) % in [\d.]+ s on npu:{rank}",
            result.stdout,
        )
        assert float(accuracy) > 90, result.stdout
        assert f"PROBE rank={rank} autocast=['npu:torch.float16'] synchronize=2" in result.stdout, (
            result.stdout
        )


# -- the worked example of docs/extending.md: a port rule of one's own ---------------------------

_BARRIER_SCRIPT = """import torch.distributed as dist

dist.barrier(device_ids=[local_rank])
dist.barrier()
"""


def test_the_worked_example_of_a_port_rule(monkeypatch):
    """docs/extending/port_rule.py, in PLUGINS just before manual (its line), ports a
    barrier's device ids and reports its rule; without it the script stays as it is."""
    assert port_source(_BARRIER_SCRIPT.encode())[0] == _BARRIER_SCRIPT.encode()
    path = Path(ROOT) / "docs" / "extending" / "port_rule.py"
    spec = importlib.util.spec_from_file_location("port_rule_example", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    at = [m.__name__ for m in registry.PLUGINS].index("devicekit.port._plugins.manual")
    monkeypatch.setattr(
        registry, "PLUGINS", (*registry.PLUGINS[:at], example, *registry.PLUGINS[at:])
    )
    ported, report = port_source(_BARRIER_SCRIPT.encode(), "train.py")
    assert ported.decode() == (
        "import torch.distributed as dist\n"
        "import devicekit\n"
        "\n"
        "dist.barrier(device_ids=[local_rank] if devicekit.is_available() else None)\n"
        "dist.barrier()\n"
    )
    assert [(c.line, c.rule, c.before) for c in report.changes] == [
        (3, "barrier-device-ids", "dist.barrier(device_ids=[local_rank])")
    ]
    assert (report.manual, report.info) == ([], [])
    assert all(f"`{rule_id}`" in example.__doc__ for rule_id in example.RULES)

"""`devicekit port` on Ascend-only scripts (torch_npu, `torch.npu.*`, `.npu()`, "npu:0",
hccl): ported onto devicekit as CUDA-only scripts are, so that they run on GPUs, NPUs
and CPUs, with torch_npu's side-effect imports gone."""

import textwrap

import pytest

from devicekit.port import port_source

HEADER = "import torch\n"


def port(source: str):
    out, report = port_source(textwrap.dedent(source).encode())
    return out.decode(), report


def body(source: str) -> str:
    """The ported `source` (after `import torch`) without its import lines."""
    text, _ = port(HEADER + source)
    lines = [line for line in text.splitlines() if line not in ("import torch", "import devicekit")]
    return "\n".join(lines)


# (what, Ascend-only line, ported line)
REWRITES = [
    ("npu()", "y = x.npu()", "y = x.to(devicekit.device())"),
    (
        "npu(non_blocking)",
        "y = x.npu(non_blocking=True)",
        "y = x.to(devicekit.device(), non_blocking=True)",
    ),
    ("npu(i)", "y = x.npu(args.npu)", "y = x.to(devicekit.device(args.npu))"),
    ("to('npu')", "y = x.to('npu')", "y = x.to(devicekit.device())"),
    ("to(f'npu:{i}')", "y = x.to(f'npu:{local_rank}')", "y = x.to(devicekit.device(local_rank))"),
    ("'npu:{}'.format", "loc = 'npu:{}'.format(args.gpu)", "loc = str(devicekit.device(args.gpu))"),
    ("torch.device('npu', i)", "d = torch.device('npu', rank)", "d = devicekit.device(rank)"),
    ("'npu' string", "device = 'npu'", "device = devicekit.device_type()"),
    ("set_device", "torch.npu.set_device(loc)", "devicekit.set_device(loc)"),
    ("set_device(f'npu:{i}')", "torch.npu.set_device(f'npu:{rank}')", "devicekit.set_device(rank)"),
    ("device_count", "n = torch.npu.device_count()", "n = devicekit.device_count()"),
    ("synchronize", "torch.npu.synchronize()", "devicekit.synchronize()"),
    ("is_available", "ok = torch.npu.is_available()", "ok = devicekit.is_available()"),
    (
        "max_memory_allocated",
        "m = torch.npu.max_memory_allocated() / 2**20",
        "m = devicekit.max_memory_allocated() / 2**20",
    ),
    (
        "is_bf16_supported",
        "ok = torch.npu.is_bf16_supported()",
        "ok = devicekit.is_bf16_supported()",
    ),
    (
        "backend='hccl'",
        "dist.init_process_group(backend='hccl', rank=r, world_size=n)",
        "dist.init_process_group(backend=devicekit.backend(), rank=r, world_size=n)",
    ),
    (
        "default='hccl'",
        "p.add_argument('--dist-backend', default='hccl')",
        "p.add_argument('--dist-backend', default=devicekit.backend())",
    ),
    (
        "amp.autocast()",
        "with torch.npu.amp.autocast(): pass",
        "with devicekit.autocast(enabled=devicekit.is_available()): pass",
    ),
    (
        "amp.autocast(enabled)",
        "with torch.npu.amp.autocast(enabled=args.amp): pass",
        "with devicekit.autocast(enabled=args.amp): pass",
    ),
    (
        "autocast('npu')",
        "with torch.autocast('npu', dtype=torch.float16): pass",
        "with devicekit.autocast(enabled=devicekit.is_available(), dtype=torch.float16): pass",
    ),
    (
        "amp.GradScaler()",
        "s = torch.npu.amp.GradScaler()",
        "s = devicekit.GradScaler(enabled=True)",
    ),
    (
        "amp.GradScaler(positional)",
        "s = torch.npu.amp.GradScaler(1024.0, 2.0, 0.5, 100, True, amp)",
        "s = devicekit.GradScaler(enabled=amp, init_scale=1024.0, growth_factor=2.0, "
        "backoff_factor=0.5, growth_interval=100)",
    ),
    (
        "map_location='npu:0'",
        "c = torch.load(p, map_location='npu:0')",
        "c = torch.load(p, map_location=devicekit.device(0))",
    ),
    (
        "compile mode",
        "torch.npu.set_compile_mode(jit_compile=False)",
        'if devicekit.device_type() == "npu":\n    torch.npu.set_compile_mode(jit_compile=False)',
    ),
    (
        "set_option",
        "torch.npu.set_option({'ACL_PRECISION_MODE': 'must_keep_origin_dtype'})",
        'if devicekit.device_type() == "npu":\n'
        "    torch.npu.set_option({'ACL_PRECISION_MODE': 'must_keep_origin_dtype'})",
    ),
    (
        "allow_internal_format",
        "torch.npu.config.allow_internal_format = False",
        'if devicekit.device_type() == "npu":\n    torch.npu.config.allow_internal_format = False',
    ),
    (
        "allow_hf32",
        "torch.npu.matmul.allow_hf32 = True",
        'if devicekit.device_type() == "npu":\n    torch.npu.matmul.allow_hf32 = True',
    ),
]


@pytest.mark.parametrize("what, before, after", REWRITES, ids=[r[0] for r in REWRITES])
def test_ascend_idiom_is_ported(what, before, after):
    assert body(before + "\n") == after
    _again, report = port("import torch\nimport devicekit\n" + after + "\n")
    assert report.changes == [] and report.manual == [], "porting twice changes nothing"


def test_torch_npu_imports_go_when_nothing_reads_them():
    text, report = port("""\
        import torch
        import torch_npu
        from torch_npu.contrib import transfer_to_npu

        torch_npu.npu.set_device(0)
        x = torch.ones(2).cuda()
        """)
    assert text == textwrap.dedent("""\
        import torch
        import devicekit

        devicekit.set_device(0)
        x = torch.ones(2).to(devicekit.device())
        """)
    dropped = [c for c in report.changes if c.rule == "torch-npu-import"]
    assert [(c.line, c.before) for c in dropped] == [
        (2, "import torch_npu"),
        (3, "from torch_npu.contrib import transfer_to_npu"),
    ]


def test_a_torch_npu_import_still_read_stays_and_its_use_is_manual():
    text, report = port("""\
        import torch
        import torch_npu

        x = torch_npu.npu_format_cast(torch.ones(2).npu(), 29)
        """)
    assert "import torch_npu\n" in text and "torch.ones(2).to(devicekit.device())" in text
    [kept, item] = report.manual
    assert (kept.line, kept.construct) == (2, "import torch_npu") and "still" in kept.why
    assert item.line == 4 and "Ascend NPUs only" in item.why and "fallback" in item.fix


def test_torch_npu_imports_anywhere_go_with_the_block_they_leave_empty():
    text, report = port("""\
        import torch
        if torch.__version__ >= "1.8":
            import torch_npu
        try:
            from torch_npu.contrib import transfer_to_npu
        except ImportError:
            pass

        def to_device(x):
            import torch_npu
            return x.npu()
        """)
    assert text == textwrap.dedent("""\
        import torch
        import devicekit

        def to_device(x):
            return x.to(devicekit.device())
        """)
    assert [c.line for c in report.changes if c.rule == "torch-npu-import"] == [3, 5, 10]


def test_transfer_to_npu_stays_while_cuda_code_it_maps_remains():
    text, report = port("""\
        import torch
        from torch_npu.contrib import transfer_to_npu
        start = torch.cuda.Event(enable_timing=True)
        """)
    assert "from torch_npu.contrib import transfer_to_npu" in text
    assert [m.construct for m in report.manual] == [
        "from torch_npu.contrib import transfer_to_npu",
        "torch.cuda.Event(enable_timing=True)",
    ]


@pytest.mark.parametrize(
    "snippet, fix",
    [
        ("from torch_npu.optim import NpuFusedAdamW\nopt = NpuFusedAdamW(params)", "torch.optim"),
        ("import torch_npu\np = torch_npu.profiler.profile()", "torch.profiler"),
        ("torch.npu.set_per_process_memory_fraction(0.5)", 'device_type() == "npu"'),
    ],
)
def test_npu_only_names_without_a_portable_twin_are_manual(snippet, fix):
    _text, report = port(HEADER + snippet + "\n")
    assert report.manual and fix in report.manual[-1].fix, report.manual
    assert "torch.cuda" not in report.manual[-1].why


def test_a_setting_inside_an_expression_is_manual_not_guarded():
    _, report = port(HEADER + "mode = torch.npu.set_compile_mode(jit_compile=False) or 1\n")
    assert report.manual and 'devicekit.device_type() == "npu"' in report.manual[-1].fix

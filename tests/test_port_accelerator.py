"""`devicekit port` on the questions scripts ask about the accelerator: "is this device an
accelerator?" (`"cuda" in device`), "is there one?" (guards that refuse to run without a
GPU), "does it have bf16?", and the integer rank used as a device through calls. Each
must follow devicekit's answer, so that the ported script takes the accelerator's branch
on an NPU and still runs on a CPU."""

import textwrap

import pytest

from devicekit.port import port_source

HEADER = "import os\nimport sys\nimport torch\n"


def port(snippet: str):
    """(the ported snippet without the header and `import devicekit`, the report)."""
    out, report = port_source((HEADER + textwrap.dedent(snippet)).encode())
    text = out.decode()
    assert text.startswith(HEADER), text
    return text[len(HEADER) :].replace("import devicekit\n", "", 1), report


# (what, CUDA-only line, ported line)
BRANCHES = [
    (
        "'cuda' in device",
        "device_type = 'cuda' if 'cuda' in device else 'cpu'",
        "device_type = devicekit.device_type() if devicekit.is_accelerator(device) else 'cpu'",
    ),
    (
        "startswith('cuda')",
        'device_type = "cuda" if device.startswith("cuda") else "cpu"',
        'device_type = devicekit.device_type() if devicekit.is_accelerator(device) else "cpu"',
    ),
    (
        "device_type == 'cuda'",
        "use_fused = fused_available and device_type == 'cuda'",
        "use_fused = fused_available and device_type == devicekit.accelerator_type()",
    ),
    (
        "'cuda' == device_type",
        "on_gpu = 'cuda' == device_type",
        "on_gpu = devicekit.accelerator_type() == device_type",
    ),
    (
        "device.type == 'cuda'",
        "use_cuda = device.type == 'cuda'",
        "use_cuda = device.type == devicekit.accelerator_type()",
    ),
    (
        "device_type != 'cuda'",
        "on_host = device_type != 'cuda'",
        "on_host = device_type != devicekit.accelerator_type()",
    ),
    (
        "'cuda' not in device",
        "on_host = ('cuda' not in device)",
        "on_host = (not devicekit.is_accelerator(device))",
    ),
    (
        "device_type == 'npu'",
        "on_npu = device_type == 'npu'",
        "on_npu = device_type == devicekit.accelerator_type()",
    ),
    (
        "guarded synchronize",
        "if device_type == 'cuda':\n    torch.cuda.synchronize()",
        "if device_type == devicekit.accelerator_type():\n    devicekit.synchronize()",
    ),
    (
        "device.type in ('cuda',)",
        "scaled = device.type in ('cuda',) and amp_dtype == torch.float16",
        "scaled = device.type in (devicekit.accelerator_type(),) and amp_dtype == torch.float16",
    ),
    (
        "not in ['cuda', 'npu']",
        "on_host = device.type not in ['cuda', 'npu']",
        "on_host = device.type not in [devicekit.accelerator_type()]",
    ),
    (
        "startswith('cuda:')",
        "if device.startswith('cuda:'):\n    torch.cuda.set_device(device)",
        "if devicekit.is_accelerator(device):\n    devicekit.set_device(device)",
    ),
    (
        "x.is_cuda guarding a synchronize",
        "if out.is_cuda:\n    torch.cuda.synchronize()",
        "if devicekit.is_accelerator(out.device):\n    devicekit.synchronize()",
    ),
    (
        "not batch.is_cuda",
        "pin = not batch.is_cuda",
        "pin = not devicekit.is_accelerator(batch.device)",
    ),
    (
        "x.is_npu",
        "on_npu = next(model.parameters()).is_npu",
        "on_npu = devicekit.is_accelerator(next(model.parameters()).device)",
    ),
    (
        "is_nccl_available() choosing the backend",
        "if not torch.distributed.is_available():\n    backend = None\n"
        "elif use_gpu and torch.distributed.is_nccl_available():\n    backend = 'nccl'\n"
        "else:\n    backend = 'gloo'",
        "if not torch.distributed.is_available():\n    backend = None\n"
        "elif use_gpu and devicekit.is_available():\n    backend = devicekit.backend()\n"
        "else:\n    backend = 'gloo'",
    ),
    (
        "bf16 question",
        "dtype = 'bfloat16' if torch.cuda.is_available() and torch.cuda.is_bf16_supported() "
        "else 'float16'",
        "dtype = 'bfloat16' if devicekit.is_available() and devicekit.is_bf16_supported() "
        "else 'float16'",
    ),
]


@pytest.mark.parametrize("what, before, after", BRANCHES, ids=[b[0] for b in BRANCHES])
def test_the_accelerator_question_follows_devicekit(what, before, after):
    text, report = port(before + "\n")
    assert text == after + "\n"
    assert report.manual == [] and report.info == [], "nothing kept as 'harmless'"
    _again, second = port_source(("import devicekit\n" + HEADER + after + "\n").encode())
    assert second.changes == [] and second.manual == []


@pytest.mark.parametrize(
    "snippet, construct",
    [
        ("same = device == 'cuda:0'", "device == 'cuda:0'"),
        ("nccl = args.dist_backend == 'nccl'", "args.dist_backend == 'nccl'"),
        ("chained = a == 'cuda' == b", "a == 'cuda' == b"),
    ],
)
def test_a_comparison_whose_question_is_unclear_is_manual_not_kept(snippet, construct):
    text, report = port(snippet + "\n")
    assert text == snippet + "\n" and report.info == []
    [item] = report.manual
    assert item.construct == construct and "devicekit.is_accelerator(device)" in item.fix


@pytest.mark.parametrize(
    "snippet",
    [
        "if device.type == 'cuda':\n    start = torch.cuda.Event(enable_timing=True)\n",
        "if x.is_cuda:\n    start = torch.cuda.Event(enable_timing=True)\n",
        "if device.type in ('cuda',):\n    start = torch.cuda.Event(enable_timing=True)\n",
        "if torch.distributed.is_nccl_available():\n    v = torch.cuda.nccl.version()\n",
        "if torch.cuda.is_available():\n    major, _ = torch.cuda.get_device_capability()\n",
        "name = torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu'\n",
    ],
)
def test_a_test_guarding_cuda_only_code_is_not_widened_to_every_accelerator(snippet):
    """On an NPU the guarded CUDA call must stay skipped, as it was: the script's own way
    on, so the call is kept with that reason, not an item to change by hand."""
    text, report = port(snippet)
    assert text == snippet and report.changes == []
    assert report.manual == []
    assert any("behind the script's own test for its device" in i.note for i in report.info)


def test_cuda_only_code_whose_guard_exits_otherwise_is_still_manual():
    """`else: sys.exit('no GPU')`: the NPU run stops there, so the user must act."""
    snippet = (
        "if torch.cuda.is_available():\n    print(torch.cuda.get_device_name(0))\n"
        "else:\n    sys.exit('no GPU')\n"
    )
    text, report = port(snippet)
    assert text == snippet and report.changes == []
    [item] = report.manual
    assert item.construct == "torch.cuda.get_device_name(0)"


def test_an_is_cuda_the_script_sets_itself_is_its_own_flag():
    """`self.is_cuda = ...` is the script's attribute, not a tensor's: only its value is
    ported, and the reads of it stay (a rewrite would make `f(x) = ...`, not Python)."""
    snippet = (
        "class Trainer:\n    def __init__(self):\n"
        "        self.is_cuda = torch.cuda.is_available()\n"
        "    def step(self, x):\n        return x.cuda() if self.is_cuda else x\n"
    )
    text, _ = port(snippet)
    assert "self.is_cuda = devicekit.is_available()" in text
    assert "if self.is_cuda else x" in text


def test_equality_tells_devices_apart_in_a_script_that_names_both():
    snippet = (
        "if args.device == 'npu':\n    n = 8\nelif args.device == 'cuda':\n"
        "    n = torch.cuda.device_count()\n"
    )
    text, _ = port(snippet)
    assert text == snippet.replace("torch.cuda.device_count()", "devicekit.device_count()")


def test_guards_that_are_only_branches_stay():
    for snippet in (
        "def f():\n    if not torch.cuda.is_available():\n        return\n    return 1\n",
        "if not torch.cuda.is_available():\n    print('this will be slow')\n",
    ):
        text, report = port(snippet)
        assert "devicekit.is_available()" in text
        assert "accelerator-guard" not in {c.rule for c in report.changes}


def test_a_comparison_with_devicekits_answer_is_left_alone():
    snippet = 'if devicekit.device_type() == "cuda":\n    pass\n'
    out, report = port_source(("import devicekit\n" + snippet).encode())
    assert out.decode() == "import devicekit\n" + snippet and not report.changes


GUARDS = [
    ("assert", 'assert torch.cuda.is_available(), "we need CUDA for DDP"\nx = 1', "x = 1"),
    ("assert device_count", "assert torch.cuda.device_count() > 0\nx = 1", "x = 1"),
    (
        "if not available: exit",
        'if not torch.cuda.is_available():\n    print("needs a GPU")\n    sys.exit(1)\nx = 1',
        "x = 1",
    ),
    (
        "one-line raise",
        "def f():\n    if not torch.cuda.is_available(): raise SystemExit('GPU')\n    return 1",
        "def f():\n    return 1",
    ),
    (
        "available or exit",
        "if torch.cuda.is_available():\n    x = 1  # one GPU\nelse:\n    sys.exit('no GPU')",
        "x = 1  # one GPU",
    ),
    (
        "elif available or exit",
        "if 'RANK' in os.environ:\n    x = 0\nelif torch.cuda.is_available():\n    x = 1\n"
        "else:\n    print('Does not support training without GPU.')\n    sys.exit(1)",
        "if 'RANK' in os.environ:\n    x = 0\nelse:\n    x = 1",
    ),
    (
        "if the device asked for is cuda: assert available",
        "if device_type == 'cuda':\n    assert torch.cuda.is_available(), 'no CUDA'\nx = 1",
        "x = 1",
    ),
]


@pytest.mark.parametrize("what, before, after", GUARDS, ids=[g[0] for g in GUARDS])
def test_a_guard_that_demands_a_gpu_goes(what, before, after):
    text, report = port(before + "\n")
    assert text == after + "\n"
    assert {c.rule for c in report.changes} == {"accelerator-guard"}


def test_a_guard_that_does_more_than_stop_stays():
    text, _report = port("if not torch.cuda.is_available():\n    device = 'cpu'\n")
    assert text == "if not devicekit.is_available():\n    device = 'cpu'\n"


def test_a_half_portable_capability_question_is_left_whole_and_manual():
    line = "ok = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 8\n"
    text, report = port(line)
    assert text == line and report.changes == []
    whole = [m for m in report.manual if m.construct == line[5:].strip()]
    assert whole and "devicekit.is_bf16_supported()" in whole[0].fix


def test_pin_memory_under_an_accelerator_branch_is_left_as_it_is():
    text, _ = port(
        "if device_type == 'cuda':\n    x = x.pin_memory().to(device)\ny = y.pin_memory()\n"
    )
    assert text == (
        "if device_type == devicekit.accelerator_type():\n"
        "    x = x.pin_memory().to(device)\n"
        "y = (y.pin_memory() if devicekit.pin_memory() else y)\n"
    )


def test_a_rank_passed_through_calls_becomes_a_device_where_it_is_used():
    text, _ = port("""\
        def loss_of(batch, model, device):
            return model(batch.to(device))

        def evaluate(model, loader, where):
            return [loss_of(b, model, device=where) for b in loader]

        def worker(rank, world_size):
            evaluate(model, loader, rank)
            evaluate(model, loader, where=rank)

        torch.multiprocessing.spawn(worker, args=(2,), nprocs=2)
        """)
    assert "return model(batch.to(devicekit.device(device)))" in text


def test_a_parameter_also_given_a_device_is_not_taken_for_a_rank():
    text, _ = port("""\
        def loss_of(batch, device):
            return batch.to(device)

        def worker(rank):
            loss_of(b, rank)
            loss_of(b, torch.device("cpu"))
        """)
    assert "return batch.to(device)" in text


@pytest.mark.parametrize(
    "before, after",
    [
        (
            "x = t.to(int(os.environ['LOCAL_RANK']))",
            "x = t.to(devicekit.device(int(os.environ['LOCAL_RANK'])))",
        ),
        (
            "device = local_rank\ny = t.to(device)",
            "device = local_rank\ny = t.to(devicekit.device(device))",
        ),
        ("s = torch.GradScaler()", "s = devicekit.GradScaler(enabled=True)"),
        (
            "dl = DataLoader(ds, pin_memory=True, pin_memory_device='cuda')",
            "dl = DataLoader(ds, pin_memory=devicekit.pin_memory(), "
            "pin_memory_device=devicekit.device_type())",
        ),
    ],
    ids=["inline LOCAL_RANK", "alias of a rank", "torch.GradScaler()", "pin_memory_device"],
)
def test_more_idioms_of_real_code(before, after):
    text, _ = port(before + "\n")
    assert text == after + "\n"

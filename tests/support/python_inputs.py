"""Generated Python and broken bytes, for the property-based tests of what `devicekit port`
(tests/test_fuzz_port.py) and `devicekit preflight` (tests/test_fuzz_preflight.py) read.

Python modules come from hypothesmith (from Python's grammar and from libcst's node types),
alone (MODULES) and with CUDA (and Ascend) idioms put into their blocks (scripts()); other
inputs are any text or bytes, and valid scripts broken a byte at a time (ANY_BYTES).
"""

import ast
import codecs
import contextlib
import os
import re
import tempfile
import warnings
from pathlib import Path

import hypothesmith
import libcst as cst
from hypothesis import HealthCheck, assume, settings
from hypothesis import strategies as st

from support.paths import CORPUS

# Budgets: hypothesmith draws a module in up to 0.1 s and each port takes as long, so the
# generated-module tests try half the profile's examples (75 under "ci", 2500 under
# "long"); the others take the profile's own.
GENERATED = settings(
    max_examples=max(20, settings.default.max_examples // 2),
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
    ],
)

# CUDA-only (and Ascend-only) idioms the rewrites act on, and some they report or keep.
IDIOMS = [
    "import torch",
    "import os",
    "import torch.distributed as dist",
    "import torch_npu",
    "from torch_npu.contrib import transfer_to_npu",
    "from torch.cuda.amp import autocast, GradScaler",
    "model = model.cuda()",
    "x = x.cuda(non_blocking=True)",
    "y = x.cuda(local_rank)",
    "x = x.npu()",
    "local_rank = int(os.environ['LOCAL_RANK'])",
    "torch.cuda.set_device(local_rank)",
    "torch.npu.set_device(local_rank)",
    'dist.init_process_group("nccl")',
    'dist.init_process_group(backend="hccl", init_method="env://")',
    'device = torch.device("cuda")',
    'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")',
    "device = torch.device(f'cuda:{local_rank}')",
    "batch = batch.to(local_rank)",
    "n = torch.cuda.device_count()",
    "torch.cuda.synchronize()",
    "scaler = torch.cuda.amp.GradScaler()",
    "with torch.cuda.amp.autocast():\n    loss = model(x)",
    "if torch.cuda.is_available():\n    model = model.cuda()",
    "try:\n    import torch_npu\nexcept ImportError:\n    torch_npu = None",
    "torch.multiprocessing.spawn(train, nprocs=torch.cuda.device_count())",
    "model = torch.nn.DataParallel(model)",
    "torch.backends.cudnn.benchmark = True",
    "state = torch.load(path, map_location='cuda:0')",
    "loader = DataLoader(data, pin_memory=True)",
]
IDIOM_STATEMENTS = [cst.parse_module(idiom + "\n").body for idiom in IDIOMS]

# Whole scripts to break: the two shortest of the CUDA-only corpus, every idiom in a
# function, and a short one with every kind of line ending. Short, so that a byte changed
# at random lands somewhere that matters and each example ports quickly.
SCRIPTS = [
    (CORPUS / name).read_bytes() for name in ("launch_local_rank.py", "spawn_checkpoint.py")
] + [
    (
        '# -*- coding: utf-8 -*-\n"""Every idiom."""\n'
        + "\n".join(IDIOMS[:6])
        + "\n\n\ndef train(model, x, data, path, local_rank):\n"
        + "".join(f"    {line}\n" for idiom in IDIOMS[6:] for line in idiom.splitlines())
        + "    return model  # caf\u00e9\n"
    ).encode(),
    b"import torch\r\nmodel = torch.nn.Linear(2, 2).cuda()\r\n\r\n"
    b"def main():\n    x = torch.ones(2).cuda()\r    return model(x)\n",
]

# Without hypothesmith's targeting: under the long profile it hill-climbs towards programs
# of kilobytes, each taking it seconds to draw, and the run takes hours. Deep and long
# programs are explicit examples instead.
MODULES = st.one_of(
    hypothesmith.from_grammar(auto_target=False), hypothesmith.from_node(auto_target=False)
)
TEXT = st.text().map(lambda text: text.encode("utf-8", "surrogatepass"))
ENCODINGS = [
    "utf-8",
    "latin-1",
    "ascii",
    "cp1252",
    "utf-16",
    "utf-8-sig",
    "koi8-r",
    "nope",
    "shift_jis",
    "utf-32",
]


def parses(data: bytes, compiled: bool = True) -> bool:
    """Whether Python's compiler takes `data` as a module (nothing is run); with not
    `compiled`, whether its parser does (`return` outside a function, say, parses)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if compiled:
                compile(data, "<fuzz>", "exec", dont_inherit=True)
            else:
                ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def lines_of(data: bytes) -> int:
    """The number of lines in `data`, with Python's line ends."""
    return len(data.splitlines()) + 1


# -- scripts: hypothesmith modules with CUDA idioms in their blocks -----------------------


class _Blocks(cst.CSTVisitor):
    """Every statement list of a module: its body and each indented block's."""

    def __init__(self):
        super().__init__()
        self.blocks: list[cst.CSTNode] = []

    def visit_Module(self, node: cst.Module) -> None:
        self.blocks.append(node)

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self.blocks.append(node)


class _Insert(cst.CSTTransformer):
    """Puts statements into chosen blocks: {id(block): [(index, statements)]}."""

    def __init__(self, where: dict[int, list[tuple[int, list]]]):
        super().__init__()
        self.where = where

    def _insert(self, original, updated):
        body = list(updated.body)
        places = sorted(self.where.get(id(original), []), key=lambda place: -place[0])
        for index, statements in places:  # from the end, so each index still holds
            body[min(index, len(body)) : min(index, len(body))] = statements
        return updated.with_changes(body=body)

    leave_Module = leave_IndentedBlock = _insert


@st.composite
def scripts(draw) -> bytes:
    """A hypothesmith module with 1 to 5 idioms put into any of its blocks (at the top and
    bottom where libcst cannot parse the module)."""
    code = draw(MODULES)
    chosen = draw(st.lists(st.integers(0, len(IDIOMS) - 1), min_size=1, max_size=5))
    try:
        module = cst.parse_module(code)
    except BaseException as error:  # libcst fails at some mixes of line endings, or panics
        if not isinstance(error, Exception) and type(error).__name__ != "PanicException":
            raise
        head = "".join(IDIOMS[i] + "\n" for i in chosen[::2])
        tail = "".join(IDIOMS[i] + "\n" for i in chosen[1::2])
        script = head + code + ("" if code.endswith(("\n", "\r")) else "\n") + tail
    else:
        finder = _Blocks()
        module.visit(finder)
        where: dict[int, list[tuple[int, list]]] = {}
        for i in chosen:
            block = draw(st.sampled_from(finder.blocks))
            index = draw(st.integers(0, len(block.body)))
            where.setdefault(id(block), []).append((index, list(IDIOM_STATEMENTS[i])))
        script = module.visit(_Insert(where)).code
    data = script.encode("utf-8", "surrogatepass")
    assume(parses(data))  # an idiom before `from __future__ import ...`, say
    return data


# -- any bytes: valid scripts broken, text, anything --------------------------------------


@st.composite
def broken_scripts(draw) -> bytes:
    """A valid script with something done to it that a file can suffer: a byte inserted,
    cut or replaced, a NUL, a byte-order mark, an encoding declaration, other line endings,
    tabs for spaces, a cut short end."""
    data = draw(st.sampled_from(SCRIPTS))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(data)))
        how = draw(
            st.sampled_from(
                [
                    "insert",
                    "cut",
                    "replace",
                    "nul",
                    "bom",
                    "declare",
                    "crlf",
                    "cr",
                    "tabs",
                    "truncate",
                    "utf16",
                ]
            )
        )
        if how == "insert":
            data = data[:at] + draw(st.binary(min_size=1, max_size=3)) + data[at:]
        elif how == "cut":
            data = data[:at] + data[at + draw(st.integers(1, 20)) :]
        elif how == "replace":
            data = data[:at] + draw(st.binary(min_size=1, max_size=1)) + data[at + 1 :]
        elif how == "nul":
            data = data[:at] + b"\0" + data[at:]
        elif how == "bom":
            data = (
                draw(st.sampled_from([codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF8 * 2]))
                + data
            )
        elif how == "declare":
            data = f"# -*- coding: {draw(st.sampled_from(ENCODINGS))} -*-\n".encode() + data
        elif how == "crlf":
            data = data.replace(b"\n", b"\r\n", draw(st.integers(1, 50)))
        elif how == "cr":
            data = data.replace(b"\n", b"\r", draw(st.integers(1, 50)))
        elif how == "tabs":
            data = re.sub(rb"\n    ", b"\n\t", data, count=draw(st.integers(1, 50)))
        elif how == "truncate":
            data = data[:at]
        else:
            data = data.decode("latin-1").encode("utf-16")
    return data


ANY_BYTES = st.one_of(
    TEXT,
    st.binary(),
    broken_scripts(),
    scripts().map(lambda data: data[: len(data) // 2] + b"\0" + data[len(data) // 2 :]),
)


# -- the files, in a folder ---------------------------------------------------------------


@contextlib.contextmanager
def folder_of(files: dict[str, bytes]):
    """A temporary folder holding `files`, as the current directory."""
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as folder:
        for name, data in files.items():
            Path(folder, name).parent.mkdir(parents=True, exist_ok=True)
            Path(folder, name).write_bytes(data)
        os.chdir(folder)
        try:
            yield Path(folder)
        finally:
            os.chdir(cwd)

"""devicekit.shard (FSDP2) and the checkpoint folders of sharded models: which modules are
sharded on their own, mistakes refused with one line, and a folder read back safely (a
missing file or a hostile `.metadata` named, never run). The multi-rank runs (sharded
follows DDP, resume on 3 ranks and in one process) are in test_examples.py with the GPT
example; this file runs one process.
"""

import os
import pickle
import shutil
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn

import devicekit
from devicekit.sharding import block_modules
from support.launchers import child_env
from support.paths import REPO

TIMEOUT_S = 120


class Block(nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class Net(nn.Module):
    def __init__(self, dim=8, layers=3):
        super().__init__()
        self.embed = nn.Linear(4, dim)
        self.layers = nn.ModuleList(Block(dim) for _ in range(layers))
        self.head = nn.Linear(dim, 2)

    def forward(self, x):
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


class ConvBlock(nn.Module):
    """conv-bn + a shortcut, then ReLU: a ResNet block of `width_in` -> `width_out`."""

    def __init__(self, width_in, width_out, stride):
        super().__init__()
        self.conv = nn.Conv2d(width_in, width_out, 3, stride, 1, bias=False)
        self.bn = nn.BatchNorm2d(width_out)
        same = width_in == width_out and stride == 1
        self.shortcut = nn.Identity() if same else nn.Conv2d(width_in, width_out, 1, stride)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)) + self.shortcut(x))


class ConvNet(nn.Module):
    """Blocks of one class and two widths, as a ResNet's stages are."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(ConvBlock(3, 8, 1), ConvBlock(8, 16, 2), ConvBlock(16, 16, 1))
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.blocks(x).mean((2, 3)))


def test_the_blocks_are_the_outermost_stack_of_one_class():
    net = Net()
    assert block_modules(net) == list(net.layers)  # not the Linear inside each block's mlp
    stage = nn.Sequential(Block(), Block())
    assert block_modules(nn.Sequential(nn.Linear(8, 8), stage)) == list(stage)


def test_a_stack_of_mixed_layers_has_no_blocks_but_named_classes_do():
    mixed = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    assert block_modules(mixed) == []
    assert block_modules(mixed, ["Linear"]) == [mixed[0], mixed[2]]
    assert block_modules(mixed, [nn.ReLU]) == [mixed[1]]


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: devicekit.shard("model"), "takes a torch.nn.Module, not a str"),
        (lambda: devicekit.shard(nn.DataParallel(Net())), "already wrapped in DataParallel"),
        (lambda: devicekit.shard(Net(), blocks=["Conv2d"]), "blocks: 'Conv2d' is not a module"),
        (
            lambda: devicekit.shard(Net(), activation_checkpointing=["Attention"]),
            "activation_checkpointing: 'Attention' is not a module class of this model",
        ),
        (
            lambda: devicekit.shard(nn.Linear(4, 4), activation_checkpointing=True),
            "no repeated blocks to recompute",
        ),
        (lambda: devicekit.shard(Net(), mixed_precision="bf16"), "must be True, False or None"),
    ],
)
def test_mistakes_are_refused_before_anything_starts(call, words):
    with pytest.raises(devicekit.UsageError, match=words):
        call()


def run_python(tmp_path, code, **env):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(code))
    environ = {**child_env(), "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env={**environ, **{key: str(value) for key, value in env.items()}},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def test_shard_before_init_distributed_in_a_world_of_two_is_refused(monkeypatch):
    """A launcher started 2 ranks (the context says so) and the script shards first."""
    from devicekit import sharding

    monkeypatch.setattr(sharding.runtime, "context", lambda: SimpleNamespace(world_size=2))
    monkeypatch.setattr(sharding.dist, "is_initialized", lambda: False)
    with pytest.raises(devicekit.UsageError) as refused:
        devicekit.shard(nn.Linear(2, 2))
    assert str(refused.value) == (
        "shard() needs the process group of this run's 2 ranks: call "
        "devicekit.init_distributed() first"
    )


# One process (a group of one, joined by shard() itself): recomputed blocks give the
# unsharded model's gradients; a second shard() and wrap_ddp() on the result are refused;
# a checkpoint folder (over what a save killed before it left), and the full weights as
# one plain file.
_ONE_PROCESS = """
    import os

    import torch

    import devicekit
    from test_sharding import Net

    torch.manual_seed(0)
    plain, x = Net(), torch.randn(5, 4)
    model = Net()
    model.load_state_dict(plain.state_dict())
    model = devicekit.shard(model, mixed_precision=False, activation_checkpointing=True)
    plain(x).square().sum().backward()
    model(x).square().sum().backward()
    for (name, p), q in zip(model.named_parameters(), plain.parameters()):
        torch.testing.assert_close(p.grad.full_tensor(), q.grad, msg=name)
    for again in (devicekit.shard, devicekit.wrap_ddp):
        try:
            again(model)
        except devicekit.UsageError as error:
            print("refused:", error)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    optimizer.step()
    os.mkdir("ckpt.partial")  # a save killed after rank 1 wrote its shard
    with open("ckpt.partial/__1_0.distcp", "wb") as half:
        half.write(b"half")
    devicekit.save_checkpoint("ckpt", {"model": model, "optimizer": optimizer, "step": 7})
    devicekit.save_checkpoint("weights.pt", model)
    print("fingerprint", devicekit.fingerprint(model))

    # A sharded checkpoint resumes a DDP run, whose file resumes a sharded run.
    ddp = devicekit.wrap_ddp(Net())
    ddp_optimizer = torch.optim.AdamW(ddp.parameters(), lr=0.1)
    devicekit.load_checkpoint("ckpt", into={"model": ddp, "optimizer": ddp_optimizer})
    print("ddp from folder", devicekit.fingerprint(ddp))
    devicekit.save_checkpoint("ddp.pt", {"model": ddp, "optimizer": ddp_optimizer, "step": 8})
    again = devicekit.shard(Net(), mixed_precision=False)
    again_optimizer = torch.optim.AdamW(again.parameters(), lr=0.1)
    into = {"model": again, "optimizer": again_optimizer}
    values = devicekit.load_checkpoint("ddp.pt", into=into)
    print("sharded from file", devicekit.fingerprint(again), values)
    for p, q in zip(again.parameters(), ddp.parameters()):
        for name in ("exp_avg", "exp_avg_sq"):
            ours = again_optimizer.state[p][name].full_tensor()
            torch.testing.assert_close(ours, ddp_optimizer.state[q][name], rtol=0, atol=0)

    # A trainer's own format: the state_dicts an unsharded run saves, and back.
    weights = devicekit.model_state_dict(again)
    moments = devicekit.optimizer_state_dict(again_optimizer, again)
    torch.save({"model": weights, "optimizer": moments}, "own.pt")
    plain = Net()
    plain.load_state_dict(torch.load("own.pt", weights_only=True)["model"])
    plain_optimizer = torch.optim.AdamW(plain.parameters(), lr=0.1)
    plain_optimizer.load_state_dict(torch.load("own.pt", weights_only=True)["optimizer"])
    print("own format", devicekit.fingerprint(plain), sorted(plain_optimizer.state_dict()["state"]))
    third = devicekit.shard(Net(), mixed_precision=False)
    third_optimizer = torch.optim.AdamW(third.parameters(), lr=0.1)
    devicekit.load_model_state_dict(third, weights)
    devicekit.load_optimizer_state_dict(third_optimizer, third, moments)
    print("own format back", devicekit.fingerprint(third), len(third_optimizer.state))

    # Whole inside unsharded(): its forward passes gather nothing; sharded again after.
    with torch.no_grad(), devicekit.unsharded(third) as whole:
        inside = [type(p).__name__ for p in whole.parameters()][:1]
        expected = plain(x)
        torch.testing.assert_close(whole(x), expected)
    third(x).square().sum().backward()
    third_optimizer.step()
    print("unsharded", inside, type(next(third.parameters())).__name__)

    # A CNN already in channels_last: FSDP2 shards contiguous parameters only, so shard()
    # gives it NCHW weights, and channels_last images keep its activations channels_last.
    # compile() then trains it; plain torch.compile fails in inductor's backward there
    # (its blocks of two widths share one compiled forward, which goes dynamic).
    from test_sharding import ConvNet

    cnn = devicekit.shard(ConvNet().to(memory_format=torch.channels_last), mixed_precision=False)
    print("cnn weights contiguous", all(p.is_contiguous() for p in cnn.parameters()))
    formats = []

    def note_format(module, args, out):
        formats.append(out.is_contiguous(memory_format=torch.channels_last))

    cnn.blocks[1].register_forward_hook(note_format)
    images = torch.randn(4, 3, 16, 16).contiguous(memory_format=torch.channels_last)
    compiled = devicekit.compile(cnn)
    cnn_optimizer = torch.optim.SGD(cnn.parameters(), lr=0.1)
    for _ in range(2):
        compiled(images).square().mean().backward()
        cnn_optimizer.step()
        cnn_optimizer.zero_grad()
    torch.testing.assert_close(compiled(images), cnn(images))
    print("cnn activations channels_last", formats[:1], "compiled", type(compiled).__name__)
"""


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """(the folder the one-process run wrote in, what it printed)."""
    folder = tmp_path_factory.mktemp("one_process")
    result = run_python(folder, _ONE_PROCESS)
    assert result.returncode == 0, result.stdout + result.stderr
    return folder, result.stdout


def test_recomputed_blocks_give_the_plain_gradients_and_wrapping_twice_is_refused(one_process):
    _, printed = one_process
    assert "refused: shard() got a model that is already sharded" in printed, printed
    assert "refused: wrap_ddp() got a model sharded by devicekit.shard()" in printed, printed


def test_checkpoints_move_between_ddp_and_sharded_runs(one_process):
    """The folder a sharded run saved resumes a DDP run (its weights and AdamW moments), and
    that run's single file resumes a sharded one."""
    _, printed = one_process
    fingerprint = printed.split("fingerprint ", 1)[1].split()[0]
    assert f"ddp from folder {fingerprint}" in printed, printed
    assert f"sharded from file {fingerprint} {{'step': 8}}" in printed, printed


def test_a_trainers_own_format_saves_what_an_unsharded_run_saves_and_loads_back(one_process):
    """model_state_dict and optimizer_state_dict of a sharded model: a plain file that a
    plain model and optimizer load (the optimizer's keyed by position); loaded back into a
    sharded model with load_model_state_dict and load_optimizer_state_dict."""
    _, printed = one_process
    fingerprint = printed.split("fingerprint ", 1)[1].split()[0]
    positions = list(range(len(list(Net().parameters()))))
    assert f"own format {fingerprint} {positions}" in printed, printed
    assert f"own format back {fingerprint} {len(positions)}" in printed, printed


def test_an_unsharded_model_is_whole_inside_and_trains_sharded_after(one_process):
    _, printed = one_process
    assert "unsharded ['Parameter'] DTensor" in printed, printed


def test_a_channels_last_cnn_shards_with_nchw_weights_and_compiles(one_process):
    _, printed = one_process
    assert "cnn weights contiguous True" in printed, printed
    assert "cnn activations channels_last [True] compiled OptimizedModule" in printed, printed


def test_the_full_weights_file_loads_with_plain_torch(one_process):
    folder, printed = one_process
    model = Net()
    model.load_state_dict(torch.load(folder / "weights.pt", weights_only=True))
    assert f"fingerprint {devicekit.fingerprint(model)}" in printed, printed


def test_a_folder_loads_into_a_plain_model_and_returns_its_values(one_process):
    folder, printed = one_process
    model = Net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    values = devicekit.load_checkpoint(
        folder / "ckpt", into={"model": model, "optimizer": optimizer}
    )
    assert values == {"step": 7}
    assert f"fingerprint {devicekit.fingerprint(model)}" in printed, printed
    assert not (folder / "ckpt.partial").exists(), "the killed save's folder is left"
    assert len(optimizer.state) == len(list(model.parameters()))
    with pytest.raises(devicekit.UsageError, match=r"sharded checkpoint folder: load it into"):
        devicekit.load_checkpoint(folder / "ckpt")


@pytest.fixture
def copy(one_process, tmp_path):
    folder, _ = one_process
    shutil.copytree(folder / "ckpt", tmp_path / "ckpt")
    return tmp_path / "ckpt"


def test_a_missing_shard_file_is_named(copy):
    shard = next(p for p in copy.iterdir() if p.suffix == ".distcp")
    shard.unlink()
    with pytest.raises(devicekit.UsageError, match=rf"incomplete: {shard.name} is missing"):
        devicekit.load_checkpoint(copy, into={"model": Net()})


def test_a_missing_metadata_file_is_named(copy):
    (copy / ".metadata").unlink()
    with pytest.raises(devicekit.UsageError, match=r"incomplete: \.metadata is missing"):
        devicekit.load_checkpoint(copy, into={"model": Net()})


class _Exploit:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_a_metadata_file_that_would_run_code_is_refused_unrun(copy, tmp_path, monkeypatch):
    (copy / ".metadata").write_bytes(pickle.dumps(_Exploit()))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(devicekit.UsageError, match=r"os\.system|posix\.system"):
        devicekit.load_checkpoint(copy, into={"model": Net()})
    assert not (tmp_path / "pwned").exists()


def test_a_model_of_another_shape_names_the_first_mismatch(copy):
    with pytest.raises(devicekit.UsageError, match=r"'model\.embed\.weight' is \(8, 4\) there"):
        devicekit.load_checkpoint(copy, into={"model": Net(dim=16)})
    with pytest.raises(devicekit.UsageError, match=r"it has no 'model\.layers\.3\.norm\.weight'"):
        devicekit.load_checkpoint(copy, into={"model": Net(layers=4)})


def test_a_save_interrupted_between_its_renames_leaves_the_previous_one(copy, tmp_path):
    copy.rename(tmp_path / "ckpt.previous")  # the old folder moved aside, the new not yet in
    values = devicekit.load_checkpoint(tmp_path / "ckpt", into={"model": Net()})
    assert values == {"step": 7}


class _Kind:
    """A device kind as _precision_policy reads it."""

    def __init__(self, name, *, accelerator, bf16, native):
        self.name, self.is_accelerator = name, accelerator
        self._bf16, self._native = bf16, native

    def is_bf16_supported(self):
        return self._bf16

    def computes_bf16_natively(self):
        return self._native


@pytest.mark.parametrize(
    ("kind", "asked", "param_dtype"),
    [
        (_Kind("cpu", accelerator=False, bf16=True, native=True), None, torch.bfloat16),
        (_Kind("cpu", accelerator=False, bf16=True, native=False), None, None),
        (_Kind("cpu", accelerator=False, bf16=True, native=False), True, torch.bfloat16),
        (_Kind("cuda", accelerator=True, bf16=False, native=False), True, torch.float16),
        (_Kind("npu", accelerator=True, bf16=True, native=True), False, None),
    ],
)
def test_mixed_precision_follows_the_device_unless_asked(kind, asked, param_dtype, monkeypatch):
    """bf16 parameters (fp32 reduction) where the device computes bf16 natively; asked for,
    bf16 where it works, else fp16 on an accelerator; False keeps fp32."""
    from devicekit import sharding

    monkeypatch.setattr(sharding.runtime, "kind", lambda: kind)
    policy = sharding._precision_policy(asked)
    assert policy.param_dtype is param_dtype
    assert policy.reduce_dtype is (None if param_dtype is None else torch.float32)


def test_mixed_precision_on_a_device_with_neither_is_refused(monkeypatch):
    from devicekit import sharding

    kind = _Kind("xpu", accelerator=False, bf16=False, native=False)
    monkeypatch.setattr(sharding.runtime, "kind", lambda: kind)
    with pytest.raises(devicekit.UsageError, match="trains in neither bf16 nor fp16"):
        sharding._precision_policy(True)

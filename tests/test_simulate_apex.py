"""Ascend's apex on the stand-in (devicekit/simulate/apex_site): `python -m devicekit
simulate` puts it on PYTHONPATH only where no apex is installed, and its names and
arguments are Ascend's apex's. tests/test_apex_amp.py checks how amp behaves;
tests/ascend_team/ascend_apex_optim.py runs a model zoo style script on the stand-in's npu.

The torch_npu wheel holds no apex, so the signatures relied on are recorded below with
where they come from.
"""

import importlib.util
import inspect
import os
import sys

import pytest
from torch.optim.optimizer import required

from devicekit.simulate import ascend_apex, command
from devicekit.simulate import ascend_apex_optim as apex_optim

# -- what Ascend's apex offers, and where that comes from -------------------------------------
#
# Ascend's apex: https://gitee.com/ascend/apex, mirrored at https://github.com/Ascend/apex,
# branch master, commit 49a7994e13cc70d155adbd7b25b7a6b86e38e58e (2023-11-23). It is
# patch/npu.patch applied to NVIDIA apex at commit 4ef930c1c884fdca5f472ab2ce7cb9b505d26c1a
# (README.zh.md says which), plus src/apex/optimizers/npu_fused_*.py and lamb.py.
AMP = {
    # NVIDIA apex apex/amp/frontend.py `initialize`, with patch/npu.patch's hunk
    # "@@ -205,8 +225,17 @@" (dynamic_init_scale... before min_loss_scale; combine_grad...
    # after max_loss_scale).
    "initialize": "(models, optimizers=None, enabled=True, opt_level='O1', "
    "cast_model_type=None, patch_torch_functions=None, keep_batchnorm_fp32=None, "
    "master_weights=None, loss_scale=None, cast_model_outputs=None, num_losses=1, "
    "verbosity=1, dynamic_init_scale=65536.0, scale_growth_factor=2.0, "
    "scale_backoff_factor=0.5, scale_window=2000, min_loss_scale=None, "
    "max_loss_scale=16777216.0, combine_grad=None, combine_ddp=None, ddp_replica_count=4, "
    "user_cast_preferred=None, check_combined_tensors=None)",
    # NVIDIA apex apex/amp/handle.py (unchanged by the patch).
    "scale_loss": "(loss, optimizers, loss_id=0, model=None, delay_unscale=False, "
    "delay_overflow_check=False)",
    # NVIDIA apex apex/amp/frontend.py.
    "state_dict": "(destination=None)",
    "load_state_dict": "(state_dict)",
    # NVIDIA apex apex/amp/_amp_state.py.
    "master_params": "(optimizer)",
}
OPTIMIZERS = {  # Ascend's src/apex/optimizers/<file>: the class's __init__
    "NpuFusedSGD": "(params, lr=required, momentum=0.0, dampening=0.0, weight_decay=0.0, "
    "nesterov=False)",  # npu_fused_sgd.py (MOMENTUM_MIN, DAMPENING_DEFAULT... are 0.0)
    "NpuFusedAdam": "(params, lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0, "
    "amsgrad=False)",  # npu_fused_adam.py
    "NpuFusedAdamW": "(params, lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0.01, "
    "amsgrad=False)",  # npu_fused_adamw.py
    "NpuFusedAdadelta": "(params, lr=1.0, rho=0.9, eps=1e-06, weight_decay=0)",
    "NpuFusedLamb": "(params, lr=0.001, betas=(0.9, 0.999), eps=1e-06, weight_decay=0, "
    "adam=False, use_global_grad_norm=False)",  # npu_fused_lamb.py
    "Lamb": "(params, lr=0.001, betas=(0.9, 0.999), eps=1e-06, weight_decay=0, adam=False)",
    "NpuFusedBertAdam": "(params, lr=required, warmup=-1, t_total=-1, "
    "schedule='warmup_linear', b1=0.9, b2=0.99, e=1e-06, weight_decay=0.01, "
    "max_grad_norm=-1)",  # npu_fused_bert_adam.py: b2 and max_grad_norm differ from torch_npu's
    "NpuFusedRMSprop": "(params, lr=0.01, alpha=0.99, eps=1e-08, weight_decay=0, momentum=0, "
    "centered=False)",
    "NpuFusedRMSpropTF": "(params, lr=0.01, alpha=0.9, eps=1e-10, weight_decay=0, "
    "momentum=0.0, centered=False, decoupled_decay=False, lr_in_momentum=True)",
    "NpuFusedAdamP": "(params, lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0, "
    "delta=0.1, wd_ratio=0.1, nesterov=False)",
}


def signature(function):
    """`function`'s parameters as its source would write them, annotations left out."""
    parts = []
    for parameter in inspect.signature(function).parameters.values():
        default = parameter.default
        if default is inspect.Parameter.empty:
            parts.append(parameter.name)
        else:
            parts.append(f"{parameter.name}={'required' if default is required else repr(default)}")
    return f"({', '.join(parts)})"


def test_amp_and_the_optimizers_have_ascend_apexs_names_and_arguments():
    assert sorted(ascend_apex.__all__) == sorted(AMP)
    assert {name: signature(getattr(ascend_apex, name)) for name in AMP} == AMP
    assert sorted(apex_optim.__all__) == sorted(OPTIMIZERS)
    assert {name: signature(getattr(apex_optim, name)) for name in OPTIMIZERS} == OPTIMIZERS


# -- `python -m devicekit simulate` puts the stand-in's apex on the path where none is ----------


class Exec(Exception):
    """os.execve, stopped: its environment in args[0]."""


def pythonpath(monkeypatch):
    """The PYTHONPATH `python -m devicekit simulate -- python` would run python with."""

    def execve(program, argv, environ):
        raise Exec(environ)

    monkeypatch.setattr(command.os, "execve", execve)
    with pytest.raises(Exec) as run:
        command.main(["--", "python", "-c", "pass"])
    return run.value.args[0]["PYTHONPATH"].split(os.pathsep)


def test_simulate_puts_the_stand_ins_apex_after_its_site_where_no_apex_is_installed(monkeypatch):
    assert importlib.util.find_spec("apex") is None, "this test needs an environment without apex"
    assert pythonpath(monkeypatch)[:2] == [str(command.SITE), str(command.APEX_SITE)]
    monkeypatch.syspath_prepend(str(command.APEX_SITE))  # simulate within simulate
    assert pythonpath(monkeypatch)[:2] == [str(command.SITE), str(command.APEX_SITE)]


def test_simulate_leaves_an_installed_apex_alone(monkeypatch, tmp_path):
    (tmp_path / "apex").mkdir()
    (tmp_path / "apex" / "__init__.py").write_text("raise ImportError('never imported here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    path = pythonpath(monkeypatch)
    assert path[0] == str(command.SITE) and str(command.APEX_SITE) not in path


@pytest.fixture
def stand_in_apex(monkeypatch):
    """The apex package of apex_site, imported in this process and forgotten afterwards."""
    monkeypatch.syspath_prepend(str(command.APEX_SITE))
    import apex

    yield apex
    for name in [name for name in sys.modules if name == "apex" or name.startswith("apex.")]:
        del sys.modules[name]


def test_the_stand_ins_apex_package_offers_amp_and_optimizers_only(stand_in_apex):
    from apex import amp, optimizers

    assert amp.initialize is ascend_apex.initialize and amp.__all__ == ascend_apex.__all__
    assert optimizers.NpuFusedSGD is apex_optim.NpuFusedSGD
    assert sorted(optimizers.__all__) == sorted(OPTIMIZERS)
    assert not hasattr(stand_in_apex, "parallel") and not hasattr(optimizers, "FusedAdam")
    with pytest.raises(AttributeError, match=r"^apex\.parallel is not provided by devicekit's"):
        stand_in_apex.parallel.DistributedDataParallel  # noqa: B018
    with pytest.raises(AttributeError, match=r"^apex\.amp\.half_function is not provided"):
        amp.half_function  # noqa: B018

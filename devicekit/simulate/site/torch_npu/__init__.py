"""The npu stand-in's `torch_npu`: what `import torch_npu` gives under `python -m devicekit
simulate`, where no real torch_npu is installed.

It offers only names torch-npu 2.13.0 has (tests/test_npu_honesty.py reads the wheel): the
`npu` module, which torch_npu registers as torch.npu, and `__version__`. Any other name of
the real module is absent, so a feature check (`hasattr(torch_npu, "npu_rms_norm")`) keeps
working, and using one says in one line that it needs a real Ascend NPU.
"""

import devicekit.simulate as _simulate

if not _simulate.activate_from_environment():
    _simulate.activate()  # on PYTHONPATH without `devicekit simulate`: its defaults

import devicekit.simulate.npu_module as npu  # noqa: F401  (torch_npu.npu: torch.npu, activated)

__version__ = "2.13.0+devicekit.standin"


def __getattr__(name: str) -> object:
    raise AttributeError(
        f"torch_npu.{name} is not provided by the npu stand-in: it needs a real Ascend NPU "
        "with torch_npu 2.13.0"
    )

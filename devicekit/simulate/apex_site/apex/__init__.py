"""`apex` under `python -m devicekit simulate` where no apex is installed: Ascend's fork of
apex as Ascend's model zoo scripts use it, `amp` and `optimizers` (devicekit/simulate/
ascend_apex.py and ascend_apex_optim.py). Its other parts are absent: using one says so in
one line."""

from . import amp, optimizers

__all__ = ["amp", "optimizers"]


def __getattr__(name: str) -> object:
    raise AttributeError(
        f"apex.{name} is not provided by devicekit's stand-in of Ascend's apex (amp and "
        "optimizers are): install Ascend's apex to use it"
    )

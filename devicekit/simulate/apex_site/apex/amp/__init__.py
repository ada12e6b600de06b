"""`apex.amp` of Ascend's apex on the stand-in (devicekit/simulate/ascend_apex.py)."""

from devicekit.simulate.ascend_apex import (
    initialize,
    load_state_dict,
    master_params,
    scale_loss,
    state_dict,
)

__all__ = ["initialize", "load_state_dict", "master_params", "scale_loss", "state_dict"]


def __getattr__(name: str) -> object:
    raise AttributeError(
        f"apex.amp.{name} is not provided by devicekit's stand-in of Ascend's apex: "
        "install Ascend's apex to use it"
    )

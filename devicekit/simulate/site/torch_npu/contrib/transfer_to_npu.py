"""torch_npu.contrib.transfer_to_npu of the npu stand-in: importing it makes an unchanged
CUDA script run on `npu` (devicekit/simulate/transfer.py says what it redirects). Importing
it again changes nothing more."""

from devicekit.simulate import transfer as _transfer

__all__: list[str] = []

_transfer.install()

"""The preflight checks, one module per kind of finding, and CHECKS: their registry.

What a check provides is the Check Protocol (checks/base.py). A new check is one module
here and one line in CHECKS, whose order, most costly first, is the order of the report.
"""

from devicekit.preflight.checks import (
    autocast_device,
    cpu_fallback,
    cuda_only,
    data_dependent_shape,
    dynamic_shape,
    float64,
    host_side,
    host_sync,
    npu_operators,
    sparse_gradient,
)
from devicekit.preflight.checks.base import Check

CHECKS: tuple[Check, ...] = (
    sparse_gradient,
    npu_operators,
    cpu_fallback,
    dynamic_shape,
    host_sync,
    data_dependent_shape,
    float64,
    autocast_device,
    cuda_only,
    host_side,
)


def all_checks() -> list[Check]:
    """The checks, most costly first (CHECKS, as it is when called)."""
    return list(CHECKS)

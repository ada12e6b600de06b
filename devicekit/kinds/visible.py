"""Parsing and validating the visible-devices variables before any device call."""

import re
from collections.abc import Iterable

from devicekit.errors import UsageError

_UUID = re.compile(r"(GPU|MIG)-[0-9A-Za-z-]+")
_ID = re.compile(r"[0-9]{1,9}")


def is_device_id(entry: str) -> bool:
    """Whether `entry` is a device id as the runtimes read one: ASCII digits only ("²" and
    "٣" pass str.isdigit(), and no runtime takes them)."""
    return _ID.fullmatch(entry) is not None


def split_entries(var: str, value: str) -> list[str]:
    """The comma-separated entries of a visible-devices value (none for an empty one)."""
    value = value.strip()
    if value == "":
        return []
    entries = [item.strip() for item in value.split(",")]
    if "" in entries:
        raise UsageError(
            f"{var}={value!r} has an empty entry: write device ids separated by single "
            f"commas, e.g. {var}=0,1"
        )
    return entries


def check_distinct(var: str, value: str, entries: Iterable[str]) -> None:
    """UsageError when a device is listed twice (`1` and `01` are the same device)."""
    seen: set[tuple[int, ...] | str] = set()
    for entry in entries:
        key = (
            tuple(map(int, entry.split(".")))
            if re.fullmatch(r"[0-9.]+", entry) and all(entry.split("."))
            else entry
        )
        if key in seen:
            raise UsageError(f"{var}={value!r} lists device {entry} twice: list each device once")
        seen.add(key)


def parse_ascend(var: str, value: str) -> list[int]:
    """Parse ASCEND_RT_VISIBLE_DEVICES: distinct device ids in ascending order.

    The Ascend runtime silently drops devices after a malformed entry and reports no
    device at all for an unordered list, so each of these is an error here instead.
    """
    entries = split_entries(var, value)
    for entry in entries:
        if not is_device_id(entry):
            raise UsageError(
                f"{var}={value!r}: {entry!r} is not a device id; use non-negative integers "
                f"separated by commas, e.g. {var}=0,1,2,3"
            )
    check_distinct(var, value, entries)
    ids = [int(entry) for entry in entries]
    if ids != sorted(ids):
        raise UsageError(
            f"{var}={value!r} is not in ascending order, which the Ascend runtime rejects "
            f"(it then reports no NPU): write {var}={','.join(map(str, sorted(ids)))}"
        )
    return ids


def parse_cuda(var: str, value: str) -> list[int | str]:
    """Parse CUDA_VISIBLE_DEVICES: distinct integer ids or GPU-/MIG- UUIDs (any order)."""
    entries = split_entries(var, value)
    for entry in entries:
        if not (is_device_id(entry) or _UUID.fullmatch(entry)):
            raise UsageError(
                f"{var}={value!r}: {entry!r} is not a device id or GPU-/MIG- UUID; "
                f"CUDA ignores every device from there on. Use e.g. {var}=0,1"
            )
    check_distinct(var, value, entries)
    return [int(entry) if is_device_id(entry) else entry for entry in entries]

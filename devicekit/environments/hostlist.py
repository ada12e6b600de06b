"""Slurm's node lists (`node[01-04,07],gpu-b2`): the first host is node 0 of the step."""

import itertools
import re
from collections.abc import Iterator

from devicekit.errors import UsageError

_NAME = re.compile(r"[A-Za-z0-9._-]*")
# ASCII digits only: \d would take other scripts' digits, which no host name has.
_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")

# An entry's parts: literal text, or the (low, high) ranges of one [...], as written.
_Part = str | list[tuple[str, str]]


def first_host(variable: str, text: str) -> str:
    """The first host of the node list `text` (`node[01-04,07],gpu-b2` -> `node01`: ranges
    keep their zero padding), the whole list checked; `variable` names it in errors."""
    return next(hosts(variable, text))


def hosts(variable: str, text: str) -> Iterator[str]:
    """Every host of the node list `text`, in Slurm's order (`rack[1-2]-n[3-4]` ->
    rack1-n3, rack1-n4, rack2-n3, rack2-n4), as `scontrol show hostnames` lists them. The
    whole list is checked before the first host is given; the hosts are made as they are
    asked for, so a list of a million hosts costs nothing until it is walked."""
    entries = [_parse_entry(variable, text, entry) for entry in _entries(variable, text)]
    for parts in entries:
        choices = [[part] if isinstance(part, str) else _numbers(part) for part in parts]
        for chosen in itertools.product(*choices):
            yield "".join(chosen)


def _numbers(ranges: list[tuple[str, str]]) -> Iterator[str]:
    """The numbers of one bracket, each as wide as its range's lower bound (`08-10` -> 08,
    09, 10)."""
    for low, high in ranges:
        for number in range(int(low), int(high) + 1):
            yield f"{number:0{len(low)}d}"


def _fail(variable: str, text: str, reason: str) -> UsageError:
    return UsageError(
        f"{variable}={text!r} is not a Slurm node list ({reason}): expected host "
        "names and bracket ranges, e.g. node[01-04,07],gpu-b2"
    )


def _entries(variable: str, text: str) -> list[str]:
    """`text` split at the commas outside brackets."""
    entries, current, inside = [], "", False
    for char in text:
        if char == "[":
            if inside:
                raise _fail(variable, text, "a '[' inside brackets")
            inside = True
        elif char == "]":
            if not inside:
                raise _fail(variable, text, "a ']' without '['")
            inside = False
        elif char == "," and not inside:
            entries.append(current)
            current = ""
            continue
        current += char
    if inside:
        raise _fail(variable, text, "a '[' without ']'")
    entries.append(current)
    if not all(entries):
        raise _fail(variable, text, "an empty host name")
    return entries


def _below(high: str, low: str) -> bool:
    """Whether the number `high` is smaller than `low`, both ASCII digits of any length
    (int() refuses more than 4300 digits)."""
    high, low = high.lstrip("0") or "0", low.lstrip("0") or "0"
    return (len(high), high) < (len(low), low)


def _parse_entry(variable: str, text: str, entry: str) -> list[_Part]:
    """An entry such as `node[01-04,07]` or `rack[1-2]-n[3-4]` in parts, checked."""
    parts: list[_Part] = []
    # re.split with a group: literal text at even places, the inside of [...] at odd ones.
    for place, part in enumerate(re.split(r"\[([^\]]*)\]", entry)):
        if place % 2 == 0:
            if not _NAME.fullmatch(part):
                raise _fail(variable, text, f"{part!r} is not a host name")
            parts.append(part)
            continue
        ranges = []
        shown = f"[{part}]" if part.isprintable() else f"[{part!r}]"
        for item in part.split(","):
            match = _RANGE.fullmatch(item)
            if not match:
                raise _fail(
                    variable, text, f"{shown} holds {item!r}, not a number or a range such as 01-04"
                )
            low, high = match.group(1), match.group(2) or match.group(1)
            if _below(high, low):
                raise _fail(variable, text, f"the range {item} runs backwards")
            if len(high) > 18:
                raise _fail(variable, text, f"{item} is not a node number")
            ranges.append((low, high))
        parts.append(ranges)
    return parts

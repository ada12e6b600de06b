"""Slurm's node lists (`node[01-04,07],gpu-b2`): the first host is node 0 of the step."""

import re
from typing import List

from devicekit.errors import UsageError

_NAME = re.compile(r"[A-Za-z0-9._-]*")
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")


def first_host(variable: str, text: str) -> str:
    """The first host of the node list `text` (`node[01-04,07],gpu-b2` -> `node01`: ranges
    keep their zero padding), the whole list checked; `variable` names it in errors."""
    hosts = [_first_of_entry(variable, text, entry) for entry in _entries(variable, text)]
    return hosts[0]


def _fail(variable: str, text: str, reason: str) -> UsageError:
    return UsageError(f"{variable}={text!r} is not a Slurm node list ({reason}): expected host "
                      "names and bracket ranges, e.g. node[01-04,07],gpu-b2")


def _entries(variable: str, text: str) -> List[str]:
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


def _first_of_entry(variable: str, text: str, entry: str) -> str:
    """The first host an entry such as `node[01-04,07]` or `rack[1-2]-n[3-4]` names."""
    first = []
    # re.split with a group: literal text at even places, the inside of [...] at odd ones.
    for place, part in enumerate(re.split(r"\[([^\]]*)\]", entry)):
        if place % 2 == 0:
            if not _NAME.fullmatch(part):
                raise _fail(variable, text, f"{part!r} is not a host name")
            first.append(part)
            continue
        for item in part.split(","):
            match = _RANGE.fullmatch(item)
            if not match:
                raise _fail(variable, text, f"[{part}] holds {item!r}, not a number or "
                                            "a range such as 01-04")
            if match.group(2) is not None and int(match.group(2)) < int(match.group(1)):
                raise _fail(variable, text, f"the range {item} runs backwards")
        first.append(_RANGE.fullmatch(part.split(",")[0]).group(1))
    return "".join(first)

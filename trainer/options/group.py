"""OptionGroup: what each group of main.py's flags provides (a module of trainer.options)."""

import argparse
from typing import Protocol


class OptionGroup(Protocol):
    """A group of main.py's flags: a module with TITLE, the heading of its flags in
    --help, and add_flags(group), which adds them to the group argparse made for it.

    Optional: check(config), which refuses (UsageError naming the flag) what argparse
    cannot: ranges, flags that contradict each other, and the paths the flags name.
    trainer.options.validate calls it with the TrainConfig of the whole command line.
    """

    TITLE: str

    def add_flags(self, group: argparse._ArgumentGroup) -> None: ...

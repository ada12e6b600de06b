"""tests/port_corpus/device_questions.py asked on this process's device, as written and
after `devicekit port`: the answers of each (or the error it raised).

    python tests/support/device_questions.py     # prints them as one line of JSON
"""

import json
import sys
from pathlib import Path

import torch

import devicekit
from devicekit.port import port_source

QUESTIONS = Path(__file__).resolve().parents[1] / "port_corpus" / "device_questions.py"


def ask() -> dict[str, object]:
    """{"original": [backend, dtype, synchronized, scaled], "ported": [...]}, each
    answered on devicekit.device(); an error's one line in place of a list."""
    source = QUESTIONS.read_bytes()
    answers: dict[str, object] = {}
    for name, code in (("original", source), ("ported", port_source(source)[0])):
        space: dict[str, object] = {}
        exec(compile(code, f"{name} {QUESTIONS.name}", "exec"), space)
        model = torch.nn.Linear(4, 4).to(devicekit.device())
        x = torch.ones(2, 4, device=devicekit.device())
        try:
            answers[name] = [space["choose_backend"](True), *space["answers"](model, x)]
        except Exception as error:  # the original on a device it does not know
            answers[name] = f"{type(error).__name__}: {error}"
    return answers


if __name__ == "__main__":
    print(json.dumps(ask()), file=sys.stdout)

"""Many scenarios in one interpreter: where each scenario used to pay a new process (and its
`import torch`) only to start from a clean devicekit, one process runs them one after
another (support/scenario_child.py), each as a new process would start it:

- os.environ is the process's own plus the scenario's variables, and devicekit takes it for
  the environment the process started with;
- devicekit has no process group, kind or context, and each kind is new (no torch_npu
  import tried, no compile mode set);
- sys.argv is ["-c", *the scenario's argv];
- its code runs in a namespace of its own (the prelude's names and an empty dict `out`);
  its stdout and stderr are captured, and a SystemExit gives its exit code.

What stays is what no scenario here can undo and none depends on: what the prelude
imported and registered with torch (the npu device, a torch_npu imported once).

    with Processes(folder / "processes") as procs:
        batch = start_batch(procs, "plain", [Scenario("a", "out['x'] = 1")], env, folder)
        procs.finish_all([batch.process], TIMEOUT_S)
    outcome(batch.results(), "a")  # {"x": 1}
"""

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

CHILD = Path(__file__).with_name("scenario_child.py")


@dataclass(frozen=True)
class Scenario:
    """One scenario: its name, its code, the variables it adds and its sys.argv[1:]."""

    name: str
    code: str
    env: dict = field(default_factory=dict)
    argv: tuple = ()


@dataclass
class Batch:
    """A started process running scenarios; `results()` once it ended."""

    process: object
    results_path: Path

    def results(self):
        """{scenario name: {"out", "stdout", "stderr", "exit", "error"}} of the scenarios
        that ran (all of them unless the process died)."""
        if not self.results_path.is_file():
            return {}
        return json.loads(self.results_path.read_text(encoding="utf-8"))


def start_batch(procs, name, scenarios, env, folder, prelude="", epilogue=""):
    """Start one Python process (`procs`: a support.processes.Processes) that runs `prelude`,
    then each of `scenarios` in order, then `epilogue`, in the environment `env`."""
    folder = Path(folder)
    spec = folder / f"{name}.spec.json"
    names = [scenario.name for scenario in scenarios]
    assert len(set(names)) == len(names), f"scenario names repeat: {names}"
    spec.write_text(
        json.dumps(
            {
                "prelude": prelude,
                "epilogue": epilogue,
                "scenarios": [
                    {
                        "name": s.name,
                        "code": s.code,
                        "env": {k: str(v) for k, v in s.env.items()},
                        "argv": [str(arg) for arg in s.argv],
                    }
                    for s in scenarios
                ],
            }
        ),
        encoding="utf-8",
    )
    results = folder / f"{name}.results.json"
    argv = [sys.executable, "-c", f"exec(open({str(CHILD)!r}).read())", str(spec), str(results)]
    return Batch(procs.start(name, argv, env), results)


def result(results, name):
    """What scenario `name` left; fails naming it when its process died before it ran."""
    assert name in results, f"scenario {name!r} never ran: its process died before it"
    return results[name]


def outcome(results, name):
    """The `out` of scenario `name`, which must have run to its end."""
    found = result(results, name)
    assert found["error"] is None and found["exit"] is None, (
        f"scenario {name!r}: {found['error'] or found['exit']}\n{found['stderr']}"
    )
    return found["out"]

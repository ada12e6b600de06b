"""The child side of support.scenario_process: run the scenarios of a spec file one after
another in this interpreter, each as a new process would start them, and write what each
left to a results file (rewritten after every scenario, so a crash leaves the ones before).

Run as `python -c "exec(open(THIS_FILE).read())" SPEC RESULTS` (not by its path: this
folder first on sys.path would shadow nothing today, but nothing needs it there)."""

import contextlib
import io
import json
import os
import sys
import traceback


def fresh_devicekit(environ):
    """devicekit as a process started with `environ` finds it: no process group, no kind
    or context, each kind without what it learnt (a torch_npu import tried, a compile mode
    set). Nothing to do where devicekit is not imported (or a scenario removed it)."""
    runtime = sys.modules.get("devicekit.runtime")
    if runtime is None:
        return
    sys.modules["devicekit.distributed"].destroy_process_group()
    kinds = sys.modules["devicekit.kinds"]
    for name, kind in list(kinds._REGISTRY.items()):
        kinds._REGISTRY[name] = type(kind)()
    runtime.adopt(None, None)
    runtime._initial_environ = lambda: dict(environ)


def run_one(scenario, shared):
    """Run one scenario's code in a namespace of its own (the prelude's names and `out`);
    what it left: `out`, its stdout and stderr, the exit code of a SystemExit, the
    traceback of any other exception."""
    namespace = {**shared, "out": {}}
    stdout, stderr = io.StringIO(), io.StringIO()
    result = {"exit": None, "error": None}
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            exec(compile(scenario["code"], scenario["name"], "exec"), namespace)
        except SystemExit as stop:
            result["exit"] = 0 if stop.code is None else stop.code
        except Exception:
            result["error"] = traceback.format_exc()
    result.update(out=namespace["out"], stdout=stdout.getvalue(), stderr=stderr.getvalue())
    return result


def main(spec_path, results_path):
    with open(spec_path, encoding="utf-8") as handle:
        spec = json.load(handle)
    base = dict(os.environ)
    shared = {"__name__": "__scenario__"}
    exec(spec["prelude"], shared)
    results = {}
    for scenario in spec["scenarios"]:
        os.environ.clear()
        os.environ.update({**base, **scenario["env"]})
        sys.argv = ["-c", *scenario["argv"]]
        fresh_devicekit(os.environ)
        results[scenario["name"]] = run_one(scenario, shared)
        with open(results_path, "w", encoding="utf-8") as handle:
            json.dump(results, handle, default=repr)
    os.environ.clear()
    os.environ.update(base)
    fresh_devicekit(os.environ)
    exec(spec["epilogue"], shared)


main(*sys.argv[1:3])

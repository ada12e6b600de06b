"""Running the user's script as it is, in this process, as a world of one, recorded."""

import os
import runpy
import sys
import traceback
from collections.abc import Callable
from datetime import timedelta

import torch.distributed as dist
import torch.multiprocessing

from devicekit import runtime
from devicekit.environments import ALL_VARIABLES
from devicekit.errors import say, usage_line
from devicekit.preflight.recording import Recorder, Recording, StopRecording
from devicekit.preflight.sites import is_user_file


class Outcome:
    """How the script ended: "finished", "stopped" (--steps reached), "interrupted"
    (Ctrl-C), "exited N" or "raised"; for "raised", the error and where the user's code
    raised it."""

    def __init__(
        self, state: str, error: BaseException | None = None, where: str = "", exit_code: int = 0
    ):
        self.state, self.error, self.where, self.exit_code = state, error, where, exit_code


# What torchrun gives a world of one: a script that reads LOCAL_RANK itself finds it.
_RANK_OF_ONE = {
    "RANK": "0",
    "LOCAL_RANK": "0",
    "WORLD_SIZE": "1",
    "LOCAL_WORLD_SIZE": "1",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500",
}


def _backend_here(backend: object) -> str:
    """The backend the script asked for where this machine has it (gloo, or the npu
    stand-in's hccl), else gloo: a world of one needs no GPU's backend to be recorded."""
    if backend is not None and dist.is_backend_available(str(backend)):
        return str(backend)
    return "gloo"


def _world_of_one() -> Callable[[], object]:
    """The script sees one rank of a torchrun run (_RANK_OF_ONE), devicekit's launcher
    detection sees no launcher at all (devicekit.launch() and a script's own mp.spawn run
    one rank here), and init_process_group joins a group of one on the backend asked for."""
    for name in ALL_VARIABLES:
        os.environ.pop(name, None)
    os.environ.update(_RANK_OF_ONE)
    os.environ["DEVICEKIT_NPROC_PER_NODE"] = "1"
    undo: list[Callable[[], None]] = []

    def patch(owner: object, name: str, replacement: object) -> None:
        original = getattr(owner, name)
        setattr(owner, name, replacement)
        undo.append(lambda: setattr(owner, name, original))

    def spawn(
        fn: Callable[..., object],
        args: tuple[object, ...] = (),
        nprocs: int = 1,
        join: bool = True,
        daemon: bool = False,
        start_method: str = "spawn",
    ) -> None:
        fn(0, *args)

    init = dist.init_process_group

    def init_process_group(
        backend: str | None = None,
        *args: object,
        timeout: timedelta | None = None,
        **kwargs: object,
    ) -> None:
        init(
            backend=_backend_here(backend),
            store=dist.HashStore(),
            rank=0,
            world_size=1,
            timeout=timeout,
        )

    def launcher_environ() -> dict[str, str]:
        return {k: v for k, v in os.environ.items() if _RANK_OF_ONE.get(k) != v}

    patch(torch.multiprocessing, "spawn", spawn)
    patch(dist, "init_process_group", init_process_group)
    patch(runtime, "launcher_environ", launcher_environ)
    return lambda: [step() for step in reversed(undo)]


def run(
    target: str, args: list[str], module: bool, recording: Recording, max_steps: int | None
) -> Outcome:
    """Run `target` (a script path, or a module name when `module`) with `args` as its
    sys.argv[1:], recording into `recording`."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [target, *args]
    sys.path.insert(0, os.getcwd() if module else os.path.dirname(os.path.abspath(target)))
    restore = _world_of_one()
    try:
        with Recorder(recording, max_steps):
            if module:
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(target, run_name="__main__")
        return Outcome("finished")
    except StopRecording:
        return Outcome("stopped")
    except KeyboardInterrupt:  # Ctrl-C: the report of what ran so far, then 130 as a shell has it
        return Outcome("interrupted", exit_code=130)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        return Outcome("finished" if code == 0 else f"exited {code}", exit_code=code)
    except Exception as error:  # the user's script raised: report what ran before it
        # Where the user's code raised it: the innermost frame of theirs, not torch's.
        frames = [f for f in traceback.extract_tb(error.__traceback__) if is_user_file(f.filename)]
        line = usage_line(error)  # a usage mistake (the npu stand-in's refusals): one line
        if line is None:
            traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
        else:
            say(line)
        where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
        return Outcome("raised", error, where, exit_code=1)
    finally:
        restore()
        if dist.is_initialized():
            dist.destroy_process_group()
        sys.argv, sys.path[:] = saved_argv, saved_path

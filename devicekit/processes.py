"""Starting one process per device on this node (`--multiprocessing-distributed`)."""

import sys

import torch.multiprocessing as mp

from devicekit.errors import exit_on_usage_error


@exit_on_usage_error
def _child(index, fn, args):
    fn(index, *args)


def spawn(fn, nprocs, args, kind):
    """Run `fn(i, *args)` for i in 0..nprocs-1, each in its own process started with the
    kind's start method (NPUs cannot be re-initialised in a forked child).

    When any process fails, the others are stopped. Returns 0 when all succeed, else the
    first failure's exit code (2 for a usage error, 1 otherwise), after one line saying
    which rank failed and how.
    """
    try:
        mp.start_processes(_child, args=(fn, args), nprocs=nprocs, join=True,
                           start_method=kind.start_method)
    except mp.ProcessExitedException as error:
        how = (f"was killed by {error.signal_name}" if error.signal_name
               else f"exited with code {error.exit_code}")
        print(f"error: local rank {error.error_index} {how}; the other ranks were stopped",
              file=sys.stderr, flush=True)
        return error.exit_code if error.exit_code and error.exit_code > 0 else 1
    except mp.ProcessRaisedException as error:
        # torch's wrapper caught the child's exception, exited it with code 1 and passed
        # its traceback here: show that traceback, then the same one line.
        print(str(error).strip(), file=sys.stderr)
        print(f"error: local rank {error.error_index} exited with code 1 (an uncaught "
              "exception, traceback above); the other ranks were stopped",
              file=sys.stderr, flush=True)
        return 1
    return 0

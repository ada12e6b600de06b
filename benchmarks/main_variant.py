"""main.py itself, with switches that exist only for the benchmarks.

    python benchmarks/main_variant.py [--bench-no-allreduce] [--bench-ddp KEY=VALUE ...] MAIN_ARGS

Runs main.main() unchanged except for what devicekit.wrap_ddp builds:
--bench-no-allreduce  registers a DDP communication hook that returns each gradient bucket
                      as it is, so the step is main.py's own minus the gradient all-reduce
                      (the compute-only ceiling of scaling: the same program, nothing else
                      left out; the ranks' weights then drift apart, which is fine here).
--bench-ddp K=V       passes K=V (a Python literal) to DistributedDataParallel, e.g.
                      bucket_cap_mb=100, to measure a DDP setting before it is proposed.
"""

import ast
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import devicekit
import main as trainer_main


def _return_bucket(_state, bucket):
    """A DDP comm hook that communicates nothing: the bucket's local gradients, at once."""
    future = torch.futures.Future()
    future.set_result(bucket.buffer())
    return future


def split_argv(argv):
    """(no_allreduce, ddp_kwargs, main_argv) from this script's command line."""
    no_allreduce, ddp_kwargs, rest = False, {}, []
    args = iter(argv)
    for arg in args:
        if arg == "--bench-no-allreduce":
            no_allreduce = True
        elif arg == "--bench-ddp":
            key, _, value = next(args).partition("=")
            ddp_kwargs[key] = ast.literal_eval(value)
        else:
            rest.append(arg)
    return no_allreduce, ddp_kwargs, rest


def patch_wrap_ddp(no_allreduce, ddp_kwargs):
    """Make devicekit.wrap_ddp (as main.py calls it) apply the benchmark's switches."""
    original = devicekit.wrap_ddp

    def wrap_ddp(model, **kwargs):
        ddp = original(model, **{**kwargs, **ddp_kwargs})
        if no_allreduce:
            ddp.register_comm_hook(None, _return_bucket)
        return ddp

    devicekit.wrap_ddp = wrap_ddp


if __name__ == "__main__":
    no_allreduce_, ddp_kwargs_, main_argv = split_argv(sys.argv[1:])
    patch_wrap_ddp(no_allreduce_, ddp_kwargs_)
    sys.exit(trainer_main.main(main_argv))

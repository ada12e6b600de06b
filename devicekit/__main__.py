"""The devicekit command line: `doctor`, `check`, `nproc`, `port`, `preflight` and
`simulate`."""

import argparse
import sys
from collections.abc import Sequence

from devicekit import __version__, check, doctor, runtime
from devicekit.environments import pop_local_rank
from devicekit.errors import ArgumentParser, exit_on_usage_error


def _parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="devicekit", description="Run one PyTorch program on cuda, npu, xpu or cpu."
    )
    parser.add_argument("--version", action="version", version=f"devicekit {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    explain = commands.add_parser("doctor", help="explain this machine and what devicekit chooses")
    explain.add_argument("--device", help="cuda, gpu, npu, xpu, cpu or auto (default: auto)")
    explain.add_argument("--json", action="store_true", help="print JSON")

    count = commands.add_parser(
        "nproc", help="print how many ranks to start per node here (launch/run_8p.sh uses it)"
    )
    count.add_argument("--device", help="cuda, gpu, npu, xpu, cpu or auto (default: auto)")

    prove = commands.add_parser(
        "check", help="verify collectives across all ranks and time all_reduce"
    )
    prove.add_argument("--device", help="cuda, gpu, npu, xpu, cpu or auto (default: auto)")
    prove.add_argument(
        "--nproc-per-node",
        "--nproc_per_node",
        type=int,
        default=None,
        help="ranks to spawn when no launcher started this process "
        "(default: the device count; 2 on cpu)",
    )
    prove.add_argument(
        "--dist-backend", default=None, help="collective backend (default: the kind's)"
    )
    prove.add_argument(
        "--dist-timeout",
        type=float,
        default=None,
        help="seconds to wait for ranks and collectives (default 300)",
    )
    prove.add_argument(
        "--max-bytes",
        type=int,
        default=64 << 20,
        help="largest all_reduce message timed (default 64 MiB)",
    )
    prove.add_argument("--json", action="store_true", help="print JSON")

    # Parsed by devicekit.port, devicekit.preflight and devicekit.simulate themselves.
    commands.add_parser("port", help="rewrite CUDA-only training scripts to run on every device")
    commands.add_parser(
        "preflight", help="run a training script here and report what it will hit on an Ascend NPU"
    )
    commands.add_parser(
        "simulate", help="run a command with the npu stand-in in every Python process it starts"
    )
    return parser


@exit_on_usage_error
def main(argv: Sequence[str] | None = None) -> int:
    """Parse `argv` and run the command; returns its exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["port"]:
        from devicekit.port import cli as port_cli  # libcst is imported only for `port`

        return port_cli.main(argv[1:])
    if argv[:1] == ["preflight"]:
        from devicekit.preflight import cli as preflight_cli

        return preflight_cli.main(argv[1:])
    if argv[:1] == ["simulate"]:
        from devicekit.simulate import command

        return command.main(argv[1:])
    # torch.distributed.launch puts --local-rank=N before the subcommand.
    argv, local_rank = pop_local_rank(argv)
    args = _parser().parse_args(argv)
    args.local_rank = local_rank
    return {"doctor": doctor.main, "check": check.main, "nproc": _nproc}[args.command](args)


def _nproc(args: argparse.Namespace) -> int:
    print(runtime.kind(args.device, source="--device").default_ranks_per_node())
    return 0


if __name__ == "__main__":
    sys.exit(main())

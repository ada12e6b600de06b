"""The devicekit command's own arguments, fuzzed: `nproc` and `check` with any flags and
values either do their job or stop with exit code 2 and one line naming the flag; `doctor`
explains the machine whatever it is given and never ends in a traceback. `check` runs for
real up to starting its ranks, which is replaced by a recorder."""

import contextlib
import io
from unittest import mock

from hypothesis import event, example, given
from hypothesis import strategies as st

from devicekit import __main__ as cli
from devicekit import check
from invariant import ANY_TEXT, NUMBER_LIKE, assert_command_refused

DEVICES = st.one_of(
    st.sampled_from(["auto", "cpu", "cuda", "gpu", "npu", "xpu", "cuda:0", "CPU", " cpu", ""]),
    ANY_TEXT,
)
FLAGS = {
    "--device": DEVICES,
    "--nproc-per-node": NUMBER_LIKE,
    "--nproc_per_node": NUMBER_LIKE,
    "--dist-backend": st.one_of(st.sampled_from(["gloo", "nccl", "hccl", "mpi"]), ANY_TEXT),
    "--dist-timeout": st.one_of(NUMBER_LIKE, st.sampled_from(["nan", "inf", "-1", "1e-9"])),
    "--max-bytes": st.one_of(NUMBER_LIKE, st.sampled_from(["1023", "1024", str(1 << 40)])),
    "--json": st.none(),
    "--bogus": st.none(),
}


@st.composite
def command_lines(draw, command):
    argv = [command]
    for flag in draw(st.lists(st.sampled_from(sorted(FLAGS)), max_size=3)):
        value = draw(FLAGS[flag])
        argv += (
            [flag] if value is None else draw(st.sampled_from([[flag, value], [f"{flag}={value}"]]))
        )
    return argv


def run(argv):
    """cli.main(argv) with the ranks' start recorded: (code, stdout, stderr, launch)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with (
        mock.patch.object(check.devicekit, "launch") as launch,
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(stderr),
    ):
        try:
            code = cli.main(argv)
        except SystemExit as stop:
            code = stop.code
    return code, stdout.getvalue(), stderr.getvalue(), launch.call_args


def names_in(argv):
    return {token.split("=", 1)[0] for token in argv if token.startswith("-")} | {
        "--nproc-per-node",
        "--nproc_per_node",
        "devicekit check",
        "devicekit nproc",
    }


@given(argv=st.one_of(command_lines("check"), command_lines("nproc")))
@example(argv=["check", "--max-bytes", str(1 << 47)])  # asked for 128 TiB of memory per rank
@example(argv=["check", "--bogus"])  # argparse's usage block made it three lines
def test_check_and_nproc_start_or_are_refused_in_one_line(argv):
    code, stdout, stderr, launch = run(argv)
    event("ran" if code == 0 else "refused")
    if code == 0:
        assert not stderr.strip(), stderr
        if argv[0] == "nproc":
            assert int(stdout) >= 1
        else:
            assert launch is not None
    else:
        assert launch is None
        assert_command_refused(code, stderr, names_in(argv))


@given(device=DEVICES, as_json=st.booleans())
def test_doctor_explains_any_device_without_a_traceback(device, as_json):
    code, stdout, stderr, _ = run(["doctor", f"--device={device}"] + ["--json"] * as_json)
    assert code in (0, 2), (code, stderr)
    assert "Traceback" not in stdout + stderr
    if code == 2:
        assert "PROBLEM" in stdout or '"problems": [' in stdout

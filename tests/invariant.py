"""The bad-input invariant, stated once: an input devicekit or the trainer reads either
works, or is refused with one line that names the input (a variable, flag or file) and
says what to do. The library raises UsageError with that line; a command prints it after
"error: " on stderr and exits with code 2, without a traceback."""

import contextlib
import os
from collections.abc import Iterable, Iterator

from hypothesis import strategies as st

from devicekit.errors import UsageError

EXIT_USAGE = 2


def assert_usage_line(error: BaseException, names: Iterable[str]) -> str:
    """`error` is a UsageError whose message is one non-empty line naming one of `names`."""
    assert isinstance(error, UsageError), f"{type(error).__name__}: {error}"
    message = str(error)
    assert message.strip(), "an empty UsageError"
    assert "\n" not in message and "\r" not in message, f"more than one line: {message!r}"
    names = list(names)
    assert any(name in message for name in names), f"names none of {names}: {message!r}"
    return message


def assert_command_refused(returncode: int, stderr: str, names: Iterable[str]) -> str:
    """A command's result: exit 2 and one stderr line "error: ..." naming one of `names`."""
    assert returncode == EXIT_USAGE, (returncode, stderr)
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ") or ": error: " in lines[0], lines[0]
    names = list(names)
    assert any(name in lines[0] for name in names), f"names none of {names}: {lines[0]!r}"
    return lines[0]


# Text a user or a broken launcher script could put in a variable or a flag: numbers of
# every size and sign, the shapes of valid values with one thing wrong, and any characters.
NUMBER_LIKE = st.one_of(
    st.integers(-3, 70000).map(str),
    st.integers().map(str),
    st.integers(0, 8).map(lambda n: f" {n} "),
    st.sampled_from(
        [
            "",
            " ",
            "0x1",
            "1e3",
            "1.0",
            "+1",
            "-0",
            "٣",
            "1_0",
            "nan",
            "inf",
            "0,1",
            "1 2",
            "None",
            "null",
            "true",
        ]
    ),
)
ANY_TEXT = st.text(max_size=40)
VALUES = st.one_of(NUMBER_LIKE, ANY_TEXT)


def environ_values(text: str) -> str:
    """`text` as os.environ can hold it: no NUL byte, valid UTF-8 (no lone surrogate)."""
    text = text.replace("\x00", "")
    return text.encode("utf-8", "replace").decode("utf-8")


ENV_TEXT = VALUES.map(environ_values)


def no_files_left(directory: str, before: Iterable[str]) -> None:
    """Nothing new in `directory` (no half-written file) after a refused input."""
    new = sorted(set(os.listdir(directory)) - set(before))
    assert not new, f"files left behind: {new}"


@contextlib.contextmanager
def working_directory(path: str) -> Iterator[None]:
    """The block runs in `path` (relative names a reader creates land there), then back."""
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


# Paths in folders where no file can be made, by root either (CI runs as root, whom the
# permission bits that os.access reads never stop): an output there is refused up front.
NO_FILES_HERE = ("/proc", "/proc/self", "/sys", "/sys/kernel")
UNWRITABLE_PATHS = st.builds(
    os.path.join,
    st.sampled_from(NO_FILES_HERE),
    st.text("abcxyz_0123456789", min_size=1, max_size=8),
    st.sampled_from(["", "deeper", "r.json"]),
).map(lambda path: path.rstrip("/"))

"""Every fenced block of README.md and docs/**/*.md works as the page says: python and bash
blocks run (or, marked `# not run by the tests: REASON`, compile), and every other fence is
output in a language the docs allow. One item per block, named by its file and the line of
its fence (`README.md:62`). The conventions are tests/docs_examples.py's docstring.

The runner's own tests below feed it small documents written here, so that each way a
block can fail is seen to fail.
"""

import os
import select
import sys
import textwrap

import pytest
from sybil.example import SybilFailure

import devicekit
from docs_examples import REPO, display, documents, examples, fence_problems, is_run, run_example

DOCUMENTS = documents()
BLOCKS = [
    pytest.param(example, id=display(example), marks=[pytest.mark.slow] if is_run(example) else [])
    for example in examples(DOCUMENTS)
]


@pytest.mark.parametrize("example", BLOCKS)
def test_doc_block(example, tmp_path):
    """The block runs to the exit code it promises (0 unless marked), or, marked not run,
    compiles."""
    try:
        run_example(example, tmp_path / "scratch", tmp_path / "logs")
    except SybilFailure as failure:
        why = failure.result
    else:
        return
    pytest.fail(why, pytrace=False)  # outside `except`: the message alone, not Sybil's too


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda path: path.relative_to(REPO).as_posix())
def test_every_fence_is_run_or_allowed_output(path):
    """No block escapes the tests by its spelling: each fence names python or bash (run) or
    an output language (text, diff, json, yaml, ini, toml)."""
    problems = fence_problems(path)
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


# The runner itself, on documents written here.


def blocks(tmp_path, text):
    """The python and bash blocks of a document `text` (dedented), saved as doc.md."""
    path = tmp_path / "doc.md"
    path.write_text(textwrap.dedent(text))
    return list(examples([path], root=tmp_path))


def failure(example, tmp_path, name="run", timeout=60):
    """Why `example` fails when run in the fresh folder tmp_path/name, or None."""
    try:
        run_example(example, tmp_path / name / "scratch", tmp_path / name / "logs", timeout)
    except SybilFailure as failed:
        return failed.result
    return None


def test_a_python_block_that_raises_fails_with_its_line(tmp_path):
    """A python block that raises fails at its fence, names the exit code, the document's
    line of the raise and the error."""
    [block] = blocks(
        tmp_path,
        """\
        Some text.

        ```python
        total = 1
        raise RuntimeError("the example broke")
        ```
        """,
    )
    assert display(block) == "doc.md:3"
    why = failure(block, tmp_path)
    assert why is not None
    assert why.startswith("doc.md:3: exit code 1, expected success (0)")
    assert "the error is raised at doc.md:5" in why
    assert "RuntimeError: the example broke" in why


def test_a_bash_command_that_fails_fails_the_block(tmp_path):
    """A failing command stops a bash block (-e), in a pipe too (pipefail), and fails it."""
    failing, piped, passing = blocks(
        tmp_path,
        """\
        ```bash
        true
        false
        echo "not reached"
        ```

        ```bash
        false | cat
        ```

        ```bash
        echo fine
        ```
        """,
    )
    why = failure(failing, tmp_path, "failing")
    assert why is not None and why.startswith(
        "doc.md:1: exit code 1, expected success (0); the command at doc.md:3 exited 1\n"
    )
    assert "not reached" not in why
    assert "docs_examples:" not in why  # the trap's own line is not shown as the block's
    why = failure(piped, tmp_path, "piped")
    assert why is not None
    assert why.startswith("doc.md:7: exit code 1, expected success (0); the command at doc.md:8")
    assert failure(passing, tmp_path, "passing") is None


def test_an_expected_exit_code_must_be_the_one(tmp_path):
    """`# expect exit code N` holds the block to exactly N; at 2, with no traceback."""
    succeeds, usage_error, with_traceback, python_exit = blocks(
        tmp_path,
        """\
        ```bash
        # expect exit code 2
        true
        ```

        ```bash
        # expect exit code 2
        echo "error: --steps must be a whole number" >&2
        exit 2
        ```

        ```bash
        # expect exit code 2
        echo "Traceback (most recent call last):" >&2
        exit 2
        ```

        ```python
        # expect exit code 3
        raise SystemExit(3)
        ```
        """,
    )
    why = failure(succeeds, tmp_path, "succeeds")
    assert why is not None and why.startswith("doc.md:1: exit code 0, expected exit code 2")
    assert failure(usage_error, tmp_path, "usage") is None
    why = failure(with_traceback, tmp_path, "traceback")
    assert why is not None
    assert why.startswith("doc.md:12: exit code 2 with a traceback on stderr")
    assert failure(python_exit, tmp_path, "python") is None


def test_a_block_marked_not_run_is_checked_and_not_run(tmp_path):
    """`# not run by the tests: REASON` blocks never run, and still fail on a syntax
    error, at the document's line."""
    python, bash, python_broken, bash_broken = blocks(
        tmp_path,
        """\
        ```python
        # not run by the tests: needs a GPU
        open("ran", "w").close()
        ```

        ```bash
        # not run by the tests: needs two hosts
        touch ran
        ```

        ```python
        # not run by the tests: needs an NPU
        def broken(:
            pass
        ```

        ```bash
        # not run by the tests: installs packages
        if true; then
            echo no fi
        ```
        """,
    )
    for block in (python, bash):
        assert failure(block, tmp_path, f"line{block.line}") is None
        assert not (tmp_path / f"line{block.line}" / "scratch" / "ran").exists()
    why = failure(python_broken, tmp_path, "python_broken")
    assert why is not None
    assert why.startswith("doc.md:13: SyntaxError")
    why = failure(bash_broken, tmp_path, "bash_broken")
    assert why is not None
    assert why.startswith("doc.md:17: `bash -n` finds a syntax error")
    assert "doc.md:21: syntax error" in why  # the end of the block


def test_a_marker_must_be_whole_and_first(tmp_path):
    """A marker without its reason or number, one below the first line, and a file name
    outside the scratch folder are refused rather than read some other way."""
    no_reason, misplaced, bad_code, outside = blocks(
        tmp_path,
        """\
        ```bash
        # not run by the tests:
        echo hi
        ```

        ```bash
        echo hi
        # not run by the tests: needs a GPU
        ```

        ```bash
        # expect exit code two
        exit 2
        ```

        ```python
        # ../outside.py
        print("hi")
        ```
        """,
    )
    assert failure(no_reason, tmp_path, "a") == (
        "doc.md:1: write the reason after the colon: `# not run by the tests: REASON`"
    )
    assert failure(misplaced, tmp_path, "b") == (
        "doc.md:6: line 2 of the block: `# not run by the tests: needs a GPU` is read only "
        "on the block's first line"
    )
    assert failure(bad_code, tmp_path, "c") == (
        "doc.md:11: write the exit code as a number: `# expect exit code N`"
    )
    why = failure(outside, tmp_path, "d")
    assert why is not None and "names a file outside the scratch folder" in why
    assert not (tmp_path / "d" / "outside.py").exists()


def test_named_files_of_earlier_blocks_and_the_application_are_in_the_scratch_folder(
    tmp_path,
):
    """A bash block alone sees the files named by the python blocks above it (written, not
    run), real copies of the application (found first: models is the copy's), devicekit,
    this environment's python and one thread; what it writes stays out of the repository.
    (Finding the modules, not importing them: the block starts no torch.)"""
    main_before = (REPO / "main.py").read_bytes()
    *_, commands = blocks(
        tmp_path,
        f"""\
        ```python
        # tiny.py: counts its runs
        with open("tiny_runs", "a") as runs:
            runs.write("x")
        ```

        ```python
        # gpu.py
        # not run by the tests: needs a GPU
        import torch
        torch.cuda.set_device(0)
        ```

        ```bash
        python tiny.py
        test "$(cat tiny_runs)" = x
        test -f gpu.py
        test -f main.py && test -f models/resnet.py && test -f launch/run_8p.sh
        test -f tests/port_corpus/ddp_trainer.py && test -f tests/preflight_scripts/clean.py
        test ! -L main.py && test ! -L models && test ! -e models/__pycache__
        test "$(python -c 'import sys; print(sys.executable)')" = "{sys.executable}"
        test "$OMP_NUM_THREADS" = 1 && test "$PIP_NO_INDEX" = 1 && test -z "${{BASH_ENV:-}}"
        python -c "from importlib.util import find_spec as f; assert f('devicekit')"
        python -c "from importlib.util import find_spec as f; print(f('models').origin)" > found
        test "$(cat found)" = "$PWD/models/__init__.py"
        echo "# changed by a block" >> main.py
        ```
        """,
    )
    assert failure(commands, tmp_path) is None
    assert (REPO / "main.py").read_bytes() == main_before


def test_a_blocks_devicekit_commands_answer_as_their_processes_would(tmp_path):
    """`python -m devicekit` in a bash block (run in the test process where it starts no
    process) gives the block its output, through a redirection too, and its exit code: a
    refusal fails the block at its line, with the one line on stderr."""
    answers, refused = blocks(
        tmp_path,
        f"""\
        ```bash
        python -m devicekit --version > version
        test "$(cat version)" = "devicekit {devicekit.__version__}"
        test "$(python -m devicekit nproc --device cpu)" = 2
        ```

        ```bash
        python -m devicekit check --device tpu
        echo "not reached"
        ```
        """,
    )
    assert failure(answers, tmp_path, "answers") is None
    why = failure(refused, tmp_path, "refused")
    assert why is not None and why.startswith(
        "doc.md:7: exit code 2, expected success (0); the command at doc.md:8 exited 2\n"
    )
    assert "\nerror: --device tpu: unknown device 'tpu'" in why and "not reached" not in why


def test_fences_in_list_items_are_found_and_run(tmp_path):
    """Fences indented under numbered and bulleted list items are blocks like any other."""
    numbered, bulleted = blocks(
        tmp_path,
        """\
        1. First:

           ```bash
           exit 3
           ```

        - Then:
          ```python
          raise SystemExit(4)
          ```
        """,
    )
    assert (display(numbered), display(bulleted)) == ("doc.md:3", "doc.md:8")
    assert failure(numbered, tmp_path, "numbered").startswith("doc.md:3: exit code 3")
    assert failure(bulleted, tmp_path, "bulleted").startswith("doc.md:8: exit code 4")


def test_a_block_past_its_timeout_fails_and_its_processes_are_killed(tmp_path):
    """A block still running at its timeout fails, and what it started is killed."""
    [block] = blocks(
        tmp_path,
        """\
        ```bash
        sleep 60 &
        echo $! > sleeper
        wait
        ```
        """,
    )
    why = failure(block, tmp_path, timeout=1)
    assert why is not None and why.startswith("doc.md:1: the run did not finish within 1 s")
    sleeper = int((tmp_path / "run" / "scratch" / "sleeper").read_text())
    try:
        handle = os.pidfd_open(sleeper)
    except ProcessLookupError:
        return  # gone and reaped
    try:
        ended, _, _ = select.select([handle], [], [], 10)
        assert ended, f"the block's background process {sleeper} is still running"
    finally:
        os.close(handle)


def test_a_fence_without_an_allowed_language_is_refused(tmp_path):
    """Bare fences (at the top level and in a list item) and ```sh are named, with what to
    write; python and text are not."""
    path = tmp_path / "doc.md"
    path.write_text(
        textwrap.dedent(
            """\
            ```python
            print("checked")
            ```

            ```
            python main.py
            ```

            ```sh
            ls
            ```

            ```text
            output
            ```

            - a step:

              ```
              indented, in a list item
              ```
            """
        )
    )
    assert fence_problems(path, root=tmp_path) == [
        "doc.md:5: a fence without a language is neither run nor allowed as output: write "
        "```bash for a command, ```python for a script, ```text for output",
        "doc.md:9: ```sh is neither run nor allowed as output: write ```bash",
        "doc.md:19: a fence without a language is neither run nor allowed as output: write "
        "```bash for a command, ```python for a script, ```text for output",
    ]

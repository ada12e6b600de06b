"""The torch-npu wheel the tests read: its version, the sha256 of every wheel of it
(pinned here), and fetch_wheel, which downloads one with pip into the test cache once and
checks it against its pin. Used by tests/test_npu_honesty.py (the wheel's sources and its
failure modes) and tests/test_preflight_ops.py (preflight's operator list is the wheel's).

The xdist workers run in network namespaces with no route out, so tests/conftest.py calls
prefetch() in the controller before they start: on a new machine the wheels are downloaded
there, once. Where one cannot be had, the run stops before any test with one line naming
the wheel, the command that fetches it and the folder it goes to. Run without workers
(`-n 0`), a test that finds no wheel skips with the reason, except in CI (CI=true or CI=1),
where it fails: these tests must not pass by skipping there. A sha256 mismatch always fails.

The cache: DEVICEKIT_TEST_CACHE, else $XDG_CACHE_HOME/devicekit-tests, else
~/.cache/devicekit-tests.
"""

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from packaging.tags import Tag, sys_tags

from support.paths import REPO

NPU_VERSION = "2.13.0"

# sha256 of every torch-npu 2.13.0 wheel, as PyPI's simple index lists them (uploaded
# 2026-10-15); cp311 x86_64, cp311 aarch64 and cp312 x86_64 also checked with sha256sum on
# downloaded copies.
# The key is the wheel's tag: torch_npu-2.13.0-<key>.whl. There is no sdist and no cp39 wheel.
WHEEL_SHA256 = {
    "cp310-cp310-manylinux_2_28_aarch64": "da6b7785ce005a5459308ad7c88104a5739865d6f23d453dd53ff967c7e17200",
    "cp310-cp310-manylinux_2_28_x86_64": "3084a5ebdab53d45acbbf3154f7cb45d1e00c463b76f0b9b2149b96c1f12ba67",
    "cp311-cp311-manylinux_2_28_aarch64": "d0e64a90b3e640b0274511e47c65284d3a7dedae5f6ad2b95d91de12ff9a29ff",
    "cp311-cp311-manylinux_2_28_x86_64": "0deb809cf447d3fce636ccfdc9c9f874950f1fe76f18f4aaab31e2d345f7dac0",
    "cp312-cp312-manylinux_2_28_aarch64": "ebb895735bf3c347e8c971c3f9083bb5ec032a1b139876ce019f03ee408d81fa",
    "cp312-cp312-manylinux_2_28_x86_64": "f27cf44167b6e0a4b8cf82097c688d2bf532edf503d3e5d6a7ced80a7e759ea6",
    "cp313-cp313-manylinux_2_28_aarch64": "359a055deaf9b94de35ffadff2e68e9fb4a3b3576796ed3617e85d16a42df259",
    "cp313-cp313-manylinux_2_28_x86_64": "20441bfb56c4054a427560ff413fa033db921b993e06c3d67d0f7edc23d40513",
    "cp314-cp314-manylinux_2_28_aarch64": "26ce9c45eb340bb9eec7ca5e78102ac1759d63aa7d66adf7c0fcafdeb221c84e",
    "cp314-cp314-manylinux_2_28_x86_64": "60ea931e36e8f61ab350ef33c6114805068e7dd15b8a28f34f4704ac05089d58",
}
# The wheel whose sources the static tests read on a machine no pinned wheel fits (macOS,
# Python 3.9, ...): the Python sources do not depend on the platform.
FALLBACK_TAG = "cp311-cp311-manylinux_2_28_x86_64"

# preflight's operator list, taken from one of these wheels (its first line names which). Found
# in the checkout, not through devicekit: importing devicekit would import torch in the
# controller, which runs no test; tests/test_preflight_ops.py holds it equal to devicekit's.
OPS_DATA_FILE = REPO / "devicekit" / "preflight" / f"torch_npu_{NPU_VERSION}_ops.txt"

# pip download: each try bounded; pip's own socket timeout and retries inside it. The first
# try uses pip's configuration as it is (a mirror set there is honoured); the second names
# PyPI itself, for a machine whose configured index lacks torch-npu.
DOWNLOAD_TRY_S = 300
PIP_SOCKET_TIMEOUT_S = 60
PIP_RETRIES = 5
PYPI_INDEX = "https://pypi.org/simple"

# Read at import: the suite's autouse fixture removes DEVICEKIT_* variables during tests.
CACHE_DIR = (
    Path(os.environ["DEVICEKIT_TEST_CACHE"])
    if os.environ.get("DEVICEKIT_TEST_CACHE")
    else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "devicekit-tests"
)


def in_ci():
    """Whether this run is CI's: CI=true or CI=1 (any case)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1")


def skip_or_fail(reason):
    """Skip with `reason`; in CI fail with it instead (these tests must run there)."""
    if in_ci():
        pytest.fail(
            f"{reason} [CI={os.environ['CI']}: this would be a skip outside CI]", pytrace=False
        )
    pytest.skip(reason)


def wheel_name(tag):
    """The file name of the wheel `tag`: torch_npu-<version>-<tag>.whl."""
    return f"torch_npu-{NPU_VERSION}-{tag}.whl"


def native_tag():
    """The pinned wheel tag this interpreter installs (pip's order of preference), or None."""
    pinned = {Tag(*key.split("-")): key for key in WHEEL_SHA256}
    return next((pinned[tag] for tag in sys_tags() if tag in pinned), None)


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def mismatch(path, expected):
    """What is wrong with `path` if its sha256 is not `expected`, else ''."""
    actual = sha256_of(path)
    if actual == expected:
        return ""
    return (
        f"{path.name}: sha256 mismatch: expected {expected} (pinned in "
        f"{Path(__file__).name}), actual {actual}; file: {path}"
    )


def verify_sha256(path, expected):
    """Fail (always, CI or not) unless `path` has the sha256 `expected`."""
    problem = mismatch(path, expected)
    if problem:
        pytest.fail(problem, pytrace=False)


def _tail(text, lines=5):
    """The last non-empty `lines` lines of `text` (pip's actual complaint), or ''."""
    kept = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(kept[-lines:])


def _pip_download(tag, dest, index_url=None):
    """One try of `pip download` for exactly the wheel `tag` into `dest`; '' on success,
    else what went wrong."""
    python_tag, abi, platform_tag = tag.split("-")
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        f"torch-npu=={NPU_VERSION}",
        "--no-deps",
        "--only-binary=:all:",
        "--platform",
        platform_tag,
        "--python-version",
        python_tag[2:],
        "--implementation",
        "cp",
        "--abi",
        abi,
        "--dest",
        str(dest),
        "--timeout",
        str(PIP_SOCKET_TIMEOUT_S),
        "--retries",
        str(PIP_RETRIES),
        "--progress-bar",
        "off",
        "--no-input",
        "--disable-pip-version-check",
    ]
    if index_url:
        command += ["--index-url", index_url]
    try:
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=DOWNLOAD_TRY_S,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return f"`pip download` took over {DOWNLOAD_TRY_S} s"
    if result.returncode != 0:
        return (
            f"`pip download` exited {result.returncode}: "
            f"{_tail(result.stderr) or _tail(result.stdout)}"
        )
    if not (dest / wheel_name(tag)).is_file():
        saved = sorted(item.name for item in dest.iterdir())
        return f"`pip download` saved {saved}, not {wheel_name(tag)}"
    return ""


def download(tag):
    """Put the wheel `tag` into CACHE_DIR unless it is there; '' on success, else what went
    wrong in each try (a download whose sha256 is not the pin is not kept)."""
    path = CACHE_DIR / wheel_name(tag)
    if path.is_file():
        return ""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    failures = []
    for index_url in (None, PYPI_INDEX):
        staging = Path(tempfile.mkdtemp(prefix="download.", dir=CACHE_DIR))
        try:
            problem = _pip_download(tag, staging, index_url)
            if not problem:
                problem = mismatch(staging / wheel_name(tag), WHEEL_SHA256[tag])
            if not problem:
                os.replace(staging / wheel_name(tag), path)
                return ""
            failures.append(f"[{index_url or 'index from pip config'}] {problem}")
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return "; ".join(failures)


def fetch_wheel(tag):
    """CACHE_DIR/<wheel for tag>, downloaded once and checked against its pinned sha256 (a
    mismatch fails). Skips (fails in CI) when no try could download it."""
    problem = download(tag)
    if problem:
        skip_or_fail(f"cannot download {wheel_name(tag)}: {problem}")
    path = CACHE_DIR / wheel_name(tag)
    verify_sha256(path, WHEEL_SHA256[tag])
    return path


def wanted_tags():
    """The wheels the tests read: this interpreter's (or the fallback whose sources are read
    where none fits), and the one preflight's operator list was taken from."""
    header = OPS_DATA_FILE.read_text(encoding="utf-8").splitlines()[0]
    listed = next((tag for tag in WHEEL_SHA256 if wheel_name(tag) in header), None)
    return sorted({native_tag() or FALLBACK_TAG, *filter(None, [listed])})


def prefetch():
    """Download every wanted wheel that the cache lacks (before the workers start: they have
    no network); the one line that says what could not be had and how to fetch it, or ''."""
    for tag in wanted_tags():
        problem = download(tag)
        if problem:
            python_tag, abi, platform_tag = tag.split("-")
            return (
                f"cannot download {wheel_name(tag)}, which tests/test_npu_honesty.py and "
                f"tests/test_preflight_ops.py read ({problem}); fetch it on a machine "
                f"with network: pip download torch-npu=={NPU_VERSION} --no-deps "
                f"--only-binary=:all: --platform {platform_tag} --python-version "
                f"{python_tag[2:]} --abi {abi} --dest {CACHE_DIR}"
            )
    return ""

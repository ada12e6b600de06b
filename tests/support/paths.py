"""Where the tests' inputs are."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
CORPUS = TESTS / "port_corpus"  # CUDA-only scripts as users write them, for `devicekit port`

"""The process harness lives in tests/support/processes.py (import support.processes); this
name stays only for the modules that still import it from here (test_faults.py and
docs_examples.py) until they do."""

from support.processes import Finished, Processes, describe, output_file, taken_port

__all__ = ["Finished", "Processes", "describe", "output_file", "taken_port"]

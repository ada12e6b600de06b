"""Helpers the test modules share: one home for starting launchers, the tiny runs' arguments
and the in-process runners. Test modules import from here, never from each other."""

"""``python -m tests.raysecond ARGS``: ``hetsched ARGS`` whose Ray rounds, once interrupted, wait in their
cleanup for the cluster suite's second Ctrl-C.

The cluster suite's double Ctrl-C test runs the CLI through this module: when a round is interrupted
(its ``_Round.interrupted``), its cleanup first touches ``<flag>.cleanup`` and then waits until
``<flag>.second`` exists (the test's second SIGINT has been answered), so that the second Ctrl-C lands
in the cleanup of the first one, by flag files and without timing. ``<flag>`` is the path in
``HETSCHED_TEST_CLEANUP_FLAG``. Everything else is the CLI as installed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from hetsched.cli import main
from hetsched.exec import ray as ray_exec

FLAG = os.environ["HETSCHED_TEST_CLEANUP_FLAG"]
WAIT_S = 300.0
"""How long an interrupted round's cleanup waits for the test at most (a safety limit)."""

_cleanup = ray_exec._Round.cleanup


def _cleanup_after_the_test(self: ray_exec._Round) -> None:
    if self.interrupted:
        Path(f"{FLAG}.cleanup").touch()
        deadline = time.monotonic() + WAIT_S
        while not os.path.exists(f"{FLAG}.second") and time.monotonic() < deadline:
            time.sleep(0.05)
    _cleanup(self)


ray_exec._Round.cleanup = _cleanup_after_the_test  # type: ignore[method-assign]

if __name__ == "__main__":
    main()

"""A module that registers a test tool, ``holder``, whose calls hold (sleep up to 300 s) while the
flag file named by the environment variable ``HETSCHED_TEST_HOLD_FLAG`` exists, after touching
``<flag>.started``: what ``--executor-option tool_modules=[...]`` imports in the cluster suite's
Ctrl-C tests, which interrupt ``hetsched run`` once a round's call is known to be running (the
flag's path is read in the driver and travels with the pickled tool to the Ray workers)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.raytools import Spin

from hetsched.tools import register_tool

HOLD_S = 300.0
"""How long a held call sleeps at most (a safety limit: the tests interrupt it long before)."""


class Hold(Spin):
    """A :class:`~tests.raytools.Spin` whose call holds while ``hold_flag`` exists (``<flag>.started`` says
    that one does)."""

    def __init__(self, name: str, *, hold_flag: str, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.hold_flag = hold_flag

    def run(self, handle: Any, inputs: Sequence[Any]) -> Any:
        if self.hold_flag and os.path.exists(self.hold_flag):
            Path(self.hold_flag + ".started").touch()
            deadline = time.monotonic() + HOLD_S
            while os.path.exists(self.hold_flag) and time.monotonic() < deadline:
                time.sleep(0.05)
        return super().run(handle, inputs)


register_tool(Hold("holder", ms=30, mem_mb=2, value=7, hold_flag=os.environ.get("HETSCHED_TEST_HOLD_FLAG", "")),
              replace=True)

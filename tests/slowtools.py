"""A module that registers two slow test tools when imported: what ``--executor-option
tool_modules=[...]`` and ``hetsched profile --tool-module`` import in a CLI test.

``slow_b`` holds (sleeps an hour per call) while the flag file named by the environment variable
``HETSCHED_TEST_HOLD_FLAG`` exists: a test that interrupts a command while it works on ``slow_b``
sets it, so the command is still at work when the interrupt lands, however slow the machine."""

from __future__ import annotations

import os

from tests.realtools import Worker

from hetsched.tools import register_tool

register_tool(Worker("slow_a", ms=400, mem_mb=1, value=1), replace=True)
register_tool(Worker("slow_b", ms=400, mem_mb=1, value=2, slow_flag=os.environ.get("HETSCHED_TEST_HOLD_FLAG", ""),
                     slow_s=3600), replace=True)

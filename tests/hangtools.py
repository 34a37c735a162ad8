"""A module that registers a test tool that hangs while the flag file named by the environment
variable ``HETSCHED_TEST_HANG_FLAG`` exists: what ``--executor-option tool_modules=[...]`` imports in
the CLI test of a tool that hangs on its first call."""

from __future__ import annotations

import os

from tests.realtools import Worker

from hetsched.tools import register_tool

register_tool(Worker("hang_a", ms=5, mem_mb=1, value=1, slow_flag=os.environ.get("HETSCHED_TEST_HANG_FLAG", ""),
                     slow_s=3600), replace=True)
register_tool(Worker("hang_b", ms=5, mem_mb=1, value=2), replace=True)

"""A module that registers a test tool whose worker process dies (``os._exit``) once, when the flag
file named by the environment variable ``HETSCHED_TEST_CRASH_FLAG`` exists (a ``*.once`` flag is
consumed): what ``--executor-option tool_modules=[...]`` imports in the cluster suite's CLI test of
a dying actor."""

from __future__ import annotations

import os

from tests.raytools import Spin

from hetsched.tools import register_tool

register_tool(Spin("crashy", ms=30, mem_mb=2, value=7, crash_flag=os.environ.get("HETSCHED_TEST_CRASH_FLAG", "")),
              replace=True)

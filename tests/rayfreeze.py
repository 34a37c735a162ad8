"""A module that registers a test tool that stops (SIGSTOP) its Ray worker's raylet after its call,
once, when the flag file named by the environment variable ``HETSCHED_TEST_FREEZE_FLAG`` exists (a
``*.once`` flag is consumed): what ``--executor-option tool_modules=[...]`` imports in the cluster
suite's CLI test of a local cluster whose teardown meets a raylet that does not answer."""

from __future__ import annotations

import os

from tests.raytools import Spin

from hetsched.tools import register_tool

register_tool(Spin("freezer", ms=30, mem_mb=2, value=7, has_gpu=False,
                   freeze_flag=os.environ.get("HETSCHED_TEST_FREEZE_FLAG", "")), replace=True)

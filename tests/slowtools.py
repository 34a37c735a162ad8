"""A module that registers two slow test tools when imported: what ``--executor-option
tool_modules=[...]`` and ``hetsched profile --tool-module`` import in a CLI test."""

from __future__ import annotations

from tests.realtools import Worker

from hetsched.tools import register_tool

register_tool(Worker("slow_a", ms=400, mem_mb=1, value=1), replace=True)
register_tool(Worker("slow_b", ms=400, mem_mb=1, value=2), replace=True)

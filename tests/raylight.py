"""A module that registers two light test tools, ``lightcpu`` (CPU only) and ``lightgpu``: what
``--executor-option tool_modules=[...]`` imports in the cluster suite's CLI tests of ``--ray-address``
and of the CLI's own local cluster (and its killed driver's ``tool_modules``), so that their Ray workers
import numpy and hetsched only, not the real tools' torch, which took about a minute of each of those
runs on a loaded machine (the suite's first test runs the real tiny tools on the cluster itself)."""

from __future__ import annotations

from tests.raytools import Spin

from hetsched.tools import register_tool

register_tool(Spin("lightcpu", ms=20, mem_mb=0.5, value=1, has_gpu=False), replace=True)
register_tool(Spin("lightgpu", ms=30, mem_mb=2, value=10), replace=True)

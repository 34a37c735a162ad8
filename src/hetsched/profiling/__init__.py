"""The offline profiler: runs each tool alone on each available device (the CPU pool, and CUDA or
the stand-in device), measures latency, load cost, memory, threads and GPU share, and writes a
tool library in the card format, with provenance saying what every figure was measured on.

Imports the model, the tools and the executors' worker processes (``hetsched.exec``).
"""

from hetsched.profiling.profiler import ProfileConfig, Profiler, ToolProfile, profile_tools, write_library

__all__ = ["ProfileConfig", "Profiler", "ToolProfile", "profile_tools", "write_library"]

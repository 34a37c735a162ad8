"""Real tools: the tool API (``Tool``, ``FunctionTool``, ``Amplified``, ``Device``), the registry
(``register_tool``, ``get_tool``; ``NAME_xK`` is NAME amplified k times), size presets
(``tiny``/``full``), the built-in implementations of the reference library's tools, and the
runtime that loads, runs and unloads them on a device and measures their memory.

Imports only ``hetsched.model``; torch, transformers and faiss (the ``[tools]`` extra) are
imported inside the built-in tools' steps, so this package imports without them.
"""

from hetsched.tools.base import SIZES, Amplified, Device, DeviceKind, FunctionTool, Tool, check_size
from hetsched.tools.registry import (
    builtin_names,
    get_tool,
    import_tool_modules,
    is_registered,
    register_tool,
    tool_names,
    unregister_tool,
)

__all__ = [
    "SIZES",
    "Amplified",
    "Device",
    "DeviceKind",
    "FunctionTool",
    "Tool",
    "builtin_names",
    "check_size",
    "get_tool",
    "import_tool_modules",
    "is_registered",
    "register_tool",
    "tool_names",
    "unregister_tool",
]

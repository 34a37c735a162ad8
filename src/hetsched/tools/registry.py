"""The tool registry: tool names -> factories, the built-in tools registered lazily, and
``NAME_xK`` resolved as the base tool amplified k times (as cards name amplified tools).

Imports the tool API and the model's errors; built-in tool modules are imported only when one of
their tools is looked up.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hetsched.model import InputError, UnknownNameError
from hetsched.model.errors import did_you_mean, path_text
from hetsched.tools.base import Amplified, Tool, check_size

ToolFactory = Callable[[str], Tool]
"""``factory(size) -> Tool``: builds a tool for a size preset."""

_BUILTIN: dict[str, str] = {
    # encoders (transformers configs, random weights)
    "bert_base": "hetsched.tools.builtin.encoders:BertBase",
    "e5_large": "hetsched.tools.builtin.encoders:E5Large",
    "reranker": "hetsched.tools.builtin.encoders:Reranker",
    "ner_tagger": "hetsched.tools.builtin.encoders:NerTagger",
    "clip_vit_b32": "hetsched.tools.builtin.encoders:ClipVitB32",
    "whisper_small": "hetsched.tools.builtin.encoders:WhisperSmall",
    # vision
    "resnet50": "hetsched.tools.builtin.vision:Resnet50",
    "object_detector": "hetsched.tools.builtin.vision:ObjectDetector",
    "ocr": "hetsched.tools.builtin.vision:Ocr",
    "image_preprocess": "hetsched.tools.builtin.vision:ImagePreprocess",
    # generation
    "llama_1b": "hetsched.tools.builtin.decoders:Llama1B",
    "llama_3b": "hetsched.tools.builtin.decoders:Llama3B",
    "summarizer": "hetsched.tools.builtin.decoders:Summarizer",
    # search
    "vector_search": "hetsched.tools.builtin.search:VectorSearch",
    "kmeans_cluster": "hetsched.tools.builtin.search:KmeansCluster",
    # text and I/O
    "doc_merger": "hetsched.tools.builtin.text:DocMerger",
    "web_fetch": "hetsched.tools.builtin.text:WebFetch",
    "pdf_parse": "hetsched.tools.builtin.text:PdfParse",
    "text_chunker": "hetsched.tools.builtin.text:TextChunker",
    "json_extract": "hetsched.tools.builtin.text:JsonExtract",
}
"""Built-in tools: name -> ``module:Class`` (a Tool subclass taking ``size``)."""

_AMPLIFIED = re.compile(r"^(?P<base>.+)_x(?P<k>[1-9][0-9]*)$")
_LOCK = threading.Lock()
_USER: dict[str, ToolFactory] = {}


def _class_factory(cls: type[Tool]) -> ToolFactory:
    return _ClassFactory(cls)


class _ClassFactory:
    """A picklable factory for a Tool subclass (calls ``cls(size=...)``)."""

    def __init__(self, cls: type[Tool]) -> None:
        self.cls = cls

    def __call__(self, size: str) -> Tool:
        return self.cls(size=size)


class _Fixed:
    """A factory that returns one tool instance whatever the size."""

    def __init__(self, tool: Tool) -> None:
        self.tool = tool

    def __call__(self, size: str) -> Tool:
        return self.tool


def register_tool(tool: Tool | type[Tool] | ToolFactory, *, name: str | None = None, replace: bool = False) -> str:
    """Register a tool under its name (or ``name``) and return the name.

    ``tool`` is a :class:`Tool` instance (used for every size preset), a Tool subclass (built
    with ``size=``), or a factory ``size -> Tool`` (then ``name`` is required). A name already
    taken (a built-in included) is refused unless ``replace``; ``NAME_xK`` names are reserved
    for amplification.
    """
    factory: ToolFactory
    if isinstance(tool, Tool):
        factory, declared = _Fixed(tool), tool.name
    elif isinstance(tool, type) and issubclass(tool, Tool):
        factory, declared = _class_factory(tool), tool.name
    elif callable(tool) and not isinstance(tool, type):
        factory, declared = tool, ""
    else:
        raise InputError(f"register_tool: {tool!r} is not a Tool, a Tool subclass or a factory size -> Tool")
    key = (name or declared or "").strip()
    if not key:
        raise InputError(f"register_tool: {tool!r} has no name; set its 'name' attribute or pass name=")
    if _AMPLIFIED.match(key):
        raise InputError(f"register_tool: {key!r} ends in _xK, which names an amplified tool; register the base tool")
    with _LOCK:
        if not replace and (key in _USER or key in _BUILTIN):
            raise InputError(f"tool {key!r} is already registered; pass replace=True to replace it")
        _USER[key] = factory
    return key


def unregister_tool(name: str) -> None:
    """Remove a tool registered with :func:`register_tool` (built-ins stay)."""
    with _LOCK:
        _USER.pop(name, None)


def tool_names() -> tuple[str, ...]:
    """Every registered base tool name (built-ins first, then the user's, each once)."""
    return tuple(dict.fromkeys([*_BUILTIN, *_USER]))


def builtin_names() -> tuple[str, ...]:
    """The built-in tools' names."""
    return tuple(_BUILTIN)


def is_registered(name: str) -> bool:
    """True when :func:`get_tool` can build ``name`` (``NAME_xK`` of a registered NAME included)."""
    if name in _USER or name in _BUILTIN:
        return True
    m = _AMPLIFIED.match(name)
    return m is not None and (m["base"] in _USER or m["base"] in _BUILTIN)


def _build(name: str, size: str) -> Tool | None:
    factory = _USER.get(name)
    if factory is not None:
        tool = factory(size)
    elif name in _BUILTIN:
        module_name, cls_name = _BUILTIN[name].split(":")
        cls: Any = getattr(importlib.import_module(module_name), cls_name)
        tool = cls(size=size)
    else:
        return None
    if not isinstance(tool, Tool):
        raise InputError(f"the factory of tool {name!r} returned {tool!r}, not a Tool")
    if tool.name != name:
        tool.name = name  # registered under another name: the registry's name wins
    return tool


def get_tool(name: str, size: str = "tiny") -> Tool:
    """The tool named ``name`` built for a size preset; ``NAME_xK`` is NAME amplified k times.

    Unknown names raise :class:`UnknownNameError` listing the registered tools.
    """
    size = check_size(size)
    tool = _build(name, size)
    if tool is not None:
        return tool
    m = _AMPLIFIED.match(name)
    if m:
        base = _build(m["base"], size)
        if base is not None:
            return Amplified(base, int(m["k"]))
    raise UnknownNameError(
        f"Unknown tool: {name!r}; registered tools: {', '.join(tool_names())} (and NAME_xK for any of them)"
        + did_you_mean(m["base"] if m else name, tool_names())
    )


def import_tool_modules(modules: list[str] | tuple[str, ...] | str) -> None:
    """Import modules that register tools (``--tool-module``, the executors' ``tool_modules``).

    Each is a module name (``my_tools``, ``pkg.tools``: found on ``sys.path``, then in the current
    folder) or a Python file (``./my_tools.py``: its folder is put on ``sys.path`` so worker
    processes import it by the same name). A missing or broken module is an InputError.
    """
    for mod in [modules] if isinstance(modules, str) else modules:
        _import_tool_module(mod)


def _import_tool_module(spec: str) -> None:
    text = str(spec).strip()
    if not text:
        raise InputError("tool module '': give a module name (my_tools) or a Python file (./my_tools.py)")
    if text.endswith(".py") or "/" in text or os.sep in text:
        path = Path(text).expanduser()
        if not path.is_file():
            raise InputError(f"tool module {text!r}: file {path_text(path)} not found; give a Python file that calls "
                             "hetsched.tools.register_tool, or a module name")
        if not path.stem.isidentifier():
            raise InputError(f"tool module {text!r}: {path.name!r} is not a Python module name; rename the file "
                             "(letters, digits and _, not starting with a digit)")
        _on_path(str(path.resolve().parent))
        name = path.stem
    else:
        name = text
    try:
        _runs_code(text, importlib.import_module(name))
        return
    except ModuleNotFoundError as exc:
        top = name.split(".")[0]
        if exc.name != top or os.getcwd() in sys.path:
            raise _import_error(text, exc) from None
    except (ImportError, SyntaxError) as exc:
        raise _import_error(text, exc) from None
    _on_path(os.getcwd())  # a module in the current folder (not on sys.path under a console script)
    try:
        module = importlib.import_module(name)
    except (ImportError, SyntaxError) as exc:
        raise _import_error(text, exc) from None
    _runs_code(text, module)


def _runs_code(text: str, module: Any) -> None:
    """Refuse a folder without ``__init__.py`` (Python imports it as an empty namespace package: no code ran,
    so it registered no tool and the command would go on without the user's tools)."""
    if getattr(module, "__file__", None) is None and hasattr(module, "__path__"):
        raise InputError(f"tool module {text!r}: {next(iter(module.__path__))} is a folder without __init__.py, "
                         "so no code of it runs and it registers no tool; give a Python file (./my_tools.py) or a "
                         "package that calls hetsched.tools.register_tool")


def _on_path(folder: str) -> None:
    if folder not in sys.path:
        sys.path.insert(0, folder)
        importlib.invalidate_caches()


def _import_error(text: str, exc: BaseException) -> InputError:
    return InputError(f"tool module {text!r} cannot be imported ({type(exc).__name__}: {exc}); give a module "
                      "name found on PYTHONPATH or in the current folder, or a Python file (./my_tools.py), that "
                      "calls hetsched.tools.register_tool")

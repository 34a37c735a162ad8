"""Plain Python functions as tools, without subclassing: :func:`function_tool` wraps a CPU
implementation, an optional GPU implementation and optional ``load``/``unload`` into a
:class:`~hetsched.tools.base.FunctionTool`, and pairs it with its tool card (:class:`ToolSpec`).

The functions' calling convention is the natural one for plain functions:

- without ``load``: ``cpu(*inputs)`` / ``gpu(*inputs)``;
- with ``load``: ``model = load(device)`` once per placement, then ``cpu(model, *inputs)`` /
  ``gpu(model, *inputs)``, and ``unload(model)`` when the runtime frees it.

``inputs`` are the node's predecessors' outputs in edge order; a source node of a
:class:`~hetsched.session.Session` request receives the request's value as its one input. The
``device`` handed to ``load`` says where the model goes (``device.torch`` is ``"cpu"`` or
``"cuda:0"``; ``device.acts_as_gpu`` is True for GPU placements).

Imports the tool API and the model's card only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hetsched.model import InputError, ToolCard
from hetsched.tools.base import Device, FunctionTool, Tool


@dataclass(frozen=True)
class _Handle:
    """What the wrapped ``load`` returns: the device it loaded on and the user's model (or None)."""

    on_gpu: bool
    model: Any


class _Load:
    """``load(device)`` of a function tool: the user's ``load`` (when given) on that device."""

    def __init__(self, load: Callable[[Device], Any] | None) -> None:
        self.load = load

    def __call__(self, device: Device) -> _Handle:
        return _Handle(device.acts_as_gpu, None if self.load is None else self.load(device))


class _Run:
    """``run(handle, inputs)`` of a function tool: the CPU or GPU function, as the handle's device says."""

    def __init__(self, cpu: Callable[..., Any], gpu: Callable[..., Any] | None, with_model: bool) -> None:
        self.cpu, self.gpu, self.with_model = cpu, gpu, with_model

    def __call__(self, handle: _Handle, inputs: Sequence[Any]) -> Any:
        fn = self.gpu if handle.on_gpu and self.gpu is not None else self.cpu
        if self.with_model:
            return fn(handle.model, *inputs)
        return fn(*inputs)


class _Unload:
    """``unload(handle)`` of a function tool: the user's ``unload`` on the model (when given)."""

    def __init__(self, unload: Callable[[Any], None] | None) -> None:
        self.unload = unload

    def __call__(self, handle: _Handle) -> None:
        if self.unload is not None:
            self.unload(handle.model)


@dataclass(frozen=True)
class ToolSpec:
    """A tool implementation with its card: what a :class:`~hetsched.builder.Workflow` node or a
    :class:`~hetsched.session.Session` needs to place and run it."""

    tool: Tool
    """The implementation (a :class:`~hetsched.tools.base.Tool`)."""
    card: ToolCard
    """Its card (estimates until profiled; ``hetsched profile`` measures real ones)."""

    @property
    def name(self) -> str:
        """The tool's name (the card's)."""
        return self.card.name


def function_tool(
    name: str,
    cpu: Callable[..., Any],
    gpu: Callable[..., Any] | None = None,
    *,
    load: Callable[[Device], Any] | None = None,
    unload: Callable[[Any], None] | None = None,
    description: str = "",
    cpu_ms: float = 1.0,
    gpu_ms: float | None = None,
    load_ms: float = 0.0,
    vram_mb: float = 0.0,
    gpu_util: float = 1.0,
    cpu_threads: int = 1,
) -> ToolSpec:
    """A tool from plain functions, with its card (see the module docstring for the calling convention).

    ``cpu`` is required; ``gpu`` makes GPU placements possible (without it the tool is CPU-only,
    device-neutral). The card figures are estimates the policy starts from (ms, MB); ``gpu_ms``
    defaults to ``cpu_ms`` when ``gpu`` is given. Functions that run in a worker process
    (``executor="local"``/``"ray"``) must be defined at module level; the in-process executor
    (the :class:`~hetsched.session.Session` default) runs any callable.
    """
    if not callable(cpu):
        raise InputError(f"function_tool {name!r}: cpu must be a function, got {cpu!r}")
    for label, fn in (("gpu", gpu), ("load", load), ("unload", unload)):
        if fn is not None and not callable(fn):
            raise InputError(f"function_tool {name!r}: {label} must be a function or None, got {fn!r}")
    has_gpu = gpu is not None
    if not has_gpu and (gpu_ms is not None or vram_mb or load_ms):
        raise InputError(f"function_tool {name!r}: gpu_ms, vram_mb and load_ms describe a GPU implementation; "
                         "give gpu= as well, or drop them")
    tool = FunctionTool(name, _Load(load), _Run(cpu, gpu, with_model=load is not None), unload=_Unload(unload),
                        description=description or (cpu.__doc__ or "").strip().split("\n")[0], has_gpu=has_gpu)
    try:
        card = ToolCard(name=name, description=tool.description, cpu_ms=cpu_ms,
                        gpu_ms=(gpu_ms if gpu_ms is not None else cpu_ms) if has_gpu else None,
                        load_ms=load_ms, vram_mb=vram_mb, gpu_util=gpu_util, cpu_threads=cpu_threads,
                        has_gpu=has_gpu)
    except ValueError as exc:  # pydantic's ValidationError
        raise InputError(f"function_tool {name!r}: bad card figures: {exc}") from None
    return ToolSpec(tool, card)

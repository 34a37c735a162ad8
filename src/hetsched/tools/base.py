"""The tool API: what a real tool declares and the three steps the runtime calls.

A tool has a name, a description, and says whether it has a GPU implementation. Its steps:

- ``prepare()``: one-time, untimed set-up on this machine (write a checkpoint of random weights,
  build a data file); safe to call again;
- ``load(device) -> handle``: put the weights on a :class:`Device` (timed: the card's ``load_ms``);
- ``run(handle, inputs) -> output``: one call; ``inputs`` are the outputs of the node's
  predecessors, in edge order (empty for a source node);
- ``unload(handle)``: free what ``load`` took (by default, dropping the handle is enough).

Subclass :class:`Tool` or wrap plain functions with :class:`FunctionTool`; :class:`Amplified`
repeats a tool's computation k times (the paper's ``NAME_xK``). Tools run in worker processes,
so a tool object must pickle: define its class or functions at the top level of an importable
module (or of the script you run, under ``if __name__ == "__main__":``).

Imports only the standard library: tools import their heavy libraries (torch...) inside their
own steps, so listing or describing tools costs nothing and the core never needs the extra.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from hetsched.model import InputError

SIZES: tuple[str, ...] = ("tiny", "full")
"""Size presets: ``full`` is the real architecture (for GPU machines), ``tiny`` the same code path
with small shapes (seconds on a 2-core CPU; for tests and the bundled demo)."""


def check_size(size: str) -> str:
    """A valid size preset, or InputError naming the accepted ones."""
    text = str(size).strip().lower()
    if text not in SIZES:
        raise InputError(f"size preset {size!r} is not known; accepted: {', '.join(SIZES)}")
    return text


class DeviceKind(StrEnum):
    """What a device is."""

    CPU = "cpu"
    """The CPU pool: the host's cores."""
    CUDA = "cuda"
    """A CUDA GPU."""
    STANDIN = "standin"
    """The stand-in device: a worker process with its own CPU threads that plays the GPU on a
    machine without CUDA. Its times and memory are real measurements of CPU cores, not of a GPU."""


@dataclass(frozen=True)
class Device:
    """Where a tool's weights live and its work runs."""

    kind: DeviceKind = DeviceKind.CPU
    """cpu, cuda or standin."""
    index: int = 0
    """CUDA device index (0 for the others)."""
    threads: int = 1
    """CPU threads the work may use (torch intra-op threads); for cuda, the host threads."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", DeviceKind(self.kind))
        if self.threads < 1:
            raise InputError(f"device threads must be >= 1, got {self.threads}")

    @property
    def torch(self) -> str:
        """The torch device string the tool should put its tensors on (``cpu`` or ``cuda:0``)."""
        return f"cuda:{self.index}" if self.kind is DeviceKind.CUDA else "cpu"

    @property
    def acts_as_gpu(self) -> bool:
        """True for the devices GPU placements run on (cuda, standin): tools use their GPU implementation."""
        return self.kind is not DeviceKind.CPU

    @property
    def label(self) -> str:
        """``cpu``, ``cuda:0`` or ``standin``."""
        return self.torch if self.kind is DeviceKind.CUDA else self.kind.value


class Tool:
    """Base class of a real tool: override :meth:`load` and :meth:`run` (and :meth:`unload`,
    :meth:`prepare` when needed); set the class attributes below."""

    name: str = ""
    """Tool name; cards and workflow nodes refer to it."""
    description: str = ""
    """What the tool does, in words (becomes the card's description)."""
    has_gpu: bool = True
    """Whether a GPU implementation exists (False: CPU only, device-neutral)."""
    requires: tuple[str, ...] = ()
    """Modules imported before ``load`` is timed (``("torch",)``), so a first load does not pay them."""

    def __init__(self, size: str = "tiny") -> None:
        self.size = check_size(size)
        """The size preset this instance was built for."""

    def prepare(self) -> None:
        """One-time, untimed set-up on this machine (idempotent). Default: nothing."""

    def load(self, device: Device) -> Any:
        """Put the tool's weights on ``device`` and return a handle for :meth:`run`."""
        raise NotImplementedError(f"tool {self.name!r} does not implement load(device)")

    def run(self, handle: Any, inputs: Sequence[Any]) -> Any:
        """One call on the loaded handle; ``inputs`` are the predecessors' outputs in edge order."""
        raise NotImplementedError(f"tool {self.name!r} does not implement run(handle, inputs)")

    def unload(self, handle: Any) -> None:
        """Free what :meth:`load` took. Default: nothing (the runtime drops the handle)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, size={self.size!r}, has_gpu={self.has_gpu})"


def _no_unload(handle: Any) -> None:
    """Default unload of a :class:`FunctionTool`: nothing (dropping the handle frees it)."""


def _no_prepare() -> None:
    """Default prepare of a :class:`FunctionTool`: nothing."""


class FunctionTool(Tool):
    """A tool from plain functions: ``load(device) -> handle``, ``run(handle, inputs) -> output``,
    optional ``unload(handle)`` and ``prepare()``. The functions must be defined at module level
    (they travel to worker processes by reference)."""

    def __init__(
        self,
        name: str,
        load: Callable[[Device], Any],
        run: Callable[[Any, Sequence[Any]], Any],
        *,
        unload: Callable[[Any], None] = _no_unload,
        prepare: Callable[[], None] = _no_prepare,
        description: str = "",
        has_gpu: bool = True,
        requires: Sequence[str] = (),
        size: str = "tiny",
    ) -> None:
        super().__init__(size)
        if not name or not str(name).strip():
            raise InputError("a tool needs a non-empty name")
        self.name = str(name)
        self.description = description
        self.has_gpu = has_gpu
        self.requires = tuple(requires)
        self._load, self._run, self._unload, self._prepare = load, run, unload, prepare

    def prepare(self) -> None:
        self._prepare()

    def load(self, device: Device) -> Any:
        return self._load(device)

    def run(self, handle: Any, inputs: Sequence[Any]) -> Any:
        return self._run(handle, inputs)

    def unload(self, handle: Any) -> None:
        self._unload(handle)


class Amplified(Tool):
    """A tool's computation repeated k times on one loaded handle (PAPER.md's amplified tools):
    latency scales by k, load cost and memory do not. Named ``BASE_xK`` like amplified cards."""

    def __init__(self, base: Tool, k: int) -> None:
        if k < 1:
            raise InputError(f"amplification k must be >= 1, got {k}")
        super().__init__(base.size)
        self.base = base
        """The tool repeated."""
        self.k = k
        """Repeats per call."""
        self.name = f"{base.name}_x{k}"
        self.description = f"{base.description} (amplified: repeated {k}x)".strip()
        self.has_gpu = base.has_gpu
        self.requires = base.requires

    def prepare(self) -> None:
        self.base.prepare()

    def load(self, device: Device) -> Any:
        return self.base.load(device)

    def run(self, handle: Any, inputs: Sequence[Any]) -> Any:
        out: Any = None
        for _ in range(self.k):
            out = self.base.run(handle, inputs)
        return out

    def unload(self, handle: Any) -> None:
        self.base.unload(handle)

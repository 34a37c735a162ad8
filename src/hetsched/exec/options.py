"""The declared options of every executor: name, type, range or choices, and what each means.

``make_executor`` checks options against these schemas before it imports an executor (so a bad
option is refused before torch or Ray load): an unknown name says which names are accepted and
which one was probably meant; a bad value names the option, the value and what is accepted.
Values arrive from Python, from ``-X KEY=VALUE`` on the command line (JSON when it parses, else
text) or from the run store, so a whole number is accepted where a float is expected and a text
is accepted where a list of module names is expected (``tool_modules=my_tools`` or
``tool_modules=a,b``). The schema and each executor's constructor are kept in step by a test.

Imports the model's errors and the tool API's constants only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hetsched.exec.devices import DEVICE_CHOICES
from hetsched.model import InputError, UnknownNameError
from hetsched.model.errors import did_you_mean
from hetsched.tools.base import SIZES

_KINDS = ("bool", "int", "float", "str", "choice", "device", "modules", "dict", "any")


@dataclass(frozen=True)
class Option:
    """One executor option."""

    name: str
    """Keyword of the executor's constructor."""
    kind: str
    """``bool``, ``int``, ``float``, ``str``, ``choice`` (one of ``choices``), ``device`` (a device choice
    or ``cuda:N``), ``modules`` (a list of module names or files), ``dict`` (a JSON object) or ``any`` (a
    Python object, from code only)."""
    help: str
    """What it does, in a few words."""
    low: float | None = None
    """Smallest accepted number (numbers only)."""
    high: float | None = None
    """Largest accepted number (numbers only)."""
    low_open: bool = False
    """``low`` itself is refused (``> low`` rather than ``>= low``)."""
    optional: bool = False
    """None (null) is accepted: the executor's default."""
    choices: tuple[str, ...] = ()
    """Accepted values of a ``choice``."""

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"option {self.name}: kind {self.kind!r} is not one of {_KINDS}")

    def accepted(self) -> str:
        """What the option accepts, in words (for messages and docs)."""
        if self.kind in ("int", "float"):
            what = "an integer" if self.kind == "int" else "a number"
            if self.low is not None and self.high is not None:
                rng = f" {'>' if self.low_open else '>='} {self.low:g} and <= {self.high:g}"
            elif self.low is not None:
                rng = f" {'>' if self.low_open else '>='} {self.low:g}"
            else:
                rng = ""
            text = what + rng
        elif self.kind == "bool":
            text = "true or false"
        elif self.kind == "choice":
            text = "one of " + ", ".join(self.choices)
        elif self.kind == "device":
            text = "one of " + ", ".join(DEVICE_CHOICES) + " (or cuda:N)"
        elif self.kind == "modules":
            text = "module names or Python files: a list, or one text (commas between several)"
        elif self.kind == "dict":
            text = "a JSON object"
        elif self.kind == "any":
            text = "a Python object (from code)"
        else:
            text = "a text"
        return text + (" (or null for the default)" if self.optional else "")

    def check(self, value: Any, owner: str) -> Any:
        """``value`` as the constructor takes it, or an InputError naming ``owner``'s option."""
        if value is None:
            if self.optional:
                return None
            raise self._bad(value, owner)
        kind = self.kind
        if kind == "any":
            return value
        if kind == "bool":
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in ("true", "false"):
                return value.strip().lower() == "true"
            raise self._bad(value, owner)
        if kind in ("int", "float"):
            number: Any = value
            if isinstance(value, str):
                try:
                    number = int(value.strip()) if kind == "int" else float(value.strip())
                except ValueError:
                    raise self._bad(value, owner) from None
            if isinstance(number, bool) or not isinstance(number, int | float):
                raise self._bad(value, owner)
            if kind == "int" and not isinstance(number, int):
                if not (math.isfinite(number) and float(number).is_integer()):
                    raise self._bad(value, owner)
                number = int(number)
            if kind == "float":
                number = float(number)
                if not math.isfinite(number):
                    raise self._bad(value, owner)
            if self.low is not None and (number <= self.low if self.low_open else number < self.low):
                raise self._bad(value, owner)
            if self.high is not None and number > self.high:
                raise self._bad(value, owner)
            return number
        if kind == "modules":
            items = value.split(",") if isinstance(value, str) else value
            if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
                raise self._bad(value, owner)
            return [i.strip() for i in items if i.strip()]
        if kind == "dict":
            if not isinstance(value, dict):
                raise self._bad(value, owner)
            return value
        if not isinstance(value, str):
            raise self._bad(value, owner)
        text = value.strip()
        if kind == "choice":
            if text.lower() not in self.choices:
                raise self._bad(value, owner, did_you_mean(text, self.choices))
            return text.lower()
        if kind == "device":
            low = text.lower()
            if low in DEVICE_CHOICES or (low.startswith("cuda:") and low[5:].isdigit()):
                return low
            raise self._bad(value, owner, did_you_mean(text, DEVICE_CHOICES))
        return text

    def _bad(self, value: Any, owner: str, hint: str = "") -> InputError:
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        if self.kind in ("choice", "device") and isinstance(value, str):
            return InputError(f"executor {owner!r}: {self.name} {shown} is not known; accepted: "
                              f"{self.accepted().removeprefix('one of ')}{hint}")
        return InputError(f"executor {owner!r}: option {self.name} = {shown} is not accepted; {self.name} takes "
                          f"{self.accepted()}{hint}")


_SIZE = Option("size", "choice", "tool size preset (default: the cards' preset)", optional=True, choices=SIZES)
_TIMEOUT = Option("timeout_s", "float", "time limit of every node, seconds (default: from its card)",
                  low=0.0, low_open=True, high=7 * 86_400.0, optional=True)
_TIMEOUT_FACTOR = Option("timeout_factor", "float", "default node time limit as a multiple of its card latency",
                         low=0.0, low_open=True, high=1e6)
_MIN_TIMEOUT = Option("min_timeout_s", "float", "shortest default node time limit, seconds", low=0.0,
                      low_open=True, high=7 * 86_400.0)
_CHECK_MEMORY = Option("check_memory", "bool", "watch the device's measured memory")
_MODULES = Option("tool_modules", "modules", "modules to import first (they register your tools)")
_DEVICE = Option("device", "device", "where GPU placements run")

SCHEMAS: dict[str, tuple[Option, ...]] = {
    "sim": (
        Option("noise", "bool", "apply the machine's latency noise"),
    ),
    "local": (
        _DEVICE,
        _SIZE,
        Option("cpu_threads", "int", "threads of the CPU pool", low=1, high=4096, optional=True),
        Option("device_threads", "int", "threads of the stand-in device", low=1, high=4096, optional=True),
        _TIMEOUT,
        _TIMEOUT_FACTOR,
        _MIN_TIMEOUT,
        Option("memory_slack", "float", "share of the budget the measured memory may exceed it by", low=0.0,
               high=100.0),
        _CHECK_MEMORY,
        _MODULES,
        Option("pin", "bool", "pin the CPU pool and the stand-in device to separate cores"),
    ),
    "ray": (
        Option("address", "str", "the Ray cluster (HOST:PORT); default: start a local one", optional=True),
        _SIZE,
        _DEVICE,
        Option("device_threads", "int", "threads of the stand-in device", low=1, high=4096),
        Option("num_cpus", "int", "CPUs of a local cluster", low=1, high=1_000_000, optional=True),
        Option("num_gpus", "int", "GPU units of a local cluster", low=1, high=4096),
        Option("vram_mb", "float", "VRAM of a GPU unit, MB (default: the scenario's budget)", low=0.0,
               low_open=True, high=1e7, optional=True),
        _TIMEOUT,
        _TIMEOUT_FACTOR,
        _MIN_TIMEOUT,
        Option("memory_slack", "float", "share of the budget a unit's measured memory may exceed its card by",
               low=0.0, high=100.0),
        Option("standin_allowance_mb", "float", "extra memory allowed on the stand-in device, MB", low=0.0,
               high=1e7),
        _CHECK_MEMORY,
        _MODULES,
        Option("runtime_env", "dict", "Ray runtime environment of the job", optional=True),
        Option("temp_dir", "str", "Ray's temp dir for a local cluster", optional=True),
        Option("warm", "bool", "prepare each round's tools in warm workers before it starts"),
        Option("events", "bool", "read Ray's task events for the trace"),
        Option("event_timeout_s", "float", "how long to wait for Ray's task events, seconds", low=0.0,
               high=86_400.0),
        Option("load_timeout_s", "float", "how long gpu_now actors may take to be placed and load, seconds",
               low=0.0, low_open=True, high=7 * 86_400.0),
        Option("shutdown_timeout_s", "float", "how long closing waits for Ray's teardown before it stops a local "
               "cluster by force, seconds", low=0.0, low_open=True, high=86_400.0),
    ),
    "inproc": (
        Option("tools", "any", "tool objects by name (hs.Session passes them)", optional=True),
        _DEVICE,
        Option("size", "choice", "tool size preset", choices=SIZES),
        _MODULES,
        Option("max_threads", "int", "most tool calls running at once", low=1, high=4096),
        Option("device_threads", "int", "GPU calls the stand-in device runs at once", low=1, high=4096),
    ),
}
"""Executor name -> its options (every keyword of its constructor but the scenario)."""


def option_names(executor: str) -> tuple[str, ...]:
    """The options an executor accepts."""
    return tuple(o.name for o in SCHEMAS.get(executor, ()))


def check_options(executor: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` checked against ``executor``'s schema and converted (``"60"`` -> 60.0, ``"a,b"`` ->
    ``["a", "b"]``). Unknown names raise :class:`UnknownNameError` with the accepted names and a
    "did you mean"; bad values raise :class:`InputError` naming the option, the value and what is accepted.
    An executor without a declared schema gets its options unchecked."""
    schema = SCHEMAS.get(executor)
    if schema is None:
        return dict(options)
    by_name = {o.name: o for o in schema}
    checked: dict[str, Any] = {}
    for key, value in options.items():
        name = str(key).strip().replace("-", "_")
        option = by_name.get(name)
        if option is None:
            raise UnknownNameError(f"executor {executor!r} has no option {key!r}; accepted: {', '.join(by_name)}"
                                   + did_you_mean(name, by_name))
        checked[name] = option.check(value, executor)
    return checked


__all__ = ["SCHEMAS", "Option", "check_options", "option_names"]

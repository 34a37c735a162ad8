"""What identifies a run: the executor it ran on (:class:`ExecutorSpec`) and its full
configuration (:class:`RunKey`), shared by the loop, the run store, the bench and the CLI.

Part of the model package; imports only the model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from hetsched.model.errors import InputError
from hetsched.model.limits import MAX_ROUNDS, MAX_SEED
from hetsched.model.scenario import Scenario


def _json_ready(value: Any, where: str) -> Any:
    try:
        return json.loads(json.dumps(value, sort_keys=True))
    except (TypeError, ValueError) as exc:
        raise InputError(f"{where} must be JSON-ready (str, int, float, bool, None, lists, dicts): {exc}") from None


@dataclass(frozen=True)
class ExecutorSpec:
    """Which executor runs a workflow, and how: a name for ``make_executor`` plus its options.

    Picklable and JSON-ready, so bench jobs carry it to worker processes and the run store keeps
    it with every run (a resumed run is rebuilt on the same executor).
    """

    name: str = "sim"
    """``sim`` (the simulator), ``local`` (real tools on this machine) or ``ray`` (a Ray cluster)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Keyword options for the executor's constructor (JSON-ready)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", self.name.strip().lower())
        object.__setattr__(self, "options", _json_ready(dict(self.options), f"executor {self.name!r} options"))

    def __hash__(self) -> int:
        return hash((self.name, json.dumps(self.options, sort_keys=True)))

    @property
    def label(self) -> str:
        """``sim``, or ``local[noise=false]`` with options."""
        if not self.options:
            return self.name
        inner = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(self.options.items()))
        return f"{self.name}[{inner}]"

    def to_dict(self) -> dict[str, Any]:
        """``{"name": ..., "options": {...}}``."""
        return {"name": self.name, "options": dict(self.options)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExecutorSpec:
        """Inverse of :meth:`to_dict`."""
        return cls(str(data.get("name", "sim")), dict(data.get("options") or {}))


SIM = ExecutorSpec("sim")
"""The default executor: the noisy simulator."""


@dataclass(frozen=True)
class RunKey:
    """Everything that makes two runs the same run: a finished run with an equal key is reused,
    an interrupted one is continued (the bench), and a stored run is rebuilt from it (resume)."""

    scenario: Scenario
    """The scenario, compared by content (a changed card is another run)."""
    policy: str
    """Registered policy name (``make_policy``)."""
    options: dict[str, Any] = field(default_factory=dict)
    """``make_policy`` keyword options (JSON-ready; secrets are never stored)."""
    seed: int = 0
    """Run seed."""
    rounds: int = 20
    """Rounds planned."""
    stop_after: int = 0
    """Early-stop setting (0: never)."""
    executor: ExecutorSpec = SIM
    """The executor the rounds ran on."""
    experiment: str = ""
    """Grouping label (the bench's ``bench``; '' for ad-hoc runs)."""

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise InputError(f"rounds must be >= 1, got {self.rounds}")
        if self.rounds > MAX_ROUNDS:
            raise InputError(f"rounds must be <= {MAX_ROUNDS:,}, got {self.rounds}")
        if not 0 <= self.seed <= MAX_SEED:
            raise InputError(f"seed must be between 0 and {MAX_SEED} (a signed 64-bit integer), got {self.seed}")
        if self.stop_after < 0:
            raise InputError(f"stop_after must be >= 0, got {self.stop_after}")
        if self.stop_after > MAX_ROUNDS:
            raise InputError(f"stop_after must be <= {MAX_ROUNDS:,}, got {self.stop_after}")
        object.__setattr__(self, "options", _json_ready(dict(self.options), f"policy {self.policy!r} options"))

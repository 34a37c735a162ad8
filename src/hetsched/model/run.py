"""What identifies a run: the executor it ran on (:class:`ExecutorSpec`), how the loop drives it
(:class:`LoopConfig`) and its full description (:class:`RunKey`, which holds both), shared by the
loop, the run store, the bench, the session and the CLI.

Part of the model package; imports only the model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
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


DEFAULT_MAX_PROBES_PER_ROUND = 64
"""The loop's own cap on probes in one round, whatever a policy asks (a safety net; policies
keep their own, smaller budgets)."""


@dataclass(frozen=True)
class LoopConfig:
    """How a run is driven: the loop's half of a :class:`RunKey` (every field is stored with the run
    and restored on resume)."""

    rounds: int = 20
    """Rounds to run (an upper bound when ``stop_after`` is set)."""
    seed: int = 0
    """Run seed; rounds and probes derive theirs from it."""
    stop_after: int = 0
    """Stop early once the mapping has been unchanged for this many rounds and the policy says
    it has converged (0: never stop early)."""
    max_probes_per_round: int = DEFAULT_MAX_PROBES_PER_ROUND
    """Most probes the loop executes in one round, whatever the policy asks (0: no probes)."""

    def __post_init__(self) -> None:
        for name in ("rounds", "seed", "stop_after", "max_probes_per_round"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise InputError(f"{name} must be an integer, got {value!r}")
        if self.rounds < 1:
            raise InputError(f"rounds must be >= 1, got {self.rounds}")
        if self.rounds > MAX_ROUNDS:
            raise InputError(f"rounds must be <= {MAX_ROUNDS:,}, got {self.rounds}")
        if not 0 <= self.seed <= MAX_SEED:  # the run store keeps it as a signed 64-bit integer
            raise InputError(f"seed must be between 0 and {MAX_SEED} (a signed 64-bit integer), got {self.seed}")
        if self.stop_after < 0:
            raise InputError(f"stop_after must be >= 0, got {self.stop_after}")
        if self.stop_after > MAX_ROUNDS:
            raise InputError(f"stop_after must be <= {MAX_ROUNDS:,}, got {self.stop_after}")
        if self.max_probes_per_round < 0:
            raise InputError(f"max_probes_per_round must be >= 0, got {self.max_probes_per_round}")


@dataclass(frozen=True, init=False)
class RunKey:
    """Everything that makes two runs the same run: a finished run with an equal key is reused,
    an interrupted one is continued (the bench), and a stored run is rebuilt from it (resume).

    The one description of a run: what runs (scenario, policy and options, executor, grouping)
    and how the loop drives it (:attr:`config`, a :class:`LoopConfig`). ``seed``, ``rounds``,
    ``stop_after`` and ``max_probes_per_round`` may be given directly (they override ``config``'s)
    and read back as properties.
    """

    scenario: Scenario
    """The scenario, compared by content (a changed card is another run)."""
    policy: str
    """Registered policy name (``make_policy``)."""
    options: dict[str, Any]
    """``make_policy`` keyword options (JSON-ready; secrets are never stored)."""
    config: LoopConfig
    """Rounds, seed, early stop and probe cap."""
    executor: ExecutorSpec
    """The executor the rounds ran on."""
    experiment: str
    """Grouping label (the bench's ``bench``; '' for ad-hoc runs)."""

    def __init__(
        self,
        scenario: Scenario,
        policy: str,
        options: dict[str, Any] | None = None,
        seed: int | None = None,
        rounds: int | None = None,
        stop_after: int | None = None,
        executor: ExecutorSpec = SIM,
        experiment: str = "",
        *,
        config: LoopConfig | None = None,
        max_probes_per_round: int | None = None,
    ) -> None:
        given = {k: v for k, v in (("seed", seed), ("rounds", rounds), ("stop_after", stop_after),
                                   ("max_probes_per_round", max_probes_per_round)) if v is not None}
        cfg = replace(config or LoopConfig(), **given) if given else (config or LoopConfig())
        object.__setattr__(self, "scenario", scenario)
        object.__setattr__(self, "policy", policy)
        object.__setattr__(self, "options", _json_ready(dict(options or {}), f"policy {policy!r} options"))
        object.__setattr__(self, "config", cfg)
        object.__setattr__(self, "executor", executor)
        object.__setattr__(self, "experiment", experiment)

    @property
    def seed(self) -> int:
        """Run seed."""
        return self.config.seed

    @property
    def rounds(self) -> int:
        """Rounds planned."""
        return self.config.rounds

    @property
    def stop_after(self) -> int:
        """Early-stop setting (0: never)."""
        return self.config.stop_after

    @property
    def max_probes_per_round(self) -> int:
        """The loop's cap on probes in one round."""
        return self.config.max_probes_per_round

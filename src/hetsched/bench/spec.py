"""What a bench runs: policy variants (a registered policy plus options, e.g. ``agentic:rules``)
and scenarios (the bundled suite S1-S13, or the user's own files and tool cards).

Reads the policy registry, so policies registered later are picked up without a change here.
Imports the model, the policy registry and the decider registry; never the loop or the CLI.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetsched.model import InputError, Scenario, ToolCard
from hetsched.model.errors import ParameterError, UnknownValueError, did_you_mean
from hetsched.model.files import bundled_scenarios, load_scenario, load_tool_library
from hetsched.policies import LOAD_ONLY, policy_names

SUITE: tuple[str, ...] = tuple(f"S{i}" for i in range(1, 14))
"""The evaluation suite, in PAPER.md order."""
QUICK_SCENARIOS: tuple[str, ...] = ("S2", "S5", "S11", "S13")
"""``--quick``: one high-gain chain/DAG, the Table 2 fan-out, and two three-way scenarios
(S5 and S13 also feed the Gantt and VRAM figures)."""
REAL_SUITE: tuple[str, ...] = ("rag_tiny", "fanout_tiny")
"""The small real suite (``--executor local``): bundled scenarios of real tiny tools whose cards were
profiled by ``hetsched profile`` (a VRAM-constrained RAG/OCR DAG and a fan-out)."""
REAL_SEEDS = 1
"""Seeds per cell on a real executor (each run costs real seconds)."""
REAL_ROUNDS = 5
"""Rounds per run on a real executor."""
NON_LLM_DECIDERS: tuple[str, ...] = ("rules", "argmin")
"""Agentic deciders the default bench runs (no LLM server or model needed)."""
LLM_DECIDER_NAMES: tuple[str, ...] = ("openai", "local")
"""Agentic deciders that need an LLM; run only when asked for (``--policy agentic:local``)."""


@dataclass(frozen=True)
class PolicySpec:
    """One column of the tables: a registered policy and the options it is built with."""

    policy: str
    """Name for ``make_policy``."""
    options: dict[str, Any] = field(default_factory=dict)
    """Keyword options for ``make_policy`` (JSON-ready; stored with the run)."""

    @property
    def label(self) -> str:
        """``agentic:rules`` for an agentic decider, ``ucb1`` for a plain policy, ``p[k=v]`` otherwise."""
        if not self.options:
            return self.policy
        if set(self.options) == {"decider"}:
            return f"{self.policy}:{self.options['decider']}"
        inner = ",".join(f"{k}={v}" for k, v in sorted(self.options.items()))
        return f"{self.policy}[{inner}]"

    @property
    def uses_llm(self) -> bool:
        """True for the agentic policy with an LLM decider."""
        return str(self.options.get("decider", "")) in LLM_DECIDER_NAMES

    def __hash__(self) -> int:
        return hash((self.policy, tuple(sorted((k, repr(v)) for k, v in self.options.items()))))


_SPEC = re.compile(r"^\s*(?P<policy>[A-Za-z0-9_-]+)\s*(?::\s*(?P<decider>[A-Za-z0-9_-]+))?\s*$")


def parse_spec(text: str) -> PolicySpec:
    """``ucb1``, ``agentic`` (= ``agentic:rules``) or ``agentic:DECIDER``; names are checked."""
    m = _SPEC.match(text)
    if not m:
        raise ParameterError("policy", f"{text!r}: write NAME or agentic:DECIDER (e.g. ucb1, agentic:rules)")
    policy = m["policy"].lower().replace("_", "-")
    known = policy_names()
    if policy not in known:
        raise UnknownValueError("policy", f"{text!r}: Unknown policy {policy!r}; valid policies: {', '.join(known)}"
                                + did_you_mean(policy, known))
    decider = m["decider"]
    if decider is None:
        return PolicySpec(policy, {"decider": "rules"} if policy == "agentic" else {})
    if policy != "agentic":
        raise ParameterError("policy", f"{text!r}: only the agentic policy takes a decider (agentic:DECIDER)")
    from hetsched.policies.decider_registry import decider_names

    decider = decider.lower()
    valid = [d for d in decider_names() if d != "scripted"]
    if decider not in valid:
        raise UnknownValueError("policy", f"{text!r}: Unknown decider {decider!r}; valid deciders: {', '.join(valid)}")
    return PolicySpec("agentic", {"decider": decider})


def default_specs(*, under_load: bool = False) -> tuple[PolicySpec, ...]:
    """Every registered policy; the agentic one once per non-LLM decider (rules, argmin). Policies
    that differ from another only under load (``LOAD_ONLY``) only with ``under_load``."""
    specs: list[PolicySpec] = []
    for name in policy_names():
        if name in LOAD_ONLY and not under_load:
            continue
        if name == "agentic":
            specs.extend(PolicySpec("agentic", {"decider": d}) for d in NON_LLM_DECIDERS)
        else:
            specs.append(PolicySpec(name))
    return tuple(specs)


def parse_specs(texts: Sequence[str]) -> tuple[PolicySpec, ...]:
    """The policies of ``--policy`` options (default: :func:`default_specs`), duplicates dropped."""
    if not texts:
        return default_specs()
    out: dict[str, PolicySpec] = {}
    for t in texts:
        spec = parse_spec(t)
        out.setdefault(spec.label, spec)
    return tuple(out.values())


def natural_key(name: str) -> tuple[str, int, str]:
    """Sort ``S2`` before ``S10``."""
    m = re.match(r"^(\D*)(\d+)(.*)$", name)
    return (m[1], int(m[2]), m[3]) if m else (name, -1, "")


def load_scenarios(refs: Sequence[str | Path], tools: Path | None = None) -> tuple[Scenario, ...]:
    """Scenarios by bundled name or file path (default: the suite S1-S13).

    ``tools`` is a tool library for scenarios that do not name their own (the bundled suite
    included, so the suite can run on re-profiled cards). Names must be unique.
    """
    library: dict[str, ToolCard] | None = load_tool_library(tools) if tools is not None else None
    if not refs:
        bundled = bundled_scenarios()
        missing = [s for s in SUITE if s not in bundled]
        if missing:  # a broken install, not user input
            raise InputError(f"bundled scenarios {missing} are missing; reinstall hetsched")
        refs = list(SUITE)
    scenarios = [load_scenario(r, library=library) for r in refs]
    seen: dict[str, str] = {}
    for ref, s in zip(refs, scenarios, strict=True):
        if s.name in seen:
            raise ParameterError(
                "scenarios", f"{ref}: scenario name {s.name!r} is already used by {seen[s.name]}; "
                "give each scenario file a distinct 'name:'"
            )
        seen[s.name] = str(ref)
    return tuple(scenarios)


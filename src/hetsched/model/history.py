"""Round records: what the loop hands a policy (and the monitor) as history, and what it stores.

A round is: the probes the policy asked for (:class:`ProbeRequest`, executed by the loop into
:class:`Probe`), the policy's :class:`Proposal` (with a typed :class:`DecisionRecord` when a
decider chose it), and the :class:`Trace` of the proposal's execution. Part of the model
package, so the monitor, policies, loop and store share these types without importing each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hetsched.model.mapping import Mapping
from hetsched.model.observations import Observation, to_json
from hetsched.model.trace import Trace


@dataclass(frozen=True)
class Attempt:
    """One ask of a decider: the shared transcript record (docs/agentic.md)."""

    attempt: int
    """1 for the first ask, 2.. for re-asks."""
    prompt: str
    """What was sent: the full prompt for attempt 1, the re-ask message after that."""
    reply: str
    """The model's reply text (content)."""
    reasoning: str = ""
    """Reasoning the model emitted (``<think>`` block, ``reasoning``/``reasoning_content``)."""
    prompt_tokens: int | None = None
    """Prompt tokens the server counted (None when unknown)."""
    completion_tokens: int | None = None
    """Completion tokens the server counted (None when unknown)."""
    latency_ms: float | None = 0.0
    """Wall time of the ask (None when not recorded)."""
    error: str = ""
    """The parse/validation/transport error that made this attempt unusable ('' if accepted)."""

    def __repr__(self) -> str:  # a prompt is kilobytes; a reply may be megabytes
        error = f", rejected: {self.error[:60]!r}" if self.error else ""
        return f"Attempt({self.attempt}, prompt {len(self.prompt):,} chars, reply {len(self.reply):,} chars{error})"

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict in the shared transcript format."""
        return {
            "attempt": self.attempt,
            "prompt": self.prompt,
            "reply": self.reply,
            "reasoning": self.reasoning,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "latency_ms": self.latency_ms,
            "error": self.error,
        }


@dataclass(frozen=True)
class DecisionRecord:
    """What a decider did for one round: every ask, and whether the policy fell back.

    The agentic policy fills it; the store writes its fields to their own columns and tables
    (``decider``, ``fallback``..., ``transcript``, ``observations``), and reads it back equal.
    """

    decider: str
    """Decider name (``rules``, ``openai``...)."""
    model: str | None = None
    """The model asked (None for deciders that are not LLMs)."""
    attempts: tuple[Attempt, ...] = ()
    """Every ask, in order."""
    fallback: bool = False
    """True when no valid mapping came back and the policy ran the best measured one instead."""
    fallback_reason: str = ""
    """Why it fell back."""
    observations: tuple[dict[str, Any], ...] = ()
    """The monitor's records the decider was given, as JSON (``kind``-tagged; built from the typed
    records by :meth:`of`, read back by the store)."""
    observations_text: str = ""
    """The same records exactly as rendered for the decider."""
    probes_spent: int = 0
    """What-if probes executed for this round."""
    cold_start: bool = False
    """True when the cards were hidden from the decider."""

    @classmethod
    def of(
        cls,
        decider: str,
        records: Sequence[Observation],
        *,
        model: str | None = None,
        attempts: tuple[Attempt, ...] = (),
        fallback: bool = False,
        fallback_reason: str = "",
        observations_text: str = "",
        probes_spent: int = 0,
        cold_start: bool = False,
    ) -> DecisionRecord:
        """The record of a decision made on the monitor's typed ``records``: they are stored as their
        JSON (:func:`~hetsched.model.observations.to_json`), made here, so a policy hands records,
        never dicts."""
        return cls(decider=decider, model=model, attempts=attempts, fallback=fallback,
                   fallback_reason=fallback_reason, observations=tuple(to_json(r) for r in records),
                   observations_text=observations_text, probes_spent=probes_spent, cold_start=cold_start)

    def __repr__(self) -> str:
        model = f" {self.model}" if self.model else ""
        fallback = f", fallback: {self.fallback_reason[:60]!r}" if self.fallback else ""
        return (f"DecisionRecord({self.decider}{model}, {len(self.attempts)} attempts, "
                f"{len(self.observations)} observations{fallback})")

    @property
    def reasks(self) -> int:
        """Attempts rejected with a parse, validation or transport error."""
        return sum(1 for a in self.attempts if a.error)

    def tokens(self, which: str) -> int | None:
        """Sum of ``prompt_tokens`` or ``completion_tokens`` over the attempts (None when none reported)."""
        values = [getattr(a, which) for a in self.attempts if getattr(a, which) is not None]
        return sum(values) if values else None

    @property
    def decision_ms(self) -> float | None:
        """Wall time over the attempts."""
        values = [a.latency_ms for a in self.attempts if a.latency_ms is not None]
        return sum(values) if values else None


@dataclass(frozen=True)
class Proposal:
    """A policy's answer for one round: the mapping, why, and what the decider left on record."""

    mapping: Mapping
    """The mapping to execute."""
    rationale: str = ""
    """Short free-text reason (the LLM's explanation, a rule's name...)."""
    decision: DecisionRecord | None = None
    """The decider's record (agentic policy); None for policies without a decider."""
    info: dict[str, Any] = field(default_factory=dict)
    """Policy-specific JSON-ready extras (UCB1's arm, HEFT's ranks...), stored verbatim."""


@dataclass(frozen=True)
class ProbeRequest:
    """A what-if execution a policy asks the loop for (the loop executes and records it)."""

    kind: str
    """``reprobe`` (one node moved) or ``swap`` (two nodes change placements)."""
    base: Mapping
    """The mapping it varies (the best measured one at the time)."""
    mapping: Mapping
    """The mapping to execute."""
    note: str = ""
    """Which change it measures (``C: gpu_now -> gpu_queue``)."""


@dataclass(frozen=True)
class Probe:
    """A what-if execution the loop ran for a policy, counted as cost."""

    kind: str
    """``reprobe`` (one node moved) or ``swap`` (two nodes exchange placements)."""
    base: Mapping
    """The mapping it varies (the best measured one at the time)."""
    trace: Trace
    """What happened."""
    note: str = ""
    """Which change it measures (``C: gpu_now -> gpu_queue``)."""

    @property
    def mapping(self) -> Mapping:
        """The probed mapping."""
        return self.trace.mapping


@dataclass(frozen=True)
class RoundRecord:
    """One round: the probes run before the decision, the proposal, and its executed trace."""

    round: int
    """Round index from 0."""
    proposal: Proposal
    """What the policy proposed."""
    trace: Trace
    """The execution of the proposal (feasible or not)."""
    probes: tuple[Probe, ...] = ()
    """What-if probes run during this round (before the proposal)."""
    decision_ms: float | None = field(default=None, compare=False)
    """Wall time of the round minus its executions (the policy's decision, its monitor, the loop's
    checks), measured by the loop; None when not measured. A clock reading, so not part of equality."""

    @property
    def mapping(self) -> Mapping:
        """The executed mapping."""
        return self.proposal.mapping

    @property
    def outcome(self) -> RoundOutcome:
        """The round's summary (:class:`RoundOutcome`)."""
        return RoundOutcome(round=self.round, mapping=self.mapping, feasible=self.trace.feasible,
                            e2e_ms=self.trace.e2e_ms, reason=self.trace.reason,
                            kind=None if self.trace.kind is None else self.trace.kind.value, probes=len(self.probes),
                            decision_ms=self.decision_ms)

    @property
    def played(self) -> list[tuple[int | None, Mapping]]:
        """Every mapping this round executed and could run: ``(None, the round's mapping)`` first when it ran,
        then ``(probe index, probe mapping)`` for each feasible probe (``RunStore.played`` reads the same from
        the store)."""
        head: list[tuple[int | None, Mapping]] = [(None, self.mapping)] if self.trace.feasible else []
        return head + [(i, p.mapping) for i, p in enumerate(self.probes) if p.trace.feasible]

    def __repr__(self) -> str:  # the generated one prints traces, prompts and replies in full
        d = self.proposal.decision
        decider = "" if d is None else f", decider {d.decider}" + (" (fallback)" if d.fallback else "")
        return f"RoundRecord({self.round}, {self.trace!r}, {len(self.probes)} probes{decider})"


@dataclass(frozen=True)
class RoundOutcome:
    """What one round did, without its traces and transcript: the one round summary that
    ``hetsched run --json``, ``show-run --json`` and the bench suites print. Built from a
    :class:`RoundRecord` (:attr:`RoundRecord.outcome`) or read straight from the run store's round
    columns (``RunStore.outcomes``), which never decodes a trace."""

    round: int
    """Round index from 0."""
    mapping: Mapping
    """The executed mapping."""
    feasible: bool
    """False when the mapping could not run."""
    e2e_ms: float | None
    """Measured E2E; None when infeasible."""
    reason: str
    """Why it could not run ('' when feasible)."""
    kind: str | None
    """The infeasibility kind's value (``oom``, ``deadlock``...); None when feasible."""
    probes: int
    """What-if probes run during the round."""
    decision_ms: float | None = None
    """The round's wall time minus its executions (:attr:`RoundRecord.decision_ms`); None: not measured."""

    def to_dict(self) -> dict[str, Any]:
        """``{"round", "mapping", "e2e_ms", "feasible", "reason", "infeasible_kind", "probes"}`` (the wall-clock
        ``decision_ms`` is left out: callers that report clock time add it)."""
        return {
            "round": self.round,
            "mapping": self.mapping.to_dict(),
            "e2e_ms": self.e2e_ms,
            "feasible": self.feasible,
            "reason": self.reason,
            "infeasible_kind": self.kind,
            "probes": self.probes,
        }

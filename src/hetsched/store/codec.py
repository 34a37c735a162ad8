"""Encoding of what the loop records: round records, probes, decision records, transcripts.

Pure functions between the model's typed records and the rows of the store's tables, so the
SQL layer (``hetsched.store.db``) never touches a model object's internals. A proposal's
:class:`~hetsched.model.DecisionRecord` goes to typed columns of ``rounds`` plus the
``transcript`` and ``observations`` tables, and ``Proposal.info`` (policy extras) is stored
verbatim, so a stored round rebuilds to an equal :class:`~hetsched.model.RoundRecord`.
Imports only the model.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping as AbcMapping
from dataclasses import dataclass
from enum import Enum
from pathlib import PurePath
from typing import Any

from hetsched.model import (
    Attempt,
    DecisionRecord,
    HetschedError,
    Infeasibility,
    Mapping,
    Probe,
    Proposal,
    RoundRecord,
    Trace,
)

SECRET_OPTION_KEYS: frozenset[str] = frozenset(
    {"api_key", "apikey", "password", "secret", "token", "access_token", "auth_token", "bearer_token"}
)
"""Policy option names that are never written to the store (resume reads them from the
environment or config again)."""


class StoreError(HetschedError):
    """The run store cannot be opened, has an unknown schema, or was asked something invalid."""


class NotJsonReady(StoreError, TypeError):
    """A value a policy or executor handed the store cannot be written as JSON."""


class DamagedValue(StoreError):
    """A stored value that cannot be read back (not UTF-8 text, not valid JSON, the wrong shape):
    the file was damaged or edited by hand."""


class Undecodable(str):
    """The text of a column whose bytes are not valid UTF-8, decoded with replacement characters
    so the rest of the row (and the other rows) can still be read; :func:`loads` refuses it."""


def decode_text(data: bytes) -> str:
    """The store's ``text_factory``: UTF-8, or an :class:`Undecodable` for damaged bytes (never raises,
    so one damaged value cannot hide the other rows of a query)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return Undecodable(data.decode("utf-8", errors="replace"))


def _default(value: Any) -> Any:
    """JSON fallback for the model's own types; anything else is a caller bug."""
    if isinstance(value, Mapping):
        return value.to_dict()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=str)
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, Trace):
        return value.to_dict()
    if isinstance(value, Infeasibility):
        return value.to_dict()
    raise NotJsonReady(
        f"cannot store a {type(value).__name__} ({value!r:.80}); Proposal.info, observations and "
        "policy options must hold JSON-ready values (str, int, float, bool, None, lists, dicts)"
    )


def dumps(value: Any, where: str = "value") -> str:
    """Compact JSON; non-JSON values raise :class:`NotJsonReady` naming ``where``."""
    try:
        return json.dumps(value, separators=(",", ":"), default=_default, ensure_ascii=False)
    except NotJsonReady as exc:
        raise NotJsonReady(f"{where}: {exc}") from None
    except (TypeError, ValueError) as exc:  # e.g. non-string dict keys, circular references
        raise NotJsonReady(f"{where}: cannot be written as JSON ({exc})") from None


def loads(text: str | None) -> Any:
    """Inverse of :func:`dumps` (None stays None); :class:`DamagedValue` for text that is not
    UTF-8 or not JSON."""
    if text is None:
        return None
    if isinstance(text, Undecodable):
        raise DamagedValue("holds bytes that are not UTF-8 text")
    if not isinstance(text, str):
        raise DamagedValue(f"holds a {type(text).__name__}, not JSON text")
    try:
        return json.loads(text)
    except RecursionError:
        raise DamagedValue("holds JSON nested too deeply to read") from None
    except ValueError as exc:
        raise DamagedValue(f"is not valid JSON ({exc})") from None


def canonical(value: Any) -> str:
    """Key-sorted JSON, for equality tests in SQL (options, scenarios)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_default, ensure_ascii=False)


def sha256(text: str) -> str:
    """Hex digest of a text (scenario fingerprints)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def public_options(options: AbcMapping[str, Any] | None) -> dict[str, Any]:
    """Policy options without secrets (see :data:`SECRET_OPTION_KEYS`), nested dicts included."""

    def clean(value: Any) -> Any:
        if isinstance(value, AbcMapping):
            return {
                str(k): clean(v)
                for k, v in value.items()
                if not _is_secret(str(k))
            }
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        return value

    cleaned: dict[str, Any] = clean(dict(options or {}))
    return cleaned


def _is_secret(key: str) -> bool:
    k = key.lower().replace("-", "_")
    return k in SECRET_OPTION_KEYS or k.endswith(("_api_key", "_secret", "_password", "_token"))


# ---------------------------------------------------------------------------- rows
@dataclass(frozen=True)
class RoundRows:
    """Everything one round writes, ready for ``executemany``."""

    round: tuple[Any, ...]
    probes: list[tuple[Any, ...]]
    observations: list[tuple[Any, ...]]
    transcript: list[tuple[Any, ...]]


def _kind(trace: Trace) -> str | None:
    return None if trace.kind is None else trace.kind.value


def encode_round(run_id: str, record: RoundRecord, recorded_at: str) -> RoundRows:
    """Split one round into the rows of ``rounds``, ``probes``, ``observations``, ``transcript``."""
    r = record.round
    where = f"round {r}"
    trace = record.trace
    d = record.proposal.decision
    decision_json = None if d is None else dumps(
        {"observations_text": d.observations_text, "cold_start": d.cold_start}, f"{where} decision"
    )
    round_row = (
        run_id,
        r,
        dumps(record.mapping.to_dict(), f"{where} mapping"),
        record.mapping.code(),
        int(trace.feasible),
        trace.e2e_ms,
        trace.reason,
        _kind(trace),
        record.proposal.rationale,
        None if d is None else d.decider,
        None if d is None else d.model,
        int(d is not None and d.fallback),
        "" if d is None else d.fallback_reason,
        None if d is None else d.probes_spent,
        None if d is None else d.tokens("prompt_tokens"),
        None if d is None else d.tokens("completion_tokens"),
        dumps(record.proposal.info, f"{where} Proposal.info"),
        "{}",
        decision_json,
        dumps(trace.to_dict(), f"{where} trace"),
        recorded_at,
        record.decision_ms,
    )
    probes = [
        (
            run_id,
            r,
            i,
            p.kind,
            p.note,
            dumps(p.base.to_dict(), f"{where} probe {i} base"),
            p.mapping.code(),
            int(p.trace.feasible),
            p.trace.e2e_ms,
            p.trace.reason,
            _kind(p.trace),
            dumps(p.trace.to_dict(), f"{where} probe {i} trace"),
        )
        for i, p in enumerate(record.probes)
    ]
    observations = d.observations if d is not None else ()
    obs_rows = [
        (run_id, r, i, _str_or_none(o.get("kind")), dumps(o, f"{where} observation {i}"))
        for i, o in enumerate(observations)
    ]
    attempts = d.attempts if d is not None else ()
    tr_rows = [
        (run_id, r, i, a.attempt, a.prompt, a.reply, a.reasoning, a.prompt_tokens, a.completion_tokens,
         a.latency_ms, a.error, None)
        for i, a in enumerate(attempts)
    ]
    return RoundRows(round_row, probes, obs_rows, tr_rows)


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def attempt_from_row(row: Any) -> Attempt:
    """One ``transcript`` row as the model's :class:`~hetsched.model.Attempt` (:class:`DamagedValue`
    when a column holds the wrong type)."""

    def text(column: str) -> str:
        value = row[column]
        if value is None:
            return ""
        if isinstance(value, Undecodable):
            raise DamagedValue(f"transcript column {column} holds bytes that are not UTF-8 text")
        if not isinstance(value, str):
            raise DamagedValue(f"transcript column {column} holds {value!r:.40}, not text")
        return value

    def number(column: str, kind: type | tuple[type, ...]) -> Any:
        value = row[column]
        if value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
            raise DamagedValue(f"transcript column {column} holds {value!r:.40}, not a number")
        return value

    attempt = number("attempt", int)
    return Attempt(
        attempt=attempt if attempt is not None else row["idx"] + 1,
        prompt=text("prompt"),
        reply=text("reply"),
        reasoning=text("reasoning"),
        prompt_tokens=number("prompt_tokens", int),
        completion_tokens=number("completion_tokens", int),
        latency_ms=None if row["latency_ms"] is None else float(number("latency_ms", (int, float))),
        error=text("error"),
    )


def decode_round(row: Any, probes: list[Any], observations: list[Any], transcript: list[Any]) -> RoundRecord:
    """Rebuild a :class:`RoundRecord` from its rows (inverse of :func:`encode_round`)."""
    info: dict[str, Any] = loads(row["info_json"])
    decision: DecisionRecord | None = None
    if row["decision_json"] is not None:
        extra = loads(row["decision_json"])
        decision = DecisionRecord(
            decider=row["decider"] or "",
            model=row["model"],
            attempts=tuple(attempt_from_row(t) for t in transcript),
            fallback=bool(row["fallback"]),
            fallback_reason=row["fallback_reason"] or "",
            observations=tuple(loads(o["data_json"]) for o in observations),
            observations_text=str(extra.get("observations_text", "")),
            probes_spent=row["probes_spent"] or 0,
            cold_start=bool(extra.get("cold_start", False)),
        )
    proposal = Proposal(mapping=Mapping(loads(row["mapping_json"])), rationale=row["rationale"], decision=decision,
                        info=info)
    probe_objs = tuple(
        Probe(kind=p["kind"], base=Mapping(loads(p["base_json"])), trace=Trace.from_dict(loads(p["trace_json"])),
              note=p["note"])
        for p in probes
    )
    decision_ms = row["decision_ms"]
    return RoundRecord(round=row["round"], proposal=proposal, trace=Trace.from_dict(loads(row["trace_json"])),
                       probes=probe_objs, decision_ms=None if decision_ms is None else float(decision_ms))


DECISION_INFO_KEYS: tuple[str, ...] = (
    "decider", "model", "transcript", "fallback", "fallback_reason", "observations", "observations_text",
    "probes_spent", "cold_start",
)
"""Keys schema-1 stores kept inside ``info_json`` for a decider's record (moved out by the migration)."""

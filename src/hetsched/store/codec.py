"""JSON encoding of what the loop records: round records, probes, proposal info, transcripts.

Pure functions between model objects and the rows of the store's tables, so the SQL layer
(``hetsched.store.db``) never touches a model object's internals. ``Proposal.info`` follows the
decider-transcript contract (``transcript``, ``observations``, ``decider``, ``model``,
``fallback``, ``fallback_reason``, ``probes_spent``); a well-formed ``transcript`` or
``observations`` list is moved into its own table and put back on read, so a stored round
rebuilds to an equal :class:`~hetsched.model.RoundRecord`. Imports only the model.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping as AbcMapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import PurePath
from typing import Any

from hetsched.model import HetschedError, Mapping, Probe, Proposal, RoundRecord, Trace

TRANSCRIPT_FIELDS: tuple[str, ...] = (
    "attempt",
    "prompt",
    "reply",
    "reasoning",
    "prompt_tokens",
    "completion_tokens",
    "latency_ms",
    "error",
)
"""Keys of one transcript entry in ``Proposal.info["transcript"]`` (the shared contract)."""

SECRET_OPTION_KEYS: frozenset[str] = frozenset(
    {"api_key", "apikey", "password", "secret", "token", "access_token", "auth_token", "bearer_token"}
)
"""Policy option names that are never written to the store (resume reads them from the
environment or config again)."""


class StoreError(HetschedError):
    """The run store cannot be opened, has an unknown schema, or was asked something invalid."""


class NotJsonReady(StoreError, TypeError):
    """A value a policy or executor handed the store cannot be written as JSON."""


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
    """Inverse of :func:`dumps` (None stays None)."""
    return None if text is None else json.loads(text)


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
class TranscriptEntry:
    """One decider attempt of one round, as stored (the shared transcript contract)."""

    round: int
    """Round index."""
    index: int
    """Position in the round's transcript list."""
    attempt: int
    """Attempt number the decider gave (0 or 1 for the first ask; re-asks count up)."""
    prompt: str = ""
    """Prompt text sent."""
    reply: str = ""
    """Reply text received (final answer part)."""
    reasoning: str = ""
    """Reasoning text (``<think>`` or a ``reasoning_content`` field), '' if none."""
    prompt_tokens: int | None = None
    """Prompt tokens the server reported."""
    completion_tokens: int | None = None
    """Completion tokens the server reported."""
    latency_ms: float | None = None
    """Wall time of the request."""
    error: str = ""
    """Validation or parse error that caused a re-ask; '' when the reply was accepted."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Keys outside the contract (and contract keys of the wrong type), kept verbatim."""


def _is_record_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, dict) for v in value)


@dataclass(frozen=True)
class RoundRows:
    """Everything one round writes, ready for ``executemany``."""

    round: tuple[Any, ...]
    probes: list[tuple[Any, ...]]
    observations: list[tuple[Any, ...]]
    transcript: list[tuple[Any, ...]]


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _sum_tokens(entries: list[dict[str, Any]], key: str) -> int | None:
    values = [_int_or_none(e.get(key)) for e in entries]
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def encode_round(run_id: str, record: RoundRecord, recorded_at: str) -> RoundRows:
    """Split one round into the rows of ``rounds``, ``probes``, ``observations``, ``transcript``."""
    r = record.round
    where = f"round {r}"
    info = dict(record.proposal.info)
    transcript = info.pop("transcript") if _is_record_list(info.get("transcript")) else None
    observations = info.pop("observations") if _is_record_list(info.get("observations")) else None
    # which lists were moved out, so the read side puts back exactly what was there
    split = {"transcript": transcript is not None, "observations": observations is not None}
    trace = record.trace
    fallback = info.get("fallback")
    probes_spent = _int_or_none(info.get("probes_spent"))
    round_row = (
        run_id,
        r,
        dumps(record.mapping.to_dict(), f"{where} mapping"),
        record.mapping.code(),
        int(trace.feasible),
        trace.e2e_ms,
        trace.reason,
        record.proposal.rationale,
        _str_or_none(info.get("decider")),
        _str_or_none(info.get("model")),
        int(bool(fallback)),
        str(info.get("fallback_reason") or ""),
        probes_spent,
        _sum_tokens(transcript or [], "prompt_tokens"),
        _sum_tokens(transcript or [], "completion_tokens"),
        dumps(info, f"{where} Proposal.info"),
        dumps(split, where),
        dumps(trace.to_dict(), f"{where} trace"),
        recorded_at,
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
            dumps(p.trace.to_dict(), f"{where} probe {i} trace"),
        )
        for i, p in enumerate(record.probes)
    ]
    obs_rows = [
        (run_id, r, i, _str_or_none(o.get("kind")), dumps(o, f"{where} observation {i}"))
        for i, o in enumerate(observations or [])
    ]
    tr_rows = [(run_id, r, i, *_transcript_columns(entry, f"{where} transcript {i}"))
               for i, entry in enumerate(transcript or [])]
    return RoundRows(round_row, probes, obs_rows, tr_rows)


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _typed_ok(key: str, value: Any) -> bool:
    """Does a contract field hold the type its column stores?"""
    if key in ("prompt", "reply", "reasoning", "error"):
        return isinstance(value, str)
    if key == "attempt":
        return _int_or_none(value) is not None
    if key in ("prompt_tokens", "completion_tokens"):
        return value is None or _int_or_none(value) is not None
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))  # latency_ms


def _transcript_columns(entry: dict[str, Any], where: str) -> tuple[Any, ...]:
    """Contract fields as typed columns; anything else (or mistyped) kept verbatim in ``extra_json``."""
    extra = {k: v for k, v in entry.items() if k not in TRANSCRIPT_FIELDS}
    missing = [k for k in TRANSCRIPT_FIELDS if k not in entry]
    columns: list[Any] = []
    for k in TRANSCRIPT_FIELDS:
        value = entry.get(k)
        if k in entry and not _typed_ok(k, value):
            extra[k] = value
            value = None
        columns.append(value)
    kept = {"extra": extra, "missing": missing} if extra or missing else None
    return (*columns, None if kept is None else dumps(kept, where))


def transcript_entry_to_info(row: Any) -> dict[str, Any]:
    """Rebuild one ``info["transcript"]`` entry from its ``transcript`` row."""
    kept = loads(row["extra_json"]) or {}
    extra: dict[str, Any] = kept.get("extra", {})
    missing = set(kept.get("missing", ()))
    values: dict[str, Any] = {k: row[k] for k in TRANSCRIPT_FIELDS if k not in missing and k not in extra}
    values.update(extra)
    return values


def transcript_entry(row: Any) -> TranscriptEntry:
    """A ``transcript`` row as a :class:`TranscriptEntry` (for display and export)."""
    kept = loads(row["extra_json"]) or {}
    return TranscriptEntry(
        round=row["round"],
        index=row["idx"],
        attempt=row["attempt"] if row["attempt"] is not None else row["idx"],
        prompt=row["prompt"] or "",
        reply=row["reply"] or "",
        reasoning=row["reasoning"] or "",
        prompt_tokens=row["prompt_tokens"],
        completion_tokens=row["completion_tokens"],
        latency_ms=row["latency_ms"],
        error=row["error"] or "",
        extra=kept.get("extra", {}),
    )


def decode_round(row: Any, probes: list[Any], observations: list[Any], transcript: list[Any]) -> RoundRecord:
    """Rebuild a :class:`RoundRecord` from its rows (inverse of :func:`encode_round`)."""
    info: dict[str, Any] = loads(row["info_json"])
    split = loads(row["split_json"]) or {}
    if split.get("transcript"):
        info["transcript"] = [transcript_entry_to_info(t) for t in transcript]
    if split.get("observations"):
        info["observations"] = [loads(o["data_json"]) for o in observations]
    proposal = Proposal(mapping=Mapping(loads(row["mapping_json"])), rationale=row["rationale"], info=info)
    probe_objs = tuple(
        Probe(kind=p["kind"], base=Mapping(loads(p["base_json"])), trace=Trace.from_dict(loads(p["trace_json"])),
              note=p["note"])
        for p in probes
    )
    return RoundRecord(round=row["round"], proposal=proposal, trace=Trace.from_dict(loads(row["trace_json"])),
                       probes=probe_objs)

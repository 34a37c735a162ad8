"""Test factories: cards, workflows, scenarios and the canonical DAGs (chain, fork, diamond).

Shared by every test module (STYLE.md: ``make_workflow``, ``make_card``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from hetsched.model import Edge, Machine, Mapping, Mode, Node, Proposal, RoundRecord, Scenario, ToolCard, Workflow
from hetsched.policies import Policy
from hetsched.store import decision_to_dict


def make_card(
    name: str = "t",
    cpu_ms: float = 100.0,
    gpu_ms: float | None = 10.0,
    load_ms: float = 50.0,
    vram_mb: float = 500.0,
    gpu_util: float = 1.0,
    cpu_threads: int = 1,
    **extra: object,
) -> ToolCard:
    """A card with simple round figures; ``gpu_ms=None`` makes a CPU-only tool."""
    return ToolCard(
        name=name,
        cpu_ms=cpu_ms,
        gpu_ms=gpu_ms,
        load_ms=load_ms,
        vram_mb=vram_mb,
        gpu_util=gpu_util,
        cpu_threads=cpu_threads,
        has_gpu=gpu_ms is not None,
        **extra,  # type: ignore[arg-type]
    )


def make_workflow(
    nodes: Sequence[tuple[str, str]], edges: Iterable[tuple[str, str] | tuple[str, str, float]] = ()
) -> Workflow:
    """Nodes as (id, tool); edges as (src, dst) or (src, dst, data_mb)."""
    es = [Edge(src=e[0], dst=e[1], data_mb=e[2] if len(e) > 2 else 0.0) for e in edges]  # type: ignore[misc]
    return Workflow(nodes=tuple(Node(id=i, tool=t) for i, t in nodes), edges=tuple(es))


def make_scenario(
    workflow: Workflow,
    cards: Iterable[ToolCard],
    mode: Mode | str = Mode.BINARY,
    name: str = "test",
    **machine: object,
) -> Scenario:
    """A scenario from a workflow and cards; machine fields as keyword arguments."""
    defaults: dict[str, object] = {"cpu_cores": 4, "vram_budget_mb": 10_000.0, "gpu_kappa": 0.0, "noise_cv": 0.0}
    defaults.update(machine)
    return Scenario(
        name=name,
        mode=Mode(mode),
        workflow=workflow,
        cards={c.name: c for c in cards},
        machine=Machine(**defaults),  # type: ignore[arg-type]
    )


def chain(n: int = 3) -> Workflow:
    """t0 -> t1 -> ... (one tool per node, tool i named ``t{i}``)."""
    ids = [f"N{i}" for i in range(n)]
    return make_workflow([(i, f"t{k}") for k, i in enumerate(ids)], itertools.pairwise(ids))


def fork(width: int = 3) -> Workflow:
    """One source S fanning out to ``width`` parallel sinks."""
    kids = [f"K{i}" for i in range(width)]
    return make_workflow([("S", "t0"), *[(k, f"t{i + 1}") for i, k in enumerate(kids)]], [("S", k) for k in kids])


def diamond() -> Workflow:
    """A -> (B, C) -> D."""
    return make_workflow(
        [("A", "t0"), ("B", "t1"), ("C", "t2"), ("D", "t3")],
        [("A", "B"), ("A", "C"), ("B", "D"), ("C", "D")],
    )


CANONICAL = {"chain": chain, "fork": fork, "diamond": diamond}
"""STYLE.md's canonical DAGs, by name."""


def canonical_scenario(kind: str, mode: Mode | str = Mode.BINARY, **machine: object) -> Scenario:
    """A canonical DAG with distinct, plausible cards (one GPU-preferred, one ambiguous, ...)."""
    wf = CANONICAL[kind]()
    figures = [
        (400.0, 40.0, 300.0, 900.0, 0.6),  # GPU-preferred
        (60.0, 30.0, 200.0, 400.0, 0.4),  # ambiguous
        (50.0, 120.0, 100.0, 200.0, 0.2),  # CPU-preferred
        (300.0, 25.0, 250.0, 700.0, 0.7),  # GPU-preferred
    ]
    cards = []
    for i, tool in enumerate(wf.tools):
        cpu, gpu, load, vram, util = figures[i % len(figures)]
        cards.append(make_card(tool, cpu, gpu, load, vram, util))
    defaults: dict[str, object] = {"gpu_kappa": 0.15, "vram_budget_mb": 1500.0}
    defaults.update(machine)
    return make_scenario(wf, cards, mode=mode, name=kind, **defaults)


def decision_info(record: RoundRecord) -> dict[str, Any]:
    """A round's decision record in its JSON form (``show-run --json``): decider, model, transcript
    (attempts as dicts), fallback, fallback_reason, observations, observations_text, probes_spent."""
    decision = record.proposal.decision
    assert decision is not None, f"round {record.round} has no decision record"
    return decision_to_dict(decision)


def run_cli(capsys: Any, *args: str) -> tuple[int, str, str]:
    """``hetsched ARGS`` through the real entry point in this process: (exit code, stdout, stderr).

    Output captured before the call is dropped; no traceback may reach the output (an exception other
    than SystemExit fails the test)."""
    from hetsched.cli import main

    capsys.readouterr()
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = 1 if isinstance(exc.code, str) else int(exc.code or 0)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


class ScriptPolicy(Policy):
    """A policy that proposes ``mappings[len(history)]`` (the last one after that): a session test
    names the mappings its requests run under."""

    name = "script"

    def __init__(self, mappings: list[dict[str, str]]) -> None:
        super().__init__()
        self.mappings = mappings

    def propose(self, history: Any, probes: Any = (), observations: Any = None) -> Proposal:
        return Proposal(Mapping(self.mappings[min(len(history), len(self.mappings) - 1)]), rationale="script")

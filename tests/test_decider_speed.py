"""The ``rules`` decider's faster search (issue 17, fast decisions) decides exactly as the plain
definitions it replaced: each shortcut is checked here against the straightforward code, on generated
workflows (``benchmarks/decision_scale.py`` compares whole runs of two checkouts, proposal by proposal)."""

from __future__ import annotations

import math
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetsched.bench.generate import FAMILIES, WorkflowSpec, random_scenario
from hetsched.deciders.estimate import Estimator
from hetsched.deciders.search import Codes, _Search
from hetsched.model import Mode
from hetsched.model.mapping import CPU_CODE, NOW_CODE, QUEUE_CODE


def plain_make_room(search: _Search, cand: Codes, i: int) -> list[Codes]:
    """``_Search.make_room`` as it was written before it sorted every tool once (session 28): the
    residents collected and sorted per call, each evicted tool's nodes found by a pass over all nodes."""
    tool, vram = search.tool, search.tool_vram
    residents = {tool[j] for j in range(search.n) if cand[j] == NOW_CODE and tool[j] != tool[i]}
    need = sum(vram[t] for t in {tool[j] for j in range(search.n) if cand[j] == NOW_CODE})
    orders: list[tuple[int, list[int]]] = []
    if search._loss_of is not None:
        search.run_loss(*search._loss_of)
        search._loss_of = None
    for target in (QUEUE_CODE, CPU_CODE):
        if search.loss is not None:
            loss = search.loss[target]
            orders.append((target, sorted(residents, key=lambda t: (loss.get(t, math.inf) / max(vram[t], 1e-9),
                                                                     search.per_mb[t], t))))
        orders.append((target, sorted(residents, key=lambda t: (search.per_mb[t], t))))
    out: list[Codes] = []
    for target, resident in orders:
        codes = list(cand)
        left = need
        for t in resident:
            if left <= search.est.budget:
                break
            for j in range(search.n):
                if tool[j] == t and codes[j] == NOW_CODE:
                    codes[j] = target if target in search.allowed[j] else CPU_CODE
            left -= vram[t]
        if left <= search.est.budget and tuple(codes) not in out:
            out.append(tuple(codes))
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=st.sampled_from(FAMILIES), n=st.integers(17, 40), three_way=st.booleans(), seed=st.integers(0, 10**6),
       screen=st.booleans())
def test_making_room_is_the_plain_definition(family: str, n: int, three_way: bool, seed: int, screen: bool) -> None:
    """Making room (every promotion to ``gpu_now`` that does not fit, single nodes and whole tools, with the
    current run's losses when screened and the cards' ranking alone when not) gives the candidates, in the
    order, of the plain definition, on random mappings of generated workflows, step after step of a descent
    (the losses change with the mapping)."""
    sc = random_scenario(WorkflowSpec(family, n, Mode.THREE_WAY if three_way else Mode.BINARY, seed))
    est = Estimator(sc, sc.machine.gpu_kappa)
    allowed = sc.compiled.allowed
    rng = random.Random(seed)
    fast = _Search(est, allowed, 10**6, 0, screen=screen)
    plain = _Search(est, allowed, 10**6, 0, screen=screen)
    compared = 0
    for _ in range(4):
        cur = tuple(rng.choice(a) for a in allowed)
        tm = est.timings(cur) if screen else None
        for s in (fast, plain):
            s.loss, s._loss_of = None, (None if tm is None else (cur, tm))
        for i in range(n):
            if NOW_CODE not in allowed[i] or cur[i] == NOW_CODE:
                continue
            cand = (*cur[:i], NOW_CODE, *cur[i + 1:])
            if est.static_ok(cand):
                continue
            assert fast.make_room(cand, i) == plain_make_room(plain, cand, i)
            compared += 1
        for g in fast.groups:
            if all(NOW_CODE in allowed[j] for j in g):
                cand = tuple(NOW_CODE if j in g else p for j, p in enumerate(cur))
                if not est.static_ok(cand):
                    assert fast.make_room(cand, g[0]) == plain_make_room(plain, cand, g[0])
    assert fast.loss == plain.loss


def test_group_moves_keep_the_placements_every_node_allows() -> None:
    """The placements a tool's nodes all allow, computed once per search, are those the moves take."""
    sc = random_scenario(WorkflowSpec("layered", 30, Mode.THREE_WAY, 3))
    est = Estimator(sc, sc.machine.gpu_kappa)
    search = _Search(est, sc.compiled.allowed, 100, 0)
    assert search.groups
    for g, common in zip(search.groups, search.group_common, strict=True):
        assert common == sorted(set.intersection(*(set(sc.compiled.allowed[j]) for j in g)))


def test_decision_scale_child_leaves_the_digest_out_of_the_decision_time() -> None:
    """``benchmarks/decision_scale.py``'s child (a script in a string, which no linter reads) reports a decision
    time per round and, apart, the time it spent digesting the searches' estimates for ``same decisions``: that
    digest (the repr of a continuation's every estimate, 0.1-0.2 s a later round at 100 tools) is not the
    decider's, and it had been counted in it (session 31). Checked without a real clock: the child runs on a
    process clock that only a digest (one ``hashlib.sha256`` call, one second) moves, so every round's decision
    time is 0 ms exactly and the digests' seconds all show up in ``digest_ms``."""
    from pathlib import Path

    from benchmarks import decision_scale

    prelude = (
        "import hashlib, time\n"
        "_clock = [0.0]\n"
        "time.process_time = lambda: _clock[0]\n"
        "_sha256 = hashlib.sha256\n"
        "def _one_second(*args, **kwargs):\n"
        "    _clock[0] += 1.0\n"
        "    return _sha256(*args, **kwargs)\n"
        "hashlib.sha256 = _one_second\n"
    )
    root = Path(__file__).resolve().parents[1]
    rounds = 3
    run = decision_scale.run_side(root, "layered", 10, "binary", 13, rounds, prelude=prelude)
    assert run["ms"] == [0.0] * rounds  # no digest second inside a round's decision time
    # every round's search was digested (round 0's search, then each later round's continuation), and each
    # digest's second is in digest_ms
    assert run["digest_ms"] >= 1000.0 * rounds and run["digest_ms"] % 1000.0 == 0.0
    assert run["searches"] is not None and len(run["searches"]) == 64
    assert len(run["proposals"]) == 64

"""The ``rules`` decider at 10-100 tools: decision time per round and quality, two checkouts side by side.

For each generated workflow (``hetsched.bench.generate``: families, sizes, both modes, seeds given
on the command line) each checkout runs, in a fresh subprocess, ``agentic`` with the ``rules``
decider on the simulator for ``--rounds`` rounds (rounds 0..5 by default) and reports:

- the decider's process time per round (``RulesDecider.decide``, the model search and the
  calibration; the monitor and the simulator are not in it, nor the digest of the searches' estimates
  this script takes for ``same decisions``: before session 31 it was in it: 0.1-0.2 s a later round at 100 tools,
  growing with round 0's estimates), median and max over the rounds; with
  ``--repeat R``, each checkout runs R times (alternating) and each round counts its least time (a
  loaded machine's extra time is noise added to the decision's own);
- the noise-free E2E of the best mapping played in those rounds (best of rounds 0..5);
- whether the two checkouts decided the same (``same decisions``): every round's mapping, rationale and
  reasoning (the estimates it quotes with it) equal, and, where both checkouts have the search's
  ``local_search`` / ``resume``, every estimate each search made, in order. A change meant only to be faster
  must read ``yes, every estimate`` on every row.

The best known mapping of a workflow is the lowest noise-free E2E among the search room's
``best_known`` (a seeded iterated local search of ``--reference-evals`` simulations plus its lower
bound's search, the same on every machine) and every mapping either checkout played; the table gives
each checkout's best of the rounds over it. Checkouts alternate (old, new) per workflow so a shared
machine's load hits both alike.

Run: python benchmarks/decision_scale.py --old /path/to/old/checkout [--new .] [--sizes 10 50 100]
     [--families layered random forkjoin] [--seeds 11] [--rounds 6] [--reference-evals 20000] [--repeat 1]
     [--new-max-decision-ms MS] [--out F.json]
(``--new-max-decision-ms``: the new side's decider with that time budget per decision, ``max_decision_ms``; a
budget in wall time, so that side's decisions depend on the load, and ``--repeat`` must then see the same
decisions each time or it stops; use ``--repeat 1``).
(an old checkout: ``git worktree add --detach /tmp/base COMMIT``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

CHILD = r"""
import hashlib, json, sys, time
from hetsched.bench.generate import WorkflowSpec, random_scenario
from hetsched.loop import LoopConfig, run_rounds
from hetsched.model import Mode
from hetsched.policies import make_policy
from hetsched.sim import Simulator
try:
    from hetsched.deciders import rules
except ImportError:
    from hetsched.llm import rules

family, n, mode, seed, rounds = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
options = json.loads(sys.argv[6]) if len(sys.argv) > 6 else {}  # the rules decider's options
sc = random_scenario(WorkflowSpec(family, n, Mode(mode), seed))
ms = []
digesting = [0.0]  # process time spent digesting the searches (below), left out of the decision's
decide = rules.RulesDecider.decide
def timed(self, ctx):
    t0, d0 = time.process_time(), digesting[0]
    try:
        return decide(self, ctx)
    finally:
        ms.append((time.process_time() - t0 - (digesting[0] - d0)) * 1000.0)
rules.RulesDecider.decide = timed
searches = []
if hasattr(rules, "local_search") and hasattr(rules, "resume"):  # each search's every estimate, in order
    def digested(search):
        def run(*args, **kwargs):
            res = search(*args, **kwargs)
            t0 = time.process_time()  # the repr of a continuation's every estimate: 0.1-0.2 s at 100 tools
            searches.append(hashlib.sha256(repr((res.best, res.e2e_ms, list(res.seen.items()))).encode()).hexdigest())
            digesting[0] += time.process_time() - t0
            return res
        return run
    rules.local_search, rules.resume = digested(rules.local_search), digested(rules.resume)
result = run_rounds(sc, make_policy("agentic", decider="rules", **options), LoopConfig(rounds=rounds, seed=0))
exact = Simulator(sc, noise=False)
played = [(exact.run(r.mapping).e2e_ms, r.mapping.to_dict()) for r in result.rounds]
best = min(played, key=lambda p: p[0])
proposals = [(r.mapping.to_dict(), r.proposal.rationale,
              [(a.reply, a.reasoning) for a in r.proposal.decision.attempts] if r.proposal.decision else [])
             for r in result.rounds]
print(json.dumps({"ms": ms, "digest_ms": digesting[0] * 1000.0, "best_ms": best[0], "best_mapping": best[1],
                  "proposals": hashlib.sha256(repr(proposals).encode()).hexdigest(),
                  "searches": hashlib.sha256("\n".join(searches).encode()).hexdigest() if searches else None}))
"""


def run_side(checkout: Path, family: str, n: int, mode: str, seed: int, rounds: int,
             prelude: str = "", options: dict[str, Any] | None = None) -> dict[str, Any]:
    """One side's child process; ``prelude`` (code run before the child's, e.g. a test's clock) is empty here;
    ``options``: the rules decider's (e.g. ``max_decision_ms``)."""
    env = dict(os.environ, PYTHONPATH=f"{checkout / 'src'}")
    res = subprocess.run([sys.executable, "-c", prelude + CHILD, family, str(n), mode, str(seed), str(rounds),
                          json.dumps(options or {})],
                         env=env, capture_output=True, text=True, check=True, cwd=checkout)
    return json.loads(res.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def same_decisions(old: dict[str, Any], new: dict[str, Any]) -> str:
    """Whether both checkouts proposed the same thing every round: ``yes`` (and ``, every estimate`` when
    both searches made the same estimates in the same order, where both checkouts have that search), or
    ``NO`` (``-`` when a checkout does not report its proposals)."""
    if old.get("proposals") is None or new.get("proposals") is None:
        return "-"
    if old["proposals"] != new["proposals"]:
        return "NO"
    if old.get("searches") is None or new.get("searches") is None:
        return "yes"
    return "yes, every estimate" if old["searches"] == new["searches"] else "yes, other estimates"


def best_known_ms(family: str, n: int, mode: str, seed: int, evals: int) -> float:
    from hetsched.bench.generate import WorkflowSpec, random_scenario
    from hetsched.model import Mode
    from hetsched.search.reference import best_known

    sc = random_scenario(WorkflowSpec(family, n, Mode(mode), seed))
    return best_known(sc, seed=0, max_seconds=None, max_evals=evals).e2e_ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", type=Path, required=True, help="checkout of the code before the change")
    ap.add_argument("--new", type=Path, default=HERE.parent, help="checkout of the code after (default: this one)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 50, 100])
    ap.add_argument("--families", nargs="+", default=["layered", "random", "forkjoin"])
    ap.add_argument("--modes", nargs="+", default=["binary", "three_way"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[11])
    ap.add_argument("--rounds", type=int, default=6, help="rounds per run (6: rounds 0..5)")
    ap.add_argument("--reference-evals", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs per checkout and workflow, alternating; per round the least process time (load)")
    ap.add_argument("--new-max-decision-ms", type=float,
                    help="the new side's decider gets this time budget per decision (RulesDecider's max_decision_ms); "
                         "with --old and --new the same checkout: capped against uncapped")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    new_options = {} if args.new_max_decision_ms is None else {"max_decision_ms": args.new_max_decision_ms}
    sys.path.insert(0, str(args.new.resolve() / "src"))
    rows: list[dict[str, Any]] = []
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"agentic:rules, {args.rounds} rounds, decision = process time of RulesDecider.decide")
    print("| n | workflow | old ms/round median (max) | new ms/round median (max) | old / new "
          "| old best / best known | new best / best known | same decisions |")
    print("|---|---|---|---|---|---|---|---|")
    for n in args.sizes:
        for family in args.families:
            for mode in args.modes:
                for seed in args.seeds:
                    got: dict[str, dict[str, Any]] = {}
                    for _ in range(args.repeat):  # alternating; each round's least process time over the repeats
                        for side, path in (("old", args.old), ("new", args.new)):
                            run = run_side(path.resolve(), family, n, mode, seed, args.rounds,
                                           options=new_options if side == "new" else None)
                            if side in got:
                                run["ms"] = [min(a, b) for a, b in zip(got[side]["ms"], run["ms"], strict=True)]
                                assert run["proposals"] == got[side]["proposals"], "a checkout decided otherwise"
                            got[side] = run
                    ref = best_known_ms(family, n, mode, seed, args.reference_evals)
                    known = min(ref, got["old"]["best_ms"], got["new"]["best_ms"])
                    row: dict[str, Any] = {"n": n, "family": family, "mode": mode, "seed": seed,
                                           "best_known_ms": known, "reference_ms": ref}
                    for side in ("old", "new"):
                        row[side] = {"median_ms": statistics.median(got[side]["ms"]), "max_ms": max(got[side]["ms"]),
                                     "ms": got[side]["ms"], "best_ms": got[side]["best_ms"],
                                     "ratio": got[side]["best_ms"] / known}
                    row["same"] = same_decisions(got["old"], got["new"])
                    rows.append(row)
                    o, w = row["old"], row["new"]
                    tag = "3w" if mode == "three_way" else "bin"
                    print(f"| {n} | {family}-{tag}-s{seed} | {o['median_ms']:.0f} ({o['max_ms']:.0f}) "
                          f"| {w['median_ms']:.0f} ({w['max_ms']:.0f}) | {o['median_ms'] / w['median_ms']:.1f}x "
                          f"| {o['ratio']:.4f} | {w['ratio']:.4f} | {row['same']} |", flush=True)
    print("\nper size: median decision ms per round (median over workflows) and worst best / best known")
    print("| n | old ms | new ms | old worst ratio | new worst ratio | new median ratio |")
    print("|---|---|---|---|---|---|")
    for n in args.sizes:
        sub = [r for r in rows if r["n"] == n]
        print(f"| {n} | {statistics.median(r['old']['median_ms'] for r in sub):.0f} "
              f"| {statistics.median(r['new']['median_ms'] for r in sub):.0f} "
              f"| {max(r['old']['ratio'] for r in sub):.4f} | {max(r['new']['ratio'] for r in sub):.4f} "
              f"| {statistics.median(r['new']['ratio'] for r in sub):.4f} |")
    same = sum(r["same"].startswith("yes") for r in rows)
    print(f"\nsame decisions (every round's mapping, rationale and reasoning, its estimates with it): {same} of "
          f"{len(rows)} workflows")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

"""Agentic-policy rounds on very large workflows (1,000-10,000 nodes): time and peak memory per run.

Each (checkout, n) runs in its own subprocess: a generated layered three-way workflow
(``hetsched.bench.generate``, seed 0) and ``--rounds`` rounds of ``agentic`` with the ``rules``
decider on the simulator, timed from the policy's creation to the last round; peak memory is the
subprocess's maximum resident set (``ru_maxrss``). With ``--old`` the same sizes run on another
checkout too, alternating, each under ``--timeout`` seconds (a run past it is reported as such).

Run: python benchmarks/agentic_scale.py [--sizes 1000 2000 5000 10000] [--rounds 2]
     [--old /path/to/old/checkout] [--timeout 400]

Quality mode (issue 17: best of rounds 0-5 against the best known mapping at 20-100 tools):
``--quality`` runs, per generated workflow (``--families``, ``--sizes``, both modes, ``--seeds``), 6
rounds of ``agentic:rules`` on each checkout (this one, and ``--old`` when given) in a subprocess
and scores the noise-free E2E of the best mapping played against the best known: the lowest of the
search room's ``best_known`` (``--reference-evals`` simulations, 20,000 by default: an iterated local
search from its own starts with the relaxation's solution and a lower bound, independent of the
decider; 0 skips it), a screened search of the decider's own noise-free model with ``--search-evals``
estimates (6,400 by default; the model is the simulator's kernel, so its estimate is the noise-free
E2E) from the decider's round-0 starts (this checkout's), and every mapping either checkout played.
Every budget counts simulations or estimates, never seconds, so the numbers do not depend on the
machine or its load. ``best_known`` (10-15 s a workflow) does not depend on the decider:
``--reference-cache F.json`` keeps its results across runs (keyed by workflow and budget, so
re-running after a decider change re-plays the rounds only); ``--jobs`` runs workflows in parallel.

Run: python benchmarks/agentic_scale.py --quality --sizes 20 30 50 100 --seeds 41
     [--families layered random forkjoin diamond fanout] [--modes binary three_way] [--old /path/to/old/checkout]
     [--reference-evals 20000] [--search-evals 6400] [--reference-cache F.json] [--jobs 1] [--out F.json]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import json_cache  # benchmarks/json_cache.py: a cache file several runs may share

HERE = Path(__file__).resolve().parent

CHILD = r"""
import json, resource, sys, time
from hetsched.bench.generate import WorkflowSpec, random_scenario
from hetsched.loop import LoopConfig, run_rounds
from hetsched.model import Mode
from hetsched.policies import make_policy

n, rounds = int(sys.argv[1]), int(sys.argv[2])
sc = random_scenario(WorkflowSpec("layered", n, Mode.THREE_WAY, 0))
t0 = time.perf_counter()
policy = make_policy("agentic", decider="rules")
result = run_rounds(sc, policy, LoopConfig(rounds=rounds, seed=0))
wall = time.perf_counter() - t0
best = min(r.trace.e2e_ms for r in result.rounds if r.trace.feasible)
print(json.dumps({"s": wall, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "rounds": len(result.rounds), "best_e2e_ms": best}))
"""


QUALITY_CHILD = r"""
import json, sys
from hetsched.bench.generate import WorkflowSpec, random_scenario
from hetsched.loop import LoopConfig, run_rounds
from hetsched.model import Mode
from hetsched.policies import make_policy
from hetsched.sim import Simulator

family, n, mode, seed = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
sc = random_scenario(WorkflowSpec(family, n, Mode(mode), seed))
result = run_rounds(sc, make_policy("agentic", decider="rules"), LoopConfig(rounds=6, seed=0))
exact = Simulator(sc, noise=False)
played = [exact.run(r.mapping).e2e_ms for r in result.rounds]
print(json.dumps({"played": played}))
"""


def play(checkout: Path, family: str, n: int, mode: str, seed: int) -> list[float]:
    """Noise-free E2E of each round's mapping (rounds 0-5) of ``agentic:rules`` on ``checkout``."""
    env = dict(os.environ, PYTHONPATH=f"{checkout / 'src'}")
    res = subprocess.run([sys.executable, "-c", QUALITY_CHILD, family, str(n), mode, str(seed)], env=env,
                         capture_output=True, text=True, check=True, cwd=checkout)
    played: list[float] = json.loads(res.stdout.strip().splitlines()[-1])["played"]
    return played


def best_known_ms(family: str, n: int, mode: str, seed: int, ref_evals: int) -> float:
    """The search room's ``best_known`` with ``ref_evals`` simulations (seed 0; this checkout's code)."""
    from hetsched.bench.generate import WorkflowSpec, random_scenario
    from hetsched.model import Mode
    from hetsched.search.reference import best_known

    sc = random_scenario(WorkflowSpec(family, n, Mode(mode), seed))
    return best_known(sc, seed=0, max_seconds=None, max_evals=ref_evals).e2e_ms


def reference_ms(family: str, n: int, mode: str, seed: int, search_evals: int) -> float:
    """A screened search of the ``rules`` decider's noise-free model with ``search_evals`` estimates from
    its round-0 starts (this checkout's code)."""
    from hetsched.bench.generate import WorkflowSpec, random_scenario
    from hetsched.deciders.rules import RulesDecider
    from hetsched.deciders.search import local_search
    from hetsched.model import Mode

    sc = random_scenario(WorkflowSpec(family, n, Mode(mode), seed))
    comp = RulesDecider()._compile(sc)
    est = comp.estimator.with_interference(sc.machine.gpu_kappa)
    return local_search(est, comp.starts, comp.allowed, max_evaluations=search_evals, seed=1, screen=True).e2e_ms


def score(job: tuple[list[tuple[str, Path]], str, int, str, int, int, int, float | None]) -> dict[str, Any]:
    """One workflow: each checkout's six rounds, the references, the ratios."""
    sides, family, n, mode, seed, ref_evals, search_evals, cached = job
    got = {side: play(path.resolve(), family, n, mode, seed) for side, path in sides}
    known_ms = cached if cached is not None or not ref_evals else best_known_ms(family, n, mode, seed, ref_evals)
    search_ms = reference_ms(family, n, mode, seed, search_evals)
    known = min([search_ms] + ([known_ms] if known_ms is not None else []) + [e for p in got.values() for e in p])
    return {"n": n, "family": family, "mode": mode, "seed": seed, "best_known_ms": known,
            "reference_evals": ref_evals, "best_known_search_ms": known_ms, "decider_search_ms": search_ms,
            **{side: {"played": got[side], "ratio": min(got[side]) / known,
                      "r0": got[side][0] / known} for side, _ in sides}}


def quality(args: argparse.Namespace) -> None:
    sides = [("new", HERE.parent)] + ([("old", args.old)] if args.old else [])
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"agentic:rules rounds 0-5; best known = min(best_known {args.reference_evals} sims, screened search "
          f"{args.search_evals} estimates, every mapping played)")
    cache: dict[str, float] = json_cache.load(args.reference_cache)

    def key(family: str, n: int, mode: str, seed: int) -> str:
        return f"{family}:{n}:{mode}:{seed}:{args.reference_evals}"

    jobs = [(sides, family, n, mode, seed, args.reference_evals, args.search_evals,
             cache.get(key(family, n, mode, seed)))
            for n in args.sizes for family in args.families for mode in args.modes for seed in args.seeds]
    print("| n | workflow | " + " | ".join(f"{side} best of R0-R5 / best known (R0)" for side, _ in sides) + " |")
    print("|---|---|" + "---|" * len(sides))
    rows: list[dict[str, Any]] = []
    with concurrent.futures.ProcessPoolExecutor(max(1, args.jobs)) as pool:
        for row in pool.map(score, jobs):
            rows.append(row)
            if args.reference_cache and row["best_known_search_ms"] is not None:
                json_cache.store(args.reference_cache,
                                 {key(row["family"], row["n"], row["mode"], row["seed"]): row["best_known_search_ms"]})
            tag = "3w" if row["mode"] == "three_way" else "bin"
            cells = " | ".join(f"{row[side]['ratio']:.4f} ({row[side]['r0']:.4f})" for side, _ in sides)
            print(f"| {row['n']} | {row['family']}-{tag}-s{row['seed']} | {cells} |", flush=True)
    print("\n| n | mode | " + " | ".join(f"{side}: worst / median / within goal" for side, _ in sides) + " |")
    print("|---|---|" + "---|" * len(sides))
    for n in args.sizes:
        goal = 1.03 if n >= 100 else 1.01
        for mode in args.modes:
            sub = [r for r in rows if r["n"] == n and r["mode"] == mode]
            summary: list[str] = []
            for side, _ in sides:
                ratios = sorted(r[side]["ratio"] for r in sub)
                ok = sum(1 for x in ratios if x <= goal)
                summary.append(f"{ratios[-1]:.4f} / {statistics.median(ratios):.4f} / {ok} of {len(ratios)}")
            print(f"| {n} | {mode} | " + " | ".join(summary) + " |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


def measure(checkout: Path, n: int, rounds: int, timeout: float) -> dict[str, float] | None:
    env = dict(os.environ, PYTHONPATH=f"{checkout / 'src'}")
    try:
        res = subprocess.run([sys.executable, "-c", CHILD, str(n), str(rounds)], env=env, capture_output=True,
                             text=True, check=True, timeout=timeout, cwd=checkout)
    except subprocess.TimeoutExpired:
        return None
    return json.loads(res.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 5000, 10000])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--old", type=Path, help="checkout of the code before the change (optional)")
    ap.add_argument("--timeout", type=float, default=400.0)
    ap.add_argument("--quality", action="store_true", help="best of rounds 0-5 against the best known (see above)")
    ap.add_argument("--families", nargs="+", default=["layered", "random", "forkjoin", "diamond", "fanout"])
    ap.add_argument("--modes", nargs="+", default=["binary", "three_way"], choices=["binary", "three_way"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[41])
    ap.add_argument("--reference-evals", type=int, default=20000,
                    help="simulations of the search room's best_known in the reference (0: left out)")
    ap.add_argument("--search-evals", type=int, default=6400)
    ap.add_argument("--reference-cache", type=Path, help="JSON file keeping best_known's results across runs")
    ap.add_argument("--jobs", type=int, default=1, help="workflows scored in parallel")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.quality:
        quality(args)
        return
    sides = [("new", HERE.parent)] + ([("old", args.old)] if args.old else [])
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"{args.rounds} agentic:rules rounds, layered three-way, seed 0")
    print("| n | checkout | wall s | s per round | peak RSS MB | best E2E ms |")
    print("|---|---|---|---|---|---|")
    for n in args.sizes:
        for side, path in sides:
            got = measure(path.resolve(), n, args.rounds, args.timeout)
            if got is None:
                print(f"| {n} | {side} | > {args.timeout:g} (stopped) | - | - | - |", flush=True)
                continue
            print(f"| {n} | {side} | {got['s']:.1f} | {got['s'] / got['rounds']:.1f} | {got['rss_mb']:.0f} "
                  f"| {got['best_e2e_ms']:.1f} |", flush=True)


if __name__ == "__main__":
    main()

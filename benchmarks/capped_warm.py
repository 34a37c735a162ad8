"""A time-capped decider on a large workflow, cold against warm-started from one uncapped run.

A serving path caps each decision of the ``rules`` decider (``max_decision_ms``); at 100 tools its first
decision would otherwise search for seconds, and a capped one stops far short (BENCHMARKS.md, "Decisions at
scale"). The recipe docs/python.md gives: decide once offline without the cap (an ``offline`` session of
``--offline`` requests, recorded in a run store), then serve with the cap and ``warm_start=True``. For each
freshly generated workflow (``hetsched.bench.generate``: families, modes and seeds from the command line)
this serves, on the simulator, one after the other:

- *cold capped*: a session with the cap and an empty store, ``--requests`` requests;
- *offline*: a session without the cap, ``--offline`` requests (its first decision is round 0's whole search);
- *warm capped*: a session with the cap, warm-started from the offline one, ``--requests`` requests.

Per workflow it prints the noise-free E2E (the simulator's model, so noise cannot flatter a mapping) of the
mapping each session played last, over the offline session's best, and each session's wall time. The cap is
wall time, so the cold side's mappings depend on the machine's load (the load average is printed).

Run: python benchmarks/capped_warm.py [--n 100] [--families layered random forkjoin] [--modes binary three_way]
     [--seeds 31] [--max-decision-ms 50] [--requests 6] [--offline 2]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import hetsched as hs
from hetsched.bench.generate import WorkflowSpec, random_scenario
from hetsched.model import Mapping, Mode, Scenario
from hetsched.sim import Simulator


def serve(sc: Scenario, store: Path, name: str, requests: int, options: dict[str, object],
          warm: bool) -> tuple[list[Mapping], float]:
    """The mappings a session played, one per request, and its wall seconds (decisions included)."""
    t0 = time.perf_counter()
    with hs.Session(sc, executor="sim", store=store, name=name, warm_start=warm, policy_options=options) as s:
        played = [s.submit(None).mapping for _ in range(requests)]
    return played, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100, help="tools (nodes) per workflow")
    ap.add_argument("--families", nargs="+", default=["layered", "random", "forkjoin"])
    ap.add_argument("--modes", nargs="+", default=["binary", "three_way"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[31])
    ap.add_argument("--max-decision-ms", type=float, default=50.0)
    ap.add_argument("--requests", type=int, default=6, help="requests each capped session serves")
    ap.add_argument("--offline", type=int, default=2, help="requests the uncapped session serves")
    args = ap.parse_args()
    print(f"# {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"load average {os.getloadavg()[0]:.1f}")
    capped = {"decider": "rules", "max_decision_ms": args.max_decision_ms}
    print("| workflow | cold capped / offline best | warm capped / offline best | cold s | offline s | warm s |")
    print("|---|---|---|---|---|---|")
    cold_r, warm_r = [], []
    for family in args.families:
        for mode in args.modes:
            for seed in args.seeds:
                sc = random_scenario(WorkflowSpec(family, args.n, Mode(mode), seed))
                exact = Simulator(sc, noise=False)
                with tempfile.TemporaryDirectory() as tmp:
                    store = Path(tmp) / "runs.sqlite"
                    cold, cold_s = serve(sc, store, "cold", args.requests, capped, warm=False)
                    offline, off_s = serve(sc, store, "offline", args.offline, {"decider": "rules"}, warm=False)
                    warm, warm_s = serve(sc, store, "warm", args.requests, capped, warm=True)
                best = min(exact.run(m).e2e_ms for m in offline)
                c, w = exact.run(cold[-1]).e2e_ms / best, exact.run(warm[-1]).e2e_ms / best
                cold_r.append(c)
                warm_r.append(w)
                tag = f"{family}-{'3w' if mode == 'three_way' else 'bin'}-s{seed}"
                print(f"| {tag} | {c:.4f} | {w:.4f} | {cold_s:.1f} | {off_s:.1f} | {warm_s:.1f} |", flush=True)
    print(f"\nmedian / worst: cold capped {statistics.median(cold_r):.4f} / {max(cold_r):.4f}, "
          f"warm capped {statistics.median(warm_r):.4f} / {max(warm_r):.4f}; "
          f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

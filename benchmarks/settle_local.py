"""The agentic policy's stopping rule on the local executor (docs/agentic.md, "Stopping within
the measured noise"): the same agentic run with the rule off, on without the model's close
mappings (``model_tries=0``: the rule before issue 20) and on as shipped (the mappings the model,
with the cards as the run's measurements left them, ranks within the noise band of its best
prediction are tried before settling), on ``rag_tiny`` with its tiny real tools.

Per run: the round where exploring stopped and where the run settled, probes spent, distinct
mappings executed, rounds that tried a model-ranked mapping, the mapping to deploy (lowest median
measured E2E, with its spread over repeats), whether the last round ran it, and how many of the
rounds after settling ran it. Then every distinct mapping to deploy is **re-measured** ``--check``
times, interleaved (round robin, so a slow spell of the machine hits them alike): the fair
comparison of what each variant would have you deploy.

Run: python benchmarks/settle_local.py [--rounds 20] [--seeds 0 1] [--check 7]   (about 3-6 minutes)
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics

from hetsched.exec.devices import cpu_model
from hetsched.exec.local import LocalExecutor
from hetsched.loop import LoopConfig, run_rounds
from hetsched.model import Mapping
from hetsched.model.files import load_scenario
from hetsched.model.measured import executions, measured_mappings
from hetsched.policies import make_policy
from hetsched.policies.agentic import Agentic

VARIANTS: dict[str, dict[str, object]] = {
    "off": {"settle": False},
    "on, no model tries": {"settle": True, "model_tries": 0},
    "on (default)": {"settle": True},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--scenario", default="rag_tiny")
    ap.add_argument("--check", type=int, default=7, help="re-measurements of each mapping to deploy (interleaved)")
    args = ap.parse_args()
    sc = load_scenario(args.scenario)
    rows: list[tuple[int, str, str, Mapping]] = []
    with LocalExecutor(sc) as ex:
        for seed in args.seeds:
            for label, options in VARIANTS.items():
                pol = make_policy("agentic", decider="rules", **options)
                assert isinstance(pol, Agentic)
                result = run_rounds(sc, pol, LoopConfig(rounds=args.rounds, seed=seed), executor=ex)
                rs = result.rounds
                probe = make_policy("agentic", decider="rules", **{**options, "settle": True})
                assert isinstance(probe, Agentic)
                probe.reset(pol.ctx)
                states = [probe.settling(rs[:i]) for i in range(len(rs) + 1)]
                stopped = next((i for i, s in enumerate(states) if s is not None and not s.exploring), None)
                settled = next((i for i, s in enumerate(states) if s is not None and s.settled), None)
                tried = sum(1 for r in rs if "trying" in r.proposal.rationale)
                deploy = result.deploy
                assert deploy is not None
                after = list(rs[settled:]) if settled is not None else []
                row = (f"| {seed} | {label} | {'-' if stopped is None else stopped} | "
                       f"{'-' if settled is None else settled} | {sum(len(r.probes) for r in rs)} | "
                       f"{len(measured_mappings(executions(rs)))} | {tried} | {deploy.mapping.code()} "
                       f"{deploy.describe()} | "
                       f"{'yes' if rs[-1].mapping == deploy.mapping else 'no'} ({rs[-1].trace.e2e_ms or 0:.0f} ms) | "
                       f"{sum(r.mapping == deploy.mapping for r in after)}/{len(after)} |")
                rows.append((seed, label, row, deploy.mapping))
                print(row, flush=True)
        distinct = list(dict.fromkeys(m for *_, m in rows))
        again: dict[Mapping, list[float]] = {m: [] for m in distinct}
        for k in range(args.check):
            for m in distinct:
                trace = ex.run(m, seed=10_000 + k)
                if trace.feasible and trace.e2e_ms is not None:
                    again[m].append(trace.e2e_ms)
    print(f"\n{args.scenario}, local executor (stand-in device), agentic --decider rules, {args.rounds} rounds; "
          f"{cpu_model()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, "
          f"Python {platform.python_version()}")
    print("| seed | rule | exploring stopped before round | settled before round | probes | mappings run | "
          "model tries | deploy (median, spread) | last round = deploy | rounds after settling on deploy |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for _, _, row, _ in rows:
        print(row)
    print(f"\nEach mapping to deploy re-measured {args.check} times, interleaved (median, min-max):")
    print("| seed | rule | deploy | re-measured median ms | min-max |")
    print("|---|---|---|---:|---|")
    for seed, label, _, m in rows:
        xs = again[m]
        med = f"{statistics.median(xs):.1f}" if xs else "-"
        rng = f"{min(xs):.1f}-{max(xs):.1f}" if xs else "did not run"
        print(f"| {seed} | {label} | {m.code()} | {med} | {rng} |")
    for label in VARIANTS:
        meds = [statistics.median(again[m]) for _, lb, _, m in rows if lb == label and again[m]]
        if meds:
            print(f"{label}: mean of the re-measured medians {statistics.mean(meds):.1f} ms over {len(meds)} run(s)")


if __name__ == "__main__":
    main()

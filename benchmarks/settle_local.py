"""The agentic policy's stopping rule on the local executor (docs/agentic.md, "Stopping within
the measured noise"): the same agentic run with the rule on (the default on real executors) and
off, on ``rag_tiny`` with its tiny real tools.

Per run: the round where exploring stopped and where the run settled, probes spent, distinct
mappings executed, the mapping to deploy (lowest median measured E2E, with its spread over
repeats), whether the last round ran it, and how many of the rounds after settling ran it.

Run: python benchmarks/settle_local.py [--rounds 20] [--seeds 0 1]
"""

from __future__ import annotations

import argparse
import os
import platform

from hetsched.exec.devices import cpu_model
from hetsched.exec.local import LocalExecutor
from hetsched.loop import LoopConfig, run_rounds
from hetsched.model.files import load_scenario
from hetsched.model.measured import executions, measured_mappings, settling
from hetsched.policies import make_policy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--scenario", default="rag_tiny")
    args = ap.parse_args()
    sc = load_scenario(args.scenario)
    rows = []
    with LocalExecutor(sc) as ex:
        for seed in args.seeds:
            for settle in (True, False):
                pol = make_policy("agentic", decider="rules", settle=settle)
                result = run_rounds(sc, pol, LoopConfig(rounds=args.rounds, seed=seed), executor=ex)
                rs = result.rounds
                stopped = next((i for i in range(len(rs) + 1) if not settling(rs[:i]).exploring), None)
                settled = next((i for i in range(len(rs) + 1) if settling(rs[:i]).settled), None)
                deploy = result.deploy
                assert deploy is not None
                after = list(rs[settled:]) if settled is not None else []
                rows.append(
                    f"| {seed} | {'on' if settle else 'off'} | {'-' if stopped is None else stopped} | "
                    f"{'-' if settled is None else settled} | {sum(len(r.probes) for r in rs)} | "
                    f"{len(measured_mappings(executions(rs)))} | {deploy.mapping.code()} {deploy.describe()} | "
                    f"{'yes' if rs[-1].mapping == deploy.mapping else 'no'} ({rs[-1].trace.e2e_ms or 0:.0f} ms) | "
                    f"{sum(r.mapping == deploy.mapping for r in after)}/{len(after)} |")
                print(rows[-1], flush=True)
    print(f"\n{args.scenario}, local executor (stand-in device), agentic --decider rules, {args.rounds} rounds; "
          f"{cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print("| seed | rule | exploring stopped before round | settled before round | probes | mappings run | "
          "deploy (median, spread) | last round = deploy | rounds after settling on deploy |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()

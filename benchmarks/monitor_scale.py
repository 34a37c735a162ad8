"""Monitor planning time per round vs workflow size, this tree against a baseline tree, side by side.

The agentic policy's runtime monitor ranks probe candidates (one- and two-node variants of the
best measured mapping, each checked against the VRAM budget) and writes its observation records
every round. This script times exactly that: the process time spent in ``Monitor.next_probe``
and ``Monitor.observe`` per round, over 10 rounds of ``agentic`` with the ``argmin`` decider
(cheap, so histories are the same whatever the monitor costs), on generated layered three-way
workflows of n = 10, 20, 50, 100 nodes (``hetsched.bench.generate``), best of ``--repeat`` runs.

Each source tree runs in its own subprocess (``PYTHONPATH``), alternating, on the same scenario
files, so the columns are measured side by side on the same (shared, noisy) machine. Both run
with 2 probes a round (the old fixed budget, so the histories match); the last column is this
tree with its default budget rule (one probe per 10 nodes, at least 2).

Run: python benchmarks/monitor_scale.py [--baseline-src PATH_TO_OLD/src] [--repeat 3]
     (a baseline checkout: git worktree add /tmp/base 212f19c)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

SIZES = (10, 20, 50, 100)
ROUNDS = 10

_CHILD = r"""
import json, sys, time
ROUNDS = int(sys.argv[4])
from hetsched.loop import LoopConfig, run_rounds
from hetsched.model import Scenario
from hetsched.monitor import monitor as M
from hetsched.policies import make_policy

path, per_round, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
sc = Scenario.model_validate_json(open(path).read())
spent = {"t": 0.0}
for name in ("next_probe", "observe"):
    orig = getattr(M.Monitor, name)
    def timed(self, *a, _orig=orig, **k):
        t0 = time.process_time()
        try:
            return _orig(self, *a, **k)
        finally:
            spent["t"] += time.process_time() - t0
    setattr(M.Monitor, name, timed)
best, probes = float("inf"), 0
for _ in range(repeat):
    spent["t"] = 0.0
    monitor = {} if per_round == "default" else {"probes_per_round": int(per_round)}
    policy = make_policy("agentic", decider="argmin", monitor=monitor)
    result = run_rounds(sc, policy, LoopConfig(rounds=ROUNDS, seed=0))
    best = min(best, spent["t"] / len(result.rounds))
    probes = sum(len(r.probes) for r in result.rounds)
print(json.dumps({"ms_per_round": best * 1000.0, "probes": probes}))
"""


def run_child(src: str, scenario: Path, per_round: str, repeat: int) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=src)
    out = subprocess.run([sys.executable, "-c", _CHILD, str(scenario), per_round, str(repeat), str(ROUNDS)], env=env,
                         capture_output=True, text=True, check=True)
    data: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-src", default=None, help="src/ folder of the tree to compare against")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    here = str(Path(__file__).resolve().parents[1] / "src")
    sys.path.insert(0, here)
    from hetsched.bench.generate import WorkflowSpec, random_scenario
    from hetsched.model import Mode

    print(f"# monitor planning, ms of process time per round (best of {args.repeat}); "
          f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    head = "| n | probes/run (2 a round) |"
    head += " baseline ms | this tree ms | speedup |" if args.baseline_src else " this tree ms |"
    head += " default budget: probes/run | default budget: ms |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    with tempfile.TemporaryDirectory() as tmp:
        for n in SIZES:
            path = Path(tmp) / f"n{n}.json"
            path.write_text(random_scenario(WorkflowSpec("layered", n, Mode.THREE_WAY, 1)).model_dump_json())
            new = run_child(here, path, "2", args.repeat)
            row = f"| {n} | {new['probes']:.0f} |"
            if args.baseline_src:
                old = run_child(args.baseline_src, path, "2", args.repeat)
                row += f" {old['ms_per_round']:.1f} | {new['ms_per_round']:.1f} | "
                row += f"{old['ms_per_round'] / max(new['ms_per_round'], 1e-9):.0f}x |"
            else:
                row += f" {new['ms_per_round']:.1f} |"
            default = run_child(here, path, "default", args.repeat)
            row += f" {default['probes']:.0f} | {default['ms_per_round']:.1f} |"
            print(row, flush=True)


if __name__ == "__main__":
    main()

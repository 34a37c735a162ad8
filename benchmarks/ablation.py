"""Monitor ablation, like the paper's Appendix A (Table 6), on the three-way example.

For each decider, the agentic policy runs with the full monitor, with each mechanism switched
off in turn (running averages, feasibility history, symmetric reprobe, swap reprobe,
exploration hints), and with no monitor at all (the decider sees only each round's mapping and
E2E). Per cell, means over seeds of:

- final: placements of the last round's mapping that match the oracle (of n nodes);
- best: the most placements any round matched (the paper's Table 4 measure);
- at-oracle: rounds whose mapping is the oracle; first: the first such round ('-' = never);
- OOM: rounds that executed an infeasible mapping (validation should keep this at 0);
- fallbacks: rounds where the decider gave no valid mapping;
- probes: what-if probes spent; final/oracle: noise-free E2E of the last mapping / the oracle's.

Deciders: ``rules`` (warm: cards visible), ``rules-cold`` (cold start), ``argmin`` (cards never
used), and on request ``local`` / ``openai`` (slow: one model call per round and variant).

Run: python benchmarks/ablation.py [--scenario vram_3way] [--seeds 5] [--rounds 20]
                                   [--deciders rules,rules-cold,argmin] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass
from pathlib import Path

from hetsched.loop import LoopConfig, run_rounds
from hetsched.model import Scenario
from hetsched.model.files import load_scenario
from hetsched.monitor import MECHANISMS, MonitorConfig
from hetsched.policies.agentic import Agentic
from hetsched.search.oracle import solve
from hetsched.sim import Simulator

VARIANTS: list[tuple[str, MonitorConfig]] = [
    ("full monitor", MonitorConfig()),
    *[(f"- {m.replace('_', ' ')}", MonitorConfig().without(m)) for m in MECHANISMS],
    ("no monitor", MonitorConfig.off()),
]


@dataclass
class Cell:
    final: float
    best: float
    at_oracle: float
    first: str
    oom: float
    fallbacks: float
    probes: float
    ratio: float


def run_cell(sc: Scenario, decider: str, cfg: MonitorConfig, seeds: int, rounds: int) -> Cell:
    sim = Simulator(sc, noise=False)
    finals, bests, ats, firsts, ooms, falls, probes, ratios = [], [], [], [], [], [], [], []
    for seed in range(seeds):
        name, cold = (decider.removesuffix("-cold"), decider.endswith("-cold"))
        policy = Agentic(decider=name, cold_start=cold, monitor=cfg)
        res = run_rounds(sc, policy, LoopConfig(rounds=rounds, seed=seed))
        oracle = solve(res.scenario, ranking=False).best
        match = [sum(r.mapping[n] == oracle[n] for n in oracle) for r in res.rounds]
        finals.append(match[-1])
        bests.append(max(match))
        hit = [r.round for r in res.rounds if r.mapping == oracle]
        ats.append(len(hit))
        firsts.append(hit[0] if hit else None)
        ooms.append(sum(not r.trace.feasible for r in res.rounds))
        falls.append(sum(bool(r.proposal.info.get("fallback")) for r in res.rounds))
        probes.append(sum(len(r.probes) for r in res.rounds))
        e2e = sim.e2e(res.rounds[-1].mapping)
        ratios.append(float("inf") if e2e is None else e2e / solve(res.scenario, ranking=False).e2e_ms)
    got = [f for f in firsts if f is not None]
    first = "-" if not got else f"{statistics.median(got):g}"
    if got and len(got) < seeds:
        first += f" ({len(got)}/{seeds})"
    mean = statistics.fmean
    return Cell(mean(finals), mean(bests), mean(ats), first, mean(ooms), mean(falls), mean(probes), mean(ratios))


def table(sc: Scenario, deciders: list[str], seeds: int, rounds: int) -> str:
    n = len(sc.workflow.node_ids)
    lines = [
        f"Monitor ablation on {sc.name} ({sc.mode.value}, {n} nodes, budget {sc.machine.vram_budget_mb:g} MB), "
        f"{rounds} rounds, {seeds} seeds (means; first = median first round at the oracle, (k/{seeds}) when "
        "only k seeds got there).",
        "",
        f"| decider | monitor | final (/{n}) | best (/{n}) | rounds at oracle | first | OOM rounds | fallbacks "
        "| probes | final E2E / oracle |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for decider in deciders:
        for label, cfg in VARIANTS:
            c = run_cell(sc, decider, cfg, seeds, rounds)
            lines.append(
                f"| {decider} | {label} | {c.final:.1f} | {c.best:.1f} | {c.at_oracle:.1f} | {c.first} | {c.oom:.1f} "
                f"| {c.fallbacks:.1f} | {c.probes:.1f} | {c.ratio:.3f} |"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="vram_3way", help="bundled name or file (default vram_3way)")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--deciders", default="rules,rules-cold,argmin",
                    help="comma-separated: rules, rules-cold, argmin, argmin-cold, local, openai (LLM ones are slow)")
    ap.add_argument("--out", type=Path, help="also write the table (markdown) here")
    args = ap.parse_args()
    sc = load_scenario(args.scenario)
    text = table(sc, [d.strip() for d in args.deciders.split(",") if d.strip()], args.seeds, args.rounds)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

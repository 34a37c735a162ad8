"""Input speed: wall time of commands on large and hostile inputs (issue 12), as whole processes
(interpreter start and imports included), so the numbers are what a user waits for.

- ``hetsched show`` on chains of 2,500 to 20,000 nodes: the time per node must stay flat
  (loading, the DAG listing and the space size are linear);
- ``hetsched show-run --full`` on a run holding one reply of 1, 5 and 20 MB (the output is bounded);
- ``hetsched validate`` on a YAML alias bomb (9 aliases x 6 and x 12 levels) and on 600-deep
  nesting: refused at once.

With ``--baseline-src DIR`` (the ``src`` folder of another checkout, e.g. the commit before
the fix) every command also runs against it, side by side, with a per-command time limit.

Run: python benchmarks/input_speed.py [--repeat 3] [--baseline-src DIR] [--limit-s 200] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]


def chain(folder: Path, n: int) -> Path:
    path = folder / f"chain{n}.yaml"
    path.write_text(yaml.safe_dump({"mode": "three_way", "nodes": {f"n{i}": "bert_base" for i in range(n)},
                                    "edges": [f"n{i} -> n{i + 1}" for i in range(n - 1)]}))
    return path


def bomb(folder: Path, levels: int) -> Path:
    lines = ["a0: &a0 [x,x,x,x,x,x,x,x,x]"]
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    path = folder / f"bomb{levels}.yaml"
    path.write_text("junk:\n" + "\n".join("  " + ln for ln in lines) + f"\ndescription: *a{levels - 1}\n"
                    "nodes: {A: bert_base}\n")
    return path


def deep(folder: Path, depth: int) -> Path:
    path = folder / f"deep{depth}.yaml"
    path.write_text("description: " + "[" * depth + "]" * depth + "\nnodes: {A: bert_base}\n")
    return path


def store_with_reply(folder: Path, src: Path, megabytes: int) -> tuple[Path, str]:
    """A run store holding one round whose decider reply is ``megabytes`` MB of text (made with ``src``)."""
    store = folder / f"reply{megabytes}.sqlite"
    code = (
        "import sys\n"
        "from hetsched.model import Attempt, DecisionRecord, Proposal, RoundRecord, RunKey\n"
        "from hetsched.model.files import load_scenario\n"
        "from hetsched.sim import Simulator\n"
        "from hetsched.store import RunStore\n"
        "sc = load_scenario('chain'); m = sc.uniform(sc.placements[0])\n"
        f"reply = 'word [/] ' * ({megabytes} * 1_000_000 // 9)\n"
        f"with RunStore({str(store)!r}) as st:\n"
        "    rid = st.create_run(RunKey(scenario=sc, policy='agentic', rounds=1))\n"
        "    d = DecisionRecord(decider='openai', attempts=(Attempt(attempt=1, prompt='p', reply=reply),))\n"
        "    st.record_round(rid, RoundRecord(0, Proposal(m, 'r', d), Simulator(sc).run(m, seed=0)))\n"
        "print(rid)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(src)}
    rid = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env).stdout
    return store, rid.strip()


def seconds(args: list[str], src: Path, limit_s: float) -> tuple[float | None, int]:
    """Wall time of ``python -m hetsched ARGS`` with ``src`` first on the path; None past the limit."""
    env = {**os.environ, "PYTHONPATH": str(src), "COLUMNS": "120"}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "hetsched", *args], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env=env, timeout=limit_s)
    except subprocess.TimeoutExpired:
        return None, -1
    return time.perf_counter() - t0, proc.returncode


def best(args: list[str], src: Path, repeat: int, limit_s: float) -> tuple[float | None, int]:
    times, code = [], 0
    for _ in range(repeat):
        t, code = seconds(args, src, limit_s)
        if t is None:
            return None, code
        times.append(t)
    return min(times), code


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline-src", type=Path, default=None, help="src folder of a checkout to compare against")
    ap.add_argument("--limit-s", type=float, default=200.0, help="time limit of one command")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    srcs = {"this": ROOT / "src"}
    if args.baseline_src is not None:
        srcs["baseline"] = args.baseline_src.resolve()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        cases: list[tuple[str, list[str], int | None]] = []
        for n in (2_500, 5_000, 10_000, 20_000):
            cases.append((f"show, {n:,}-node chain", ["show", str(chain(folder, n))], n))
        for levels in (6, 12):
            cases.append((f"validate, alias bomb 9^{levels}", ["validate", str(bomb(folder, levels))], None))
        cases.append(("validate, 600-deep nesting", ["validate", str(deep(folder, 600))], None))
        for label, src in srcs.items():  # each checkout writes its own store
            (folder / label).mkdir()
            for mb in (1, 5, 20):
                store, rid = store_with_reply(folder / label, src, mb)
                cases.append((f"show-run --full, {mb} MB reply [{label}]",
                              ["show-run", rid, "--store", str(store), "--full"], None))
        for name, cmd, n in cases:
            row: dict[str, Any] = {"case": name}
            for label, src in srcs.items():
                if "[" in name and not name.endswith(f"[{label}]"):
                    continue
                t, code = best(cmd, src, 1 if label == "baseline" else args.repeat, args.limit_s)
                row[label] = None if t is None else round(t, 2)
                row[f"{label}_exit"] = code
                if n and t is not None:
                    row[f"{label}_ms_per_node"] = round(1000 * t / n, 3)
            rows.append(row)
            print(json.dumps(row), flush=True)
    result = {"machine": f"{platform.machine()} {platform.processor() or ''} {os.cpu_count()} CPUs, "
                         f"Python {platform.python_version()}", "rows": rows}
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    print("\n| case | " + " | ".join(f"{k} s" for k in srcs) + " |")
    print("|---|" + "---|" * len(srcs))
    for r in rows:
        cells = []
        for k in srcs:
            if k not in r:
                cells.append("")
            elif r[k] is None:
                cells.append(f"> {args.limit_s:g} (killed)")
            else:
                cells.append(f"{r[k]:.2f} (exit {r[f'{k}_exit']})")
        print(f"| {r['case']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

"""CLI startup (issue 17): wall time of ``hetsched --version``, ``--help`` and a light command
(``scenarios``) as whole processes, side by side with bare Python (``python -c pass``), interleaved
so that machine load hits every command alike. Reports the median of the repeats and each
command's ratio to bare Python (goal: under 10x for --version/--help).

With ``--baseline-src DIR`` (the ``src`` folder of another checkout, e.g. the commit before the
lazy CLI) the same commands also run against it.

Run: python benchmarks/cli_startup.py [--repeat 15] [--baseline-src DIR] [--out FILE.json]
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS: dict[str, list[str]] = {
    "python -c pass": ["-c", "pass"],
    "hetsched --version": ["-m", "hetsched", "--version"],
    "hetsched --help": ["-m", "hetsched", "--help"],
    "hetsched scenarios": ["-m", "hetsched", "scenarios"],
}


def once(args: list[str], src: str) -> float:
    env = {**os.environ, "PYTHONPATH": src}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, *args], capture_output=True, env=env)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{args} failed: {proc.stderr.decode()[-500:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--baseline-src", default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    sources = {"this": str(ROOT / "src")}
    if args.baseline_src:
        sources["baseline"] = args.baseline_src
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.repeat):  # interleaved: load affects every command alike
        for label, src in sources.items():
            for name, cmd in COMMANDS.items():
                times.setdefault((label, name), []).append(once(cmd, src))
    bare = statistics.median(times[("this", "python -c pass")])
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}; median of {args.repeat}")
    print("| source | command | median ms | x bare Python |")
    print("| --- | --- | ---: | ---: |")
    rows = []
    for (label, name), values in times.items():
        med = statistics.median(values)
        rows.append({"source": label, "command": name, "median_ms": round(med * 1000, 1),
                     "ratio": round(med / bare, 2)})
        print(f"| {label} | {name} | {med * 1000:.0f} | {med / bare:.1f} |")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

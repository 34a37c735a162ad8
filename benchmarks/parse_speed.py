"""Reply parsing speed on hostile replies: is the work linear in the reply's length?

Times ``hetsched.llm.parse.parse_reply`` (with its size limit lifted) on replies of n characters
built to be expensive: a run of ``{`` (the issue's example), ``{}`` pairs (a million objects),
``[]`` pairs inside one object (a million tokens, cut at max_tokens: the repair path too),
``{"a":`` repeated, and flat ``{"x": 1}`` objects. The ratio column divides the time at n by the
time at n/2: about 2 means linear, about 4 quadratic. With ``--baseline REV`` the parser of git
revision REV (e.g. ``212f19c``, before this work) is timed on the same kind of input at small n,
side by side.

Run: python benchmarks/parse_speed.py [--repeat 3] [--baseline 212f19c]
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

from hetsched.llm.parse import parse_reply
from hetsched.llm.validate import ReplyError

SHAPES: dict[str, Callable[[int], str]] = {
    "{ x n": lambda n: "{" * n,
    "{} x n/2": lambda n: "{}" * (n // 2),
    "{ + [] x n/2 (cut)": lambda n: "{" + "[]" * (n // 2),
    '{"a": x n/5': lambda n: '{"a":' * (n // 5),
    '{"x": 1} x n/9': lambda n: '{"x": 1} ' * (n // 9),
}
CUT = {"{ + [] x n/2 (cut)"}


def timed(parse: Callable[..., object], text: str, finish: str | None, repeat: int, **kw: object) -> float:
    """Best wall time of ``repeat`` parses; a crash of the parser (the old one) is printed and timed too."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        try:
            parse(text, finish, **kw)
        except (ReplyError, ValueError):
            pass
        except RecursionError:
            print(f"  (RecursionError on {text[:12]!r}... of {len(text):,} characters)")
        best = min(best, time.perf_counter() - t0)
    return best


def baseline_parser(rev: str) -> Callable[..., object] | None:
    """``parse_reply`` of an older revision, loaded from git (None when git cannot show it)."""
    root = Path(__file__).resolve().parents[1]
    try:
        source = subprocess.run(["git", "show", f"{rev}:src/hetsched/llm/parse.py"], cwd=root, check=True,
                                capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    module = types.ModuleType("baseline_parse")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"{rev}:parse.py", "exec"), module.__dict__)  # our own older source, from git
    parse: Callable[..., object] = module.parse_reply
    return parse


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", default="", help="git revision whose parser to time side by side (small n)")
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, {platform.machine()}, best of {args.repeat}")
    print("| reply | n | s | us per 1k chars | t(n) / t(n/2) |")
    print("|---|---|---|---|---|")
    sizes = [125_000, 250_000, 500_000, 1_000_000, 2_000_000]
    for shape, build in SHAPES.items():
        prev = None
        finish = "length" if shape in CUT else None
        for n in sizes:
            s = timed(parse_reply, build(n), finish, args.repeat, max_chars=None)
            ratio = "" if prev is None or prev == 0 else f"{s / prev:.2f}"
            print(f"| `{shape}` | {n:,} | {s:.3f} | {1e6 * s / (n / 1000):.1f} | {ratio} |")
            prev = s
    if args.baseline:
        old = baseline_parser(args.baseline)
        if old is None:
            print(f"(git cannot show {args.baseline}; no baseline)")
            return
        print(f"\nbaseline: parse_reply of {args.baseline}, same replies, small n")
        print("| reply | n | old s | new s | t_old(n) / t_old(n/2) |")
        print("|---|---|---|---|---|")
        for shape in ("{ x n", '{"a": x n/5'):
            prev = None
            for n in (10_000, 20_000, 40_000, 80_000):
                text = SHAPES[shape](n)
                s_old = timed(old, text, None, 1)
                s_new = timed(parse_reply, text, None, args.repeat, max_chars=None)
                ratio = "" if prev is None or prev == 0 else f"{s_old / prev:.2f}"
                print(f"| `{shape}` | {n:,} | {s_old:.3f} | {s_new:.4f} | {ratio} |")
                prev = s_old


if __name__ == "__main__":
    main()

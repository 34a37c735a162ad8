"""The bench's tables (PAPER.md's Table 4 and Table 5, rounds-to-oracle, regret, probes, LLM cost),
each as one :class:`Table` that renders to Markdown, CSV and HTML.

Pure functions of :class:`~hetsched.bench.data.BenchData`. Imports the bench data module only.
"""

from __future__ import annotations

import csv
import html
import io
import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from hetsched.model import Mode

from .data import BenchData, RunSummary, mean_sd

_NUMBER = re.compile(r"^R?[-+]?\d[\d,]*(\.\d+)?(-\d+)?(/\d+)?(x| ms| per run)?( ± [\d.]+)?( \(\d+/\d+ never\))?$")
_BLANK = {"", "-", "OOM", "never", "not run"}


@dataclass
class Table:
    """A titled table of strings with notes under it."""

    key: str
    """File stem (``table4``)."""
    title: str
    """Heading."""
    columns: list[str]
    """Column names."""
    rows: list[list[str]] = field(default_factory=list)
    """Cells, as text."""
    notes: list[str] = field(default_factory=list)
    """How to read it (one line each)."""

    def numeric(self) -> list[bool]:
        """Per column: True when every cell is a number (``812.3``, ``1.05x``, ``3/4``, ``R2``...) or a
        placeholder (``-``, ``OOM``): those columns are right-aligned, text columns left-aligned."""
        out = []
        for i in range(len(self.columns)):
            cells = [row[i] for row in self.rows if i < len(row) and row[i] not in _BLANK]
            out.append(bool(cells) and all(_NUMBER.match(c) for c in cells))
        return out

    def to_markdown(self) -> str:
        """A GitHub-flavoured Markdown table with its title and notes."""
        def esc(text: str) -> str:  # one line a row; no raw HTML from a scenario's text
            return text.replace("|", "\\|").replace("<", "&lt;").replace("\n", " ")

        lines = [f"### {self.title}", "", "| " + " | ".join(esc(c) for c in self.columns) + " |",
                 "| " + " | ".join("---:" if num else "---" for num in self.numeric()) + " |"]
        lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in self.rows]
        if self.notes:
            lines += [""] + [f"- {n}" for n in self.notes]
        return "\n".join(lines) + "\n"

    def to_csv(self) -> str:
        """The cells as CSV (header row first)."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(self.columns)
        w.writerows(self.rows)
        return buf.getvalue()

    def to_html(self) -> str:
        """An HTML table with its title and notes."""
        numeric = self.numeric()
        cls = [' class="n"' if num else "" for num in numeric]
        head = "".join(f"<th{cls[i]}>{html.escape(c)}</th>" for i, c in enumerate(self.columns))
        body = "".join(
            "<tr>" + "".join(f"<td{cls[i] if i < len(cls) else ''}>{html.escape(c)}</td>" for i, c in enumerate(row))
            + "</tr>" for row in self.rows
        )
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in self.notes)
        return (f'<h3 id="{html.escape(self.key)}">{html.escape(self.title)}</h3>\n'
                f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>\n"
                + (f'<ul class="notes">{notes}</ul>\n' if notes else ""))


def fmt_ms(value: float | None) -> str:
    """``812.3`` (one decimal), ``-`` for None/NaN."""
    return "-" if value is None or math.isnan(value) else f"{value:.1f}"


def _median_int(values: Sequence[int]) -> float:
    return float(statistics.median(values)) if values else math.nan


def _binary(data: BenchData, name: str) -> bool:
    return data.scenarios[name].mode is Mode.BINARY


# ---------------------------------------------------------------------------- Table 4
def best_match_cell(runs: Sequence[RunSummary]) -> str:
    """``4/4`` when every seed matched k, else ``lo-hi/4``; ``-`` without runs."""
    if not runs:
        return "-"
    n = runs[0].n_nodes
    lo = min(r.best_match for r in runs)
    hi = max(r.best_match for r in runs)
    return f"{lo}/{n}" if lo == hi else f"{lo}-{hi}/{n}"


def table4(data: BenchData) -> Table:
    """Best match with the oracle's placements over the rounds, per policy and scenario (Table 4)."""
    labels = data.labels
    t = Table("table4", "Table 4: best match with the oracle's placements over the rounds",
              ["scenario", *labels])
    groups: dict[str, list[str]] = {"binary": [], "three-way": []}
    for name in data.scenario_names():
        t.rows.append([name, *(best_match_cell(data.cell(name, lb)) for lb in labels)])
        groups["binary" if _binary(data, name) else "three-way"].append(name)
    for group, names in groups.items():
        if not names:
            continue
        total = []
        seeds_total = []
        for lb in labels:
            full = sum(1 for s in names
                       if data.cell(s, lb) and all(r.best_match == r.n_nodes for r in data.cell(s, lb)))
            with_runs = sum(1 for s in names if data.cell(s, lb))
            total.append(f"{full}/{with_runs}")
            runs = [r for s in names for r in data.cell(s, lb)]
            seeds_total.append(f"{sum(1 for r in runs if r.best_match == r.n_nodes)}/{len(runs)}")
        t.rows.append([f"total {group} ({len(names)} scenarios): scenarios at full match", *total])
        t.rows.append([f"total {group}: runs at full match", *seeds_total])
    rounds = sorted({r.rounds_planned for r in data.runs})
    t.notes += [
        f"Cell: the highest number of nodes placed as in the oracle mapping in any one round of a run "
        f"({'/'.join(map(str, rounds))} rounds), over {len(data.seeds())} seeds: 'k/n' when every seed "
        "reached k, 'lo-hi/n' otherwise. An infeasible round (OOM, deadlock...) counts 0.",
        "Totals: scenarios where every seed reached the full match (the paper's '10/10'), then runs.",
    ]
    return t


# ---------------------------------------------------------------------------- Table 5
def _reached_text(runs: Sequence[RunSummary]) -> str:
    reached = [r.reached for r in runs if r.reached is not None]
    never = len(runs) - len(reached)
    if not reached:
        return "never"
    med = _median_int(reached)
    text = f"R{med:g}"
    return text + (f" ({never}/{len(runs)} never)" if never else "")


def _best_found(runs: Sequence[RunSummary]) -> tuple[list[float], list[float]]:
    """Measured best E2E per run and the true E2E of that round's mapping, over runs with a feasible round."""
    measured, true = [], []
    for r in runs:
        b = r.best_round()
        if b is not None and b.e2e_ms is not None and b.true_e2e_ms is not None:
            measured.append(b.e2e_ms)
            true.append(b.true_e2e_ms)
    return measured, true


def infeasible_text(runs: Sequence[RunSummary]) -> str:
    """What stopped runs with no feasible round: their kinds (``OOM``, ``deadlock``, ``OOM/deadlock``)."""
    labels = dict.fromkeys(lb for r in runs for lb in r.infeasible_labels)
    return "/".join(labels) or "infeasible"


def _mean_sd_text(values: Sequence[float], runs: Sequence[RunSummary] = ()) -> str:
    if not values:
        return infeasible_text(runs)
    m, sd = mean_sd(values)
    return f"{m:.1f} ± {sd:.1f}"


def primary_label(data: BenchData) -> str | None:
    """The policy Table 5 follows: agentic with the rules decider, else the first agentic, else None."""
    if data.has_label("agentic:rules"):
        return "agentic:rules"
    return next((lb for lb in data.labels if lb.startswith("agentic")), None)


def table5(data: BenchData, label: str | None = None) -> Table | None:
    """The paper's Table 5 layout for one policy on the three-way scenarios (None without any)."""
    names = [s for s in data.scenario_names() if not _binary(data, s)]
    label = label or primary_label(data)
    if not names or label is None:
        return None
    t = Table("table5", f"Table 5: three-way scenarios, {label} against the memory-aware greedy",
              ["scenario", "oracle E2E ms", f"{label} best-found E2E ms", "best-found / oracle (true)",
               "round reached", "infeasible rounds", "greedy-mem E2E ms"])
    for s in names:
        runs = data.cell(s, label)
        if not runs:
            continue
        measured, true = _best_found(runs)
        oracle = runs[0].oracle_e2e_ms
        greedy = data.cell(s, "greedy-mem")
        g_measured, _ = _best_found(greedy)
        greedy_text = _mean_sd_text(g_measured, greedy) if greedy else "not run"
        ratio = f"{statistics.fmean(true) / oracle:.3f}" if true else "-"
        oom = sum(r.oom_rounds for r in runs)
        t.rows.append([s, fmt_ms(oracle), _mean_sd_text(measured, runs), ratio, _reached_text(runs),
                       f"{oom / len(runs):g} per run" if oom else "0", greedy_text])
    t.notes += [
        "Oracle E2E: noise-free optimum of the simulator. Best-found: the lowest measured (noisy) E2E over a "
        "run's rounds, mean ± sd over seeds; measured noise can put it slightly below the oracle. "
        "'best-found / oracle (true)' uses the noise-free E2E of the best-found mapping instead.",
        "Round reached: median over seeds of the first round that ran the oracle mapping (R0 = first round).",
        "greedy-mem E2E: the memory-aware greedy's best measured E2E (it proposes one mapping every round).",
    ]
    return t


def table5_all(data: BenchData) -> Table | None:
    """Table 5's figures for every policy on the three-way scenarios."""
    names = [s for s in data.scenario_names() if not _binary(data, s)]
    if not names:
        return None
    t = Table("table5_all", "Table 5 for every policy (three-way scenarios)",
              ["scenario", "policy", "oracle E2E ms", "best-found E2E ms", "best-found / oracle (true)",
               "round reached", "infeasible rounds (mean per run)"])
    for s in names:
        for lb in data.labels:
            runs = data.cell(s, lb)
            if not runs:
                continue
            measured, true = _best_found(runs)
            oracle = runs[0].oracle_e2e_ms
            ratio = f"{statistics.fmean(true) / oracle:.3f}" if true else "-"
            oom = statistics.fmean(r.oom_rounds for r in runs)
            t.rows.append([s, lb, fmt_ms(oracle), _mean_sd_text(measured, runs), ratio, _reached_text(runs),
                           f"{oom:g}"])
    return t


# ---------------------------------------------------------------------------- the other tables
def table_e2e(data: BenchData) -> Table:
    """True E2E of each policy's best-found mapping over the oracle's (the data of Figure 5)."""
    t = Table("e2e_ratio", "E2E of the best-found mapping / oracle E2E (noise-free; 1.000 = oracle)",
              ["scenario", *data.labels])
    for s in data.scenario_names():
        row = [s]
        for lb in data.labels:
            runs = data.cell(s, lb)
            _, true = _best_found(runs)
            ratio = f"{statistics.fmean(true) / runs[0].oracle_e2e_ms:.3f}" if true else infeasible_text(runs)
            row.append(ratio if runs else "-")
        t.rows.append(row)
    t.notes.append("Mean over seeds; 'OOM', 'deadlock'...: no round of any seed could run, and why. Adaptive and "
                   "fixed policies alike are "
                   "scored on the best mapping they ran (a fixed policy runs one).")
    return t


def table_rounds_to_oracle(data: BenchData) -> Table:
    """First round that ran the oracle mapping, per policy and scenario."""
    t = Table("rounds_to_oracle", "Rounds to the oracle mapping", ["scenario", *data.labels])
    for s in data.scenario_names():
        t.rows.append([s, *(_reached_text(data.cell(s, lb)) if data.cell(s, lb) else "-" for lb in data.labels)])
    t.notes.append("Median over seeds of the first round (R0 = first) whose executed mapping is the oracle's; "
                   "'(k/n never)' counts the seeds that never ran it.")
    return t


def table_regret(data: BenchData, with_probes: bool = False) -> Table:
    """Cumulative regret per policy and scenario, in units of the oracle's E2E."""
    key = "regret_probes" if with_probes else "regret"
    title = ("Cumulative regret including probes" if with_probes else "Cumulative regret over the rounds")
    t = Table(key, f"{title} (sum of E2E - oracle E2E, in oracle E2Es)", ["scenario", *data.labels])
    totals = [0.0] * len(data.labels)
    for s in data.scenario_names():
        row = [s]
        for i, lb in enumerate(data.labels):
            runs = data.cell(s, lb)
            if not runs:
                row.append("-")
                continue
            norm = statistics.fmean(r.regret(with_probes=with_probes) / r.oracle_e2e_ms for r in runs)
            totals[i] += norm
            row.append(f"{norm:.2f}")
        t.rows.append(row)
    t.rows.append(["total", *(f"{v:.2f}" for v in totals)])
    t.notes += [
        "Per run: sum over rounds of (noise-free E2E of the round's mapping - oracle E2E) / oracle E2E, mean over "
        "seeds; 0 means every round ran the oracle mapping. An infeasible round is charged the all-CPU E2E (the "
        "always-feasible fallback) - oracle E2E.",
    ]
    if with_probes:
        t.notes.append("Each feasible what-if probe adds its own E2E - oracle E2E: probes are real executions.")
    else:
        t.notes.append("regret.csv also has the measured (noisy) regret in ms; it can be below 0 for a policy that "
                       "runs the oracle mapping, because a noisy run can beat the noise-free optimum.")
    return t


def table_probes(data: BenchData) -> Table:
    """What-if probes per run."""
    t = Table("probes", "Probes spent per run (mean over seeds)", ["scenario", *data.labels])
    for s in data.scenario_names():
        t.rows.append([s, *(f"{statistics.fmean(r.probes for r in data.cell(s, lb)):g}" if data.cell(s, lb) else "-"
                            for lb in data.labels)])
    t.notes.append("What-if executions the agentic monitor ran (symmetric and swap reprobes); other policies run none.")
    return t


def table_llm(data: BenchData) -> Table | None:
    """Decider cost per agentic variant: attempts, re-asks, fallbacks, tokens, decision latency."""
    labels = [lb for lb in data.labels if any(r.decider for run in data.runs if run.label == lb for r in run.rounds)]
    if not labels:
        return None
    t = Table("llm", "Decider cost per round (agentic policies)",
              ["policy", "rounds", "attempts / round", "re-asks", "fallbacks", "prompt tokens / round",
               "completion tokens / round", "decision ms / round (mean)", "decision ms (p95)"])
    for lb in labels:
        rounds = [r for run in data.runs if run.label == lb for r in run.rounds]
        n = len(rounds)
        pt = [r.prompt_tokens for r in rounds if r.prompt_tokens is not None]
        ct = [r.completion_tokens for r in rounds if r.completion_tokens is not None]
        lat = sorted(r.decision_ms for r in rounds if r.decision_ms is not None)
        p95 = lat[min(len(lat) - 1, math.ceil(0.95 * len(lat)) - 1)] if lat else None
        t.rows.append([
            lb, str(n), f"{statistics.fmean(r.attempts for r in rounds):.2f}", str(sum(r.reasks for r in rounds)),
            str(sum(1 for r in rounds if r.fallback)),
            f"{statistics.fmean(pt):.0f}" if pt else "-", f"{statistics.fmean(ct):.0f}" if ct else "-",
            f"{statistics.fmean(lat):.1f}" if lat else "-", fmt_ms(p95),
        ])
    t.notes += [
        "Tokens are the server's counts ('-': the decider is not an LLM or the server reported none). Decision time "
        "is the decider's wall time per round, re-asks included; it is wall-clock, so it varies between machines.",
        "The rules and argmin deciders are not LLMs: their rows show the cost floor of the loop itself.",
    ]
    return t


def reference_note(data: BenchData) -> str:
    """'' when every scenario's reference is the exact oracle; else which scenarios' "oracle" is a
    best-known mapping (not a proven optimum), and how far above the lower bound it may be."""
    best_known: dict[str, tuple[float | None, str]] = {}
    for r in data.runs:
        if r.reference_kind != "oracle":
            best_known.setdefault(r.scenario, (r.reference_gap, r.reference_found_by))
    if not best_known:
        return ""
    parts = []
    for s, (gap, found_by) in sorted(best_known.items()):
        notes = ([] if gap is None else [f"within {100 * gap:.1f}% of the lower bound"]) + (
            [f"found by {found_by}"] if found_by else [])
        parts.append(s + (f" ({'; '.join(notes)})" if notes else ""))
    return ("Reference: for " + ", ".join(parts) + " the exact search did not fit the time budget (or best-known was "
            "asked for), so 'oracle' here means the best mapping known, not a proven optimum: the best of a bounded "
            "search and of every mapping the runs played (a noise-free ratio is never below 1; a measured one can be, "
            "by noise).")


SIMULATED = " [simulated from the cards]"
"""Suffix of the title of every table whose oracle or noise-free figures are simulated, in a report
of runs on a real executor."""


def _measured_runs(run: RunSummary) -> dict[str, list[float]]:
    """A run's feasible measured E2Es (rounds and probes) by mapping code, in order."""
    by_code: dict[str, list[float]] = {}
    for rnd in run.rounds:
        for p in rnd.probes:
            if p.e2e_ms is not None:
                by_code.setdefault(p.code, []).append(p.e2e_ms)
        if rnd.feasible and rnd.e2e_ms is not None:
            by_code.setdefault(rnd.code, []).append(rnd.e2e_ms)
    return by_code


def _deploy(run: RunSummary) -> tuple[str, list[float]] | None:
    """The mapping to deploy of one run: lowest median measured E2E (ties: more runs), with its runs."""
    by_code = _measured_runs(run)
    if not by_code:
        return None
    return min(by_code.items(), key=lambda kv: (statistics.median(kv[1]), -len(kv[1])))


def table_measured(data: BenchData) -> Table:
    """On a real executor: each run's mapping to deploy, measured, against the best measured of its
    scenario (the measured reference: every figure in it was measured on the executor)."""
    executor = str(data.meta.get("executor", "sim")).split("[")[0]  # the name, without its options
    t = Table("measured", f"Measured on {executor}: the mapping to deploy, against the best measured mapping",
              ["scenario", *data.labels])
    for s in data.scenario_names():
        deploys = {lb: [d for d in (_deploy(r) for r in data.cell(s, lb)) if d is not None] for lb in data.labels}
        medians = [statistics.median(runs) for ds in deploys.values() for _, runs in ds]
        best = min(medians) if medians else None
        row = [s]
        for lb in data.labels:
            ds = deploys[lb]
            if not ds or best is None:
                row.append(infeasible_text(data.cell(s, lb)) if data.cell(s, lb) else "-")
                continue
            med = statistics.fmean(statistics.median(runs) for _, runs in ds)
            spreads = [(max(runs) - min(runs)) / statistics.median(runs) for _, runs in ds if len(runs) > 1]
            spread = f" ±{50 * statistics.fmean(spreads):.0f}%" if spreads else " (once)"
            row.append(f"{med:.1f} ms{spread} = {med / best:.2f}x")
        t.rows.append(row)
    t.notes += [
        "Measured: per run, the mapping to deploy is the one with the lowest median measured E2E over its "
        "executions (rounds and probes); the cell is that median (mean over seeds), ± half its spread (max - min) "
        "over repeats, '(once)' when it ran once, and its ratio to the best measured: the lowest such median of "
        "any policy on the scenario (the measured reference; 1.00x = the best measured).",
        "Every other table's oracle and noise-free figures are simulated from the cards (titles marked "
        "[simulated from the cards]); the cards may have been profiled on another machine.",
    ]
    return t


def all_tables(data: BenchData) -> list[Table]:
    """Every table of the report, in order (on a real executor, the measured table first, and the
    tables built on simulated figures say so in their titles)."""
    tables: list[Table | None] = [
        table4(data), table5(data), table5_all(data), table_e2e(data), table_rounds_to_oracle(data),
        table_regret(data), table_regret(data, with_probes=True), table_probes(data), table_llm(data),
    ]
    note = reference_note(data)
    out = [t for t in tables if t is not None]
    if note:
        for t in out:
            t.notes.append(note)
    if data.meta.get("executor", "sim") != "sim":
        for t in out:
            if t.key not in ("probes", "llm"):
                t.title += SIMULATED
        out.insert(0, table_measured(data))
    return out


def regret_csv(data: BenchData) -> str:
    """Long-format regret per run: true and measured, with and without probes, ms and normalized."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["scenario", "policy", "seed", "run_id", "rounds", "oracle_e2e_ms", "true_regret_ms",
                "measured_regret_ms", "true_regret_with_probes_ms", "true_regret_norm", "oom_rounds", "probes"])
    for r in data.runs:
        w.writerow([r.scenario, r.label, r.seed, r.run_id, len(r.rounds), f"{r.oracle_e2e_ms:.3f}",
                    f"{r.regret():.3f}", f"{r.regret(measured=True):.3f}", f"{r.regret(with_probes=True):.3f}",
                    f"{r.regret() / r.oracle_e2e_ms:.4f}", r.oom_rounds, r.probes])
    return buf.getvalue()


def rounds_csv(data: BenchData) -> str:
    """Long-format rounds: one row per round of every run (for your own plots)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["scenario", "policy", "seed", "round", "mapping", "feasible", "e2e_ms", "true_e2e_ms",
                "oracle_e2e_ms", "match", "n_nodes", "probes", "reason"])
    for run in data.runs:
        for r in run.rounds:
            w.writerow([run.scenario, run.label, run.seed, r.round, r.code, int(r.feasible),
                        "" if r.e2e_ms is None else f"{r.e2e_ms:.3f}",
                        "" if r.true_e2e_ms is None else f"{r.true_e2e_ms:.3f}", f"{run.oracle_e2e_ms:.3f}",
                        r.match, run.n_nodes, len(r.probes), r.reason])
    return buf.getvalue()

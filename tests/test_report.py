"""The bench report, its figures and traces (``hetsched.bench.report``, ``figures``, ``hetsched.export``),
as a reader must be able to trust them: one colour per policy in every figure, bars from 0 and
legends that cover nothing, a Gantt chart per scenario that scales, Chrome traces with named
lanes and one final VRAM sample, tables aligned by content, the reading guide inside the report,
and results whose repr stays short.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.factories import make_card, make_scenario, make_workflow

from hetsched.bench.tables import Table
from hetsched.export import lanes, trace_events
from hetsched.model import Attempt, DecisionRecord, Mapping, Placement, Proposal, RoundRecord
from hetsched.model.files import load_scenario
from hetsched.policies import policy_names
from hetsched.search.oracle import solve
from hetsched.sim import Simulator

plt = pytest.importorskip("matplotlib.pyplot", reason="the bench figures need matplotlib (the 'bench' extra)")

from hetsched.bench import figures, load_runs, read_manifest  # noqa: E402  (after the skip)
from hetsched.bench.report import GUIDE  # noqa: E402


# ---------------------------------------------------------------------------- style
def known_labels() -> list[str]:
    return [p for p in policy_names() if p != "agentic"] + [f"agentic:{d}" for d in ("rules", "argmin", "openai",
                                                                                       "local")]


def test_every_registered_policy_has_its_own_fixed_style() -> None:
    labels = known_labels()
    styles = {lb: figures.style(lb) for lb in labels}
    assert len({(s.color, s.marker) for s in styles.values()}) == len(labels)
    assert len({s.color for s in styles.values()}) == len(labels)
    for lb in labels:  # independent of which other policies a bench has, and of their order
        assert figures.colors([lb])[lb] == figures.colors(list(reversed(labels)))[lb] == styles[lb].color
    assert figures.style("oracle").emphasis and figures.style("agentic:rules").emphasis
    assert figures.style("ucb1").faint


@given(label=st.text(min_size=1, max_size=30))
def test_any_label_gets_a_style_from_its_own_text(label: str) -> None:
    assert figures.style(label) == figures.style(label)
    assert figures.style(label).color.startswith("#")


# ---------------------------------------------------------------------------- a small bench to draw
@pytest.fixture(scope="module")
def bench_data(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from hetsched.cli import main

    folder = tmp_path_factory.mktemp("bench")
    # one custom three-way scenario where all-GPU never runs (the case), named with a path
    # separator, markup and a formula matplotlib would try to typeset
    own = folder / "mine.yaml"
    own.write_text("name: 'odd / name [x] $\\frac{$'\nmode: three_way\nmachine: {vram_budget_mb: 1000}\n"
                   "cards:\n  a: {cpu_ms: 300, gpu_ms: 20, vram_mb: 700, load_ms: 30}\n"
                   "  b: {cpu_ms: 200, gpu_ms: 30, vram_mb: 600, load_ms: 40}\n"
                   "nodes: {A: a, B: b}\nedges: [A -> B]\n")
    with pytest.raises(SystemExit) as done:
        main(["bench", "--scenario", str(own), "--scenario", "S5", "-p", "all-gpu", "-p", "greedy-mem",
              "-p", "all-cpu", "-p", "oracle", "-p", "ucb1", "-p", "agentic:rules", "--seeds", "1", "--rounds", "3",
              "--jobs", "1", "--out", str(folder / "out"), "--no-progress"])
    assert done.value.code in (0, None)
    store, ids, labels, meta = read_manifest(folder / "out")
    return load_runs(store, ids, labels, meta), folder / "out"


def capture(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    kept: list[Any] = []
    monkeypatch.setattr(figures, "_save", lambda fig, path: kept.append(fig) or path)
    return kept


def test_e2e_bars_start_at_zero_and_the_legend_has_each_policys_colour(
    bench_data: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, _ = bench_data
    kept = capture(monkeypatch)
    figures.fig_e2e_normalized(data, tmp_path / "e.png")
    ax = kept[0].axes[0]
    assert ax.get_ylim()[0] == 0  # winners' bars (ratio 1) are visible, not flat at the axis
    legend = ax.get_legend()
    shown = {t.get_text(): h for t, h in zip(legend.get_texts(), legend.legend_handles, strict=True)}
    assert set(shown) == set(data.labels)
    for label, handle in shown.items():  # all-gpu never ran feasibly on the custom scenario: still its colour
        assert matplotlib_hex(handle.get_facecolor()) == figures.style(label).color, label
    # the legend sits below the axes: it covers no bar
    fig = kept[0]
    fig.canvas.draw()
    assert legend.get_window_extent().y1 <= ax.get_window_extent().y0
    plt.close(fig)


def matplotlib_hex(rgba: Any) -> str:
    from matplotlib.colors import to_hex

    return to_hex(rgba)


def test_convergence_and_regret_draw_oracle_and_agentic_on_top(
    bench_data: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, _ = bench_data
    kept = capture(monkeypatch)
    figures.fig_convergence(data, tmp_path / "c.png")
    figures.fig_regret(data, tmp_path / "r.png")
    for fig in kept:
        for ax in fig.axes:
            lines = {ln.get_label(): ln for ln in ax.get_lines() if not ln.get_label().startswith("_")}
            if not lines:
                continue
            z = {lb: ln.get_zorder() for lb, ln in lines.items()}
            assert z["oracle"] == max(z.values()) and z["agentic:rules"] > z["all-gpu"] > z["ucb1"]
            assert (lines["ucb1"].get_alpha() or 1) < 1 and lines["oracle"].get_linestyle() != "-"
        handles = fig.legends[0].legend_handles
        assert [matplotlib_hex(h.get_color()) for h in handles] == [figures.style(lb).color for lb in data.labels]
        plt.close(fig)


def test_the_report_has_a_gantt_per_scenario_and_its_own_guide(bench_data: Any) -> None:
    data, out = bench_data
    names = sorted(p.name for p in (out / "figures").glob("gantt_*.png"))
    assert len(names) == len(data.scenarios) == 2
    assert "gantt_S5.png" in names and any(n.startswith("gantt_odd_name_x_") for n in names)  # a safe file name
    page = (out / "report.html").read_text(encoding="utf-8")
    md = (out / "report.md").read_text(encoding="utf-8")
    for title, items in GUIDE:
        assert title in page and title in md and all(i in md for i in items)
    assert '<a href="#how-to-read">How to read it</a>' in page and "docs/bench.md" not in page


def test_gantt_of_thousands_of_nodes_draws_one_artist_per_lane(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    n = 3000  # a chain, plus one parallel branch: two lanes
    nodes = [(f"N{i}", "t") for i in range(n)] + [("X", "t")]
    edges = [(f"N{i}", f"N{i + 1}") for i in range(n - 1)]
    sc = make_scenario(make_workflow(nodes, edges), [make_card("t", cpu_ms=10, gpu_ms=5)], cpu_cores=4)
    kept = capture(monkeypatch)
    figures.gantt_figure(sc, [("all-CPU", sc.uniform(Placement.CPU))], tmp_path / "g.png")
    ax = kept[0].axes[0]
    assert len(ax.patches) == 0 and len(ax.collections) == 2 and len(ax.texts) == 0  # no labels past 40 nodes
    plt.close(kept[0])


# ---------------------------------------------------------------------------- Chrome traces
def test_trace_lanes_are_named_and_the_vram_counter_ends_once() -> None:
    for name in ("S13", "vram_3way", "fanout", "S11"):
        sc = load_scenario(name)
        best = solve(sc, ranking=False).best
        tr = Simulator(sc, noise=False).run(best)
        events = trace_events([("r0", tr), ("r1", Simulator(sc).run(best, seed=1))])
        named = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
        used = {(e["pid"], e["tid"]) for e in events if e["ph"] in ("X", "i")}
        assert used <= named, used - named
        for pid in {e["pid"] for e in events if e["ph"] == "C"}:
            samples = [(e["ts"], e["args"]["used"]) for e in events if e["ph"] == "C" and e["pid"] == pid]
            assert all(a != b for a, b in itertools.pairwise(samples)), samples  # no repeated sample
            assert samples[-1][1] == 0.0 and len({t for t, _ in samples}) == len(samples)
        json.dumps(events)


@settings(max_examples=200, deadline=None)
@given(spans=st.lists(st.tuples(st.integers(0, 50), st.integers(1, 20)), max_size=40))
def test_lanes_never_overlap_and_match_first_fit(spans: list[tuple[int, int]]) -> None:
    intervals = [(float(s), float(s + d), f"n{i}") for i, (s, d) in enumerate(spans)]
    got = lanes(intervals)
    lane_end: list[float] = []  # the textbook first-fit the heap version must equal
    expected: dict[str, int] = {}
    for start, end, key in sorted(intervals):
        for i, busy in enumerate(lane_end):
            if busy <= start + 1e-9:
                lane_end[i], expected[key] = end, i
                break
        else:
            lane_end.append(end)
            expected[key] = len(lane_end) - 1
    assert got == expected


# ---------------------------------------------------------------------------- tables
def test_tables_right_align_numbers_and_left_align_text() -> None:
    t = Table("t", "T", ["scenario", "policy", "E2E ms", "ratio", "match", "reached", "mode", "shows"])
    t.rows = [["S5", "ucb1", "812.3", "1.05x", "3/4", "R2 (1/5 never)", "binary", "a 2.5x gain"],
              ["S13", "agentic:rules", "-", "OOM", "3-4/4", "never", "three_way", "queue it"]]
    assert t.numeric() == [False, False, True, True, True, True, False, False]
    assert "| --- | --- | ---: | ---: | ---: | ---: | --- | --- |" in t.to_markdown()
    html = t.to_html()
    assert '<td class="n">812.3</td>' in html and "<td>ucb1</td>" in html and "<td>a 2.5x gain</td>" in html
    t.rows.append(["x|y", "<b>\nz", "1", "1", "1", "R0", "m", "s"])
    assert "x\\|y" in t.to_markdown() and "&lt;b> z" in t.to_markdown()


# ---------------------------------------------------------------------------- short reprs
def test_results_have_short_reprs() -> None:
    sc = make_scenario(make_workflow([(f"N{i}", f"t{i % 3}") for i in range(8)]),
                       [make_card(f"t{k}", vram_mb=300.0) for k in range(3)], mode="three_way", vram_budget_mb=700.0)
    res = solve(sc, ranking=True)
    assert len(res.ranking) > 1000 and len(repr(res)) < 300
    big = make_scenario(make_workflow([(f"N{i}", "t") for i in range(2000)]), [make_card("t")])
    tr = Simulator(big).run(big.uniform(Placement.CPU), seed=1)
    decision = DecisionRecord("openai", "m", (Attempt(1, "p" * 100_000, "r" * 1_000_000),))
    record = RoundRecord(0, Proposal(tr.mapping, "why", decision), tr)
    for obj in (tr, record, decision, decision.attempts[0], big, tr.mapping, Mapping({"A": "cpu"})):
        assert len(repr(obj)) < 400, type(obj).__name__
    assert "2000 nodes" in repr(tr.mapping) and "1,000,000 chars" in repr(decision.attempts[0])


def test_random_scenarios_print_and_export_without_error() -> None:
    rng = random.Random(3)
    for _ in range(5):
        n = rng.randint(1, 30)
        nodes = [(f"N{i}", f"t{rng.randint(0, 3)}") for i in range(n)]
        edges = [(f"N{a}", f"N{b}") for a in range(n) for b in range(a + 1, n) if rng.random() < 0.1]
        sc = make_scenario(make_workflow(nodes, edges), [make_card(f"t{k}") for k in range(4)], mode="three_way")
        m = Mapping((f"N{i}", rng.choice(list(Placement))) for i in range(n))
        tr = Simulator(sc).run(m, seed=rng.randint(0, 9))
        json.dumps(trace_events([("x", tr)]))

"""The bench's figures read right on the figure objects: plain tick labels (never raw mathtext), a y
label on every row of panels, nothing cut off the figure with one, two or thirteen scenarios, and Gantt
labels that sit on their own bar or on free room in their lane, never on another bar."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

plt = pytest.importorskip("matplotlib.pyplot", reason="the bench figures need matplotlib (the 'bench' extra)")

from hetsched.bench import figures, load_runs, read_manifest  # noqa: E402  (after the skip)
from hetsched.model import Placement  # noqa: E402
from hetsched.model.files import load_scenario  # noqa: E402
from hetsched.search.reference import reference  # noqa: E402
from hetsched.sim import Simulator  # noqa: E402


def bench(folder: Path, *scenarios: str) -> Any:
    from hetsched.cli import main

    args = [a for s in scenarios for a in ("--scenario", s)]
    with pytest.raises(SystemExit) as done:
        main(["bench", *args, "-p", "all-gpu", "-p", "ucb1", "-p", "agentic:rules", "--seeds", "1", "--rounds", "4",
              "--jobs", "1", "--out", str(folder), "--no-progress"])
    assert done.value.code in (0, None)
    store, ids, labels, meta = read_manifest(folder)
    return load_runs(store, ids, labels, meta)


@pytest.fixture(scope="module", params=[("S13",), ("S5", "S13")], ids=["one scenario", "two scenarios"])
def few(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return bench(tmp_path_factory.mktemp("bench"), *request.param)


def drawn(monkeypatch: pytest.MonkeyPatch, draw: Any, *args: Any) -> Any:
    kept: list[Any] = []
    monkeypatch.setattr(figures, "_save", lambda fig, path: kept.append(fig) or path)
    draw(*args, Path("unused.png"))
    (fig,) = kept
    fig.canvas.draw()
    return fig


def inside(inner: Any, outer: Any, slack: float = 1.0) -> bool:
    return (inner.x0 >= outer.x0 - slack and inner.y0 >= outer.y0 - slack and inner.x1 <= outer.x1 + slack
            and inner.y1 <= outer.y1 + slack)


@pytest.mark.parametrize("draw", [figures.fig_convergence, figures.fig_regret], ids=["convergence", "regret"])
def test_few_scenarios_fit_their_title_axes_and_legend(few: Any, draw: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fig = drawn(monkeypatch, draw, few)
    renderer = fig.canvas.get_renderer()
    whole = fig.bbox
    assert inside(fig._suptitle.get_window_extent(renderer), whole)
    visible = [ax for ax in fig.axes if ax.get_visible()]
    for ax in visible:
        assert inside(ax.get_tightbbox(renderer), whole), ax.get_title()  # tick labels and y label included
        assert ax.get_tightbbox(renderer).y0 > fig.legends[0].get_window_extent(renderer).y1  # legend below
    assert visible[0].get_ylabel()
    assert inside(fig.legends[0].get_window_extent(renderer), whole)
    plt.close(fig)


def test_regret_ticks_are_plain_numbers_and_every_row_has_a_y_label(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = bench(tmp_path_factory.mktemp("bench"), "S1", "S2", "S5", "S11", "S13")
    fig = drawn(monkeypatch, figures.fig_regret, data)
    renderer = fig.canvas.get_renderer()
    visible = [ax for ax in fig.axes if ax.get_visible()]
    for ax in visible:
        labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
        assert labels and not any("$" in t or "mathdefault" in t for t in labels), labels
        assert float(labels[0]) <= float(labels[-1])  # read back as numbers
        assert ax.get_tightbbox(renderer).x0 >= fig.bbox.x0 - 1
    rows = {round(ax.get_position().y0, 3): ax for ax in reversed(visible)}  # the first panel of each row
    assert all(ax.get_ylabel() == "cumulative regret (oracle E2Es)" for ax in rows.values())
    # no panel's tick labels run into its left neighbour
    for left, right in itertools.pairwise(visible):
        if round(left.get_position().y0, 3) == round(right.get_position().y0, 3):
            assert left.get_window_extent(renderer).x1 < right.get_tightbbox(renderer).x0
    plt.close(fig)


def test_gantt_labels_never_sit_on_another_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    sc = load_scenario("rag_tiny")
    ref = reference(sc)
    assert ref is not None
    schedules = [("oracle", ref.mapping), ("all-CPU", sc.uniform(Placement.CPU))]
    fig = drawn(monkeypatch, lambda *a: figures.gantt_figure(sc, schedules, a[-1]))
    renderer = fig.canvas.get_renderer()
    sim = Simulator(sc, noise=False)
    charts = [ax for ax in fig.axes if ax.texts]
    assert len(charts) == 2
    for ax, (_, mapping) in zip(charts, schedules, strict=True):
        trace = sim.run(mapping)
        texts = [t for t in ax.texts if t.get_position()[1] > -1 and t.get_transform() == ax.transData]
        boxes = {t.get_text(): t.get_window_extent(renderer) for t in texts}
        lanes = {round(t.get_position()[1]) for t in texts}
        assert lanes  # labels were drawn
        for text, box in boxes.items():
            owner = text.split()[0]
            for n in trace.nodes.values():
                if n.node == owner:
                    continue
                start = n.admitted_ms if n.load_ms > 0 else n.start_ms
                bar = ax.transData.transform([(start, 0), (n.end_ms, 0)])
                overlaps_x = box.x0 < bar[1][0] - 1 and box.x1 > bar[0][0] + 1
                same_lane = any(abs(t.get_position()[1] - y) < 0.5 for t in texts if t.get_text() == text
                                for y in [_lane(ax, n.node, trace)])
                assert not (overlaps_x and same_lane), (text, n.node)
        for a, b in ((a, b) for a in boxes for b in boxes if a < b):
            assert not boxes[a].overlaps(boxes[b]), (a, b)
    plt.close(fig)


def _lane(ax: Any, node: str, trace: Any) -> float:
    """The y of ``node``'s bar: the row whose bars (broken_barh) include its start time."""
    n = trace.nodes[node]
    for coll in ax.collections:
        for path in coll.get_paths():
            xs, ys = path.vertices[:, 0], path.vertices[:, 1]
            if abs(xs.min() - n.start_ms) < 1e-6 and abs(xs.max() - n.end_ms) < 1e-6:
                return float((ys.min() + ys.max()) / 2)
    return float("nan")

"""Lower bounds on the noise-free E2E of (partial) mappings, vectorized with numpy.

The exact search (:mod:`hetsched.search.oracle`), the best-known search
(:mod:`hetsched.search.local_search`) and the reference's lower bound (:mod:`hetsched.search.reference`)
all bound with this module. Nodes are assigned in a fixed topological order (``BoundModel.order``),
so the nodes of a partial mapping (a *prefix*) always include every predecessor of each of them.
For a batch of prefixes (rows) it keeps, per row, the relaxed finish time of every assigned node
and running sums, and returns a bound that holds for every completion of the prefix. Each term
is a lower bound on the E2E the contention model (:mod:`hetsched.model.contention`) computes, for these
reasons (docs/reference.md spells them out):

- **critical path**: a node cannot start before its inputs arrive and then runs at least its
  isolated time: ``cpu_ms * max(1, d / cpu_cores)`` on the CPU, d its cores busy (``ToolCard.cores_busy``:
  measured ``cpu_demand``, else ``cpu_threads``; its own threads already
  oversubscribe the cores), ``gpu_ms`` on the GPU (the slowdown ``max(1, U) * (1 + kappa (|R|-1))``
  is >= 1), plus ``load_ms`` for ``gpu_queue``; an edge between the CPU and the GPU adds
  ``data_mb / pcie_mb_per_ms``. Unassigned nodes count their smallest possible time, no transfer.
- **GPU work**: running GPU tasks progress at rate 1/s, s = max(1, U) (1 + kappa (k - 1)). Give
  each task the weight a = min(1, (1 + kappa) gpu_util): alone, a task does a <= 1 weighted work
  per ms; with k >= 2 tasks, sum(a) / s <= (1 + kappa) min(U, 1) / (1 + kappa (k - 1)) <= 1. So
  the GPU completes at most 1 ms of ``gpu_ms * a`` work per ms (with a = gpu_util this is plain
  utilisation; the (1 + kappa) factor is the interference every pair of tasks pays). Loads count
  no work (under ``load_sharing: device`` they take a share, which only lowers the others' rate).
  No GPU task computes before the earliest compute start of the GPU nodes (``head``) and, after
  the last one ends, a chain of at least the smallest ``tail`` remains:
  E2E >= min head + sum(gpu_ms * a) + min tail.
- **CPU work**: with T the cores the running CPU tasks demand, every task of d >= 1 slows by
  max(1, T / P) (one of d < 1 less), so those tasks complete at most P thread-ms per ms: E2E >= min
  head + sum(cpu_ms * d) / P over the CPU nodes of d >= 1 + min tail over CPU nodes (a node of
  d < 1, mostly waiting, counts no work).
- **mixed work**: E2E >= max(GPU work, CPU work) >= their mean, and each unassigned node adds at
  least the smaller of its two works to one of them.
- **VRAM x time**: the memory held never exceeds the budget. A ``gpu_queue`` node holds its
  ``vram_mb`` for at least ``load_ms + gpu_ms``; a ``gpu_now`` tool holds its memory from 0 until
  its last ``gpu_now`` node ends: E2E >= (sum of memory x time) / budget.

Bounds are computed in float64 from the same figures the simulator uses; callers compare them
with a slack (:func:`BoundModel.slack`) that covers the simulator's event tolerance.
Imports only the model (numpy is a core dependency).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from hetsched.model import Scenario
from hetsched.model.mapping import CPU_CODE as CPU
from hetsched.model.mapping import NOW_CODE as NOW
from hetsched.model.mapping import QUEUE_CODE as QUEUE

Floats = NDArray[np.float64]
Codes = NDArray[np.int8]

_INF = np.inf
DEADLOCK_CHECK_MAX_NODES = 128
"""Largest workflow for which :meth:`BoundModel.deadlocked` flags sure queue deadlocks (its set-up is
quadratic); above it, it flags none and the simulation finds them."""
ROW_CELLS = 1 << 22
"""Largest rows x positions of one batch of prefixes (about 40 MB with the finish times)."""
_REL_SLACK = 1e-9
_ABS_SLACK_PER_NODE = 1e-5  # ms; the simulator treats work and events within 1e-7 ms as done


@dataclass
class Rows:
    """A batch of prefixes of one depth (the first ``depth`` nodes of ``BoundModel.order``) and their bounds."""

    depth: int
    """Number of assigned nodes."""
    codes: Codes
    """Placement codes, shape (depth, rows): one contiguous array per assignment position."""
    finish: Floats
    """Relaxed finish time of each assigned node (critical path, no contention), shape (depth, rows)."""
    tool_end: Floats
    """Per tool: relaxed end of its last ``gpu_now`` node so far, 0 when it has none; shape (tools, rows)."""
    gpu_work: Floats
    """Sum of ``gpu_ms * gpu_util`` over assigned GPU nodes."""
    cpu_work: Floats
    """Sum of ``cpu_ms * d / cpu_cores`` over assigned CPU nodes of d >= 1 core busy."""
    queue_mem: Floats
    """Sum of ``vram_mb * (load_ms + gpu_ms)`` over assigned ``gpu_queue`` nodes (MB x ms)."""
    gpu_head: Floats
    """Earliest relaxed compute start over assigned GPU nodes (inf: none)."""
    gpu_tail: Floats
    """Smallest static tail over assigned GPU nodes (inf: none)."""
    cpu_head: Floats
    """Earliest relaxed start over assigned CPU nodes (inf: none)."""
    cpu_tail: Floats
    """Smallest static tail over assigned CPU nodes (inf: none)."""
    lb: Floats
    """The lower bound on the E2E of every completion of each row."""
    vram_now: Floats
    """VRAM the assigned ``gpu_now`` tools hold at t = 0 (counted once per tool)."""
    group_lb: Floats
    """Largest sibling-group contention bound so far (0: none)."""

    def __len__(self) -> int:
        return int(self.lb.shape[0])

    @staticmethod
    def concat(parts: list[Rows]) -> Rows:
        """Rows of one depth stacked."""
        if len(parts) == 1:
            return parts[0]
        return Rows(
            parts[0].depth,
            *(np.concatenate([getattr(p, f) for p in parts], axis=1) for f in ("codes", "finish", "tool_end")),
            *(np.concatenate([getattr(p, f) for p in parts]) for f in (
                "gpu_work", "cpu_work", "queue_mem", "gpu_head", "gpu_tail", "cpu_head", "cpu_tail", "lb",
                "vram_now", "group_lb")),
        )

    def take(self, idx: NDArray[np.intp] | NDArray[np.bool_]) -> Rows:
        """The rows selected by an index array or a boolean mask."""
        return Rows(
            self.depth, self.codes[:, idx], self.finish[:, idx], self.tool_end[:, idx], self.gpu_work[idx],
            self.cpu_work[idx], self.queue_mem[idx], self.gpu_head[idx], self.gpu_tail[idx],
            self.cpu_head[idx], self.cpu_tail[idx], self.lb[idx], self.vram_now[idx], self.group_lb[idx],
        )


@dataclass(frozen=True)
class _Device:
    """The siblings of a group that may run on one device (``code``: CPU or gpu_now), by work."""

    code: int
    positions: NDArray[np.intp]
    work: Floats
    weight: Floats
    comp: Floats


@dataclass(frozen=True)
class _Group:
    """Nodes with the same predecessors: they become ready together, up to ``delay``."""

    first: int
    last: int
    delay: float
    devices: list[_Device]


class BoundModel:
    """A scenario's figures as arrays in assignment order, and the vectorized bound over prefixes."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        c = scenario.compiled  # the kernel's compile: figures, tools, edges, allowed codes
        self.compiled = c
        self.budget_mb = c.budget
        self.n = n = c.n
        self.order: tuple[int, ...] = tuple(c.index[v] for v in scenario.workflow.topo_order)
        """Node index (workflow node order) of each assignment position."""
        order = self.order
        pos = {v: p for p, v in enumerate(order)}
        self.position: NDArray[np.intp] = np.array([pos[i] for i in range(n)], dtype=np.intp)
        """Assignment position of each node index (the inverse of ``order``)."""
        self.tool: tuple[int, ...] = tuple(c.tool_idx[i] for i in order)
        self.tool_vram: Floats = np.array(c.tool_vram, dtype=np.float64)
        self.allowed: tuple[tuple[int, ...], ...] = tuple(
            tuple(k for k in c.allowed[i] if not (k == QUEUE and c.vram[i] > self.budget_mb)) for i in order
        )
        """Placement codes each position may take (a queue node larger than the budget never runs)."""
        cores = c.cores
        demand = np.array([c.demand[i] for i in order])
        self._demand: Floats = demand
        cpu_raw = np.array([c.cpu_ms[i] for i in order])
        gpu_ms = np.array([c.gpu_ms[i] for i in order])  # inf without a GPU implementation
        gpu_or0 = np.where(np.isinf(gpu_ms), 0.0, gpu_ms)
        load_ms = np.array([c.load_ms[i] for i in order])
        util = np.array([c.util[i] for i in order])
        self._util: Floats = util
        self._cpu_raw: Floats = cpu_raw
        self._gpu_or0: Floats = gpu_or0
        cpu_ms = np.array([ms * max(1.0, d / cores) for ms, d in zip(cpu_raw.tolist(), demand.tolist(), strict=True)])
        self.cpu_ms: Floats = cpu_ms
        self.gpu_ms: Floats = gpu_ms
        dur = np.full((n, 3), _INF)
        dur[:, CPU] = cpu_ms
        dur[:, NOW] = gpu_ms
        dur[:, QUEUE] = gpu_ms + load_ms
        self.dur: Floats = dur
        """Isolated time per position and code (queue: load + compute)."""
        kappa = c.kappa
        self.gpu_w: Floats = np.array([g * min(1.0, (1.0 + kappa) * u)
                                       for g, u in zip(gpu_or0.tolist(), util.tolist(), strict=True)])
        """GPU work per position: gpu_ms * min(1, (1 + kappa) gpu_util) (see the module docstring)."""
        self.cpu_w: Floats = np.array([ms * d / cores if d >= 1.0 else 0.0
                                       for ms, d in zip(cpu_raw.tolist(), demand.tolist(), strict=True)])
        """CPU work per position: cpu_ms * d / cpu_cores, 0 below one core (see the module docstring)."""
        self.vram_pos: Floats = np.array([c.vram[i] for i in order])
        self.queue_mem: Floats = np.array([v * (ld + g) for v, ld, g in zip(
            self.vram_pos.tolist(), load_ms.tolist(), gpu_or0.tolist(), strict=True)])
        preds: list[list[tuple[int, float]]] = [[] for _ in range(n)]
        succs: list[list[int]] = [[] for _ in range(n)]
        for i in order:
            for w, delay in c.succs[i]:
                preds[pos[w]].append((pos[i], delay))
                succs[pos[i]].append(pos[w])
        self.preds: tuple[tuple[tuple[int, float], ...], ...] = tuple(tuple(p) for p in preds)
        self.succs: tuple[tuple[int, ...], ...] = tuple(tuple(s) for s in succs)
        mind = np.array([min(dur[p, k] for k in self.allowed[p]) for p in range(n)])
        self.min_dur: Floats = mind
        # longest path from a node's start to the end, every node at its smallest time, no transfers
        from_start = np.zeros(n)
        for p in range(n - 1, -1, -1):
            from_start[p] = mind[p] + max((from_start[w] for w in self.succs[p]), default=0.0)
        self.tail: Floats = np.array([max((from_start[w] for w in self.succs[p]), default=0.0) for p in range(n)])
        """Static tail: smallest time from a node's end to the end of the workflow."""
        self._from_start = from_start
        minw = np.array([min(self.gpu_w[p] if k != CPU else self.cpu_w[p] for k in self.allowed[p]) for p in range(n)])
        self._mix_rest = np.concatenate([np.cumsum(minw[::-1])[::-1], [0.0]])
        forced = np.array([self.cpu_w[p] if self.allowed[p] == (CPU,) else 0.0 for p in range(n)])
        self._forced_cpu_rest = np.concatenate([np.cumsum(forced[::-1])[::-1], [0.0]])
        self._cp_cols: dict[int, tuple[NDArray[np.intp], Floats, float]] = {}
        all_tools = float(self.tool_vram.sum())
        self._queue_binds = any(
            QUEUE in a and all_tools + v > self.budget_mb for a, v in zip(self.allowed, self.vram_pos, strict=True)
        )
        self.cores = float(cores)
        self.kappa = float(kappa)
        self._deadlock_checks: list[tuple[int, float, Floats, Floats]] = []
        if n <= DEADLOCK_CHECK_MAX_NODES:  # quadratic set-up; the exact searches it serves stop far below
            masks = scenario.descendant_masks  # per node (workflow order), its descendants as bits
            below = [[pos[j] for j in range(n) if masks[i] >> j & 1] for i in order]
            for q in range(n):
                if QUEUE not in self.allowed[q]:
                    continue
                holders = sorted({self.tool[v] for v in below[q] if NOW in self.allowed[v]})
                if not holders or self.vram_pos[q] + self.tool_vram[holders].sum() <= self.budget_mb:
                    continue
                mat = np.zeros((len(holders), n))
                for r, t_i in enumerate(holders):
                    for v in below[q]:
                        if self.tool[v] == t_i and NOW in self.allowed[v]:
                            mat[r, v] = 1.0
                self._deadlock_checks.append((q, float(self.vram_pos[q]), self.tool_vram[holders], mat))
        self._may_now = np.array([NOW in a for a in self.allowed])
        # per position and code: GPU work, CPU work, queue memory-time, compute time, tails by device
        on_gpu = np.array([0.0, 1.0, 1.0])
        self._gw3: Floats = self.gpu_w[:, None] * on_gpu
        self._cw3: Floats = self.cpu_w[:, None] * (1.0 - on_gpu)
        self._qm3: Floats = self.queue_mem[:, None] * np.array([0.0, 0.0, 1.0])
        self._comp3: Floats = np.stack([cpu_ms, gpu_ms, gpu_ms], axis=1)
        self._tailg3: Floats = np.where(on_gpu > 0, self.tail[:, None], _INF)
        self._tailc3: Floats = np.where(on_gpu > 0, _INF, self.tail[:, None])
        self._sibling_groups = self._find_groups()

    def _find_groups(self) -> list[_Group]:
        """Nodes with the same set of predecessors (sources included), per device they may share."""
        by_preds: dict[tuple[int, ...], list[int]] = {}
        for p in range(self.n):
            by_preds.setdefault(tuple(sorted(u for u, _ in self.preds[p])), []).append(p)
        groups = []
        for members in by_preds.values():
            if len(members) < 2:
                continue
            devices = []
            for code in (CPU, NOW):
                # a CPU node of d < 1 progresses faster than its siblings when the cores are
                # oversubscribed: it is left out (it only ever adds to the others' slowdown)
                pos = [p for p in members if code in self.allowed[p] and (code != CPU or self._demand[p] >= 1.0)]
                if len(pos) < 2:
                    continue
                work = (self._cpu_raw if code == CPU else self._gpu_or0)[np.array(pos, dtype=np.intp)]
                order = np.argsort(work, kind="stable")
                pos_sorted = np.array(pos, dtype=np.intp)[order]
                weight = (self._demand if code == CPU else self._util)[pos_sorted].astype(np.float64)
                comp = self._comp3[pos_sorted, code]
                devices.append(_Device(code, pos_sorted, work[order], weight, comp))
            if devices:
                delay = max((d for p in members for _, d in self.preds[p]), default=0.0)
                groups.append(_Group(min(members), max(members), float(delay), devices))
        return groups

    # ------------------------------------------------------------------ helpers
    def slack(self, value: float) -> float:
        """How far a bound may exceed a simulated E2E through float and event tolerance."""
        return abs(value) * _REL_SLACK + _ABS_SLACK_PER_NODE * (self.n + 1)

    def batch_rows(self, limit: int) -> int:
        """Rows one batch may hold: ``limit``, fewer for long workflows (memory per batch is rows x nodes)."""
        return max(256, min(limit, ROW_CELLS // max(1, self.n)))

    def branching(self, start: int, stop: int) -> int:
        """Number of children of a prefix of depth ``start`` at depth ``stop``."""
        out = 1
        for p in range(start, stop):
            out *= len(self.allowed[p])
        return out

    def levels(self, first_min: int = 64, branch: int = 243) -> list[int]:
        """Depths at which a search stops to bound: the first with at least ``first_min`` prefixes
        (the units of parallel work), then as many positions as keep at most ``branch`` children."""
        n = self.n
        cuts = [0]
        d = 0
        while d < n and self.branching(0, d) < first_min:
            d += 1
        if d > 0:
            cuts.append(d)
        while cuts[-1] < n:
            d = cuts[-1] + 1
            while d < n and self.branching(cuts[-1], d + 1) <= branch:
                d += 1
            cuts.append(d)
        return cuts

    def combos(self, start: int, stop: int) -> Codes:
        """Every code combination of positions start..stop-1, shape (stop - start, combinations),
        combinations in lexicographic order."""
        out: Codes = np.zeros((0, 1), dtype=np.int8)
        for p in range(start, stop):  # no meshgrid: it takes at most 32 dimensions, and a run of
            vals = np.array(self.allowed[p], dtype=np.int8)  # one-choice positions may be longer
            width = out.shape[1]
            out = np.concatenate([np.repeat(out, len(vals), axis=1), np.tile(vals, width)[None, :]], axis=0)
        return out

    def _cp_terms(self, depth: int) -> tuple[NDArray[np.intp], Floats, float]:
        """Columns whose finish bounds the critical path at ``depth``, what follows each, and the
        longest path among unassigned nodes that no assigned node feeds."""
        hit = self._cp_cols.get(depth)
        if hit is not None:
            return hit
        cols: list[int] = []
        after: list[float] = []
        for v in range(depth):
            later = [self._from_start[w] for w in self.succs[v] if w >= depth]
            if later:
                cols.append(v)
                after.append(max(later))
            elif not self.succs[v]:
                cols.append(v)
                after.append(0.0)
        const = max(
            (self._from_start[w] for w in range(depth, self.n) if not self.preds[w]), default=0.0
        )
        out = (np.array(cols, dtype=np.intp), np.array(after), float(const))
        self._cp_cols[depth] = out
        return out

    # ------------------------------------------------------------------ batches
    def root(self) -> Rows:
        """The empty prefix (one row)."""
        z = np.zeros(1)
        inf = np.full(1, _INF)
        rows = Rows(0, np.zeros((0, 1), np.int8), np.zeros((0, 1)), np.zeros((len(self.tool_vram), 1)),
                    z, z.copy(), z.copy(), inf, inf.copy(), inf.copy(), inf.copy(), z.copy(), z.copy(), z.copy())
        rows.lb = self._bound(rows)
        return rows

    def expand(self, rows: Rows, stop: int) -> Rows:
        """Every child of each row at depth ``stop`` (rows x combinations, parent-major order)."""
        combos = self.combos(rows.depth, stop)
        k = combos.shape[1]
        b = len(rows)
        parent = np.repeat(np.arange(b), k)
        new = np.tile(combos, (1, b))
        return self.extend(rows.take(parent), new)

    def extend(self, rows: Rows, new: Codes) -> Rows:
        """Each row extended by its own codes for the next ``new.shape[0]`` positions (shape (k, rows))."""
        k, b = new.shape
        d0 = rows.depth
        d1 = d0 + k
        codes = np.concatenate([rows.codes, new], axis=0)
        finish = np.empty((d1, b))
        finish[:d0] = rows.finish
        on_cpu = new == CPU
        newi = new.astype(np.intp)
        tool_end = rows.tool_end.copy() if self._may_now[d0:d1].any() else rows.tool_end
        vram_now = rows.vram_now.copy()
        for j in range(k):
            p = d0 + j
            c = new[j]
            dur = self.dur[p].take(newi[j])
            start: Floats | None = None
            for u, delay in self.preds[p]:
                t = finish[u]
                if delay > 0:
                    t = t + delay * (on_cpu[j] != (codes[u] == CPU))
                start = t if start is None else np.maximum(start, t)
            if self._queue_binds and QUEUE in self.allowed[p]:
                wait = self._admission(tool_end, vram_now, p, c)
                if wait is not None:
                    start = wait if start is None else np.maximum(start, wait)
            fin = finish[p]
            if start is None:
                fin[:] = dur
            else:
                np.add(start, dur, out=fin)
            if self._may_now[p]:
                t_i = self.tool[p]
                now = c == NOW
                end = tool_end[t_i]
                vram_now += self.tool_vram[t_i] * (now & (end == 0))
                np.maximum(end, np.where(now, fin, 0.0), out=end)
        flat = newi + (3 * np.arange(d0, d1))[:, None]
        fin = finish[d0:d1]
        gw = rows.gpu_work + self._gw3.take(flat).sum(axis=0)
        cw = rows.cpu_work + self._cw3.take(flat).sum(axis=0)
        qm = rows.queue_mem + self._qm3.take(flat).sum(axis=0)
        comp_start = fin - self._comp3.take(flat)
        gh = np.minimum(rows.gpu_head, np.where(on_cpu, _INF, comp_start).min(axis=0))
        ch = np.minimum(rows.cpu_head, np.where(on_cpu, comp_start, _INF).min(axis=0))
        gt = np.minimum(rows.gpu_tail, self._tailg3.take(flat).min(axis=0))
        ct = np.minimum(rows.cpu_tail, self._tailc3.take(flat).min(axis=0))
        group_lb = self._groups_bound(d0, d1, codes, finish, rows.group_lb)
        out = Rows(d1, codes, finish, tool_end, gw, cw, qm, gh, gt, ch, ct, np.empty(b), vram_now, group_lb)
        out.lb = self._bound(out)
        return out

    def _admission(self, tool_end: Floats, vram_now: Floats, p: int, c: Codes) -> Floats | None:
        """The earliest time a ``gpu_queue`` node at position p can be admitted, per row (None: no wait).

        The ``gpu_now`` tools known to be resident hold their memory until their last node ends, no
        earlier than its relaxed end; a queued node that does not fit beside them waits at least
        until the first of them ends (FIFO order and admitted queue nodes only make it later)."""
        waiting = (c == QUEUE) & (vram_now + self.vram_pos[p] > self.budget_mb * (1 + _REL_SLACK) + 1e-6)
        if not waiting.any():
            return None
        first = np.where(tool_end > 0, tool_end, _INF).min(axis=0)
        return np.where(waiting, first, 0.0)

    def _groups_bound(self, d0: int, d1: int, codes: Codes, finish: Floats, prev: Floats) -> Floats:
        """Sibling groups (same predecessors) with members among positions d0..d1-1: contention bound.

        Siblings on one device start together (up to the largest transfer delay D of their edges),
        and every task on a device progresses at the same rate (processor sharing). So while a
        sibling L has progressed x, every sibling j with D <= x < p_j - D is still running beside
        it, and L's time per unit of progress is at least f(those siblings): max(1, U) (1 + kappa
        (k - 1)) on the GPU (``gpu_now`` siblings; U their gpu_util, k their count), max(1,
        d / P) on the CPU (siblings of d >= 1 only); f >= 1 elsewhere. L ends no earlier than its relaxed start plus
        the integral of f over its work p_L, and a tail follows.
        """
        out = prev
        for group in self._sibling_groups:
            if group.last < d0 or group.first >= d1:
                continue
            for dev in group.devices:
                avail = dev.positions < d1
                if int(avail.sum()) < 2 or not (dev.positions[avail] >= d0).any():
                    continue
                idx = dev.positions[avail]
                work = dev.work[avail]
                delay = group.delay
                edges = np.maximum(work - delay, delay)
                seg = np.diff(np.concatenate([[delay], edges]))
                extra = np.minimum(work, delay) + np.maximum(0.0, work - edges) + self.tail[idx]
                on = codes[idx] == dev.code
                if not on.any():
                    continue
                w = dev.weight[avail][:, None] * on
                suffix_w = np.cumsum(w[::-1], axis=0)[::-1]
                if dev.code == CPU:
                    f = np.maximum(1.0, suffix_w / self.cores)
                else:
                    count = np.cumsum(on[::-1], axis=0)[::-1]
                    f = np.maximum(1.0, suffix_w) * (1.0 + self.kappa * np.maximum(count - 1, 0))
                grown = np.cumsum(seg[:, None] * f, axis=0)
                start = finish[idx] - dev.comp[avail][:, None]
                bound = np.where(on, start + grown + extra[:, None], 0.0).max(axis=0)
                out = np.maximum(out, bound)
        return out

    def deadlocked(self, codes: Codes) -> NDArray[np.bool_]:
        """Full mappings (shape (positions, rows)) where a ``gpu_queue`` node needs memory that
        ``gpu_now`` tools with nodes downstream of it hold until it has run (``Scenario.queue_deadlock``);
        only sure cases are flagged (borderline float sums are left to the simulation)."""
        b = codes.shape[1]
        bad = np.zeros(b, dtype=bool)
        if not self._deadlock_checks:
            return bad
        now = (codes == NOW).astype(np.float64)
        for q, vram_q, tools, mat in self._deadlock_checks:
            is_q = codes[q] == QUEUE
            if not is_q.any():
                continue
            held = tools @ ((mat @ now) > 0)
            bad |= is_q & (held + vram_q > self.budget_mb * (1 + _REL_SLACK) + 1e-9)
        return bad

    def _bound(self, r: Rows) -> Floats:
        d = r.depth
        cols, after, const = self._cp_terms(d)
        if len(cols):
            lb = (r.finish[cols] + after[:, None]).max(axis=0)
            np.maximum(lb, const, out=lb)
        else:
            lb = np.full(len(r.lb), const)
        gpu = r.gpu_head + r.gpu_work + r.gpu_tail
        np.maximum(lb, np.where(np.isfinite(gpu), gpu, 0.0), out=lb)
        cpu = r.cpu_head + r.cpu_work + r.cpu_tail
        np.maximum(lb, np.where(np.isfinite(cpu), cpu, 0.0), out=lb)
        np.maximum(lb, r.cpu_work + self._forced_cpu_rest[d], out=lb)
        np.maximum(lb, 0.5 * (r.gpu_work + r.cpu_work + self._mix_rest[d]), out=lb)
        np.maximum(lb, r.group_lb, out=lb)
        mem = r.queue_mem + self.tool_vram @ r.tool_end
        np.maximum(lb, mem / self.budget_mb, out=lb)
        return lb

    # ------------------------------------------------------------------ full mappings
    def to_positions(self, codes: NDArray[np.int8] | list[tuple[int, ...]]) -> Codes:
        """Full mappings given as rows in workflow node order -> shape (positions, rows)."""
        arr = np.asarray(codes, dtype=np.int8).reshape(-1, self.n)
        return np.ascontiguousarray(arr.T[np.asarray(self.order, dtype=np.intp)])

    def to_nodes(self, codes: Codes) -> Codes:
        """Codes of shape (positions, rows) -> rows in workflow node order, shape (rows, nodes)."""
        return codes[self.position].T

    def bound_full(self, codes: NDArray[np.int8] | list[tuple[int, ...]]) -> Rows:
        """Bounds of full mappings given as rows in workflow node order."""
        pos = self.to_positions(codes)
        root = self.root().take(np.zeros(pos.shape[1], dtype=np.intp))
        return self.extend(root, pos)

    def fits(self, vram_now: Floats) -> NDArray[np.bool_]:
        """Rows whose ``gpu_now`` set may fit the budget (borderline rows pass; check them exactly)."""
        return vram_now <= self.budget_mb * (1 + _REL_SLACK) + 1e-9

    def borderline(self, vram_now: Floats) -> NDArray[np.bool_]:
        """Rows too close to the budget for the float sum to decide; the caller checks them exactly."""
        return np.abs(vram_now - self.budget_mb) <= self.budget_mb * _REL_SLACK + 1e-9


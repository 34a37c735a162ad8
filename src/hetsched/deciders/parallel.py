"""Which nodes of a workflow may run at the same time (neither ancestor nor descendant of each other).

The ``rules`` decider reads it to know which GPU nodes contend; the chat prompt lists it per
node. Bit masks over the workflow's node order, so the n^2 relation costs O(edges) big-integer
ORs to build. Imports only ``hetsched.model`` (and numpy).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from numpy.typing import NDArray

from hetsched.model import Scenario


def related_masks(scenario: Scenario) -> list[int]:
    """Per node (workflow node order), a bit mask of the nodes that can NOT run beside it: itself,
    its ancestors and its descendants (bit i stands for ``workflow.node_ids[i]``). O(edges)
    big-integer ORs, n^2 bits in all (12.5 MB at 10,000 nodes), instead of a graph walk per node."""
    wf = scenario.workflow
    index = {v: i for i, v in enumerate(wf.node_ids)}
    preds: list[list[int]] = [[] for _ in wf.node_ids]
    for e in wf.edges:
        preds[index[e.dst]].append(index[e.src])
    anc = [0] * len(preds)
    for v in wf.topo_order:
        i = index[v]
        acc = 0
        for j in preds[i]:
            acc |= (1 << j) | anc[j]
        anc[i] = acc
    desc = scenario.descendant_masks
    return [a | d | (1 << i) for i, (a, d) in enumerate(zip(anc, desc, strict=True))]


def mask_bits(mask: int, n: int) -> NDArray[np.bool_]:
    """A bit mask over n nodes as a boolean array (index i: bit i)."""
    raw = np.frombuffer(mask.to_bytes((n + 7) // 8 or 1, "little"), dtype=np.uint8)
    return np.unpackbits(raw, bitorder="little")[:n].astype(bool)


def iter_parallel(scenario: Scenario) -> Iterator[tuple[str, tuple[str, ...]]]:
    """Each node with the nodes that may run at the same time (neither ancestor nor descendant), in
    workflow node order, one node at a time (the lists themselves may total n^2 names)."""
    ids = scenario.workflow.node_ids
    n = len(ids)
    for v, related in zip(ids, related_masks(scenario), strict=True):
        yield v, tuple(ids[j] for j in np.flatnonzero(~mask_bits(related, n)))


def parallel_nodes(scenario: Scenario) -> dict[str, tuple[str, ...]]:
    """For each node, the nodes that may run at the same time (neither ancestor nor descendant)."""
    return dict(iter_parallel(scenario))

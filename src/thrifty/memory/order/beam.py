"""Beam search over executed sets: the exact search's state space, cut to the best few.

The states of :mod:`thrifty.memory.order.exact` (sets of executed tasks, with the peak so far
and the bytes resident) are expanded one task at a time, keeping at each depth the
``width`` states of least (peak so far, bytes resident), merged when they executed the same
set. The same dominance rule applies (a task that raises neither the peak nor the resident
bytes is run at once). This is the bounded-width relative of Serenity's dynamic programming
(Ahn et al., MLSys 2020); it is a heuristic, whose result seeds the exact search.

Example
-------
>>> from thrifty.memory.order.generate import random_dag
>>> c = Compact.of(random_dag(8, seed=1))
>>> c.peak_of(beam_order(c, width=4))
24
"""

from __future__ import annotations

import time

from thrifty.memory.order.compact import Compact
from thrifty.memory.order.exact import Lattice

__all__ = ["beam_order"]


def beam_order(c: Compact, width: int = 32, time_limit: float | None = None) -> list[int]:
    """An order found by beam search of ``width`` states per depth.

    When ``time_limit`` seconds pass, the best state so far is completed greedily (least
    peak increase first).
    """
    n = c.n
    t0 = time.perf_counter()
    lattice = Lattice(c, with_bounds=False)
    pred_mask = lattice.pred_mask
    ready0 = 0
    for t in range(n):
        if not c.preds[t]:
            ready0 |= 1 << t
    # a state: (peak so far, resident, executed set, ready set, order as a linked list)
    beam: list[tuple[int, int, int, int, tuple | None]] = [
        (c.initial, c.start_mem, 0, ready0, None)]
    for _depth in range(n):
        nxt: dict[int, tuple[int, int, int, int, tuple | None]] = {}
        for v, mem, s, ready, path in beam:
            for t, nv, nm, ns in lattice.moves(v, mem, s, ready):
                old = nxt.get(ns)
                if old is not None and (old[0], old[1]) <= (nv, nm):
                    continue
                nready = ready & ~(1 << t)
                for q in c.succs[t]:
                    if pred_mask[q] & ~ns == 0:
                        nready |= 1 << q
                nxt[ns] = (nv, nm, ns, nready, (t, path))
        beam = sorted(nxt.values(), key=lambda x: (x[0], x[1]))[:width]
        if time_limit is not None and time.perf_counter() - t0 > time_limit:
            width = 1
    order: list[int] = []
    path = beam[0][4]
    while path is not None:
        order.append(path[0])
        path = path[1]
    order.reverse()
    return order

"""Local improvement of an order: re-solve windows around its peak exactly.

The tasks executed before a window and the tasks after it are fixed, so the resident bytes
outside the window do not depend on the order inside it; the least peak of the window's
own steps is found by the exact best-first search of :mod:`thrifty.memory.order.exact`
between the two executed sets, on a lattice of the window's tasks alone
(:meth:`~thrifty.memory.order.exact.Lattice.window`: sets of a few tasks instead of sets of
the whole graph, the same search). Windows that contain a peak step are re-solved, growing
when no window of the current size helps, until the peak meets the lower bound, no window
helps, or time runs out. This is the window-based refinement used after a heuristic, as in
the "divide and conquer" step of Serenity (Ahn et al., MLSys 2020).

Example
-------
>>> from thrifty.memory.order.generate import random_layered
>>> from thrifty.memory.order.heuristics import bfs
>>> c = Compact.of(random_layered(60, width=6, seed=2))
>>> start = bfs(c)
>>> better = improve_order(c, start, time_limit=5.0)
>>> c.peak_of(better) <= c.peak_of(start)
True
"""

from __future__ import annotations

import time
from collections.abc import Callable

from thrifty.memory.order.compact import Compact
from thrifty.memory.order.exact import Lattice

__all__ = ["improve_order"]


def improve_order(c: Compact, order: list[int], lattice: Lattice | None = None,
                  window: int = 10, max_window: int = 40, time_limit: float = 2.0,
                  lower_bound: int | None = None) -> list[int]:
    """A topological order whose peak is at most that of ``order``.

    Parameters
    ----------
    c, order:
        The compact graph and a topological order of it.
    lattice:
        A :class:`~thrifty.memory.order.exact.Lattice` of ``c``, when already built.
    window, max_window:
        The first and largest number of consecutive tasks re-solved at once.
    time_limit:
        Seconds to spend.
    lower_bound:
        Stop when the peak reaches it (default: :meth:`Compact.lower_bound`).
    """
    deadline = time.perf_counter() + time_limit
    n = c.n
    if n < 2:
        return list(order)
    lat = lattice if lattice is not None else Lattice(c)
    lb = c.lower_bound(lat.bounds) if lower_bound is None else lower_bound
    order = list(order)
    during, after = c.profile(order)  # kept up to date window by window
    pos = [0] * n
    for i, t in enumerate(order):
        pos[t] = i
    w = window
    while time.perf_counter() < deadline:
        peak = max(during)
        if peak <= max(lb, c.initial):
            break
        helped = False
        for k in (k for k, d in enumerate(during) if d == peak):
            for lo in (k - w + 1, k - w // 2, k):
                lo = max(0, min(lo, n - w))
                hi = min(n, lo + w)
                sub, win = lat.window(order[lo:hi], _ran_before(pos, lo))
                mem = after[lo - 1] if lo > 0 else c.start_mem
                found, _, _, _, _ = sub.search(0, (1 << len(win)) - 1, mem, 0, peak,
                                               deadline, 50_000)
                if found is not None:
                    order[lo:hi] = [win[i] for i in found]
                    during[lo:hi], after[lo:hi] = sub.replay(0, mem, found)
                    for i in range(lo, hi):
                        pos[order[i]] = i
                    helped = True
                    break
                if time.perf_counter() > deadline:
                    return order
            if helped:
                break
        if not helped:
            if w >= max_window or w >= n:
                break
            w = min(2 * w, max_window)
    return order


def _ran_before(pos: list[int], lo: int) -> Callable[[int], bool]:
    """Whether a task comes before step ``lo`` of the order (``pos``: each task's step)."""
    return lambda t: pos[t] < lo

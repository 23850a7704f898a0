"""Budgets: parsing them, a proven lower bound, and the smallest budget found feasible.

**Lower bound.** In every plan (ARCHITECTURE.md memory model, as replayed by
:func:`thrifty.memory.simulate`):

1. the inputs are all resident at the start, so the peak is at least their total size;
2. every task ``t`` runs at least once, and while it runs its reads are resident and its
   writes and workspace allocated, so the peak is at least
   ``size(reads ∪ writes) + workspace``, plus the inputs that are results (they can be
   neither freed nor recomputed, and are resident from the start to the end);
3. every result is resident at the end; each became resident at a compute or a prefetch,
   and only frees follow the last of those, so the peak is at least the total size of the
   results.

:func:`lower_bound` is the largest of these. :func:`smallest_feasible` searches for the
smallest budget at which a planner finds a plan (bisection between the lower bound and the
best schedule's peak, which is always feasible); when a plan is found at the lower bound
itself, that budget is proven smallest.
"""

from __future__ import annotations

import time
from collections.abc import Hashable

from thrifty.graph.taskgraph import TaskGraph
from thrifty.sizes import parse_budget  # the one reading of budgets, re-exported here

__all__ = ["best_order", "lower_bound", "parse_budget", "smallest_feasible"]


def lower_bound(g: TaskGraph) -> int:
    """A budget no plan of ``g`` can go below (see the module docstring for the proof).

    Example
    -------
    >>> from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
    >>> g = TaskGraph([Task("a", writes=("x",)), Task("b", reads=("x",), writes=("y",))],
    ...               [Buffer("x", 8, "a"), Buffer("y", 4, "b")])
    >>> lower_bound(g)
    12
    """
    size = {b: buf.size for b, buf in g.buffers.items()}
    inputs = [b for b, buf in g.buffers.items() if buf.producer is None]
    pinned = [b for b in inputs if b in g.results]
    pinned_total = sum(size[b] for b in pinned)
    bound = max(sum(size[b] for b in inputs), sum(size[b] for b in g.results))
    for t in g.tasks.values():
        touched = set(t.reads) | set(t.writes)
        need = sum(size[b] for b in touched) + t.workspace
        need += pinned_total - sum(size[b] for b in pinned if b in touched)
        bound = max(bound, need)
    return bound


def best_order(g: TaskGraph, time_limit: float = 10.0) -> tuple[Hashable, ...]:
    """The order of the least-peak schedule found by :func:`thrifty.memory.schedule`."""
    try:
        from thrifty.memory.schedule import schedule
    except ImportError:  # pragma: no cover - the scheduler ships with the package
        return g.order
    return tuple(schedule(g, time_limit=time_limit).order)


def smallest_feasible(g: TaskGraph, bandwidth: float | None, recompute: bool,
                      order: tuple[Hashable, ...] | None = None,
                      iterations: int = 24, time_limit: float = 30.0) -> tuple[int, bool]:
    """The smallest budget at which eviction planning finds a plan, and whether it is proven.

    Returns ``(budget, proven)``; ``proven`` is ``True`` when that budget equals
    :func:`lower_bound`. The bisection stops after ``iterations`` steps, or once
    ``time_limit`` seconds have passed, with the smallest budget found feasible so far.
    """
    from thrifty.memory.budget.evict import NoRoom, Policy, evict_plan
    from thrifty.memory.budget.replay import estimate

    order = order if order is not None else best_order(g)
    allp = evict_plan(g, order, 2**62, None, Policy(recompute=False, offload=False,
                                                     evict=False))
    hi = estimate(g, allp.steps, None).peak
    lb = lower_bound(g)
    if not recompute and bandwidth is None:
        return hi, hi == lb
    pol = Policy(recompute=recompute, offload=bandwidth is not None)

    def ok(budget: int) -> bool:
        try:
            evict_plan(g, order, budget, bandwidth, pol)
        except NoRoom:
            return False
        return True

    deadline = time.perf_counter() + time_limit
    if ok(lb):
        return lb, True
    lo = lb
    for _ in range(iterations):
        if hi - lo <= max(1, hi // 10_000) or time.perf_counter() > deadline:
            break
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi, False

"""Budgets: parsing them, a proven lower bound, and the smallest budget found feasible.

**Lower bound.** In every plan (ARCHITECTURE.md memory model, as replayed by
:func:`thrifty.memory.simulate`):

1. the inputs are all resident at the start, so the peak is at least their total size;
2. every task ``t`` runs at least once, and while it runs its reads are resident and its
   writes and workspace allocated, so the peak is at least
   ``size(reads ∪ writes) + workspace``; without offloading, plus the inputs that are
   results (they can be neither freed nor recomputed, so they are resident from the start
   to the end; with offloading they may wait in host memory);
3. every result is resident at the end; each became resident at a compute or a prefetch,
   and only frees follow the last of those, so the peak is at least the total size of the
   results.

:func:`lower_bound` is the largest of these. :func:`smallest_feasible` searches for the
smallest budget at which a planner finds a plan (bisection between the lower bound and the
best schedule's peak, which is always feasible); when a plan is found at the lower bound
itself, that budget is proven smallest, and so is the peak of a schedule proven optimal
when neither recompute nor offload is allowed (the plans are then the schedules). The
eviction planner is not monotone in the budget (it may fail at a budget and succeed at a
smaller one), so the bisection's answer is the smallest budget *found* feasible, and the
plan found there is kept: :func:`thrifty.memory.budget.plan` returns it rather than refuse
a larger budget.
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from dataclasses import replace

from thrifty.graph.taskgraph import TaskGraph
from thrifty.memory.model import Plan
from thrifty.sizes import parse_budget  # the one reading of budgets, re-exported here

__all__ = ["best_order", "lower_bound", "parse_budget", "search_smallest", "smallest_feasible"]


def lower_bound(g: TaskGraph, offload: bool = True) -> int:
    """A budget no plan of ``g`` can go below (see the module docstring for the proof).

    ``offload=False`` bounds the plans that offload nothing (a larger bound when some
    inputs are results).

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
    pinned = [] if offload else [b for b in inputs if b in g.results]
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

    Returns ``(budget, proven)``; ``proven`` is ``True`` when no plan fits a smaller budget:
    the budget equals :func:`lower_bound`, or (without recompute and offload, where the
    plans are the schedules) it is the peak of a schedule proven optimal. The bisection
    stops after ``iterations`` steps, or once ``time_limit`` seconds have passed, with the
    smallest budget found feasible so far.
    """
    small, proven, _ = search_smallest(g, bandwidth, recompute, order, iterations, time_limit)
    return small, proven


def search_smallest(g: TaskGraph, bandwidth: float | None, recompute: bool,
                    order: tuple[Hashable, ...] | None = None, iterations: int = 24,
                    time_limit: float = 30.0, order_optimal: bool = False,
                    no_offload: frozenset[Hashable] = frozenset()
                    ) -> tuple[int, bool, Plan]:
    """:func:`smallest_feasible`, with the plan found at that budget. ``order_optimal``
    says that ``order`` is a schedule proven of least peak; ``no_offload`` names buffers
    that are never offloaded (they may still be freed and recomputed)."""
    from thrifty.memory.budget.evict import NoRoom, Policy, evict_plan
    from thrifty.memory.budget.replay import estimate

    proven_order = order_optimal and order is not None
    if order is None:
        from thrifty.memory.schedule import schedule

        res = schedule(g, time_limit=min(time_limit, 10.0))
        order, proven_order = res.order, res.optimal
    allp = evict_plan(g, order, 2**62, None, Policy(recompute=False, offload=False,
                                                     evict=False))
    hi = estimate(g, allp.steps, None).peak
    best = replace(allp, budget=hi)
    lb = lower_bound(g, offload=bandwidth is not None)
    if not recompute and bandwidth is None:
        return hi, hi <= lb or proven_order, best
    pol = Policy(recompute=recompute, offload=bandwidth is not None,
                 force=dict.fromkeys(no_offload, "free"))

    def attempt(budget: int) -> Plan | None:
        try:
            p = evict_plan(g, order, budget, bandwidth, pol)
        except NoRoom:
            return None
        return p if estimate(g, p.steps, bandwidth).peak <= budget else None

    deadline = time.perf_counter() + time_limit
    p = attempt(lb)
    if p is not None:
        return lb, True, p
    lo = lb
    for _ in range(iterations):
        if hi - lo <= max(1, hi // 10_000) or time.perf_counter() > deadline:
            break
        mid = (lo + hi) // 2
        p = attempt(mid)
        if p is not None:
            hi, best = mid, p
        else:
            lo = mid
    return hi, False, best

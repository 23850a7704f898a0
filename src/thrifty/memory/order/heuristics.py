"""Baseline and heuristic task orders: the file's own, dask.order, DFS, BFS and greedy ones.

Every function takes a :class:`~thrifty.memory.order.compact.Compact` and returns a
topological order of task numbers. The greedy orders follow the memory-aware scheduling of
PyTorch inductor (``torch/_inductor/memory.py``): among the ready tasks, run the one that
adds the least memory. The "reverse post-order" walk is the classic stack-based evaluation
order: a task is scheduled once all its producers were, visiting the costliest producer
subtree first (Sethi-Ullman style).

Example
-------
>>> from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
>>> g = TaskGraph([Task("a", writes=("x",)), Task("b", reads=("x",), writes=("y",))],
...               [Buffer("x", 8, "a"), Buffer("y", 4, "b")])
>>> bfs(Compact.of(g))
[0, 1]
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from typing import Any

from thrifty.memory.order.compact import Compact

__all__ = ["BASELINES", "BEAM_MAX_TASKS", "HEURISTICS", "beam", "bfs", "dask_order", "dfs",
           "file_order", "greedy_delta", "greedy_peak", "postorder"]


def file_order(c: Compact) -> list[int]:
    """The graph's own order (task numbers follow ``TaskGraph.order``)."""
    return list(range(c.n))


def _kahn(c: Compact, pop: Callable[[deque[int]], int]) -> list[int]:
    indeg = [len(p) for p in c.preds]
    ready = deque(t for t in range(c.n) if indeg[t] == 0)
    order: list[int] = []
    while ready:
        t = pop(ready)
        order.append(t)
        for s in c.succs[t]:
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    return order


def bfs(c: Compact) -> list[int]:
    """Breadth-first: ready tasks run first in, first out."""
    return _kahn(c, deque.popleft)


def dfs(c: Compact) -> list[int]:
    """Depth-first: the most recently readied task runs next (Kahn's algorithm with a stack)."""
    # Push roots in reverse so the first root runs first.
    indeg = [len(p) for p in c.preds]
    stack = [t for t in range(c.n) if indeg[t] == 0]
    stack.reverse()
    order: list[int] = []
    while stack:
        t = stack.pop()
        order.append(t)
        newly = []
        for s in c.succs[t]:
            indeg[s] -= 1
            if indeg[s] == 0:
                newly.append(s)
        stack.extend(reversed(newly))
    return order


def postorder(c: Compact) -> list[int]:
    """Demand-driven: from each sink, schedule producers first, the heaviest subtree first.

    A producer's weight is the largest self cost in its ancestry (computed once, in
    topological order), so the walk enters the branch with the highest hill first, as in
    Sethi-Ullman numbering for expression trees.
    """
    weight = [0] * c.n
    for t in range(c.n):  # task numbers are topological
        w = c.self_cost(t)
        for p in c.preds[t]:
            if weight[p] > w:
                w = weight[p]
        weight[t] = w
    done = [False] * c.n
    order: list[int] = []
    sinks = [t for t in range(c.n) if not c.succs[t]]
    sinks.sort(key=lambda t: -weight[t])
    for root in sinks:
        stack = [(root, False)]
        while stack:
            t, expanded = stack.pop()
            if done[t]:
                continue
            if expanded:
                done[t] = True
                order.append(t)
                continue
            stack.append((t, True))
            preds = [p for p in c.preds[t] if not done[p]]
            preds.sort(key=lambda p: weight[p])  # heaviest popped first
            stack.extend((p, False) for p in preds)
    return order


def dask_order(c: Compact) -> list[int]:
    """The order dask's own scheduler would use (:func:`dask.order.order`) on this graph."""
    from dask.order import order as _dask_order

    def _noop(*args: object) -> None:
        return None

    # integer keys: their hashes, hence dask's tie-breaking, do not vary between runs
    dsk: dict[Any, Any] = {t: (_noop, *c.preds[t]) for t in range(c.n)}
    deps: dict[Any, Any] = {t: set(c.preds[t]) for t in range(c.n)}
    prio = _dask_order(dsk, dependencies=deps)
    return sorted(range(c.n), key=lambda t: int(prio[t]))


def _greedy(c: Compact, key: Callable[[int, int], tuple[int, ...]]) -> list[int]:
    """Run the ready task of least ``key(t, freed)`` next; ``freed`` = bytes t would free.

    Keys are refreshed lazily: a task's freed bytes only grow, when another reader of one
    of its inputs runs, and then a fresh heap entry is pushed.
    """
    indeg = [len(p) for p in c.preds]
    rem = [len(r) for r in c.readers]
    freed = [0] * c.n
    for t in range(c.n):
        freed[t] = sum(c.size[b] for b in c.reads[t]
                       if rem[b] == 1 and not c.result[b])
    heap = [(key(t, freed[t]), t) for t in range(c.n) if indeg[t] == 0]
    heapq.heapify(heap)
    done = [False] * c.n
    order: list[int] = []
    while heap:
        k, t = heapq.heappop(heap)
        if done[t] or k != key(t, freed[t]):
            continue
        done[t] = True
        order.append(t)
        for b in c.reads[t]:
            rem[b] -= 1
            if rem[b] == 1 and not c.result[b]:
                for r in c.readers[b]:
                    if not done[r]:
                        freed[r] += c.size[b]
                        if indeg[r] == 0:
                            heapq.heappush(heap, (key(r, freed[r]), r))
        for s in c.succs[t]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(heap, (key(s, freed[s]), s))
    return order


def greedy_delta(c: Compact) -> list[int]:
    """Least net memory change first (outputs kept minus inputs freed), then least hill."""
    return _greedy(c, lambda t, f: (c.kept[t] - f, c.out[t] + c.ws[t], t))


def greedy_peak(c: Compact) -> list[int]:
    """Least hill first (outputs + workspace while running), then least net change."""
    return _greedy(c, lambda t, f: (c.out[t] + c.ws[t], c.kept[t] - f, t))


def beam(c: Compact, time_limit: float | None = None) -> list[int]:
    """Beam search over executed sets (:mod:`thrifty.memory.order.beam`), its width by size:
    32 states up to 2,000 tasks, 8 up to 10,000, and a single state (a look-ahead greedy)
    beyond; after ``time_limit`` seconds, a single state."""
    from thrifty.memory.order.beam import beam_order

    width = 32 if c.n <= 2000 else 8 if c.n <= 10_000 else 1
    return beam_order(c, width=width, time_limit=time_limit)


BASELINES: dict[str, Callable[[Compact], list[int]]] = {
    "file": file_order,
    "dask": dask_order,
    "dfs": dfs,
    "bfs": bfs,
    "greedy": greedy_peak,
}
"""The baselines the benchmark compares against (issue: file order, dask.order, DFS, BFS,
greedy least-peak-first)."""

HEURISTICS: dict[str, Callable[[Compact], list[int]]] = {
    **BASELINES,
    "greedy_delta": greedy_delta,
    "postorder": postorder,
    "beam": beam,
}
"""Every heuristic ``schedule`` tries, keeping the best (``beam`` only up to
:data:`BEAM_MAX_TASKS` tasks)."""

BEAM_MAX_TASKS = 10_000
"""Above this many tasks ``schedule`` skips the beam search (its states are task sets)."""

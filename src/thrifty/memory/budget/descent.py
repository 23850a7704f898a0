"""Recompute-only plans by a backward search over resident sets (a reverse pebble game).

**The search.** Take any recompute-only plan (no offload) and a moment ``τ`` at which a set
``S`` of buffers is resident. Each buffer of ``S`` that is not a graph input was last
computed before ``τ`` and stayed resident since (without offload, a freed buffer comes back
only by a compute). Let ``u`` be the producer of the one computed last. While that compute
of ``u`` ran, every other buffer of ``S`` was already resident (an input has been resident
since the start: once freed it never comes back), and so were ``u``'s reads: the set
``S' = (S - writes(u)) ∪ reads(u)`` was resident, and memory was at least
``size(S') + size(writes(u)) + workspace(u)``. Repeating from ``S'`` at that earlier moment
gives a *descent* ``S_0 → S_1 → …`` that ends at a set of graph inputs, every step's cost a
lower bound of the plan's memory at that step. Results add two rules, because a result once
computed stays resident to the end: a result in ``reads(u)`` or ``writes(u)`` must be in
``S``, and a result written by ``u`` may have been resident before (``u`` recomputed with it
resident: it stays in ``S'``) or not (its only compute).

Starting from ``S_0`` = the results at the end of the plan, every plan of peak ``<= B``
gives a descent whose steps all cost ``<= B`` (and the inputs, resident at the start, fit
``B``). So when an exhaustive search over descents finds none, **no recompute-only plan fits
B** (proven: :attr:`Descent.status` is ``"infeasible"``).

Conversely, a descent is a plan: run its steps' tasks in reverse (the forward order), freeing
after each what the rest no longer reads. Its peak is at most the largest step cost. The
plan computes every task only when every task leads to a result (each ancestor of a result
is stepped over); otherwise :func:`descent_plan` finds no plan (the proof above still holds).

The search is a depth-first search over sets, each visited once, stepping first over the
producer of the buffer made latest in a topological order (the reverse of a schedule;
recomputation appears where a set must take back a buffer it gave up). It stops at a time
limit or a number of sets, with ``status="unknown"``.
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from dataclasses import dataclass

from thrifty.graph.taskgraph import TaskGraph
from thrifty.memory.model import Plan

__all__ = ["Descent", "descend", "descent_bound", "descent_plan"]

#: Bytes of set masks the search may hold (it stops with ``status="unknown"`` beyond).
MAX_MASK_BYTES = 200 * 2**20


@dataclass(frozen=True, slots=True)
class Descent:
    """What :func:`descend` found.

    ``status``: ``"found"`` (a descent within the budget: ``order`` is the forward order of
    its computes), ``"infeasible"`` (proven: no recompute-only plan fits the budget) or
    ``"unknown"`` (the search stopped at its limits). ``sets``: sets visited.
    """

    status: str
    order: tuple[Hashable, ...]
    sets: int


def _bits(m: int) -> list[int]:
    out = []
    while m:
        low = m & -m
        out.append(low.bit_length() - 1)
        m ^= low
    return out


class _Masks:
    """The graph as bit masks: buffers numbered in listing order."""

    def __init__(self, g: TaskGraph) -> None:
        self.bufs = list(g.buffers)
        bix = {b: i for i, b in enumerate(self.bufs)}
        self.tasks = list(g.tasks)
        tix = {t: i for i, t in enumerate(self.tasks)}
        self.size = [g.buffers[b].size for b in self.bufs]
        ts = [g.tasks[t] for t in self.tasks]
        self.reads = [sorted({bix[b] for b in t.reads}) for t in ts]
        self.writes = [sorted({bix[b] for b in t.writes}) for t in ts]
        self.rmask = [sum(1 << i for i in r) for r in self.reads]
        self.wmask = [sum(1 << i for i in w) for w in self.writes]
        self.extra = [sum(self.size[i] for i in w) + t.workspace
                      for w, t in zip(self.writes, ts, strict=True)]
        self.prod = [-1 if g.buffers[b].producer is None else tix[g.buffers[b].producer]
                     for b in self.bufs]
        self.inputs = sum(1 << i for i, p in enumerate(self.prod) if p < 0)
        self.results = sum(1 << bix[b] for b in g.results)
        level = [0] * len(self.bufs)
        self.level = [0] * len(self.tasks)
        for t in g.order:  # topological
            k = tix[t]
            lv = 1 + max((level[i] for i in self.reads[k]), default=0)
            self.level[k] = lv
            for i in self.writes[k]:
                level[i] = lv

    def mem(self, m: int) -> int:
        return sum(self.size[i] for i in _bits(m))

    def steps(self, m: int, ms: int, budget: int, rules: bool = True
              ) -> list[tuple[tuple[int, int, int], int, int, int]]:
        """The descent steps from set ``m`` (of ``ms`` bytes) that cost at most ``budget``:
        ``(sort key, task, new set, its bytes)``, the step to explore first last.
        ``rules=False`` drops the rules of results (for sets that need not hold every
        resident result: a relaxation, each step's cost still a lower bound)."""
        out = []
        size, prod, results = self.size, self.prod, self.results
        seen = set()
        for i in _bits(m & ~self.inputs):
            u = prod[i]
            if u in seen:
                continue
            seen.add(u)
            rm, wm = self.rmask[u], self.wmask[u]
            if rules and (rm | wm) & results & ~m:
                continue  # a result computed here would be resident at the end, so in m
            s = ms + self.extra[u]
            for j in self.writes[u]:
                if m >> j & 1:
                    s -= size[j]
            if s > budget:
                continue
            for j in self.reads[u]:
                if not m >> j & 1:
                    s += size[j]
            if s > budget:
                continue
            new = (m & ~wm) | rm
            s -= self.extra[u]
            out.append(((0, self.level[u], -s), u, new, s))
            if rules and wm & results:  # results of u resident before it ran, or not
                keep = _bits(wm & results)
                for k in range(1, 1 << len(keep)):
                    kept = sum(1 << keep[j] for j in range(len(keep)) if k >> j & 1)
                    sk = s + self.mem(kept)
                    if sk + self.extra[u] <= budget:
                        out.append(((-k, self.level[u], -sk), u, new | kept, sk))
        out.sort()
        return out


def descend(g: TaskGraph, budget: int, time_limit: float = 10.0,
            max_sets: int | None = None) -> Descent:
    """Search the descents of ``g`` within ``budget`` bytes (see the module docstring).

    ``max_sets`` bounds the sets visited (default: as many as :data:`MAX_MASK_BYTES` holds).

    Example
    -------
    >>> from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
    >>> g = TaskGraph([Task("a", writes=("x",)), Task("b", reads=("x",), writes=("y",))],
    ...               [Buffer("x", 8, "a"), Buffer("y", 4, "b")])
    >>> descend(g, 12).status, descend(g, 12).order, descend(g, 11).status
    ('found', ('a', 'b'), 'infeasible')
    """
    x = _Masks(g)
    if max_sets is None:
        max_sets = max(1000, MAX_MASK_BYTES // (len(x.bufs) // 8 + 64))
    if x.mem(x.inputs) > budget:
        return Descent("infeasible", (), 1)
    root = x.results
    parent: dict[int, tuple[int, int] | None] = {root: None}
    stack = [(root, x.mem(root))]
    deadline = time.perf_counter() + time_limit
    while stack:
        m, ms = stack.pop()
        if not m & ~x.inputs:
            order = []
            while (step := parent[m]) is not None:
                m, u = step
                order.append(x.tasks[u])
            return Descent("found", tuple(order), len(parent))
        for _, u, new, s in x.steps(m, ms, budget):
            if new not in parent:
                parent[new] = (m, u)
                stack.append((new, s))
        if len(parent) > max_sets or time.perf_counter() > deadline:
            return Descent("unknown", (), len(parent))
    return Descent("infeasible", (), len(parent))


def ancestors_of_results(g: TaskGraph) -> set[Hashable]:
    """The tasks some result depends on (a plan from a descent computes exactly these)."""
    seen: set[Hashable] = set()
    todo = [g.buffers[b].producer for b in g.results if g.buffers[b].producer is not None]
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        todo.extend(g.buffers[b].producer for b in g.tasks[t].reads
                    if g.buffers[b].producer is not None)
    return seen


def steps_of(g: TaskGraph, order: tuple[Hashable, ...]) -> list[tuple[str, Hashable]]:
    """The plan steps that run ``order`` (each task's reads resident when it runs, as in a
    descent) and free every buffer that is not a result right after its last use before
    it is written again or the plan ends; unread inputs are freed first."""
    needed: dict[Hashable, bool] = {}  # looking forward: read before written again?
    frees: list[list[Hashable]] = [[] for _ in order]
    for i in range(len(order) - 1, -1, -1):
        t = g.tasks[order[i]]
        for b in dict.fromkeys((*t.writes, *t.reads)):
            if b not in g.results and not needed.get(b, False):
                frees[i].append(b)
        for b in t.writes:
            needed[b] = False
        for b in t.reads:
            needed[b] = True
    steps: list[tuple[str, Hashable]] = [
        ("free", b) for b, buf in g.buffers.items()
        if buf.producer is None and b not in g.results and not needed.get(b, False)]
    for tid, fr in zip(order, frees, strict=True):
        steps.append(("compute", tid))
        steps.extend(("free", b) for b in fr)
    return steps


def descent_plan(g: TaskGraph, budget: int, time_limit: float = 10.0) -> tuple[Plan | None,
                                                                              Descent]:
    """A recompute-only plan of ``g`` within ``budget`` from :func:`descend`, or ``None``
    (with the search's outcome: ``"infeasible"`` is a proof that no plan exists).

    ``None`` also when some task leads to no result (a descent does not compute it)."""
    d = descend(g, budget, time_limit)
    if d.status != "found" or len(ancestors_of_results(g)) < len(g.tasks):
        return None, d
    info = {"descent_sets": d.sets, "optimal": False}
    return Plan.from_steps(steps_of(g, d.order), budget=budget, method="descent",
                           info=info), d


def descent_bound(g: TaskGraph, depth: int = 2) -> int:
    """A lower bound of the peak of every plan of ``g`` that offloads nothing.

    While any task ``v`` runs, its reads ``S`` are resident and its outputs and workspace
    allocated. Stepping back from ``S`` as in the module docstring (the rules of results
    dropped: ``S`` need not hold every resident result), the compute of the buffer of ``S``
    made last needed ``S'`` resident and its own outputs allocated; the least over the
    choices of that buffer, of the largest cost over ``depth`` such steps, bounds the peak
    of every plan. The bound is the largest over every task (and the inputs at the start,
    the results at the end, as in :func:`~thrifty.memory.budget.lower_bound`).

    Example
    -------
    >>> from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
    >>> g = TaskGraph([Task("t0", writes=("a",)), Task("t1", reads=("a",), writes=("b",)),
    ...                Task("t2", reads=("a",), writes=("c",)),
    ...                Task("t3", reads=("b", "c"), writes=("d",))],
    ...               [Buffer("a", 10, "t0"), Buffer("b", 10, "t1"), Buffer("c", 10, "t2"),
    ...                Buffer("d", 1, "t3")])
    >>> descent_bound(g, depth=0), descent_bound(g, depth=1)
    (21, 30)
    """
    x = _Masks(g)
    memo: dict[tuple[int, int], int] = {}

    def bound(m: int, ms: int, d: int) -> int:
        if d == 0 or not m & ~x.inputs:
            return ms
        got = memo.get((m, d))
        if got is None:
            got = min((max(s + x.extra[u], bound(new, s, d - 1))
                       for _, u, new, s in x.steps(m, ms, 1 << 62, rules=False)), default=ms)
            got = memo[(m, d)] = max(ms, got)
        return got

    best = max(x.mem(x.inputs), x.mem(x.results))
    for u in range(len(x.tasks)):
        m = x.rmask[u]
        ms = x.mem(m)
        best = max(best, ms + x.extra[u], bound(m, ms, depth))
    return best

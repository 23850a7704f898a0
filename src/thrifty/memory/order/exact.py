"""Exact minimum-peak order by best-first search over executed sets (Serenity-style DP).

The state of an eager-free run is the set ``S`` of tasks already executed (a down-set of
the DAG): the resident bytes ``mem(S)`` depend on ``S`` only. The least peak of a complete
order is a minimax path from the empty set to the full set in the lattice of down-sets,
where moving from ``S`` to ``S + t`` costs ``mem(S) + out(t) + workspace(t)``. Following
Serenity (Ahn et al., "Ordering Chaos: Memory-Aware Scheduling of Irregular Neural Networks
for Edge Devices", MLSys 2020) the search memoises the best peak per executed set and
prunes by dominance; here it is a best-first (A*-like, for a bottleneck cost) search:

* priority ``f(S) = max(peak so far, mem(S), largest bound of a task not yet run)`` (a
  task's bound counts what is in use while it runs in every order:
  :meth:`~thrifty.memory.order.compact.Compact.task_bounds`), a lower bound on every
  completion through ``S``; the first complete set popped is
  optimal, and when the time limit stops the search the least ``f`` still queued is a
  proven lower bound on the optimum;
* states whose ``f`` reaches a known upper bound (the best heuristic order) are dropped:
  when the search then runs dry, that heuristic order is proven optimal;
* **dominance**: if a ready task ``t`` does not raise the peak so far and does not
  increase the resident bytes (``mem(S + t) <= mem(S)``), some optimal completion of ``S``
  runs ``t`` first (moving ``t`` to the front never increases any later step's memory),
  so only that move is expanded. This collapses chains and other memory-neutral steps,
  a peak-preserving reduction in the sense of Fradet, Girault and Honorat (LCTES 2023).

Example
-------
>>> from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
>>> g = TaskGraph([Task("a", writes=("x",)), Task("b", reads=("x",), writes=("y",))],
...               [Buffer("x", 8, "a"), Buffer("y", 4, "b")])
>>> r = exact_order(Compact.of(g))
>>> r.order, r.peak, r.optimal
([0, 1], 12, True)
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

from thrifty.memory.order.compact import Compact

__all__ = ["ExactResult", "Lattice", "exact_order"]


@dataclass(frozen=True, slots=True)
class ExactResult:
    """The search's outcome: an order (or ``None``), its peak, and a proven lower bound.

    ``optimal`` is True when the search finished: then ``order`` has the least peak, or is
    ``None`` when no order beats the given upper bound (which is then optimal).
    """

    order: list[int] | None
    peak: int | None
    lower_bound: int
    optimal: bool
    states: int


class Lattice:
    """The lattice of executed sets of a graph, searched best-first between two sets.

    Holds the bit masks (predecessors of each task, readers of each buffer) and the per-task
    bounds once, so that many searches (whole graph, or windows of an order in
    :mod:`thrifty.memory.order.local`) share them.
    """

    def __init__(self, c: Compact, task_bounds: list[int] | None = None,
                 with_bounds: bool = True) -> None:
        n = c.n
        self.c = c
        self.hill = [c.out[t] + c.ws[t] for t in range(n)]
        if task_bounds is None:
            task_bounds = c.task_bounds() if with_bounds else [0] * n
        self.bounds = task_bounds
        self.by_bound = sorted(range(n), key=lambda t: -self.bounds[t])

    @cached_property
    def pred_mask(self) -> list[int]:
        """Per task, the set of its predecessors (built when a search first needs it: the
        windows of a large graph are searched on their own lattices, :meth:`window`)."""
        c = self.c
        masks = [0] * c.n
        for t in range(c.n):
            for p in c.preds[t]:
                masks[t] |= 1 << p
        return masks

    @cached_property
    def reader_mask(self) -> list[int]:
        """Per buffer, the set of the tasks that read it."""
        c = self.c
        masks = [0] * len(c.size)
        for b in range(len(c.size)):
            for r in c.readers[b]:
                masks[b] |= 1 << r
        return masks

    def moves(self, v: int, mem: int, s: int, ready: int) -> list[tuple[int, int, int, int]]:
        """The moves from a state (peak so far ``v``, bytes resident ``mem``, executed set
        ``s``, ready set ``ready``): ``(task, peak so far, resident after, executed set)``
        per ready task. A move that raises neither the peak nor the resident bytes dominates
        every other and is returned alone."""
        c, hill, reader_mask = self.c, self.hill, self.reader_mask
        size, result, reads, kept = c.size, c.result, c.reads, c.kept
        moves = []
        r = ready
        while r:
            low = r & -r
            t = low.bit_length() - 1
            r ^= low
            run = mem + hill[t]
            nv = v if run <= v else run
            nm = mem + kept[t]
            ns = s | low
            for b in reads[t]:
                if not result[b] and reader_mask[b] & ~ns == 0:
                    nm -= size[b]
            if nv == v and nm <= mem:
                return [(t, nv, nm, ns)]
            moves.append((t, nv, nm, ns))
        return moves

    def window(self, tasks: Sequence[int], ran: Callable[[int], bool]
               ) -> tuple[Lattice, list[int]]:
        """The lattice of re-ordering ``tasks`` alone, numbered ``0..len(tasks)-1``.

        ``tasks`` are a window of an order: each of their predecessors ran before them
        (``ran(t)``) or is one of them. Sets of the window are then small integers instead
        of sets of the whole graph. A buffer read by a task that runs after the window
        stays resident (a result, for the window); one whose other readers all ran before
        is freed by its last reader in the window, as in the whole graph. The window's
        view lists no writes (the search needs only ``out`` and ``kept``); its searches
        take the same steps as this lattice's between the same sets (same bounds, same
        tie-breaking: the numbering keeps the tasks' order). Returns the window's lattice
        and the task of each of its numbers.
        """
        c = self.c
        win = sorted(tasks)
        local = {t: i for i, t in enumerate(win)}
        bix: dict[int, int] = {}
        size: list[int] = []
        readers: list[tuple[int, ...]] = []
        stays: list[bool] = []
        reads = []
        for t in win:
            rd = []
            for b in c.reads[t]:
                j = bix.get(b)
                if j is None:
                    j = bix[b] = len(size)
                    size.append(c.size[b])
                    readers.append(tuple(local[r] for r in c.readers[b] if r in local))
                    stays.append(c.result[b] or any(r not in local and not ran(r)
                                                    for r in c.readers[b]))
                rd.append(j)
            reads.append(tuple(rd))
        sub = Compact(
            ids=tuple(win), reads=tuple(reads), writes=tuple(() for _ in win),
            out=tuple(c.out[t] for t in win), kept=tuple(c.kept[t] for t in win),
            ws=tuple(c.ws[t] for t in win),
            preds=tuple(tuple(local[p] for p in c.preds[t] if p in local) for t in win),
            succs=tuple(tuple(local[q] for q in c.succs[t] if q in local) for t in win),
            size=tuple(size), producer=tuple(-1 for _ in size), readers=tuple(readers),
            result=tuple(stays), initial=0, start_mem=0)
        return Lattice(sub, [self.bounds[t] for t in win]), win

    def _todo(self, span: int) -> list[int]:
        """The tasks of the set ``span``, highest bound first (ties: lower number first)."""
        if span.bit_count() * 64 > self.c.n:  # many: one pass over all tasks
            return [t for t in self.by_bound if (span >> t) & 1]
        todo = []
        while span:  # few (a window): their bits only
            low = span & -span
            todo.append(low.bit_length() - 1)
            span ^= low
        bounds = self.bounds
        todo.sort(key=lambda t: (-bounds[t], t))
        return todo

    def replay(self, s: int, mem: int, tasks: list[int]) -> tuple[list[int], list[int]]:
        """Bytes in use during each of ``tasks`` and resident after it, run in this order
        from executed set ``s`` with ``mem`` bytes resident (the steps of
        :meth:`~thrifty.memory.order.compact.Compact.profile`)."""
        c, hill, reader_mask = self.c, self.hill, self.reader_mask
        size, result, reads, kept = c.size, c.result, c.reads, c.kept
        during, after = [], []
        for t in tasks:
            during.append(mem + hill[t])
            s |= 1 << t
            mem += kept[t]
            for b in reads[t]:
                if not result[b] and reader_mask[b] & ~s == 0:
                    mem -= size[b]
            after.append(mem)
        return during, after

    def search(self, start: int, goal: int, start_mem: int, start_value: int,
               upper_bound: int | None, deadline: float, max_states: int
               ) -> tuple[list[int] | None, int | None, int, bool, int]:
        """Least-peak way from executed set ``start`` to ``goal`` (a superset).

        Returns ``(tasks run, peak over them, lower bound, finished, states)``; the tasks
        are ``None`` when the search stopped early or nothing beats ``upper_bound``.
        """
        c, bounds, pred_mask = self.c, self.bounds, self.pred_mask
        todo = self._todo(goal & ~start)

        def rest_bound(s: int) -> int:
            for t in todo:
                if not (s >> t) & 1:
                    return bounds[t]
            return 0

        ready0 = 0
        for t in todo:
            if pred_mask[t] & ~start == 0:
                ready0 |= 1 << t
        ub = upper_bound
        best: dict[int, int] = {start: start_value}
        parent: dict[int, tuple[int, int]] = {}
        f0 = max(start_value, start_mem if start != goal else 0, rest_bound(start))
        heap = [(f0, 0, start, start_value, start_mem, ready0)]
        pops = 0
        while heap:
            f, _, s, v, mem, ready = heapq.heappop(heap)
            if v > best[s]:
                continue  # a better way to this executed set was found after this push
            if ub is not None and f >= ub:
                break
            if s == goal:
                order = []
                while s != start:
                    s, t = parent[s]
                    order.append(t)
                order.reverse()
                return order, v, v, True, len(best)
            pops += 1
            if pops % 256 == 0 and (time.perf_counter() > deadline or len(best) > max_states):
                return None, None, f, False, len(best)
            for t, nv, nm, ns in self.moves(v, mem, s, ready):
                old = best.get(ns)
                if old is not None and old <= nv:
                    continue
                nf = max(nv, nm if ns != goal else 0, rest_bound(ns))
                if ub is not None and nf >= ub:
                    continue
                nready = ready & ~(1 << t)
                for q in c.succs[t]:
                    if (goal >> q) & 1 and pred_mask[q] & ~ns == 0:
                        nready |= 1 << q
                best[ns] = nv
                parent[ns] = (s, t)
                heapq.heappush(heap, (nf, -ns.bit_count(), ns, nv, nm, nready))
        # Ran dry below the upper bound: nothing beats it.
        return None, None, ub if ub is not None else f0, True, len(best)


def exact_order(c: Compact, upper_bound: int | None = None, time_limit: float = 10.0,
                max_states: int = 2_000_000, task_bounds: list[int] | None = None,
                lattice: Lattice | None = None) -> ExactResult:
    """Search for an order of least peak, below ``upper_bound`` when given.

    Parameters
    ----------
    c:
        The compact graph.
    upper_bound:
        The peak of a known order: only strictly better orders are searched for.
    time_limit, max_states:
        The search stops after this many seconds or stored states, returning the best
        proven lower bound.
    task_bounds, lattice:
        :meth:`Compact.task_bounds` or the whole :class:`Lattice`, when already built.
    """
    deadline = time.perf_counter() + time_limit
    lat = lattice if lattice is not None else Lattice(c, task_bounds)
    base = c.lower_bound(lat.bounds)
    if c.n == 0:
        return ExactResult([], base, base, True, 1)
    order, peak, bound, finished, states = lat.search(
        0, (1 << c.n) - 1, c.start_mem, c.initial, upper_bound, deadline, max_states)
    return ExactResult(order, peak, max(bound, base), finished, states)

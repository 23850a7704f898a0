"""A compact integer view of a TaskGraph for the ordering algorithms, and its peak evaluator.

Tasks are numbered ``0..n-1`` in the graph's topological order and buffers ``0..m-1``; the
eager-free memory model of ARCHITECTURE.md is evaluated on these integers
(:meth:`Compact.peak_of`). This evaluator is the ordering code's own; the tests check it
against :func:`thrifty.memory.simulate`, which shares no code with it.

Example
-------
>>> from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
>>> g = TaskGraph([Task("a", writes=("x",)), Task("b", reads=("x",), writes=("y",))],
...               [Buffer("x", 8, "a"), Buffer("y", 4, "b")])
>>> c = Compact.of(g)
>>> c.peak_of([0, 1]), c.lower_bound()
(12, 12)
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.sparse import csr_array
from scipy.sparse.csgraph import breadth_first_order

from thrifty.graph.taskgraph import TaskGraph

__all__ = ["DENSE_BOUND_TASKS", "Compact"]

DENSE_BOUND_TASKS = 6000
"""Largest graph whose per-task bounds use a dense ancestor matrix (n * n bytes)."""


@dataclass(frozen=True, slots=True)
class Compact:
    """Integer arrays describing a TaskGraph (all tuples; index = task or buffer number).

    ``reads[t]`` are the distinct buffers task ``t`` reads; ``writes[t]`` the buffers it
    writes; ``out[t]`` their total size; ``kept[t]`` the size of those that outlive ``t``
    (read later, or results); ``ws[t]`` its workspace; ``preds``/``succs`` task adjacency.
    ``nreaders[b]`` counts the distinct tasks that read buffer ``b``; ``result[b]`` says
    whether it stays to the end; ``initial`` is the bytes resident at the start and
    ``start_mem`` the bytes left once unread, non-result inputs are dropped.
    """

    ids: tuple[Hashable, ...]
    reads: tuple[tuple[int, ...], ...]
    writes: tuple[tuple[int, ...], ...]
    out: tuple[int, ...]
    kept: tuple[int, ...]
    ws: tuple[int, ...]
    preds: tuple[tuple[int, ...], ...]
    succs: tuple[tuple[int, ...], ...]
    size: tuple[int, ...]
    producer: tuple[int, ...]
    readers: tuple[tuple[int, ...], ...]
    result: tuple[bool, ...]
    initial: int
    start_mem: int

    @staticmethod
    def of(g: TaskGraph) -> Compact:
        """Build the compact view of ``g`` (tasks in ``g.order``)."""
        ids = tuple(g.order)
        tix = {t: i for i, t in enumerate(ids)}
        bids = list(g.buffers)
        bix = {b: i for i, b in enumerate(bids)}
        size = tuple(g.buffers[b].size for b in bids)
        producer = tuple(-1 if g.buffers[b].producer is None else tix[g.buffers[b].producer]
                         for b in bids)
        readers = tuple(tuple(sorted({tix[r] for r in g.readers[b]})) for b in bids)
        result = tuple(b in g.results for b in bids)
        reads, writes, out, kept, ws, preds, succs = [], [], [], [], [], [], []
        for t in ids:
            task = g.tasks[t]
            rd = tuple(dict.fromkeys(bix[b] for b in task.reads))
            wr = tuple(bix[b] for b in task.writes)
            reads.append(rd)
            writes.append(wr)
            out.append(sum(size[b] for b in wr))
            kept.append(sum(size[b] for b in wr if readers[b] or result[b]))
            ws.append(int(task.workspace))
            preds.append(tuple(tix[p] for p in g.predecessors(t)))
            succs.append(tuple(tix[s] for s in g.successors(t)))
        initial = sum(size[b] for b in range(len(bids)) if producer[b] < 0)
        start_mem = sum(size[b] for b in range(len(bids))
                        if producer[b] < 0 and (readers[b] or result[b]))
        return Compact(ids, tuple(reads), tuple(writes), tuple(out), tuple(kept), tuple(ws),
                       tuple(preds), tuple(succs), size, producer, readers, result, initial,
                       start_mem)

    @property
    def n(self) -> int:
        return len(self.ids)

    def self_cost(self, t: int) -> int:
        """Bytes task ``t`` needs while it runs, whatever the order: reads + outputs + workspace."""
        return sum(self.size[b] for b in self.reads[t]) + self.out[t] + self.ws[t]

    def lower_bound(self, task_bounds: list[int] | None = None) -> int:
        """A peak no order can beat: bytes at start, results at the end, and the largest
        :meth:`task_bounds` entry (pass them when already computed)."""
        res = sum(s for s, r in zip(self.size, self.result) if r)
        if task_bounds is None:
            task_bounds = self.task_bounds()
        return max(self.initial, res, max(task_bounds, default=0))

    def task_bounds(self) -> list[int]:
        """Per task ``t``, bytes that are in use while ``t`` runs in *every* order.

        Those are ``t``'s reads, outputs and workspace, and every buffer that must be live
        across ``t``: produced before it (by an ancestor, or an input) and read after it
        (by a descendant) or a result made by an ancestor. Computed with a dense ancestor
        matrix for graphs of up to :data:`DENSE_BOUND_TASKS` tasks; beyond, the self cost.
        """
        n = self.n
        own = [self.self_cost(t) for t in range(n)]
        if n == 0 or n > DENSE_BOUND_TASKS:
            return own
        anc = np.zeros((n, n), dtype=bool)  # anc[t, p]: p is an ancestor of t
        for t in range(n):  # numbering is topological
            for p in self.preds[t]:
                anc[t] |= anc[p]
                anc[t, p] = True
        big = sum(self.size) >= 2**62  # exact Python integers beyond what int64 holds
        live = np.zeros(n, dtype=object if big else np.int64)
        for b, sz in enumerate(self.size):
            if sz == 0:
                continue
            p, readers = self.producer[b], self.readers[b]
            made_before = anc[:, p] if p >= 0 else np.ones(n, dtype=bool)
            if self.result[b]:
                across = made_before
            elif readers:
                across = made_before & anc[list(readers)].any(axis=0)
            else:
                continue
            live += across.astype(object) * sz if big else sz * across
        bounds = []
        for t in range(n):
            extra = 0
            for b in self.reads[t]:
                if self.result[b] or any(anc[r, t] for r in self.readers[b]):
                    continue  # already counted as live across t
                extra += self.size[b]
            bounds.append(int(live[t]) + extra + self.out[t] + self.ws[t])
        return bounds

    def task_bound(self, t: int) -> int:
        """One entry of :meth:`task_bounds`, by walking ``t``'s ancestors and descendants
        (linear time; for large graphs, where the dense matrix does not fit)."""
        anc = _reach(t, self.preds)
        desc = _reach(t, self.succs)
        total = self.out[t] + self.ws[t]
        seen: set[int] = set()
        producers = [*anc, -1]
        for p in producers:
            bufs = self.writes[p] if p >= 0 else self.inputs
            for b in bufs:
                if b in seen:
                    continue
                seen.add(b)
                if self.result[b] or any(r in desc for r in self.readers[b]):
                    total += self.size[b]
        for b in self.reads[t]:
            if b not in seen or not (self.result[b] or any(r in desc for r in self.readers[b])):
                total += self.size[b]
        return total

    def task_bounds_of(self, tasks: Sequence[int]) -> list[int]:
        """:meth:`task_bound` of each of ``tasks``, by array operations: the ancestors and
        descendants of each by scipy's breadth-first search, the buffers live across it
        by numpy masks (the sums in Python integers, exact at any size)."""
        n, m = self.n, len(self.size)
        if not tasks:
            return []
        heads = np.fromiter((s for ss in self.succs for s in ss), dtype=np.int64)
        tails = np.repeat(np.arange(n), [len(ss) for ss in self.succs])
        fwd = csr_array((np.ones(len(heads), dtype=np.int8), (tails, heads)), shape=(n, n))
        bwd = fwd.T.tocsr()
        made_by = np.array(self.producer, dtype=np.int64)
        made_by[made_by < 0] = n  # inputs: made before every task
        read_buf = np.repeat(np.arange(m), [len(r) for r in self.readers])
        read_task = np.fromiter((r for rs in self.readers for r in rs), dtype=np.int64)
        result = np.array(self.result, dtype=bool)
        bounds = []
        for t in tasks:
            anc = np.zeros(n + 1, dtype=bool)
            anc[breadth_first_order(bwd, t, return_predecessors=False)] = True
            anc[t], anc[n] = False, True
            desc = np.zeros(n, dtype=bool)
            desc[breadth_first_order(fwd, t, return_predecessors=False)] = True
            desc[t] = False
            read_after = result.copy()
            read_after[read_buf[desc[read_task]]] = True
            live = anc[made_by] & read_after
            total = self.out[t] + self.ws[t]
            total += sum(self.size[b] for b in np.flatnonzero(live).tolist())
            total += sum(self.size[b] for b in self.reads[t] if not live[b])
            bounds.append(total)
        return bounds

    @property
    def inputs(self) -> list[int]:
        """Buffers with no producer."""
        return [b for b, p in enumerate(self.producer) if p < 0]

    def profile(self, order: Sequence[int]) -> tuple[list[int], list[int]]:
        """Per step of ``order``: bytes in use while the task runs, and resident after it."""
        rem = [len(r) for r in self.readers]
        mem = self.start_mem
        during: list[int] = []
        after: list[int] = []
        size, result = self.size, self.result
        for t in order:
            during.append(mem + self.out[t] + self.ws[t])
            mem += self.kept[t]
            for b in self.reads[t]:
                rem[b] -= 1
                if rem[b] == 0 and not result[b]:
                    mem -= size[b]
            after.append(mem)
        return during, after

    def peak_of(self, order: Sequence[int]) -> int:
        """The eager-free peak of a complete order of task numbers (not checked)."""
        during, _ = self.profile(order)
        return max([self.initial, *during])

    def to_ids(self, order: Sequence[int]) -> tuple[Hashable, ...]:
        return tuple(self.ids[t] for t in order)


def _reach(t: int, adj: tuple[tuple[int, ...], ...]) -> set[int]:
    """Tasks reachable from ``t`` (excluded) along ``adj``."""
    seen: set[int] = set()
    stack = list(adj[t])
    while stack:
        u = stack.pop()
        if u not in seen:
            seen.add(u)
            stack.extend(adj[u])
    return seen

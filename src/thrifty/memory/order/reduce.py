"""Graph reductions that preserve the least peak, before the exact search.

In the spirit of Fradet, Girault and Honorat ("Graph transformations for memory peak
minimization by scheduling", LCTES 2023 / ACM TECS): tasks that some optimal order runs back
to back are *merged* into one task, so that the search over executed sets
(:mod:`thrifty.memory.order.exact`) has fewer states. :func:`reduce_graph` returns the
reduced :class:`~thrifty.graph.taskgraph.TaskGraph` (an ordinary graph: every planner and
:func:`thrifty.memory.simulate` work on it) and a :class:`Reduction` whose
:meth:`~Reduction.expand` turns any order of the reduced graph into an order of the
original with the *same* peak. Both directions hold, so the two graphs have the same least
peak and a lower bound proven on one holds for the other.

Notation (the memory model of ARCHITECTURE.md, eager frees). The state of a run is the set
``S`` of tasks done; the bytes resident ``mem(S)`` depend on ``S`` alone. Running ``x`` from
``S`` uses ``mem(S) + h(x)`` where the *hill* ``h(x) = out(x) + workspace(x)``; afterwards
``mem(S + x) = mem(S) + d_x(S)`` with the *impact* ``d_x(S) = kept(x) - freed_x(S)``:
``kept(x)`` the bytes of ``x``'s outputs that are read later or are results, ``freed_x(S)``
the non-result buffers ``x`` reads whose other readers are all in ``S``. ``freed_x(S)``
grows with ``S``, so **``d_x(S)`` never increases as ``S`` grows** (the one fact all the
proofs use; it holds with several readers per buffer, several outputs per task, inputs and
results).

Rule F, *forward* (run ``t`` as soon as its last predecessor ``u`` has run). Conditions:
``u`` is a predecessor of ``t`` and every other predecessor of ``t`` is an ancestor of
``u`` (so ``t`` is ready right after ``u`` in every order);
(F1) ``dmax(t) <= 0``: ``t`` frees at least what it keeps, counting only frees that are
certain once ``t`` is ready (buffers whose other readers are all ancestors of ``t``);
(F2) ``dmax(u) + h(t) <= h(u)``: ``t`` never uses more than ``u`` did, with ``dmax(u)``
likewise counting only ``u``'s certain frees.
*Proof.* Take any order ``... u Y t ...`` and move ``t`` to just after ``u``. ``t`` then
uses ``mem(S) + d_u(S) + h(t) <= mem(S) + h(u)``, what ``u`` used (F2). Each ``y`` of ``Y``
now runs with ``t`` done: its use changes by ``d_t(S')`` for a state ``S'`` that contains
the one right after ``u``, so by ``<= dmax(t) <= 0`` (F1 and monotony). Every other step
keeps its state. The peak does not increase, so some optimal order runs ``u`` then ``t``.

Rule B, *backward* (run ``u`` as late as possible: just before its only successor ``t``).
Conditions: every reader of ``u``'s outputs is ``t``; for each non-result buffer ``b`` that
``u`` reads, either every other reader of ``b`` is an ancestor of ``t`` (``u`` frees ``b``
whenever ``t`` is ready) or one of them is ``t`` or a descendant of ``t`` (``u`` never frees
it): so ``u``'s impact just before ``t`` is one number ``D``;
(B1) ``D >= 0``: ``u`` does not reduce the bytes resident;
(B2) ``h(u) <= D + h(t)``: ``u`` never uses more than ``t`` uses after it.
*Proof.* Take any order ``... u X t ...`` and move ``u`` to just before ``t``. Each ``x`` of
``X`` now runs without ``u``: its use drops by ``d_u(S') >= D >= 0`` (``S'`` is contained
in the state just before ``t``; monotony). ``u`` uses ``mem(S) + h(u) <= mem(S) + D + h(t)``,
what ``t`` used (B2); ``t`` and the rest keep their states.

*Merging.* For the pair run back to back, the merged task ``m`` reads what ``u`` and ``t``
read (less ``u``'s outputs), writes their outputs that are read by other tasks or are
results (a buffer that only ``t`` reads, or nobody, lives and dies inside ``m``), and gets
the workspace that makes its hill the pair's: ``h(u)`` under F (``t`` uses no more),
``D + h(t)`` under B (``u`` uses no more). Every state outside the pair has the same
resident bytes, and ``m`` frees exactly what ``u`` and ``t`` freed, so the orders of the
merged graph are the orders of the original that run the pair back to back, with the same
peak. A merge whose workspace would be negative (``m``'s kept outputs exceed its hill, which
the original pair never allocated at once) is not done. Merges are repeated on the merged
graph until none applies; each preserves the least peak, so all of them do. Chains of tasks
that grow and then shrink memory collapse into single tasks; a chain that dips to a
*valley* (a step that frees memory followed by one that peaks higher) keeps the valley, where
the best order may run other work.

Rules examined and *not* used (the tests search small graphs for counter-examples):

* "``t`` is ``u``'s only successor and ``u`` is ``t``'s only predecessor: run them back to
  back" is false. ``u`` reads an input ``A`` (8 bytes) and writes ``U`` (1), ``t`` reads
  ``U`` and writes a result ``T`` (9), and an independent task ``x`` needs 5 bytes of
  workspace: ``u, x, t`` peaks at 10 (``x`` runs in the valley after ``u``), while every
  order running ``u, t`` back to back peaks at 13 or more. Neither F nor B merges it
  (``t`` keeps more than it frees; ``u`` frees more than it keeps).
* Connected components ("independent branches") solved one by one and merged.
  ``tests/memory/test_reduce.py`` splits a graph into its independent parts and
  merges fixed orders of them (Kayaaslan et al.'s parallel
  composition: each order cut where it holds least, the heads merged backwards and the
  tails forwards by Liu's rule). That merge is exact only for orders that never drop below
  their start (Liu's condition), and which of a part's least-peak orders is merged changes
  the result: ``test_reduce.py`` holds a graph where one choice misses the optimum and
  another reaches it. Whether *some* choice of least-peak orders of the parts, best interleaved,
  always reaches the optimum we could neither prove nor refute (no counter-example among
  tens of thousands of random pairs of parts of up to 6 tasks, ``test_reduce.py`` checks
  a sample). So components give candidate orders only, never a proof;
  :func:`thrifty.memory.schedule` does not split graphs into them (the exact search runs on
  the whole reduced graph).

Example
-------
A chain ``a -> b -> c`` writing 9, 4 and 2 bytes: ``a`` runs just before ``b`` (rule B:
``a`` uses no more than ``b`` does after it), then ``c`` right after them (rule F: it
frees more than it keeps and uses less than the pair did). One task is left, with the
chain's peak.

>>> from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
>>> g = TaskGraph([Task("a", writes=("x",)), Task("b", reads=("x",), writes=("y",)),
...                Task("c", reads=("y",), writes=("z",))],
...               [Buffer("x", 9, "a"), Buffer("y", 4, "b"), Buffer("z", 2, "c")])
>>> red = reduce_graph(g)
>>> len(red.graph.tasks), red.merges, red.expand(list(red.graph.order))
(1, {'forward': 1, 'backward': 1}, ('a', 'b', 'c'))
>>> from thrifty.memory import simulate
>>> simulate(red.graph, ["a"]).peak == simulate(g, ["a", "b", "c"]).peak == 13
True
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from thrifty.errors import ThriftyError
from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
from thrifty.memory.order.compact import Compact

__all__ = ["Reduction", "reduce_graph"]

SEARCH_BUDGET = 200
"""Tasks one ancestor query may visit before it answers "no" (the cautious answer: a rule
needing that ancestry is then not applied). Keeps the reductions near-linear on graphs with
long skip connections, such as training graphs."""


@dataclass(frozen=True, slots=True)
class Reduction:
    """A reduced graph and how to map its orders back.

    ``members[m]`` lists, in run order, the original tasks merged into reduced task ``m``
    (a reduced task keeps the id of one of them). ``merges`` counts the merges by rule
    (``"forward"``, ``"backward"``).
    """

    original: TaskGraph
    graph: TaskGraph
    members: dict[Hashable, tuple[Hashable, ...]]
    merges: dict[str, int] = field(default_factory=dict)

    def expand(self, order: Sequence[Hashable]) -> tuple[Hashable, ...]:
        """The order of the original graph that runs each reduced task's members in turn."""
        out: list[Hashable] = []
        for t in order:
            try:
                out.extend(self.members[t])
            except KeyError:
                raise ThriftyError(f"{t!r} is not a task of the reduced graph") from None
        return tuple(out)

    @property
    def info(self) -> dict[str, int]:
        """Tasks before and after, and merges by rule (for a result's ``info``)."""
        return {"tasks_before": len(self.original.tasks), "tasks_after": len(self.graph.tasks),
                **{f"merged_{k}": v for k, v in self.merges.items()}}


class _Mutable:
    """The integer view of a graph, editable: tasks merge, buffers die."""

    def __init__(self, c: Compact, g: TaskGraph) -> None:
        n = c.n
        self.c = c
        self.alive = [True] * n
        self.members: list[list[int]] = [[t] for t in range(n)]
        self.reads = [set(r) for r in c.reads]
        self.writes = [list(w) for w in c.writes]
        self.hill = [c.out[t] + c.ws[t] for t in range(n)]
        self.time = [float(g.tasks[t].time) for t in c.ids]
        self.size = list(c.size)
        self.result = list(c.result)
        self.producer = list(c.producer)
        self.readers = [set(r) for r in c.readers]
        self.buf_alive = [True] * len(c.size)
        self.preds = [set(p) for p in c.preds]
        self.succs = [set(s) for s in c.succs]
        self.pos = list(range(n))  # a topological numbering, kept valid by merges
        self.kept_c = [self._kept(t) for t in range(n)]
        self.free_c = [self._frees_at_most(t) for t in range(n)]

    # -- queries -------------------------------------------------------------------------
    def is_anc(self, a: int, b: int) -> bool:
        """Is ``a`` a proper ancestor of ``b``? A backward search from ``b``, pruned by the
        topological numbering and cut after :data:`SEARCH_BUDGET` tasks, when it answers
        False: every rule treats "not an ancestor" as the cautious answer (fewer merges)."""
        pa = self.pos[a]
        if pa >= self.pos[b]:
            return False
        seen = {b}
        stack = [b]
        preds, pos = self.preds, self.pos
        while stack:
            x = stack.pop()
            for p in preds[x]:
                if p == a:
                    return True
                if p not in seen and pos[p] > pa:
                    seen.add(p)
                    stack.append(p)
            if len(seen) > SEARCH_BUDGET:
                return False
        return False

    def _kept(self, t: int) -> int:
        return sum(self.size[b] for b in self.writes[t] if self.readers[b] or self.result[b])

    def _frees_at_most(self, x: int) -> int:
        return sum(self.size[b] for b in self.reads[x] if not self.result[b])

    def kept(self, t: int) -> int:
        """Bytes of ``t``'s outputs read later or results (cached: only merges change it)."""
        return self.kept_c[t]

    def frees_at_most(self, x: int) -> int:
        """Bytes of the non-result buffers ``x`` reads: the most it can free (cached)."""
        return self.free_c[x]

    def certain_frees(self, x: int, done: set[int]) -> int:
        """Bytes of non-result buffers ``x`` reads whose other readers are all in ``done``
        or ancestors of ``x``."""
        total = 0
        for b in self.reads[x]:
            if self.result[b]:
                continue
            if all(r == x or r in done or self.is_anc(r, x) for r in self.readers[b]):
                total += self.size[b]
        return total

    # -- rules ---------------------------------------------------------------------------
    def forward(self, u: int, t: int) -> int | None:
        """Rule F for the edge ``u -> t``: the merged workspace, or None."""
        # necessary conditions first, counting every buffer read as freed (no searches)
        if (self.kept(t) > self.frees_at_most(t)
                or self.kept(u) - self.frees_at_most(u) + self.hill[t] > self.hill[u]):
            return None
        pu, pos = self.pos[u], self.pos
        if any(pos[p] > pu for p in self.preds[t]):  # a predecessor after u: no ancestor
            return None
        if any(p != u and not self.is_anc(p, u) for p in self.preds[t]):
            return None
        if self.kept(t) - self.certain_frees(t, {u}) > 0:  # F1
            return None
        dmax_u = self.kept(u) - self.certain_frees(u, set())
        if dmax_u + self.hill[t] > self.hill[u]:  # F2
            return None
        ws = self.hill[u] - self._merged_out(u, t)
        return ws if ws >= 0 else None

    def backward(self, u: int, t: int) -> int | None:
        """Rule B for the edge ``u -> t``: the merged workspace, or None."""
        if self.succs[u] != {t} or self.hill[u] > self.kept(u) + self.hill[t]:
            return None
        freed = 0
        for b in self.reads[u]:
            if self.result[b]:
                continue
            others = [r for r in self.readers[b] if r != u]
            if any(r == t or self.is_anc(t, r) for r in others):
                continue  # never freed by u
            if all(self.is_anc(r, t) for r in others):
                freed += self.size[b]  # always freed by u once t is ready
            else:
                return None  # u's impact would depend on the order
        d = self.kept(u) - freed
        if d < 0 or self.hill[u] > d + self.hill[t]:  # B1, B2
            return None
        ws = d + self.hill[t] - self._merged_out(u, t)
        return ws if ws >= 0 else None

    def _merged_out(self, u: int, t: int) -> int:
        total = 0
        for x in (u, t):
            for b in self.writes[x]:
                if (self.readers[b] - {t}) or self.result[b]:
                    total += self.size[b]
        return total

    def merge(self, u: int, t: int, ws: int, at: int) -> None:
        """Merge ``t`` into ``u`` (``u`` runs first); the merged task is numbered ``u`` and
        placed at position ``at``."""
        writes: list[int] = []
        for x in (u, t):
            for b in self.writes[x]:
                self.readers[b].discard(t)
                if self.readers[b] or self.result[b]:
                    writes.append(b)
                    self.producer[b] = u
                else:
                    self.buf_alive[b] = False
        own = set(self.writes[u])
        reads = (self.reads[u] | self.reads[t]) - own
        for b in self.reads[t] - own:
            self.readers[b].discard(t)
            self.readers[b].add(u)
        self.reads[u] = reads
        self.writes[u] = writes
        self.hill[u] = sum(self.size[b] for b in writes) + ws
        self.time[u] += self.time[t]
        self.members[u] += self.members[t]
        preds = (self.preds[u] | self.preds[t]) - {u}
        succs = (self.succs[u] | self.succs[t]) - {t}
        for p in self.preds[t]:
            self.succs[p].discard(t)
            if p != u:
                self.succs[p].add(u)
        for s in self.succs[t]:
            self.preds[s].discard(t)
            self.preds[s].add(u)
        self.preds[u], self.succs[u] = preds, succs
        self.preds[t], self.succs[t], self.reads[t], self.writes[t] = set(), set(), set(), []
        self.alive[t] = False
        self.pos[u] = at
        self.kept_c[u] = self._kept(u)  # other tasks keep theirs: a buffer's readers
        self.free_c[u] = self._frees_at_most(u)  # only change from {.., t} to {.., u}

    def run(self, max_passes: int) -> dict[str, int]:
        """Try every edge ``u -> t`` in topological order; after a merge, try again the
        edges around the merged task (a worklist), then make a full pass again, until a
        pass merges nothing or ``max_passes`` passes are done."""
        merges = {"forward": 0, "backward": 0}
        for _ in range(max_passes):
            before = sum(merges.values())
            todo = sorted((x for x in range(len(self.alive)) if self.alive[x]),
                          key=lambda x: self.pos[x])
            while todo:
                dirty: set[int] = set()
                for u in todo:
                    while self.alive[u] and self._merge_one(u, merges):
                        dirty.add(u)
                        for s in (u, *self.succs[u]):
                            dirty |= self._candidates(s)
                todo = sorted((x for x in dirty if self.alive[x]), key=lambda x: self.pos[x])
            if sum(merges.values()) == before:
                break
        return merges

    def _candidates(self, t: int) -> set[int]:
        """The predecessors ``u`` of ``t`` for which a rule may merge ``u -> t``: F needs
        ``u`` to be the last predecessor, B needs ``t`` to be ``u``'s only successor."""
        preds = self.preds[t]
        if not preds:
            return set()
        pos = self.pos
        out = {p for p in preds if len(self.succs[p]) == 1}
        out.add(max(preds, key=lambda p: pos[p]))
        return out

    def _merge_one(self, u: int, merges: dict[str, int]) -> bool:
        """Merge one successor into ``u`` if a rule allows it."""
        for t in sorted(self.succs[u], key=lambda x: self.pos[x]):
            ws = self.forward(u, t)
            if ws is not None:
                self.merge(u, t, ws, self.pos[u])
                merges["forward"] += 1
                return True
            ws = self.backward(u, t)
            if ws is not None:
                self.merge(u, t, ws, self.pos[t])
                merges["backward"] += 1
                return True
        return False

    def graph(self, g: TaskGraph) -> tuple[TaskGraph, dict[Hashable, tuple[Hashable, ...]]]:
        c = self.c
        bids = list(g.buffers)
        tasks: list[Task] = []
        members: dict[Hashable, tuple[Hashable, ...]] = {}
        for t in sorted((x for x in range(c.n) if self.alive[x]), key=lambda x: self.pos[x]):
            tid = c.ids[t]
            orig = g.tasks[tid]
            if len(self.members[t]) == 1:
                tasks.append(orig)
            else:
                out = sum(self.size[b] for b in self.writes[t])
                tasks.append(Task(tid, reads=tuple(bids[b] for b in sorted(self.reads[t])),
                                  writes=tuple(bids[b] for b in self.writes[t]),
                                  time=self.time[t], workspace=self.hill[t] - out,
                                  kernel=orig.kernel, attrs=orig.attrs))
            members[tid] = tuple(c.ids[x] for x in self.members[t])
        buffers = [Buffer(bids[b], self.size[b],
                          None if self.producer[b] < 0 else c.ids[self.producer[b]])
                   for b in range(len(bids)) if self.buf_alive[b]]
        results = [bids[b] for b in range(len(bids)) if self.buf_alive[b] and self.result[b]]
        return TaskGraph(tasks, buffers, results=results, name=f"{g.name}/reduced"), members


def reduce_graph(g: TaskGraph, max_passes: int = 20) -> Reduction:
    """Merge tasks by rules F and B (module docstring) until none applies.

    Returns a :class:`Reduction`: the reduced graph has the same least peak as ``g``, and
    :meth:`Reduction.expand` maps any of its orders to an order of ``g`` with the same peak.
    """
    c = Compact.of(g)
    mut = _Mutable(c, g)
    merges = mut.run(max_passes)
    if not any(merges.values()):
        return Reduction(g, g, {t: (t,) for t in g.tasks}, merges)
    graph, members = mut.graph(g)
    return Reduction(g, graph, members, merges)

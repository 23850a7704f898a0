"""Hill-valley segments of orders, and Liu's merge of independent orders.

Liu, "An application of generalized tree pebbling to sparse matrix factorization", SIAM J.
Algebraic Discrete Methods 8(3), 1987: an order's *canonical segments* cut it after each
valley, where the hill ``H`` is the most memory in use from there on and the valley ``V``
the least memory resident after that hill (recursively on what follows). Independent
orders that never fall below their starting bytes are merged optimally by taking their
segments in non-increasing ``H - V``. Used by the in-tree algorithm
(:mod:`thrifty.memory.order.tree`) and the series-parallel one
(:mod:`thrifty.memory.order.sp`, which also merges backwards in time).

The segments are the stack that :func:`segments` builds one step at a time. A :class:`Seq`
keeps that stack (``segs``) up to date as steps are pushed, and a merged or concatenated
order gets its stack by pushing whole segments of its parts instead of their steps
(:func:`_push_segment`). That is the same stack whenever every step of the pushed segment
leaves more bytes resident than the top of the stack (the stack's largest valley): then no
step of it pops an entry by the valley rule, and the hill rule pops the same entries for
the segment's steps as for its hill. Every segment after the first of an order satisfies
this in a Liu merge (its steps stay above the valley before it); the condition is checked
each time (each segment carries the least bytes resident over its steps) and a segment
that fails it is pushed step by step. So each step is scanned about once instead of once
per merge above it (the series-parallel algorithm's halves and reversed orders are still
scanned step by step).
:func:`segments` stays as the step-by-step reference; the tests compare the two.

Example
-------
>>> a = Seq([0], [9], [1], 0)          # one task: 9 bytes in use, 1 left
>>> b = Seq([1, 2], [3, 4], [2, 2], 0)
>>> liu_merge([b, a]).tasks
[0, 1, 2]
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["Seq", "liu_merge", "no_cycle_collection", "reversed_seq", "segments",
           "split_at_least"]

Segment = tuple[int, int, int, int]
"""``(hill, valley, end, low)``: the most bytes in use over the segment's steps, the bytes
resident after its last step, the index one past that step, and the least bytes resident
after any of its steps."""


@dataclass(slots=True)
class Seq:
    """An order of part of the graph: per step the bytes in use and resident after it.

    ``init`` is the bytes of the part resident before its first step. ``segs`` is its
    canonical segments (:data:`Segment`) when known, kept up to date by :meth:`push` and
    :meth:`extend`; ``None`` until :meth:`canonical` computes them.
    """

    tasks: list[int]
    during: list[int]
    after: list[int]
    init: int
    segs: list[Segment] | None = None

    def __post_init__(self) -> None:
        if self.segs is None and not self.tasks:
            self.segs = []

    def push(self, t: int, during: int, after: int) -> None:
        self.tasks.append(t)
        self.during.append(during)
        self.after.append(after)
        if self.segs is not None:
            _push_step(self.segs, during, after, len(self.tasks), after)

    def extend(self, other: Seq) -> None:
        """Append ``other``'s steps (``other.init`` must be this order's final bytes).

        The segments stay known when ``other``'s are; otherwise they are computed when
        asked for (:meth:`canonical`)."""
        if other.segs is None:
            self.segs = None
        elif self.segs is not None:
            base, segs = len(self.tasks), self.segs
            begin = 0
            for seg in other.canonical():
                _push_segment(segs, other, seg, begin, 0, base + begin)
                begin = seg[2]
        self.tasks += other.tasks
        self.during += other.during
        self.after += other.after

    def final(self) -> int:
        return self.after[-1] if self.after else self.init

    def canonical(self) -> list[Segment]:
        """The canonical segments, computed step by step when not known yet."""
        if self.segs is None:
            segs: list[Segment] = []
            for j, (h, v) in enumerate(zip(self.during, self.after)):
                _push_step(segs, h, v, j + 1, v)
            self.segs = segs
        return self.segs


def _push_step(segs: list[Segment], h: int, v: int, end: int, low: int) -> None:
    """One step of :func:`segments` (hill ``h``, valley ``v``), keeping ``low``."""
    while segs:
        th, tv, _, tl = segs[-1]
        if th > h and tv < v:
            break
        segs.pop()
        if th > h:
            h = th
        if tl < low:
            low = tl
    segs.append((h, v, end, low))


def _push_segment(segs: list[Segment], q: Seq, seg: Segment, begin: int, shift: int,
                  offset: int) -> None:
    """Push the steps ``begin..seg.end`` of ``q`` (one of its canonical segments ``seg``),
    shifted by ``shift`` bytes, step ``begin`` placed after ``offset`` steps, onto ``segs``:
    as one entry when all its steps stay above the stack's top valley, else step by step."""
    h, v, end, low = seg
    if not segs or low + shift > segs[-1][1]:
        _push_step(segs, h + shift, v + shift, offset + end - begin, low + shift)
        return
    during, after = q.during, q.after
    for j in range(begin, end):
        a = after[j] + shift
        _push_step(segs, during[j] + shift, a, offset + j - begin + 1, a)


def segments(q: Seq) -> list[tuple[int, int, int]]:
    """Canonical hill-valley segments ``(hill, valley, end)`` of ``q`` (Liu 1987), step by
    step (the reference for :meth:`Seq.canonical`)."""
    segs: list[tuple[int, int, int]] = []
    for j in range(len(q.tasks)):
        h, v = q.during[j], q.after[j]
        while segs and (segs[-1][0] <= h or segs[-1][1] >= v):
            h = max(h, segs[-1][0])
            segs.pop()
        segs.append((h, v, j + 1))
    return segs


def liu_merge(parts: list[Seq]) -> Seq:
    """Merge independent orders by their segments in non-increasing hill minus valley.

    Each part must never drop below its ``init`` (true of the halves :func:`split_at_least`
    cuts). The merged order's canonical segments come with it.
    """
    keyed = []
    for i, q in enumerate(parts):
        begin = 0
        for seg in q.canonical():
            keyed.append((seg[1] - seg[0], i, begin, seg))
            begin = seg[2]
    keyed.sort()
    contrib = [q.init for q in parts]
    total = sum(contrib)
    out = Seq([], [], [], total)
    segs: list[Segment] = []
    tasks, during, after = out.tasks, out.during, out.after
    for _, i, begin, seg in keyed:
        q = parts[i]
        end = seg[2]
        shift = total - contrib[i]
        _push_segment(segs, q, seg, begin, shift, len(tasks))
        tasks += q.tasks[begin:end]
        if shift:
            during += [x + shift for x in q.during[begin:end]]
            after += [x + shift for x in q.after[begin:end]]
        else:
            during += q.during[begin:end]
            after += q.after[begin:end]
        contrib[i] = seg[1]
        total = shift + contrib[i]
    out.segs = segs
    return out


def reversed_seq(q: Seq) -> Seq:
    """The same steps backwards in time: resident-before and resident-after swap."""
    if not q.tasks:
        return Seq([], [], [], q.init)
    before = [q.init, *q.after[:-1]]
    return Seq(q.tasks[::-1], q.during[::-1], before[::-1], q.final())


def split_at_least(q: Seq) -> tuple[Seq, Seq]:
    """Cut ``q`` where the bytes resident are least (the first such point)."""
    k, low = 0, q.init
    if q.after and min(q.after) < low:
        low = min(q.after)
        k = q.after.index(low) + 1
    return (Seq(q.tasks[:k], q.during[:k], q.after[:k], q.init),
            Seq(q.tasks[k:], q.during[k:], q.after[k:], low))


@contextmanager
def no_cycle_collection() -> Iterator[None]:
    """Pause Python's cycle collector (and restore its state after): the orders built here
    hold no reference cycles, and their many short lists would otherwise make it walk
    every live object of the process again and again (reference counting still frees
    them)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()

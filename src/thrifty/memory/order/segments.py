"""Hill-valley segments of orders, and Liu's merge of independent orders.

Liu, "An application of generalized tree pebbling to sparse matrix factorization", SIAM J.
Algebraic Discrete Methods 8(3), 1987: an order's *canonical segments* cut it after each
valley, where the hill ``H`` is the most memory in use from there on and the valley ``V``
the least memory resident after that hill (recursively on what follows). Independent
orders that never fall below their starting bytes are merged optimally by taking their
segments in non-increasing ``H - V``. Used by the in-tree algorithm
(:mod:`thrifty.memory.order.tree`) and the series-parallel one
(:mod:`thrifty.memory.order.sp`, which also merges backwards in time).

Example
-------
>>> a = Seq([0], [9], [1], 0)          # one task: 9 bytes in use, 1 left
>>> b = Seq([1, 2], [3, 4], [2, 2], 0)
>>> liu_merge([b, a]).tasks
[0, 1, 2]
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Seq", "liu_merge", "reversed_seq", "segments", "split_at_least"]


@dataclass(slots=True)
class Seq:
    """An order of part of the graph: per step the bytes in use and resident after it.

    ``init`` is the bytes of the part resident before its first step.
    """

    tasks: list[int]
    during: list[int]
    after: list[int]
    init: int

    def push(self, t: int, during: int, after: int) -> None:
        self.tasks.append(t)
        self.during.append(during)
        self.after.append(after)

    def extend(self, other: Seq) -> None:
        self.tasks += other.tasks
        self.during += other.during
        self.after += other.after

    def final(self) -> int:
        return self.after[-1] if self.after else self.init


def segments(q: Seq) -> list[tuple[int, int, int]]:
    """Canonical hill-valley segments ``(hill, valley, end)`` of ``q`` (Liu 1987)."""
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

    Each part must never drop below its ``init`` (true of the halves :func:`_split` cuts).
    """
    keyed = []
    for i, q in enumerate(parts):
        begin = 0
        for h, v, end in segments(q):
            keyed.append((-(h - v), i, begin, end))
            begin = end
    keyed.sort()
    contrib = [q.init for q in parts]
    total = sum(contrib)
    out = Seq([], [], [], total)
    for _, i, begin, end in keyed:
        q = parts[i]
        shift = total - contrib[i]
        out.tasks += q.tasks[begin:end]
        out.during += [x + shift for x in q.during[begin:end]]
        out.after += [x + shift for x in q.after[begin:end]]
        contrib[i] = q.after[end - 1]
        total = shift + contrib[i]
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
    for j, r in enumerate(q.after):
        if r < low:
            k, low = j + 1, r
    return (Seq(q.tasks[:k], q.during[:k], q.after[:k], q.init),
            Seq(q.tasks[k:], q.during[k:], q.after[k:], low))

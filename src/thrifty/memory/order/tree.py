"""Liu's exact minimum-peak order for in-trees (and in-forests).

Liu, "An application of generalized tree pebbling to sparse matrix factorization",
SIAM J. Algebraic Discrete Methods 8(3), 1987. In an in-tree every task's outputs are read
by at most one task (its parent); running a task needs its children's outputs, its own
outputs and its workspace. Liu shows that an optimal order of a subtree is obtained by
cutting the optimal orders of the child subtrees into their *hill-valley segments* (the
hill ``H`` is the highest memory in use, the valley ``V`` the lowest memory resident after
it, taken recursively over what follows) and merging all the segments in non-increasing
``H - V``, then running the parent.

Orders are kept at step level (each step's bytes in use and resident after it,
:mod:`thrifty.memory.order.segments`), so that the canonical segments of a merged order are
computed exactly; a node with one child extends its child's order in place.

Example
-------
The tree ``a -> c <- b`` (``a``, ``b`` leaves writing 5 and 1 bytes; ``c`` writes 1; ``a``
needs 3 more bytes of workspace)::

    a(5, ws 3)   b(1)
         \\      /
           c(1)

>>> from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
>>> g = TaskGraph([Task("a", writes=("A",), workspace=3), Task("b", writes=("B",)),
...                Task("c", reads=("A", "B"), writes=("C",))],
...               [Buffer("A", 5, "a"), Buffer("B", 1, "b"), Buffer("C", 1, "c")])
>>> c = Compact.of(g)
>>> order = liu_in_tree(c)
>>> c.to_ids(order), c.peak_of(order)
(('a', 'b', 'c'), 8)
"""

from __future__ import annotations

from thrifty.memory.order.compact import Compact
from thrifty.memory.order.segments import Seq, liu_merge, no_cycle_collection

__all__ = ["is_in_forest", "liu_in_tree"]


def is_in_forest(c: Compact) -> bool:
    """Whether ``c`` is an in-forest Liu's algorithm applies to.

    Every task has at most one successor, all its outputs that outlive it are read by that
    successor only (or, for a root, are results), and inputs have size 0.
    """
    for b in range(len(c.size)):
        if c.producer[b] < 0 and c.size[b] > 0:
            return False
    for t in range(c.n):
        if len(c.succs[t]) > 1:
            return False
        parent = c.succs[t][0] if c.succs[t] else None
        for b in c.writes[t]:
            if parent is None:
                if c.readers[b]:
                    return False
            elif c.result[b] or c.readers[b] not in ((), (parent,)):
                return False
    return True


def liu_in_tree(c: Compact) -> list[int]:
    """An order of least peak for an in-forest (check :func:`is_in_forest` first)."""
    with no_cycle_collection():
        return _liu_in_tree(c)


def _liu_in_tree(c: Compact) -> list[int]:
    kids: list[list[int]] = [[] for _ in range(c.n)]
    roots: list[int] = []
    for t in range(c.n):
        if c.succs[t]:
            kids[c.succs[t][0]].append(t)
        else:
            roots.append(t)
    seqs: list[Seq | None] = [None] * c.n
    for t in range(c.n):  # topological: children before parents
        children = [seqs[k] for k in kids[t]]
        for k in kids[t]:
            seqs[k] = None
        q = _merged(children)  # type: ignore[arg-type]
        q.push(t, q.final() + c.out[t] + c.ws[t], c.kept[t])  # children's outputs resident
        seqs[t] = q
    return _merged([seqs[r] for r in roots]).tasks  # type: ignore[misc]


def _merged(parts: list[Seq]) -> Seq:
    if not parts:
        return Seq([], [], [], 0)
    return parts[0] if len(parts) == 1 else liu_merge(parts)

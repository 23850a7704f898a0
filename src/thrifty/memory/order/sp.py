"""Minimum-peak orders of series-parallel graphs (Kayaaslan, Lambert, Marchal and Uçar).

Kayaaslan, Lambert, Marchal, Uçar, "Scheduling series-parallel task graphs to minimize peak
memory", Theoretical Computer Science 707, 2018. Their model puts the data on the edges:
each edge carries a buffer written by its tail and read by its head only. In a TaskGraph
that is every buffer having at most one reader (a buffer with several readers is only
accepted when it has size 0, or is a result: see :func:`sp_decompose`). The graph, closed
with a virtual source (feeding the inputs and the tasks without predecessors) and a
virtual sink (consuming the results), must be two-terminal series-parallel.

The algorithm follows the decomposition tree: a series composition concatenates the
orders of its parts around the shared task; a parallel composition cuts each branch's order
where the bytes resident are least, merges the parts after the cuts by Liu's rule (their
hill-valley segments in non-increasing hill minus valley, as for in-trees) and the parts
before the cuts by the same rule backwards in time (as for out-trees), and runs the merged
head then the merged tail. Running a task costs its inputs, its outputs and its workspace
(their model's vertex weight is our inputs plus workspace). The decomposition is found by
the classical reductions (merge parallel edges, contract a task with one in-edge and one
out-edge).

Example
-------
A fork-join ``s -> {a, b} -> t`` where ``a`` has a big workspace::

        s
       / \\
      a   b
       \\ /
        t

>>> from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
>>> T = [Task("s", writes=("sa", "sb")), Task("a", reads=("sa",), writes=("at",),
...      workspace=9), Task("b", reads=("sb",), writes=("bt",)),
...      Task("t", reads=("at", "bt"), writes=("out",))]
>>> B = [Buffer("sa", 1, "s"), Buffer("sb", 5, "s"), Buffer("at", 1, "a"),
...      Buffer("bt", 1, "b"), Buffer("out", 1, "t")]
>>> c = Compact.of(TaskGraph(T, B))
>>> order = sp_order(c)
>>> c.to_ids(order), c.peak_of(order)
(('s', 'b', 'a', 't'), 12)
"""

from __future__ import annotations

from dataclasses import dataclass

from thrifty.memory.order.compact import Compact
from thrifty.memory.order.segments import (
    Seq,
    liu_merge,
    no_cycle_collection,
    reversed_seq,
    split_at_least,
)

__all__ = ["sp_decompose", "sp_order"]


@dataclass(frozen=True, slots=True)
class _Edge:
    weight: int


@dataclass(frozen=True, slots=True)
class _Series:
    left: int
    mid: int
    right: int


@dataclass(frozen=True, slots=True)
class _Parallel:
    parts: tuple[int, ...]


_SPNode = _Edge | _Series | _Parallel


def sp_decompose(c: Compact) -> tuple[list[_SPNode], int] | None:
    """The decomposition tree (nodes in creation order, root index), or ``None``.

    ``None`` when the edge model does not apply (a buffer of nonzero size with two
    readers that is not a result) or the closed graph is not two-terminal series-parallel.
    A result stays resident from its producer to the end whoever reads it: it becomes an
    edge to the virtual sink carrying its bytes, and its readers get edges of weight 0
    (they only order the reader after the producer).
    """
    n = c.n
    src, snk = n, n + 1
    nodes: list[_SPNode] = []
    out_adj: list[dict[int, int]] = [{} for _ in range(n + 2)]
    in_adj: list[dict[int, int]] = [{} for _ in range(n + 2)]

    def add_edge(u: int, v: int, node: int) -> None:
        old = out_adj[u].get(v)
        if old is not None:
            parts: list[int] = []
            for x in (old, node):
                nx = nodes[x]
                parts.extend(nx.parts if isinstance(nx, _Parallel) else (x,))
            nodes.append(_Parallel(tuple(parts)))
            node = len(nodes) - 1
        out_adj[u][v] = node
        in_adj[v][u] = node

    def leaf(u: int, v: int, w: int) -> None:
        nodes.append(_Edge(w))
        add_edge(u, v, len(nodes) - 1)

    for b in range(len(c.size)):
        readers, p = c.readers[b], c.producer[b]
        tail = src if p < 0 else p
        if c.result[b]:
            # resident from its producer to the end: an edge to the sink holds its bytes,
            # and edges of weight 0 to its readers order them after the producer
            leaf(tail, snk, c.size[b])
            for r in readers:
                leaf(tail, r, 0)
            continue
        if len(readers) > 1 and c.size[b] > 0:
            return None
        for r in readers:
            leaf(tail, r, c.size[b])
    for t in range(n):
        if not in_adj[t]:
            leaf(src, t, 0)
        if not out_adj[t]:
            leaf(t, snk, 0)
    if n == 0:
        leaf(src, snk, 0)
    queue = list(range(n))
    removed = [False] * (n + 2)
    while queue:
        v = queue.pop()
        if removed[v] or len(in_adj[v]) != 1 or len(out_adj[v]) != 1:
            continue
        (u, e1), = in_adj[v].items()
        (w, e2), = out_adj[v].items()
        removed[v] = True
        del out_adj[u][v], in_adj[w][v]
        in_adj[v].clear()
        out_adj[v].clear()
        nodes.append(_Series(e1, v, e2))
        add_edge(u, w, len(nodes) - 1)
        queue.extend(x for x in (u, w) if x < n)
    if any(not removed[t] for t in range(n)) or list(out_adj[src]) != [snk]:
        return None
    return nodes, out_adj[src][snk]


def _parallel(parts: list[Seq]) -> Seq:
    """Kayaaslan et al.'s parallel composition: cut each branch at its least resident point;
    merge the parts after the cuts forward and the parts before the cuts backward."""
    halves = [split_at_least(q) for q in parts]
    head = reversed_seq(liu_merge([reversed_seq(a) for a, _ in halves]))
    head.init = sum(q.init for q in parts)
    head.extend(liu_merge([b for _, b in halves]))
    return head


def sp_order(c: Compact) -> list[int] | None:
    """An order of least peak for a series-parallel graph in the edge model, or ``None``."""
    with no_cycle_collection():
        return _sp_order(c)


def _sp_order(c: Compact) -> list[int] | None:
    dec = sp_decompose(c)
    if dec is None:
        return None
    nodes, root = dec
    used = [False] * len(nodes)  # a flattened parallel node replaces earlier ones
    stack = [root]
    while stack:
        i = stack.pop()
        used[i] = True
        nd = nodes[i]
        if isinstance(nd, _Series):
            stack += [nd.left, nd.right]
        elif isinstance(nd, _Parallel):
            stack += nd.parts
    seqs: list[Seq | None] = [None] * len(nodes)
    for i, nd in enumerate(nodes):  # children are created before their parents
        if not used[i]:
            continue
        if isinstance(nd, _Edge):
            seqs[i] = Seq([], [], [], nd.weight)
        elif isinstance(nd, _Series):
            left, right = seqs[nd.left], seqs[nd.right]
            assert left is not None and right is not None
            seqs[nd.left] = seqs[nd.right] = None
            m = nd.mid
            left.push(m, left.final() + c.out[m] + c.ws[m], right.init)
            left.extend(right)
            seqs[i] = left
        else:
            parts = [seqs[k] for k in nd.parts]
            for k in nd.parts:
                seqs[k] = None
            seqs[i] = _parallel(parts)  # type: ignore[arg-type]
    top = seqs[root]
    assert top is not None
    return top.tasks

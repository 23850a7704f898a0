"""TaskGraph to and from a :class:`networkx.DiGraph`: a node is a task and its one output.

The node-link benchmarks of memory planning describe a graph as networkx nodes with a size
and a time attribute, in two shapes:

* ``checkmate`` (Jain et al., "Checkmate: Breaking the Memory Wall with Optimal Tensor
  Rematerialization", MLSys 2020): ``cost_ram`` (bytes of the node's output) and
  ``cost_cpu`` (time); nodes also carry ``name`` and ``backward``;
* ``layered`` (Gagrani et al., "Neural Topological Ordering for Computation Graphs",
  NeurIPS 2022, as used by Moccasin, ICML 2023): ``out_cost`` and ``duration``, beside
  ``param_cost``.

A node ``v`` is a task with id ``v`` that writes one buffer, also with id ``v`` (task and
buffer ids are separate name spaces); an edge ``u -> v`` means task ``v`` reads buffer ``u``,
in the order the edges into ``v`` were added (a multigraph's repeated edges are read once).
Every other node attribute is kept in :attr:`Task.attrs`. Graph attributes ``name`` and
``results`` (a list of buffer ids, when not the default) are read and written.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from thrifty.errors import GraphError
from thrifty.graph.formats.common import (
    build,
    default_results,
    fail,
    number,
    show,
    size,
    sorted_ids,
)
from thrifty.graph.taskgraph import Buffer, Task, TaskGraph

if TYPE_CHECKING:
    import networkx as nx


@dataclass(frozen=True, slots=True)
class Shape:
    """One attribute shape of node-link task graphs: which attribute means what."""

    name: str
    size: str
    time: str
    id_key: str  # the node-link key that holds a node's id when writing
    source: str  # the node-link keys of a link's ends
    target: str


SHAPES: dict[str, Shape] = {
    "checkmate": Shape("checkmate", "cost_ram", "cost_cpu", "id", "source", "target"),
    "layered": Shape("layered", "out_cost", "duration", "name", "0", "1"),
}


def understood_shapes() -> str:
    """The shapes, for messages."""
    return "; ".join(f"{s.name}: nodes with {s.size!r} (bytes) and {s.time!r} (time)"
                     for s in SHAPES.values())


def detect_shape(first: Any, path: Path | None) -> Shape:
    """The shape whose size attribute the first node has."""
    keys = first if isinstance(first, dict) else {}
    for shape in SHAPES.values():
        if shape.size in keys:
            return shape
    fail(path, f"unknown node attribute shape (the first node has {show(sorted(map(str, keys)))}"
         f"); understood shapes are {understood_shapes()}")


def from_networkx(G: nx.DiGraph, size_attr: str | None = None, time_attr: str | None = None,
                  name: str | None = None, path: Path | None = None,
                  ) -> tuple[TaskGraph, list[Hashable]]:
    """The TaskGraph of ``G`` and the nodes whose sizes were rounded to whole bytes.

    ``size_attr``/``time_attr`` default to those of the shape the first node has. Errors
    name ``path`` when given (FileFormatError), else they are GraphErrors.
    """
    import networkx as nx

    if not isinstance(G, nx.Graph):
        raise GraphError(f"expected a networkx graph, got {type(G).__name__}")
    if not G.is_directed():
        fail(path, "the graph is undirected; task graphs are directed (a networkx DiGraph)")
    if size_attr is None or time_attr is None:
        if not len(G):
            fail(path, "the graph has no nodes")
        shape = detect_shape(G.nodes[next(iter(G))], path)
        size_attr = size_attr or shape.size
        time_attr = time_attr or shape.time
    rounded: list[Hashable] = []
    tasks, buffers = [], []
    for v, data in G.nodes(data=True):
        for attr in (size_attr, time_attr):
            if attr not in data:
                fail(path, f"node {show(v)} has no attribute {attr!r} (every node gives its "
                     f"output's size in {size_attr!r} and its time in {time_attr!r})")
        reads = tuple(dict.fromkeys(G.predecessors(v)))
        attrs = {a: x for a, x in data.items() if a not in (size_attr, time_attr)}
        tasks.append(Task(v, reads=reads, writes=(v,),
                          time=number(data[time_attr], path, v, time_attr), attrs=attrs))
        buffers.append(Buffer(v, size(data[size_attr], path, v, size_attr, rounded), v))
    results = G.graph.get("results")
    if results is not None:
        try:
            if not isinstance(results, (list, tuple, set, frozenset)):
                raise TypeError
            frozenset(results)
        except TypeError:
            fail(path, f"graph attribute 'results' is {show(results)}; it must list buffer ids")
    label = name or str(G.graph.get("name") or (path.stem if path else "taskgraph"))
    return build(tasks, buffers, results, label, path), rounded


def to_networkx(g: TaskGraph, shape: str = "checkmate") -> nx.DiGraph:
    """A DiGraph with one node per task, its size and time in ``shape``'s attributes.

    Only graphs where every task writes exactly one buffer with its own id, and no buffer
    is an input, fit (that is what a node means); workspaces and kernels have no place.
    """
    import networkx as nx

    if shape not in SHAPES:
        raise GraphError(f"unknown node-link shape {shape!r}; valid: {', '.join(SHAPES)}")
    sh = SHAPES[shape]
    G = nx.DiGraph(name=g.name)
    for t in g.tasks.values():
        _check_node(g, t, sh)
        G.add_node(t.id, **{sh.size: g.buffers[t.id].size, sh.time: t.time}, **t.attrs)
    for b in g.buffers.values():
        if b.producer is None:
            raise GraphError(f"{g.name}: buffer {show(b.id)} is an input (no producer); a "
                             "node-link graph cannot hold inputs (save as thrifty JSON instead)")
    for t in g.tasks.values():
        G.add_edges_from((b, t.id) for b in t.reads)
    if g.results != default_results(g):
        G.graph["results"] = sorted_ids(g.results)
    return G


def _check_node(g: TaskGraph, t: Task, sh: Shape) -> None:
    if t.writes != (t.id,):
        raise GraphError(
            f"{g.name}: task {show(t.id)} writes {show(t.writes)}; node-link graphs need every "
            "task to write exactly one buffer with its own id (save as thrifty JSON instead)")
    if t.workspace or t.kernel is not None:
        raise GraphError(
            f"{g.name}: task {show(t.id)} has a workspace or kernel, which node-link graphs "
            "cannot hold (save as thrifty JSON instead)")
    clash = {sh.size, sh.time} & set(t.attrs)
    if clash:
        raise GraphError(f"{g.name}: task {show(t.id)} has attributes {sorted(clash)} that "
                         f"the {sh.name} shape uses for itself")

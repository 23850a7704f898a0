"""TaskGraph: tasks that read and write buffers, the type every memory planner works on.

The memory model (shared by every planner, the simulator and the runtime):

* running task ``t`` needs every buffer it reads resident, and allocates its outputs plus
  its declared ``workspace`` bytes for the duration of ``t``;
* a buffer with no producer is an *input*: it is resident when the run starts;
* buffers in ``results`` (by default the sinks: buffers nobody reads) stay resident to the
  end of the run.

A task optionally carries something to run (``fn`` called with the values of ``reads`` in
order, returning one value per entry of ``writes``; a single value when there is one
write); planners only look at ids, sizes and times.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from thrifty.errors import CycleError, GraphError

TaskId = Hashable
BufferId = Hashable


@dataclass(frozen=True, slots=True)
class Task:
    """One unit of work: reads buffers, writes buffers, takes ``time`` units."""

    id: TaskId
    reads: tuple[BufferId, ...] = ()
    writes: tuple[BufferId, ...] = ()
    time: float = 0.0
    workspace: int = 0
    fn: Callable[..., Any] | None = field(default=None, compare=False)
    kernel: str | None = None
    attrs: Mapping[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True, slots=True)
class Buffer:
    """A piece of memory of ``size`` bytes, written by ``producer`` (``None`` for inputs)."""

    id: BufferId
    size: int
    producer: TaskId | None = None


class TaskGraph:
    """An immutable DAG of tasks and buffers, with readers and order computed once.

    Parameters
    ----------
    tasks, buffers:
        Iterables of :class:`Task` and :class:`Buffer`. Task ids and buffer ids are separate
        name spaces (a node-link file gives a task and its output buffer the same id).
    results:
        Buffers that stay resident to the end. ``None`` means every buffer no task reads.
    name:
        A label for messages and reports.

    Example
    -------
    >>> g = TaskGraph([Task("a", writes=("x",), time=1.0), Task("b", reads=("x",),
    ...                writes=("y",), time=2.0)], [Buffer("x", 8, "a"), Buffer("y", 4, "b")])
    >>> g.order, g.readers["x"], sorted(g.results)
    (('a', 'b'), ('b',), ['y'])
    """

    __slots__ = ("tasks", "buffers", "readers", "order", "results", "name", "_preds", "_succs")

    def __init__(self, tasks: Iterable[Task], buffers: Iterable[Buffer],
                 results: Iterable[BufferId] | None = None, name: str = "taskgraph") -> None:
        who = name if len(str(name)) <= 60 else str(name)[:55] + " ..."  # for messages
        task_map: dict[TaskId, Task] = {}
        for t in tasks:
            if t.id in task_map:
                raise GraphError(f"{who}: duplicate task id {_r(t.id)}")
            task_map[t.id] = t
        buf_map: dict[BufferId, Buffer] = {}
        for buf in buffers:
            if buf.id in buf_map:
                raise GraphError(f"{who}: duplicate buffer id {_r(buf.id)}")
            if not isinstance(buf.size, int) or isinstance(buf.size, bool) or buf.size < 0:
                raise GraphError(f"{who}: buffer {_r(buf.id)} has size {_r(buf.size)}; sizes "
                                 "are integers >= 0 bytes")
            buf_map[buf.id] = buf
        readers: dict[BufferId, list[TaskId]] = {b: [] for b in buf_map}
        for t in task_map.values():
            if not (t.time >= 0) or t.time != t.time:
                raise GraphError(
                    f"{who}: task {_r(t.id)} has time {_r(t.time)}; times are numbers >= 0")
            if t.workspace < 0:
                raise GraphError(f"{who}: task {_r(t.id)} has negative workspace {t.workspace}")
            for b in t.reads:
                if b not in buf_map:
                    raise GraphError(f"{who}: task {_r(t.id)} reads unknown buffer {_r(b)}")
                readers[b].append(t.id)
            for b in t.writes:
                if b not in buf_map:
                    raise GraphError(f"{who}: task {_r(t.id)} writes unknown buffer {_r(b)}")
                if buf_map[b].producer != t.id:
                    raise GraphError(
                        f"{who}: task {_r(t.id)} writes buffer {_r(b)} whose producer is "
                        f"{_r(buf_map[b].producer)}")
        for buf in buf_map.values():
            if buf.producer is not None and buf.producer not in task_map:
                raise GraphError(
                    f"{who}: buffer {_r(buf.id)} has unknown producer {_r(buf.producer)}")
            if buf.producer is not None and buf.id not in task_map[buf.producer].writes:
                raise GraphError(
                    f"{who}: buffer {_r(buf.id)} names producer {_r(buf.producer)}, "
                    "which does not list it in its writes")
        self.name = name
        self.tasks: Mapping[TaskId, Task] = MappingProxyType(task_map)
        self.buffers: Mapping[BufferId, Buffer] = MappingProxyType(buf_map)
        self.readers: Mapping[BufferId, tuple[TaskId, ...]] = MappingProxyType(
            {b: tuple(r) for b, r in readers.items()})
        preds: dict[TaskId, list[TaskId]] = {t: [] for t in task_map}
        succs: dict[TaskId, list[TaskId]] = {t: [] for t in task_map}
        for t in task_map.values():
            for b in t.reads:
                p = buf_map[b].producer
                if p is not None and p not in preds[t.id]:
                    preds[t.id].append(p)
                    succs[p].append(t.id)
        self._preds = {t: tuple(p) for t, p in preds.items()}
        self._succs = {t: tuple(s) for t, s in succs.items()}
        self.order: tuple[TaskId, ...] = _topological_order(task_map, self._preds,
                                                            self._succs, who)
        if results is None:
            res = frozenset(b for b, r in self.readers.items() if not r)
        else:
            res = frozenset(results)
            unknown = [b for b in res if b not in buf_map]
            if unknown:
                raise GraphError(f"{who}: results name unknown buffers {_r(unknown)}")
        self.results: frozenset[BufferId] = res

    # -- networkx --------------------------------------------------------------------------
    @classmethod
    def from_networkx(cls, G: Any, size: str | None = None, time: str | None = None,
                      name: str | None = None) -> TaskGraph:
        """The TaskGraph of a networkx DiGraph whose node ``v`` is a task writing buffer ``v``.

        ``size``/``time`` name the node attributes of the output's bytes and the task's time
        (default: ``cost_ram``/``cost_cpu`` or ``out_cost``/``duration``, as the first node
        has); an edge ``u -> v`` makes ``v`` read ``u``; other node attributes go to
        :attr:`Task.attrs`. See :func:`thrifty.graph.taskgraph_io.taskgraph_from_networkx`.

        Example
        -------
        >>> import networkx as nx
        >>> G = nx.DiGraph([("a", "b")])
        >>> nx.set_node_attributes(G, {"a": 8, "b": 4}, "cost_ram")
        >>> nx.set_node_attributes(G, 1.0, "cost_cpu")
        >>> g = TaskGraph.from_networkx(G)
        >>> g.order, g.tasks["b"].reads, g.buffers["a"].size
        (('a', 'b'), ('a',), 8)
        """
        from thrifty.graph.formats.nx import from_networkx

        return from_networkx(G, size, time, name)[0]

    def to_networkx(self, shape: str = "checkmate") -> Any:
        """A networkx DiGraph with one node per task, in the ``"checkmate"`` (``cost_ram``,
        ``cost_cpu``) or ``"layered"`` (``out_cost``, ``duration``) attribute shape.

        Every task must write exactly one buffer with its own id, with no inputs,
        workspaces or kernels; :meth:`from_networkx` reads the result back equal.
        """
        from thrifty.graph.formats.nx import to_networkx

        return to_networkx(self, shape)

    # -- structure -------------------------------------------------------------------------
    def predecessors(self, task: TaskId) -> tuple[TaskId, ...]:
        """Tasks that produce a buffer ``task`` reads (each once)."""
        return self._preds[task]

    def successors(self, task: TaskId) -> tuple[TaskId, ...]:
        """Tasks that read a buffer ``task`` writes (each once)."""
        return self._succs[task]

    @property
    def inputs(self) -> tuple[BufferId, ...]:
        """Buffers with no producer: resident when a run starts."""
        return tuple(b for b, buf in self.buffers.items() if buf.producer is None)

    def total_time(self) -> float:
        """The sum of all task times (the makespan of a run with no recomputation)."""
        return float(sum(t.time for t in self.tasks.values()))

    def __len__(self) -> int:
        return len(self.tasks)

    def __repr__(self) -> str:
        return (f"TaskGraph({self.name!r}, tasks={len(self.tasks)}, "
                f"buffers={len(self.buffers)}, results={len(self.results)})")


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, so that error messages stay one short
    line whatever ids and names a file holds."""
    try:
        text = repr(value)
    except (RecursionError, ValueError):  # deep nesting, or an int too long to print
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit - 5] + " ...>"


_r = short_repr


def _topological_order(tasks: Mapping[TaskId, Task], preds: Mapping[TaskId, tuple | list],
                       succs: Mapping[TaskId, tuple | list], name: str) -> tuple[TaskId, ...]:
    """Kahn's algorithm, stable in insertion order; raises CycleError naming one cycle."""
    indeg = {t: len(p) for t, p in preds.items()}
    ready = [t for t in tasks if indeg[t] == 0]
    ready.reverse()
    order: list[TaskId] = []
    while ready:
        t = ready.pop()
        order.append(t)
        newly = []
        for s in succs[t]:
            indeg[s] -= 1
            if indeg[s] == 0:
                newly.append(s)
        ready.extend(reversed(newly))
    if len(order) != len(tasks):
        left = {t for t, d in indeg.items() if d > 0}
        cycle = find_cycle(left, lambda t: [p for p in preds[t] if p in left])
        raise CycleError(
            f"{name}: the graph has a cycle: {' -> '.join(map(_r, (cycle + cycle[:1])[:12]))}"
            + (" -> ..." if len(cycle) > 11 else ""),
            cycle)
    return tuple(order)


def find_cycle(nodes: Iterable[Hashable],
               neighbours: Callable[[Hashable], Iterable[Hashable]]) -> list[Hashable]:
    """Return one cycle among ``nodes`` (every node there must lie on or lead to a cycle)."""
    nodes = list(nodes)
    if not nodes:
        return []
    seen_at: dict[Hashable, int] = {}
    path: list[Hashable] = []
    v = nodes[0]
    while v not in seen_at:
        seen_at[v] = len(path)
        path.append(v)
        v = next(iter(neighbours(v)))
    cycle = path[seen_at[v]:]
    cycle.reverse()  # neighbours are predecessors: reverse to read in edge direction
    return cycle

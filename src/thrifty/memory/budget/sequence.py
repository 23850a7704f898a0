"""From a sequence of computations to a plan: eager frees, the least memory for that sequence.

Given the order in which tasks are computed (recomputations included), freeing each copy of
a buffer right after its last read before its producer runs again (or after it is written,
when nothing reads it) holds, at every step, only what a later step reads: no plan with the
same computations uses less memory. Exact planners (the chain DP, the MILP) therefore decide
only the computations (and the paging MILP its stages' transfers, :func:`staged_plan`), and
this pass writes the frees.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from thrifty.graph.taskgraph import TaskGraph
from thrifty.memory.model import Plan, Step

__all__ = ["Stage", "plan_from_sequence", "staged_plan"]


def plan_from_sequence(g: TaskGraph, seq: Sequence[Hashable], **plan_kw: object) -> Plan:
    """The plan computing ``seq`` in order, with every buffer freed as early as possible.

    Inputs that nothing reads (and are not results) are freed first. Results are never
    freed.

    Example
    -------
    >>> from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
    >>> g = TaskGraph([Task("a", writes=("x",)), Task("b", reads=("x",), writes=("y",))],
    ...               [Buffer("x", 8, "a"), Buffer("y", 4, "b")])
    >>> [(s.op, s.target) for s in plan_from_sequence(g, ["a", "b"]).steps]
    [('compute', 'a'), ('compute', 'b'), ('free', 'x')]
    """
    return staged_plan(g, [((), (), tuple(seq), (), ())], **plan_kw)


#: One stage of a staged plan: (prefetch now, prefetch for later, computes, offload old,
#: offload new), in that order within the stage (the paging MILP's, :mod:`.milp`).
Stage = tuple[tuple[Hashable, ...], tuple[Hashable, ...], tuple[Hashable, ...],
              tuple[Hashable, ...], tuple[Hashable, ...]]


def staged_plan(g: TaskGraph, stages: Sequence[Stage], **plan_kw: object) -> Plan:
    """The plan of ``stages`` (prefetches, computes, offloads per stage), freeing eagerly.

    A buffer's device copy is freed right after its last use (a read by a compute, or an
    offload) before it is next written or prefetched, or right after it is written or
    prefetched when nothing uses it; inputs nothing uses are freed first; results are never
    freed.

    Example
    -------
    >>> from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
    >>> g = TaskGraph([Task("a", writes=("x",), time=1.0),
    ...                Task("b", reads=("x",), writes=("y",), time=1.0),
    ...                Task("c", reads=("x", "y"), writes=("z",), time=1.0)],
    ...               [Buffer("x", 4, "a"), Buffer("y", 4, "b"), Buffer("z", 4, "c")])
    >>> p = staged_plan(g, [((), (), ("a",), (), ()), ((), (), ("b",), (), ("x",)),
    ...                     (("x",), (), ("c",), (), ())])
    >>> [(s.op, s.target) for s in p.steps]  # doctest: +NORMALIZE_WHITESPACE
    [('compute', 'a'), ('compute', 'b'), ('offload', 'x'), ('prefetch', 'x'),
     ('compute', 'c'), ('free', 'x'), ('free', 'y')]
    """
    events: list[Step] = []
    for pn, pl, comps, oo, on in stages:
        events.extend(Step("prefetch", b) for b in (*pn, *pl))
        events.extend(Step("compute", t) for t in comps)
        events.extend(Step("offload", b) for b in (*oo, *on))
    live: set[Hashable] = set(g.results)
    frees_after: list[list[Hashable]] = [[] for _ in events]
    for i in range(len(events) - 1, -1, -1):
        st = events[i]
        if st.op == "offload":
            live.add(st.target)
        elif st.op == "prefetch":
            if st.target not in live:
                frees_after[i].append(st.target)
            live.discard(st.target)
        else:
            task = g.tasks[st.target]
            for w in task.writes:
                if w in g.results:
                    continue
                if w not in live:
                    frees_after[i].append(w)
                live.discard(w)
            for r in dict.fromkeys(task.reads):
                if r not in live:
                    frees_after[i].append(r)
                    live.add(r)
    steps: list[Step] = [Step("free", b) for b, buf in g.buffers.items()
                         if buf.producer is None and b not in live]
    for i, st in enumerate(events):
        steps.append(st)
        steps.extend(Step("free", b) for b in frees_after[i])
    return Plan(tuple(steps), **plan_kw)  # type: ignore[arg-type]

"""From a sequence of computations to a plan: eager frees, the least memory for that sequence.

Given the order in which tasks are computed (recomputations included), freeing each copy of
a buffer right after its last read before its producer runs again (or after it is written,
when nothing reads it) holds, at every step, only what a later step reads: no plan with the
same computations uses less memory. Exact planners (the chain DP, the MILP) therefore decide
only the computations, and this pass writes the frees.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from thrifty.graph.taskgraph import TaskGraph
from thrifty.memory.model import Plan, Step

__all__ = ["plan_from_sequence"]


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
    live: set[Hashable] = set(g.results)
    frees_after: list[list[Hashable]] = [[] for _ in seq]
    for i in range(len(seq) - 1, -1, -1):
        task = g.tasks[seq[i]]
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
    for i, t in enumerate(seq):
        steps.append(Step("compute", t))
        steps.extend(Step("free", b) for b in frees_after[i])
    return Plan(tuple(steps), **plan_kw)  # type: ignore[arg-type]

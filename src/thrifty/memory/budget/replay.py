"""The planners' own fast replay of a plan: peak, makespan and per-step memory.

This is the estimate the planners optimise against while they search; it follows the time
and memory model documented in :mod:`thrifty.memory.simulate` (step accounting; one copy
stream; an offload releases its memory when its copy ends and every later compute waits for
that; a prefetch starts no earlier than the end of the compute issued before it). It does
not validate: :func:`thrifty.memory.simulate` stays the independent oracle, and the tests
check that both agree on every plan.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from thrifty.graph.taskgraph import TaskGraph
from thrifty.memory.model import Step

__all__ = ["Estimate", "estimate"]


@dataclass(frozen=True, slots=True)
class Estimate:
    """Peak bytes, makespan, compute time, and the bytes in use during each step."""

    peak: int
    makespan: float
    compute_time: float
    during: tuple[int, ...]


def estimate(g: TaskGraph, steps: Sequence[Step], bandwidth: float | None) -> Estimate:
    """Replay ``steps`` on ``g`` (assumed valid) and return an :class:`Estimate`.

    Example
    -------
    >>> from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
    >>> g = TaskGraph([Task("a", writes=("x",), time=1.0)], [Buffer("x", 8, "a")])
    >>> estimate(g, [Step("compute", "a")], None).peak
    8
    """
    size = {b: buf.size for b, buf in g.buffers.items()}
    resident: set[Hashable] = {b for b, buf in g.buffers.items() if buf.producer is None}
    mem = sum(size[b] for b in resident)
    peak = mem
    ready: dict[Hashable, float] = dict.fromkeys(resident, 0.0)
    host_at: dict[Hashable, float] = {}
    compute_end = copy_end = release_at = compute_time = makespan = 0.0
    during: list[int] = []

    def xfer(b: Hashable) -> float:
        if bandwidth is None or math.isinf(bandwidth):
            return 0.0
        return size[b] / bandwidth

    for st in steps:
        x = st.target
        if st.op == "compute":
            task = g.tasks[x]
            start = max(compute_end, release_at)
            for b in task.reads:
                start = max(start, ready[b])
            out = sum(size[b] for b in task.writes)
            d = mem + out + task.workspace
            peak = max(peak, d)
            end = start + task.time
            for b in task.writes:
                if b not in resident:
                    mem += size[b]
                    resident.add(b)
                ready[b] = end
            compute_end = end
            compute_time += task.time
            makespan = max(makespan, end)
        elif st.op == "free":
            resident.discard(x)
            mem -= size[x]
            d = mem
        elif st.op == "offload":
            d = mem
            start = max(copy_end, ready[x])
            end = start + xfer(x)
            host_at[x] = end
            copy_end = end
            release_at = max(release_at, end)
            makespan = max(makespan, end)
            resident.discard(x)
            mem -= size[x]
        else:
            start = max(copy_end, compute_end, host_at[x])
            end = start + xfer(x)
            ready[x] = end
            copy_end = end
            resident.add(x)
            mem += size[x]
            d = mem
            peak = max(peak, mem)
            makespan = max(makespan, end)
        during.append(d)
    return Estimate(peak, makespan, compute_time, tuple(during))

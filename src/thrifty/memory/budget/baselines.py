"""The √n checkpointing baseline (Chen, Xu, Zhang and Guestrin, "Training Deep Nets with
Sublinear Memory Cost", 2016).

The forward tasks (``Task.attrs["backward"]`` is ``False``) are cut into segments of ``k``
tasks in the order of first computations; only the outputs of each segment's last task are
kept after the forward pass, every other forward output is freed after its last forward
reader, and recomputed on demand (from the nearest kept buffers) during the backward pass.
As in the baselines of Checkmate (Jain et al., MLSys 2020), ``k`` is swept (around √n and,
on small graphs, every value) and the cheapest plan that fits is returned.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

from thrifty.graph.taskgraph import TaskGraph
from thrifty.memory.budget.evict import NoRoom, Policy, evict_plan
from thrifty.memory.budget.replay import estimate
from thrifty.memory.model import Plan

__all__ = ["forward_tasks", "sqrt_n_plan"]


def forward_tasks(g: TaskGraph, order: Sequence[Hashable]) -> list[Hashable]:
    """Tasks marked ``attrs["backward"] is False``, in ``order`` (empty when unmarked)."""
    marks = {t: g.tasks[t].attrs.get("backward") for t in order}
    if not any(m is True for m in marks.values()):
        return []
    return [t for t in order if marks[t] is False]


def sqrt_n_plan(g: TaskGraph, order: Sequence[Hashable], budget: int) -> Plan:
    """The cheapest segmented-checkpointing plan that fits ``budget``, or raise NoRoom.

    Example
    -------
    >>> from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
    >>> f = [Task(f"f{i}", reads=(f"a{i-1}",) if i else (), writes=(f"a{i}",), time=1.0,
    ...           attrs={"backward": False}) for i in range(4)]
    >>> b = [Task("b", reads=tuple(f"a{i}" for i in range(4)), writes=("d",), time=1.0,
    ...           attrs={"backward": True})]
    >>> bufs = [Buffer(f"a{i}", 1, f"f{i}") for i in range(4)] + [Buffer("d", 1, "b")]
    >>> sqrt_n_plan(TaskGraph(f + b, bufs), [t.id for t in f + b], 5).method
    'sqrt_n'
    """
    fwd = forward_tasks(g, order)
    if not fwd:
        raise NoRoom("√n checkpointing needs tasks marked as forward and backward")
    n = len(fwd)
    ks = {max(1, round(math.sqrt(n) * c)) for c in (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)}
    if n <= 64:
        ks |= set(range(1, n + 1))
    fset = frozenset(fwd)
    best: tuple[float, Plan] | None = None
    for k in sorted(ks):
        ck = frozenset(w for j, t in enumerate(fwd) if j % k == k - 1
                       for w in g.tasks[t].writes)
        pol = Policy(recompute=True, offload=False, evict=False, checkpoints=ck, forward=fset)
        try:
            p = evict_plan(g, order, budget, None, pol)
        except NoRoom:
            continue
        t = estimate(g, p.steps, None).makespan
        if best is None or t < best[0]:
            best = (t, Plan(p.steps, budget=budget, method="sqrt_n",
                            info={"segment": k}))
    if best is None:
        raise NoRoom(f"no segment size of √n checkpointing fits {budget} bytes")
    return best[1]

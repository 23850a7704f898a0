"""Refinements of a plan: hoist prefetches so transfers hide behind compute, and a local
search over the eviction decisions (keep / recompute / offload per buffer).

The local search is a first-improvement descent in the spirit of the refinement step of
POET (Patil et al., ICML 2022) and of Checkmate's rounding: each move forces one evicted
buffer's decision and replans with :func:`~thrifty.memory.budget.evict.evict_plan`; a move
is kept when the estimated makespan drops. It stops at its time limit.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Hashable, Sequence
from dataclasses import replace

from thrifty.graph.taskgraph import TaskGraph
from thrifty.memory.budget.evict import NoRoom, Policy, evict_plan
from thrifty.memory.budget.replay import estimate
from thrifty.memory.model import Plan

__all__ = ["hoist_prefetches", "local_search"]


def hoist_prefetches(g: TaskGraph, plan: Plan, budget: int, bandwidth: float | None) -> Plan:
    """Move each prefetch earlier, past computes, until its transfer can hide behind them.

    A prefetch moves back while the bytes in use at every step it passes stay within
    ``budget`` and it does not pass a step touching its buffer. The result is kept only if
    its estimated makespan is not worse and its peak fits.

    Example
    -------
    >>> from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
    >>> from thrifty.memory.model import Step
    >>> g = TaskGraph([Task("a", writes=("x",), time=1.0)], [Buffer("x", 8, "a")])
    >>> p = Plan((Step("compute", "a"),))
    >>> hoist_prefetches(g, p, 8, None) is p
    True
    """
    if bandwidth is None or not any(s.op == "prefetch" for s in plan.steps):
        return plan
    steps = list(plan.steps)
    during = list(estimate(g, steps, bandwidth).during)
    size = {b: buf.size for b, buf in g.buffers.items()}
    j = 0
    while j < len(steps):
        st = steps[j]
        if st.op != "prefetch":
            j += 1
            continue
        b = st.target
        x = 0.0 if math.isinf(bandwidth) else size[b] / bandwidth
        k, hidden = j, 0.0
        while k > 0 and hidden < x:
            prev = steps[k - 1]
            if prev.target == b and prev.op != "compute":
                break
            if prev.op == "compute":
                task = g.tasks[prev.target]
                if b in task.reads or b in task.writes:
                    break
            if during[k - 1] + size[b] > budget:
                break
            if prev.op == "compute":
                hidden += g.tasks[prev.target].time
            k -= 1
        if k < j:
            steps.insert(k, steps.pop(j))
            during.pop(j)
            for i in range(k, j):
                during[i] += size[b]
            during.insert(k, (during[k - 1] if k > 0 else 0) + size[b])
        j += 1
    new = replace(plan, steps=tuple(steps))
    old_e, new_e = estimate(g, plan.steps, bandwidth), estimate(g, new.steps, bandwidth)
    if new_e.peak <= budget and new_e.makespan <= old_e.makespan:
        return new
    return plan


def _score(g: TaskGraph, plan: Plan, budget: int, bandwidth: float | None) -> tuple[Plan, float]:
    plan = hoist_prefetches(g, plan, budget, bandwidth)
    return plan, estimate(g, plan.steps, bandwidth).makespan


def local_search(g: TaskGraph, order: Sequence[Hashable], budget: int,
                 bandwidth: float | None, policy: Policy, start: Plan,
                 time_limit: float, seed: int = 0) -> Plan:
    """Improve ``start`` (made by ``evict_plan(g, order, budget, bandwidth, policy)``).

    Tries, per evicted buffer, forcing it to be kept, recomputed or offloaded, and keeps
    each change that lowers the estimated makespan, until ``time_limit`` seconds.
    """
    deadline = time.perf_counter() + time_limit
    best, best_t = _score(g, start, budget, bandwidth)
    force = dict(policy.force)
    rng = random.Random(seed)
    improved = True
    while improved and time.perf_counter() < deadline:
        improved = False
        evicted = list(dict.fromkeys(s.target for s in best.steps
                                     if s.op in ("free", "offload")))
        rng.shuffle(evicted)
        for b in evicted:
            if time.perf_counter() >= deadline:
                break
            for how in ("keep", "offload", "free"):
                if force.get(b) == how or (how == "offload" and bandwidth is None):
                    continue
                if policy.force.get(b) == "free" and how == "offload":
                    continue
                trial = {**force, b: how}
                try:
                    cand = evict_plan(g, order, budget, bandwidth, replace(policy, force=trial))
                except NoRoom:
                    continue
                cand, t = _score(g, cand, budget, bandwidth)
                if t < best_t - 1e-12 * max(1.0, best_t):
                    best, best_t, force, improved = cand, t, trial, True
                    break
    return best


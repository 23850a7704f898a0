"""Refinements of a plan: hoist prefetches so transfers hide behind compute, and a local
search over the eviction decisions (keep / recompute / offload / drop per buffer).

The local search is a first-improvement descent in the spirit of the refinement step of
POET (Patil et al., ICML 2022) and of Checkmate's rounding: each move forces one buffer's
decision and replans with :func:`~thrifty.memory.budget.evict.evict_plan`; a move is kept
when the estimated makespan drops (or stays and the bytes in use drop). When the descent
ends, it restarts from random perturbations of the best decisions (an iterated local
search); it stops after a few restarts without improvement or at its time limit (CPU time).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Hashable, Sequence
from dataclasses import replace

from thrifty.graph.taskgraph import TaskGraph
from thrifty.memory.budget.evict import NoRoom, Policy, cpu_bound, evict_plan
from thrifty.memory.budget.replay import Estimate, estimate, memo, recall, remember
from thrifty.memory.model import Plan, Step

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
    return _hoist(g, plan, budget, bandwidth)[0]


def _hoist(g: TaskGraph, plan: Plan, budget: int, bandwidth: float | None
           ) -> tuple[Plan, Estimate | None]:
    """:func:`hoist_prefetches`, and the estimate of the plan it returns when it made one
    (``None`` when it returned ``plan`` without replaying it)."""
    if bandwidth is None or not any(s.op == "prefetch" for s in plan.steps):
        return plan, None
    store = memo()
    if store is not None:  # the same steps hoisted before within this planning call
        hit = recall(store, "hoist", (g, plan.steps), budget, bandwidth)
        if isinstance(hit, tuple):
            new_steps: tuple[Step, ...] = hit
            return replace(plan, steps=new_steps), estimate(g, new_steps, bandwidth)
        if hit is False:
            return plan, estimate(g, plan.steps, bandwidth)
    new, est = _hoist_once(g, plan, budget, bandwidth)
    if store is not None:
        remember(store, "hoist", (g, plan.steps), budget, bandwidth,
                 value=False if new is plan else new.steps)
    return new, est


def _hoist_once(g: TaskGraph, plan: Plan, budget: int, bandwidth: float
                ) -> tuple[Plan, Estimate]:
    old_e = estimate(g, plan.steps, bandwidth)
    steps = list(plan.steps)
    during = list(old_e.during)
    moved = False
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
            moved = True
            steps.insert(k, steps.pop(j))
            during.pop(j)
            for i in range(k, j):
                during[i] += size[b]
            during.insert(k, (during[k - 1] if k > 0 else 0) + size[b])
        j += 1
    if not moved:
        return plan, old_e
    new = replace(plan, steps=tuple(steps))
    new_e = estimate(g, new.steps, bandwidth)
    if new_e.peak <= budget and new_e.makespan <= old_e.makespan:
        return new, new_e
    return plan, old_e


def _score(g: TaskGraph, plan: Plan, budget: int, bandwidth: float | None
           ) -> tuple[Plan, float, int]:
    """The plan with its prefetches hoisted, its makespan, and the bytes in use summed over
    its steps (the tie-break: of two plans of one makespan, the one holding less memory
    leaves more room to the next move)."""
    plan, est = _hoist(g, plan, budget, bandwidth)
    if est is None:
        est = estimate(g, plan.steps, bandwidth)
    return plan, est.makespan, sum(est.during)


def _moves(g: TaskGraph, plan: Plan, policy: Policy, rng: random.Random
           ) -> list[tuple[Hashable, tuple[str, ...]]]:
    """The moves to try, in order: for each evicted buffer (shuffled), keep it, offload it
    or recompute it; then, with recompute, for each buffer the plan never evicts (shuffled),
    drop it after each use (so that what the eviction would have evicted instead stays)."""
    evicted = list(dict.fromkeys(s.target for s in plan.steps if s.op in ("free", "offload")))
    rng.shuffle(evicted)
    moves: list[tuple[Hashable, tuple[str, ...]]] = [(b, ("keep", "offload", "free"))
                                                     for b in evicted]
    if policy.recompute:
        gone = set(evicted)
        others = [b for b, buf in g.buffers.items() if b not in gone
                  and buf.producer is not None and b not in g.results]
        rng.shuffle(others)
        moves += [(b, ("drop",)) for b in others]
    return moves


def local_search(g: TaskGraph, order: Sequence[Hashable], budget: int,
                 bandwidth: float | None, policy: Policy, start: Plan,
                 time_limit: float, seed: int = 0) -> Plan:
    """Improve ``start`` (made by ``evict_plan(g, order, budget, bandwidth, policy)``).

    A descent (:func:`_descend`): per evicted buffer, forcing it to be kept, recomputed or
    offloaded, and per buffer never evicted, dropping it after each use (:func:`_moves`);
    it keeps each change that lowers the estimated makespan, or keeps it and lowers the
    bytes in use summed over the steps. When the descent ends before ``time_limit``
    seconds, it restarts from the best plan with a few decisions changed at random (an
    iterated local search), until the time is up, five restarts in a row found nothing
    better, or the plan has no overhead left (its makespan is the tasks' total time); the
    best plan found is returned. Inside :func:`~thrifty.memory.budget.evict.passes_of` (as
    in :func:`thrifty.memory.budget.plan`), a pass still running at the time limit gives
    up, so that the search ends within about one check interval of its limit.
    """
    deadline = time.process_time() + time_limit
    with cpu_bound(deadline):  # a pass still running at the deadline gives up
        return _search(g, order, budget, bandwidth, policy, start, deadline, seed)


def _search(g: TaskGraph, order: Sequence[Hashable], budget: int, bandwidth: float | None,
            policy: Policy, start: Plan, deadline: float, seed: int) -> Plan:
    rng = random.Random(seed)
    cur = _descend(g, order, budget, bandwidth, policy, dict(policy.force),
                   _score(g, start, budget, bandwidth), deadline, rng)
    best = cur
    pool = [b for b, buf in g.buffers.items() if buf.producer is not None]
    hows = ("keep", "drop", "free") + (("offload",) if bandwidth is not None else ())
    kicks = 0
    floor = g.total_time() * (1 + 1e-12)  # no plan runs faster: restarts cannot gain
    while time.process_time() < deadline and pool and kicks < _KICKS and best[2] > floor:
        kicks += 1
        force = dict(best[0])
        for b in rng.sample(pool, min(len(pool), rng.randint(2, 4))):
            how = rng.choice(hows)
            if not (policy.force.get(b) == "free" and how == "offload"):
                force[b] = how
        try:
            p = evict_plan(g, order, budget, bandwidth, replace(policy, force=force))
        except NoRoom:
            continue
        cur = _descend(g, order, budget, bandwidth, policy, force,
                       _score(g, p, budget, bandwidth), deadline, rng)
        if cur[2] < best[2] - 1e-12 * max(1.0, best[2]):
            best, kicks = cur, 0
    return best[1]


#: The iterated local search stops after this many restarts in a row that found nothing
#: better (or at its time limit).
_KICKS = 5

_State = tuple[dict[Hashable, str], Plan, float, int]


def _descend(g: TaskGraph, order: Sequence[Hashable], budget: int, bandwidth: float | None,
             policy: Policy, force: dict[Hashable, str], scored: tuple[Plan, float, int],
             deadline: float, rng: random.Random) -> _State:
    """First-improvement descent from ``scored`` (the plan of ``force``) until no move
    improves or the deadline passes; returns (force, plan, makespan, bytes summed)."""
    best, best_t, best_area = scored
    improved = True
    while improved and time.process_time() < deadline:
        improved = False
        for b, hows in _moves(g, best, policy, rng):
            if time.process_time() >= deadline:
                break
            for how in hows:
                if force.get(b) == how or (how == "offload" and bandwidth is None):
                    continue
                if policy.force.get(b) == "free" and how == "offload":
                    continue
                trial = {**force, b: how}
                try:
                    cand = evict_plan(g, order, budget, bandwidth, replace(policy, force=trial))
                except NoRoom:
                    continue
                cand, t, area = _score(g, cand, budget, bandwidth)
                tol = 1e-12 * max(1.0, best_t)
                if t < best_t - tol or (t <= best_t + tol and area < best_area):
                    best, best_t, best_area, force, improved = cand, t, area, trial, True
                    break
    return force, best, best_t, best_area

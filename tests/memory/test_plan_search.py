"""The eviction planner's search machinery: shared passes, time-bounded passes, the work cap,
forced drops, and the iterated local search; every plan replayed by the simulator."""

from __future__ import annotations

import math

import pytest

from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
from thrifty.memory.budget import lower_bound, plan
from thrifty.memory.budget.evict import NoRoom, Policy, evict_plan, passes_of, time_bound
from thrifty.memory.budget.milp import milp_plan
from thrifty.memory.budget.refine import local_search
from thrifty.memory.budget.replay import estimate
from thrifty.memory.order.generate import nn_like, random_layered
from thrifty.memory.schedule import schedule
from thrifty.memory.simulate import simulate

from .test_budget import random_dag


def check(g, p, budget, bw=None):
    r = simulate(g, p, offload_bandwidth=bw)
    assert r.peak <= budget, f"plan peak {r.peak} > budget {budget}"
    e = estimate(g, p.steps, bw)
    assert e.peak == r.peak and math.isclose(e.makespan, r.makespan, rel_tol=1e-9,
                                             abs_tol=1e-9)
    return r


def test_identical_passes_run_once_within_a_plan_call():
    g = random_dag(3, 12)
    order = tuple(schedule(g).order)
    b = schedule(g).peak
    with passes_of(g):
        p1 = evict_plan(g, order, b, None, Policy(offload=False))
        p2 = evict_plan(g, order, b, None, Policy(offload=False))
        p3 = evict_plan(g, order, b, None, Policy(offload=False, lookahead=False))
    assert p1 is p2 and p3 is not p1
    outside = evict_plan(g, order, b, None, Policy(offload=False))
    assert outside is not p1 and outside.steps == p1.steps


def test_a_failed_pass_fails_again_and_a_timed_out_one_is_not_remembered():
    g = random_layered(600, width=8, seed=1)
    order = tuple(g.order)
    peak = simulate(g, order).peak
    with passes_of(g):
        with pytest.raises(NoRoom):
            evict_plan(g, order, lower_bound(g) - 1, None, Policy(offload=False))
        with pytest.raises(NoRoom):
            evict_plan(g, order, lower_bound(g) - 1, None, Policy(offload=False))
        with time_bound(0.0), pytest.raises(NoRoom, match="time bound"):
            evict_plan(g, order, peak, None, Policy(offload=False))
        # the same pass, no longer bounded, completes: the time-out was not remembered
        p = evict_plan(g, order, peak, None, Policy(offload=False))
        # a plain replay (nothing evicted) is never bounded
        with time_bound(0.0):
            evict_plan(g, order, peak, None, Policy(recompute=False, offload=False,
                                                    evict=False))
    check(g, p, peak)


def test_work_cap_counts_against_the_tasks_reached():
    """A chain whose backward pass, under a tight budget, recomputes the forward prefix for
    every backward task (quadratic work): a small cap stops it, no cap lets it finish."""
    n = 40
    tasks = [Task(f"f{i}", reads=(f"a{i-1}",) if i else (), writes=(f"a{i}",), time=1.0)
             for i in range(n)]
    bufs = [Buffer(f"a{i}", 1, f"f{i}") for i in range(n)]
    for i in range(n - 1, -1, -1):
        reads = (f"a{i}",) + ((f"d{i+1}",) if i < n - 1 else ())
        tasks.append(Task(f"b{i}", reads=reads, writes=(f"d{i}",), time=1.0))
        bufs.append(Buffer(f"d{i}", 1, f"b{i}"))
    g = TaskGraph(tasks, bufs, name="chain")
    order = [t.id for t in tasks]
    b = 6
    p = evict_plan(g, order, b, None, Policy(offload=False, max_work=None))
    computes = sum(s.op == "compute" for s in p.steps)
    assert computes > 3 * len(order)  # the plan exists but does that much work
    check(g, p, b)
    with pytest.raises(NoRoom, match="computes per task"):
        evict_plan(g, order, b, None, Policy(offload=False, max_work=1.0))
    assert computes > 1.0 * len(order) + 64


def test_drop_frees_a_buffer_after_its_use_and_recomputes_it():
    # a -> x; x read by c early and by e late; x dropped: freed after c, recomputed for e
    g = TaskGraph([Task("a", writes=("x",), time=2.0),
                   Task("c", reads=("x",), writes=("y",), time=1.0),
                   Task("d", reads=("y",), writes=("z",), time=1.0),
                   Task("e", reads=("x", "z"), writes=("w",), time=1.0)],
                  [Buffer("x", 4, "a"), Buffer("y", 4, "c"), Buffer("z", 4, "d"),
                   Buffer("w", 4, "e")])
    order = ["a", "c", "d", "e"]
    keep = evict_plan(g, order, 100, None, Policy(offload=False))
    drop = evict_plan(g, order, 100, None, Policy(offload=False, force={"x": "drop"}))
    ops = [(s.op, s.target) for s in drop.steps]
    assert ops.index(("free", "x")) == ops.index(("compute", "c")) + 1
    assert sum(1 for s in drop.steps if s.op == "compute" and s.target == "a") == 2
    assert check(g, drop, 100).makespan == check(g, keep, 100).makespan + 2.0
    def during_d(p):
        i = [(s.op, s.target) for s in p.steps].index(("compute", "d"))
        return estimate(g, p.steps, None).during[i]
    assert during_d(drop) == during_d(keep) - 4  # x is not held while d runs


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("bw", [None, 3.0])
def test_local_search_is_never_worse_and_replays(seed, bw):
    g = random_dag(40 + seed, 10)
    order = tuple(schedule(g).order)
    lb, pk = lower_bound(g), schedule(g).peak
    for b in sorted({lb, (lb + pk) // 2, pk}):
        pol = Policy(offload=bw is not None, seed=seed)
        try:
            start = evict_plan(g, order, b, bw, pol)
        except NoRoom:
            continue
        p = local_search(g, order, b, bw, pol, start, time_limit=0.5, seed=seed)
        r = check(g, p, b, bw)
        assert r.makespan <= estimate(g, start.steps, bw).makespan + 1e-9


def test_nn_like_within_one_point_of_the_milp_optimum():
    """The residual training graph where the plain descent stopped 1.3 points above the
    MILP's proven optimum (budget 0.6 of the best schedule's peak)."""
    g = nn_like(10, seed=10)
    order = tuple(schedule(g, time_limit=2.0).order)
    b = int(0.6 * simulate(g, order).peak)
    mp = milp_plan(g, b, order=order, time_limit=60)
    assert mp is not None and mp.info["optimal"]
    ours = plan(g, b, order=order, use_milp=False, time_limit=5.0)
    total = g.total_time()
    r = check(g, ours, b)
    assert r.makespan >= simulate(g, mp).makespan - 1e-9  # the optimum is a true bound
    assert r.makespan / total <= simulate(g, mp).makespan / total + 0.01


@pytest.mark.parametrize("bw", [None, 1e3])
@pytest.mark.parametrize("seed", range(4))
def test_the_one_evictable_buffer_is_found_among_many_resident(seed, bw):
    # 1,000 results stay resident (a sampled pass sees 64 of them and the farthest next
    # uses, all results); the only buffer that can make room for w's workspace is x, read
    # again soon: a pass that looked at its sample only would call the budget too small
    n = 1000
    tasks = [Task("t0", writes=("x",), time=1.0)]
    tasks += [Task(f"r{k}", writes=(f"y{k}",), time=1.0) for k in range(n)]
    tasks += [Task("w", workspace=150, time=1.0),
              Task("u", reads=("x",), writes=("z",), time=1.0)]
    bufs = [Buffer("x", 100, "t0"), Buffer("z", 1, "u")]
    bufs += [Buffer(f"y{k}", 1, f"r{k}") for k in range(n)]
    g = TaskGraph(tasks, bufs, results=[f"y{k}" for k in range(n)] + ["z"])
    order = [t.id for t in tasks]
    budget = n + 150  # x (100 bytes) does not fit beside the results and w's workspace
    with pytest.raises(NoRoom):
        evict_plan(g, order, budget - 1, bw, Policy(seed=seed, offload=False))
    p = evict_plan(g, order, budget, bw, Policy(seed=seed, offload=bw is not None))
    sim = simulate(g, p, offload_bandwidth=bw)
    assert sim.peak <= budget
    assert any(s.op in ("free", "offload") and s.target == "x" for s in p.steps)

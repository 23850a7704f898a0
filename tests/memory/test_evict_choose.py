"""The eviction pass's bounded choice (``_Builder.choose``) against full scoring
(``_Builder.choose_plain``), the CPU time bound of passes, and the hoisting estimate reuse.

``choose`` must pick exactly what ``choose_plain`` picks (the same buffer and the same way
to evict it, ties to the first candidate), so whole plans must be identical, step for step;
every plan is also replayed by the independent simulator within its budget. The graphs mix
results, inputs, multi-output tasks, workspaces and integer times and sizes (many exact ties
of scores); the candidate limits are lowered so that sampling and the next-use heap run on
small graphs too.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
from thrifty.memory import simulate
from thrifty.memory.budget import evict as E
from thrifty.memory.budget import lower_bound, plan
from thrifty.memory.budget.evict import NoRoom, Policy, cpu_bound, evict_plan, passes_of
from thrifty.memory.budget.refine import _hoist, _score, hoist_prefetches, local_search
from thrifty.memory.budget.replay import estimate, memo, recall, remembered
from thrifty.memory.order.generate import nn_like


class _Plain(E._Builder):
    choose = E._Builder.choose_plain


def random_graph(rng: random.Random, n: int) -> TaskGraph:
    bufs = [Buffer(f"in{i}", rng.choice([1, 2, 4, 8])) for i in range(rng.randint(0, 2))]
    tasks: list[Task] = []
    for t in range(n):
        avail = [b.id for b in bufs]
        k = min(len(avail), rng.choice([0, 1, 1, 2, 2, 3]))
        reads = tuple(rng.sample(avail[-8:], k) if rng.random() < 0.7 else
                      rng.sample(avail, k))
        outs = tuple(f"b{t}_{j}" for j in range(rng.choice([1, 1, 1, 2, 0])))
        tasks.append(Task(f"t{t}", reads=reads, writes=outs,
                          workspace=rng.choice([0, 0, 0, 1, 3]),
                          time=float(rng.randint(0, 3))))
        bufs.extend(Buffer(b, rng.choice([0, 1, 2, 4, 8]), f"t{t}") for b in outs)
    results = None
    if bufs and rng.random() < 0.4:
        results = rng.sample([b.id for b in bufs], rng.randint(0, min(3, len(bufs))))
    return TaskGraph(tasks, bufs, results=results, name="random")


@contextmanager
def limits(scan: int, heap: int) -> Iterator[None]:
    """Candidate limits of the eviction pass (module constants), restored after."""
    before = E._SCAN_LIMIT, E._HEAP_CANDIDATES
    E._SCAN_LIMIT, E._HEAP_CANDIDATES = scan, heap
    try:
        yield
    finally:
        E._SCAN_LIMIT, E._HEAP_CANDIDATES = before


def run(cls: type[E._Builder], g: TaskGraph, order: list, budget: int, bw: float | None,
        pol: Policy) -> tuple | str:
    try:
        return cls(g, order, budget, bw, pol, None).build().steps
    except NoRoom as e:
        return f"NoRoom: {e}"


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 40),
       scan=st.sampled_from([2, 3, 5, 64]), heap=st.sampled_from([1, 2, 4, 64]),
       lookahead=st.booleans(), recompute=st.booleans(),
       bw=st.sampled_from([None, None, 0.5, 3.0, math.inf]), frac=st.floats(0.0, 1.0),
       forced=st.integers(0, 4))
def test_choose_makes_the_plans_of_full_scoring(seed: int, n: int, scan: int, heap: int,
                                                lookahead: bool, recompute: bool,
                                                bw: float | None, frac: float,
                                                forced: int) -> None:
    rng = random.Random(seed)
    g = random_graph(rng, n)
    order = list(g.tasks)
    peak = simulate(g, order).peak
    lb = lower_bound(g, offload=bw is not None)
    budget = int(lb + frac * max(0, peak - lb))
    force = {b: rng.choice(["keep", "free", "offload", "drop"])
             for b in rng.sample(list(g.buffers), min(forced, len(g.buffers)))}
    pol = Policy(lookahead=lookahead, recompute=recompute, offload=bw is not None,
                 seed=seed % 7, force=force)
    with limits(scan, heap):
        fast, slow = run(E._Builder, g, order, budget, bw, pol), run(_Plain, g, order,
                                                                     budget, bw, pol)
    assert fast == slow
    if not isinstance(fast, str):
        r = simulate(g, E.Plan(fast), offload_bandwidth=bw)  # the independent oracle
        assert r.peak <= budget


@pytest.mark.parametrize("frac", [0.7, 0.5])
@pytest.mark.parametrize("bw_scale", [None, 1.0])
def test_choose_makes_the_plans_of_full_scoring_on_an_nn_like_graph(
        frac: float, bw_scale: float | None) -> None:
    """On a training graph large enough that candidates are sampled (beyond the scan
    limit) and taken from the next-use heap, with the default limits."""
    g = nn_like(60, seed=3)
    order = list(g.order)
    peak = simulate(g, order).peak
    bw = (None if bw_scale is None
          else bw_scale * sum(b.size for b in g.buffers.values()) / g.total_time())
    for lookahead in (True, False):
        pol = Policy(lookahead=lookahead, offload=bw is not None)
        fast = run(E._Builder, g, order, int(frac * peak), bw, pol)
        assert not isinstance(fast, str)
        assert fast == run(_Plain, g, order, int(frac * peak), bw, pol)
        assert any(s.op != "compute" for s in fast)  # it did evict
        r = simulate(g, E.Plan(fast), offload_bandwidth=bw)
        assert r.peak <= int(frac * peak)


def test_choose_falls_back_to_full_scoring_when_a_time_is_not_finite() -> None:
    tasks = [Task("a", writes=("x",), time=math.inf), Task("b", reads=("x",), writes=("y",),
                                                          time=1.0),
             Task("c", writes=("z",), time=1.0), Task("d", reads=("x", "y", "z"),
                                                     writes=("w",), time=1.0)]
    g = TaskGraph(tasks, [Buffer("x", 4, "a"), Buffer("y", 4, "b"), Buffer("z", 4, "c"),
                          Buffer("w", 1, "d")])
    order = ["a", "b", "c", "d"]
    b = E._Builder(g, order, 13, None, Policy(), None)
    assert not b.finite
    assert run(E._Builder, g, order, 13, None, Policy()) == run(_Plain, g, order, 13, None,
                                                                 Policy())


def test_a_pass_gives_up_at_its_cpu_bound_and_is_not_remembered() -> None:
    g = nn_like(100, seed=1)  # more than 256 computes: the bound is checked every 256
    order = list(g.order)
    budget = int(0.6 * simulate(g, order).peak)
    pol = Policy()
    with passes_of(g):
        with cpu_bound(time.process_time() - 1.0), pytest.raises(NoRoom, match="time bound"):
            evict_plan(g, order, budget, None, pol)
        p = evict_plan(g, order, budget, None, pol)  # not the remembered time-out
        assert simulate(g, p).peak <= budget
        # a replay that evicts nothing always completes
        with cpu_bound(time.process_time() - 1.0):
            evict_plan(g, order, 2**62, None, Policy(recompute=False, offload=False,
                                                     evict=False))


def test_local_search_past_its_limit_returns_a_plan_within_the_budget() -> None:
    g = nn_like(40, seed=2)
    order = list(g.order)
    budget = int(0.6 * simulate(g, order).peak)
    with passes_of(g):
        start = evict_plan(g, order, budget, None, Policy())
        p = local_search(g, order, budget, None, Policy(), start, time_limit=1e-9)
    assert simulate(g, p).peak <= budget


def _offload_case(seed: int, recompute: bool | None = None):
    """A random graph of 30 tasks, a copy bandwidth and a budget halfway between its lower
    bound and its order's peak, with an eviction plan there (``None`` when there is none);
    ``recompute`` drawn from the seed when not given."""
    rng = random.Random(seed)
    g = random_graph(rng, 30)
    order = list(g.order)
    bw = rng.choice([0.5, 3.0, 50.0])
    budget = int(0.5 * (lower_bound(g) + simulate(g, order).peak))
    rc = rng.random() < 0.5 if recompute is None else recompute
    try:
        return g, bw, budget, evict_plan(g, order, budget, bw, Policy(recompute=rc))
    except NoRoom:
        return None


@pytest.mark.parametrize("seed", range(20))
def test_hoist_returns_the_estimate_of_the_plan_it_returns(seed: int) -> None:
    case = _offload_case(seed)
    if case is None:
        return
    g, bw, budget, p = case
    hoisted, est = _hoist(g, p, budget, bw)
    if est is not None:
        assert est == estimate(g, hoisted.steps, bw)
    assert _score(g, p, budget, bw)[1] == estimate(g, hoisted.steps, bw).makespan
    assert simulate(g, hoisted, offload_bandwidth=bw).peak <= budget


def test_plan_at_scale_replays_within_budget() -> None:
    """``plan`` on a graph where every planner runs, replayed by the simulator."""
    g = nn_like(100, seed=5)
    for bw in (None, sum(b.size for b in g.buffers.values()) / g.total_time()):
        p = plan(g, 0.6, offload_bandwidth=bw, time_limit=0.5, use_milp=False)
        r = simulate(g, p, offload_bandwidth=bw)
        assert r.peak <= p.budget
        assert math.isclose(r.makespan / g.total_time() - 1.0, p.info["overhead"],
                            rel_tol=1e-9, abs_tol=1e-12)


@pytest.mark.parametrize("seed", range(20))
def test_remembered_replays_and_hoists_equal_fresh_ones(seed: int) -> None:
    """Within ``remembered`` (as in ``plan``), a repeated replay or hoist of the same steps
    returns what a fresh one computes; a tuple equal but not identical is replayed anew."""
    case = _offload_case(seed, recompute=True)
    if case is None:
        return
    g, bw, budget, p = case
    fresh_est, fresh_hoist = estimate(g, p.steps, bw), hoist_prefetches(g, p, budget, bw)
    with remembered():
        for _ in range(2):
            assert estimate(g, p.steps, bw) == fresh_est
            assert hoist_prefetches(g, p, budget, bw).steps == fresh_hoist.steps
            assert _hoist(g, p, budget, bw)[0].budget == p.budget
        assert estimate(g, tuple(p.steps), bw) == fresh_est
        assert estimate(g, p.steps, None) == estimate(g, list(p.steps), None)
        other = E.Plan(tuple(reversed(p.steps)))  # another plan: never the remembered one
        assert recall(memo() or {}, "estimate", (g, other.steps), bw) is None

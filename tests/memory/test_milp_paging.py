"""The MILP with paging (recompute + offload, POET-style stages): every plan is replayed by
the simulator, fits its budget, costs at most the MILP's objective, is no worse than the
recompute-only MILP, and equals an independent exhaustive search over the same plan space
on tiny graphs."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from thrifty.errors import InfeasibleBudget
from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
from thrifty.graph.taskgraph_io import load_taskgraph
from thrifty.memory.budget import MILP_MAX_TASKS, lower_bound, plan
from thrifty.memory.budget.milp import milp_plan
from thrifty.memory.budget.replay import estimate
from thrifty.memory.order.generate import random_dag
from thrifty.memory.schedule import schedule
from thrifty.memory.simulate import simulate
from thrifty.testing import require_shared_data


# -- graphs ----------------------------------------------------------------------------------
def chain_graph(sizes, ftimes, btimes, grad=None, name="chain"):
    """A forward/backward chain in the Checkmate shape (b_i reads a_i, a_(i+1), d_(i+1))."""
    n = len(sizes)
    grad = grad or sizes
    tasks, bufs = [], []
    for i in range(n):
        tasks.append(Task(f"f{i}", reads=(f"a{i-1}",) if i else (), writes=(f"a{i}",),
                          time=float(ftimes[i])))
        bufs.append(Buffer(f"a{i}", sizes[i], f"f{i}"))
    for i in range(n - 2, -1, -1):
        reads = (f"a{i}", f"a{i+1}") + ((f"d{i+1}",) if i < n - 2 else ())
        tasks.append(Task(f"b{i}", reads=reads, writes=(f"d{i}",), time=float(btimes[i])))
        bufs.append(Buffer(f"d{i}", grad[i], f"b{i}"))
    return TaskGraph(tasks, bufs, name=name)


def skip_graph():
    """``x`` is written first and read again last; in between, two 4-byte buffers."""
    return TaskGraph([Task("a", writes=("x",), time=3.0),
                      Task("b", reads=("x",), writes=("y",), time=1.0),
                      Task("c", reads=("y",), writes=("z",), time=1.0),
                      Task("d", reads=("x", "z"), writes=("w",), time=1.0)],
                     [Buffer("x", 4, "a"), Buffer("y", 4, "b"), Buffer("z", 4, "c"),
                      Buffer("w", 1, "d")], name="skip")


def input_graph():
    """A large input read by the first and the last task (inputs can be paged too)."""
    return TaskGraph([Task("a", reads=("in",), writes=("x",), time=2.0),
                      Task("b", reads=("x",), writes=("y",), time=4.0),
                      Task("c", reads=("y", "in"), writes=("z",), time=1.0)],
                     [Buffer("in", 6, None), Buffer("x", 3, "a"), Buffer("y", 3, "b"),
                      Buffer("z", 1, "c")], name="input")


def budgets(g, k=4):
    lb, pk = lower_bound(g), schedule(g).peak
    return sorted({lb + (pk - lb) * i // max(1, k - 1) for i in range(k)})


def rate(g):
    """The "PCIe-like" bandwidth of the benchmark: moving every buffer once takes as long
    as the whole computation."""
    return sum(b.size for b in g.buffers.values()) / g.total_time()


def check(g, p, budget, bw):
    """Replay with the simulator: it fits, agrees with the planners' replay, and its
    makespan is at most the MILP's objective (an upper bound by construction)."""
    r = simulate(g, p, offload_bandwidth=bw)
    assert r.peak <= budget, f"plan peak {r.peak} > budget {budget}"
    e = estimate(g, p.steps, bw)
    assert e.peak == r.peak and math.isclose(e.makespan, r.makespan, abs_tol=1e-9)
    assert r.makespan <= p.info["objective"] * (1 + 1e-6) + 1e-9
    if "solver_objective" in p.info:  # the MILP's own stage times price its choices right
        assert p.info["solver_objective"] == pytest.approx(p.info["objective"], rel=1e-6)
    return r


# -- the exhaustive search over the MILP's plan space, written independently -----------------
def staged_optimum(g, budget, order, bw, recompute=True):
    """Least staged cost of any plan in the MILP's plan space, or None.

    Dynamic programming over stages; a state is (buffers on the device, buffers on the
    host) when a stage starts. Stage t: prefetch some host buffers (to read now, or only to
    carry), compute a subset of tasks before t (in order) then t, then keep, drop or offload
    each buffer on the device. Memory is counted step by step with eager frees; the cost of
    a stage is max(Xpn + C + Xon, Xpn + Xpl + Xoo + Xon).
    """
    n = len(order)
    tasks = [g.tasks[t] for t in order]
    size = {b: buf.size for b, buf in g.buffers.items()}
    inputs = frozenset(b for b, buf in g.buffers.items() if buf.producer is None)
    if sum(size[b] for b in inputs) > budget:
        return None

    def xfer(bs):
        if not bs:
            return 0.0
        return 0.0 if math.isinf(bw) else sum(size[b] for b in bs) / bw

    def pageable(b):
        return bw is not None and size[b] > 0 and b not in g.results

    dp = {(inputs, frozenset()): 0.0}
    for t in range(n):
        last = t == n - 1
        nxt: dict = {}
        for (dev, host), cost in dp.items():
            subsets = (itertools.chain.from_iterable(itertools.combinations(range(t), r)
                                                     for r in range(t + 1))
                       if recompute else [()])
            for sub in subsets:
                comps = [*sub, t]
                written = {w for k in comps for w in tasks[k].writes}
                if written & dev:
                    continue  # no recompute while the output is resident
                hs = sorted(host, key=repr)
                for assign in itertools.product(("stay", "now") + (() if last else ("later",)),
                                                repeat=len(hs)):
                    pn = {b for b, a in zip(hs, assign) if a == "now"}
                    pl = {b for b, a in zip(hs, assign) if a == "later"}
                    if written & (pn | pl):
                        continue
                    have, ok = set(dev) | pn, True
                    for k in comps:
                        if not set(tasks[k].reads) <= have:
                            ok = False
                            break
                        have |= set(tasks[k].writes)
                    if not ok:
                        continue
                    end = sorted(dev | pn | pl | written, key=repr)
                    opts = []
                    for b in end:
                        if b in g.results:
                            opts.append(("keep",))
                            continue
                        o = ["keep", "drop"]
                        if pageable(b) and not last and b not in pn | pl:
                            o.append("offload")
                        opts.append(tuple(o))
                    for choice in itertools.product(*opts):
                        keep = {b for b, c in zip(end, choice) if c == "keep"}
                        off = {b for b, c in zip(end, choice) if c == "offload"}
                        held = keep | off  # needed until the end of the stage
                        used = {b for k in comps for b in tasks[k].reads}
                        if pn | pl:
                            at = sum(size[b] for b in dev if b in used or b in held)
                            if at + sum(size[b] for b in pn | pl) > budget:
                                continue
                        avail, fits = set(dev) | pn | pl, True
                        for j, k in enumerate(comps):
                            later = {b for kk in comps[j:] for b in tasks[kk].reads}
                            mem = sum(size[b] for b in avail if b in later or b in held)
                            mem += sum(size[w] for w in tasks[k].writes) + tasks[k].workspace
                            if mem > budget:
                                fits = False
                                break
                            avail |= set(tasks[k].writes)
                        if not fits:
                            continue
                        c = sum(tasks[k].time for k in comps)
                        xon, xoo = xfer(off & written), xfer(off - written)
                        d = max(xfer(pn) + c + xon, xfer(pn) + xfer(pl) + xoo + xon)
                        state = (frozenset(keep), frozenset((host - pn - pl - written) | off))
                        if cost + d < nxt.get(state, math.inf):
                            nxt[state] = cost + d
        dp = nxt
    return min(dp.values(), default=None)


TINY = [chain_graph([3, 1, 2], [2, 1, 3], [1, 2, 2], name="chain3"),
        chain_graph([4, 4, 1], [3, 1, 1], [1, 1, 2], grad=[1, 1, 1], name="chain3b"),
        skip_graph(), input_graph(),
        # random DAGs whose lower bound is below their best schedule's peak
        random_dag(5, 0.5, seed=5, max_size=6, workspace=True),
        random_dag(5, 0.5, seed=23, max_size=6, workspace=True),
        random_dag(4, 0.6, seed=25, max_size=6, workspace=True)]


@pytest.mark.parametrize("g", TINY, ids=lambda g: g.name)
def test_paging_milp_equals_the_exhaustive_staged_optimum(g):
    order = g.order
    r = rate(g)
    for b in budgets(g, 4):
        for bw in (r / 4, r, 4 * r, math.inf):
            best = staged_optimum(g, b, order, bw)
            p = milp_plan(g, b, order=order, time_limit=30, bandwidth=bw)
            if best is None:
                assert p is None
                continue
            assert p is not None and p.info["optimal"], (b, bw)
            assert p.info["objective"] == pytest.approx(best, rel=1e-6), (b, bw)
            check(g, p, b, bw)


@pytest.mark.parametrize("g", TINY[:4], ids=lambda g: g.name)
def test_recompute_only_milp_equals_the_exhaustive_search_without_paging(g):
    """The same search with nothing pageable is Checkmate's space: the two MILPs share code,
    so this pins down the part without paging."""
    for b in budgets(g, 3):
        best = staged_optimum(g, b, g.order, None)
        p = milp_plan(g, b, order=g.order, time_limit=30)
        assert (p is None) == (best is None)
        if p is not None:
            assert p.info["optimal"] and p.info["objective"] == pytest.approx(best)
            assert simulate(g, p).makespan == pytest.approx(best)


# -- properties on random small DAGs ---------------------------------------------------------
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(3, 8), frac=st.floats(0.0, 1.0),
       bwf=st.sampled_from([0.25, 1.0, 4.0]), ws=st.booleans())
def test_paging_plans_replay_fit_and_beat_recompute_only(seed, n, frac, bwf, ws):
    g = random_dag(n, 0.4, seed=seed, max_size=9, workspace=ws)
    lb, pk = lower_bound(g), schedule(g).peak
    b = lb + int((pk - lb) * frac)
    bw = bwf * rate(g)
    order = schedule(g).order
    rec = milp_plan(g, b, order=order, time_limit=20)
    pag = milp_plan(g, b, order=order, time_limit=20, bandwidth=bw)
    if rec is not None:
        assert pag is not None  # every recompute-only plan is in the paging space
    if pag is None:
        return
    r = check(g, pag, b, bw)
    if rec is not None and rec.info["optimal"] and pag.info["optimal"]:
        assert pag.info["objective"] <= rec.info["objective"] * (1 + 1e-6)
        assert r.makespan <= simulate(g, rec).makespan * (1 + 1e-6)


@pytest.mark.parametrize("seed", range(4))
def test_recompute_false_gives_pure_paging_and_no_offload_is_respected(seed):
    g = random_dag(7, 0.4, seed=seed, max_size=9)
    bw = rate(g)
    for b in budgets(g, 3):
        p = milp_plan(g, b, order=g.order, time_limit=20, bandwidth=bw, recompute=False)
        if p is not None:
            r = check(g, p, b, bw)
            assert not r.recomputed
        banned = frozenset(g.buffers)
        q = milp_plan(g, b, order=g.order, time_limit=20, bandwidth=bw, no_offload=banned)
        if q is not None:
            assert not any(s.op in ("offload", "prefetch") for s in q.steps)


# -- offload clearly helps ----------------------------------------------------------------------
def test_offload_strictly_beats_recompute_on_a_chain_with_large_early_activations():
    g = chain_graph([8, 8, 2, 2, 2, 2], [5] * 6, [5] * 6, grad=[1] * 6)
    b = 18  # the lower bound; the best schedule's peak is 25
    rec = milp_plan(g, b, order=g.order, time_limit=30)
    pag = milp_plan(g, b, order=g.order, time_limit=30, bandwidth=4.0)
    assert rec.info["optimal"] and pag.info["optimal"]
    r_rec = simulate(g, rec)
    r_pag = check(g, pag, b, 4.0)
    assert r_pag.makespan < r_rec.makespan - 1.0
    assert r_pag.offloaded and r_rec.makespan > g.total_time()


@pytest.mark.parametrize("g, budget", [(skip_graph(), 9), (input_graph(), 10)],
                         ids=["skip", "input"])
def test_paging_a_buffer_read_early_and_late(g, budget):
    """Recompute-only must rerun the producer (or cannot drop an input at all); paging
    hides the copies behind compute."""
    rec = milp_plan(g, budget, order=g.order, time_limit=10)
    pag = milp_plan(g, budget, order=g.order, time_limit=10, bandwidth=8.0)
    r = check(g, pag, budget, 8.0)
    assert pag.info["optimal"] and r.offloaded
    if rec is not None:
        assert r.makespan < simulate(g, rec).makespan
    else:  # an input cannot be recomputed
        assert g.buffers["in"].producer is None and "in" in r.offloaded


# -- through plan() -----------------------------------------------------------------------------
def test_plan_uses_the_paging_milp_with_a_bandwidth():
    g = chain_graph([8, 8, 2, 2, 2, 2], [5] * 6, [5] * 6, grad=[1] * 6)
    assert len(g.tasks) <= MILP_MAX_TASKS
    p = plan(g, 18, offload_bandwidth=4.0, method="milp", order=g.order)
    r = check(g, p, 18, 4.0)
    assert p.info["paging"] and p.info["planner_optimal"]
    auto = plan(g, 18, offload_bandwidth=4.0, order=g.order)
    assert "milp" in auto.info["candidates"]
    assert auto.info["makespan"] <= r.makespan + 1e-9
    rec = plan(g, 18, method="milp", order=g.order)
    assert r.makespan < rec.info["makespan"]


def test_infeasible_budgets_raise_as_the_planner_api_does():
    g = skip_graph()
    lb = lower_bound(g)
    for method in ("milp", "auto"):
        with pytest.raises(InfeasibleBudget) as e:
            plan(g, lb - 1, offload_bandwidth=8.0, method=method)
        assert e.value.smallest == lb
    assert milp_plan(g, lb - 1, bandwidth=8.0) is None
    check(g, plan(g, lb, offload_bandwidth=8.0, method="milp"), lb, 8.0)


# -- the Checkmate graphs of shared/data ---------------------------------------------------------
@pytest.mark.needs_data
def test_checkmate_inference_graph_at_and_below_its_peak():
    g = load_taskgraph(require_shared_data("graphs", "checkmate", "vgg16_test.json"))
    pk = schedule(g, time_limit=1).peak
    bw = rate(g)
    p = plan(g, pk, offload_bandwidth=bw, method="milp", time_limit=20)
    assert check(g, p, pk, bw).makespan == pytest.approx(g.total_time())
    with pytest.raises(InfeasibleBudget):
        plan(g, pk - 1, offload_bandwidth=bw, method="milp", time_limit=5)


@pytest.mark.needs_data
def test_checkmate_vgg16_training_graph_paging_is_optimal_and_beats_recompute():
    g = load_taskgraph(require_shared_data("graphs", "checkmate", "vgg16_train.json"))
    s = schedule(g, time_limit=1)
    b = int(0.95 * s.peak)
    bw = rate(g)
    rec = milp_plan(g, b, order=s.order, time_limit=30)
    pag = milp_plan(g, b, order=s.order, time_limit=30, bandwidth=bw)
    assert rec.info["optimal"] and pag.info["optimal"]
    r = check(g, pag, b, bw)
    assert r.makespan < simulate(g, rec).makespan

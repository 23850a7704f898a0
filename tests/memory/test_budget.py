"""Planning under a budget: every plan replayed by the simulator, exact planners against an
exhaustive search, heuristics against the MILP, infeasible budgets."""

from __future__ import annotations

import heapq
import itertools
import json
import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from thrifty.errors import InfeasibleBudget, PlanError, ThriftyError
from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
from thrifty.graph.taskgraph_io import load_taskgraph
from thrifty.memory.budget import PLANNERS, Context, lower_bound, parse_budget, plan
from thrifty.memory.budget.chain import as_chain, chain_plan
from thrifty.memory.budget.milp import milp_plan
from thrifty.memory.budget.replay import estimate
from thrifty.memory.schedule import schedule
from thrifty.memory.simulate import simulate
from thrifty.testing import require_shared_data


# -- graphs ----------------------------------------------------------------------------------
def chain_graph(sizes, ftimes, btimes, name="chain", grad=None):
    """A forward/backward chain in the shape of the Checkmate graphs::

        f0 -> f1 -> ... -> f(n-1)
        |      |              |
        b0 <- b1 <- ...  <- b(n-1)      b_i reads a_i, a_(i+1) and d_(i+1)

    The last backward task reads the last two activations only.
    """
    n = len(sizes)
    grad = grad or sizes
    tasks, bufs = [], []
    for i in range(n):
        tasks.append(Task(f"f{i}", reads=(f"a{i-1}",) if i else (), writes=(f"a{i}",),
                          time=float(ftimes[i]), attrs={"backward": False}))
        bufs.append(Buffer(f"a{i}", sizes[i], f"f{i}"))
    for i in range(n - 2, -1, -1):
        reads = (f"a{i}", f"a{i+1}") + ((f"d{i+1}",) if i < n - 2 else ())
        tasks.append(Task(f"b{i}", reads=reads, writes=(f"d{i}",), time=float(btimes[i]),
                          attrs={"backward": True}))
        bufs.append(Buffer(f"d{i}", grad[i], f"b{i}"))
    return TaskGraph(tasks, bufs, name=name)


def random_dag(seed, n, p=0.35, max_size=9):
    rng = random.Random(seed)
    tasks, bufs = [], []
    for i in range(n):
        preds = [j for j in range(i) if rng.random() < p]
        if i and not preds:
            preds = [rng.randrange(i)]
        tasks.append(Task(i, reads=tuple(preds), writes=(i,), time=float(rng.randint(1, 5))))
        bufs.append(Buffer(i, rng.randint(1, max_size), i))
    return TaskGraph(tasks, bufs, name=f"dag{seed}")


# -- the exhaustive oracle -------------------------------------------------------------------
def brute_force(g, budget):
    """Least compute time of any recompute-only plan within ``budget`` (Dijkstra over the
    states (resident buffers, tasks computed at least once); frees cost nothing)."""
    size = {b: buf.size for b, buf in g.buffers.items()}
    inputs = frozenset(b for b, buf in g.buffers.items() if buf.producer is None)
    start = (inputs, frozenset())
    dist = {start: 0.0}
    heap = [(0.0, 0, start)]
    tick = itertools.count(1)
    while heap:
        d, _, (res, done) = heapq.heappop(heap)
        if d > dist[(res, done)]:
            continue
        if len(done) == len(g.tasks) and g.results <= res:
            return d
        mem = sum(size[b] for b in res)
        moves = []
        for b in res:
            if b not in g.results:
                moves.append(((res - {b}, done), 0.0))
        for t, task in g.tasks.items():
            if not set(task.reads) <= res or any(w in res for w in task.writes):
                continue
            if mem + sum(size[w] for w in task.writes) + task.workspace > budget:
                continue
            moves.append(((res | set(task.writes), done | {t}), task.time))
        for state, cost in moves:
            nd = d + cost
            if nd < dist.get(state, math.inf):
                dist[state] = nd
                heapq.heappush(heap, (nd, next(tick), state))
    return None


def check(g, p, budget, bw=None):
    """Replay ``p`` with the simulator; it fits and the planner's estimate agrees."""
    r = simulate(g, p, offload_bandwidth=bw)
    assert r.peak <= budget, f"plan peak {r.peak} > budget {budget}"
    e = estimate(g, p.steps, bw)
    assert e.peak == r.peak
    assert math.isclose(e.makespan, r.makespan, rel_tol=1e-9, abs_tol=1e-9)
    return r


def chain_of(seed, n=None):
    rng = random.Random(seed)
    n = n or rng.randint(3, 5)
    return chain_graph([rng.randint(1, 5) for _ in range(n)], [rng.randint(1, 4) for _ in range(n)],
                       [rng.randint(1, 4) for _ in range(n)], name=f"chain{seed}")


def budgets(g, k=4):
    """Up to ``k`` budgets from the lower bound to the best schedule's peak."""
    lb, pk = lower_bound(g), schedule(g).peak
    return sorted({lb + (pk - lb) * i // max(1, k - 1) for i in range(k)})


# -- exact planners against the exhaustive search ----------------------------------------------
@pytest.mark.parametrize("seed", range(5))
def test_chain_dp_and_milp_match_brute_force(seed):
    """On chains the DP (exact in bytes), the MILP and the exhaustive search agree."""
    g = chain_of(seed)
    for b in budgets(g):
        best = brute_force(g, b)
        dp = check(g, chain_plan(g, b, slots=None), b)
        mp = milp_plan(g, b, time_limit=20)
        assert mp is not None and mp.info["optimal"]
        assert dp.compute_time == pytest.approx(best)
        assert check(g, mp, b).compute_time == pytest.approx(best)


def topological_orders(g, limit=80):
    import networkx as nx

    G = nx.DiGraph()
    G.add_nodes_from(g.tasks)
    G.add_edges_from((p, t) for t in g.tasks for p in g.predecessors(t))
    return list(itertools.islice(nx.all_topological_sorts(G), limit))


@pytest.mark.parametrize("seed", range(5))
def test_milp_over_all_orders_is_the_global_optimum(seed):
    """The MILP is exact over plans whose first computations follow its order: the best over
    every topological order equals the exhaustive optimum (and no order goes below it)."""
    g = random_dag(seed, 5)
    orders = topological_orders(g)
    for b in budgets(g, 3):
        best = brute_force(g, b)
        found = []
        for o in orders:
            mp = milp_plan(g, b, order=o, time_limit=20)
            if mp is not None:
                assert mp.info["optimal"]
                t = check(g, mp, b).compute_time
                assert t == pytest.approx(mp.info["objective"])
                found.append(t)
        if best is None:
            assert not found
        else:
            assert min(found) == pytest.approx(best)


HEURISTICS = [name for name in PLANNERS if name not in ("milp", "chain")]


@pytest.mark.parametrize("name", HEURISTICS)
@pytest.mark.parametrize("seed", range(3))
def test_milp_optimum_is_at_most_each_heuristic(name, seed):
    g = random_dag(100 + seed, 7)
    order = schedule(g).order
    ctx = Context(None, True, 2.0, tuple(order))
    for b in budgets(g, 3):
        mp = milp_plan(g, b, order=order, time_limit=20)
        if mp is None:
            continue
        assert mp.info["optimal"]
        try:
            p = PLANNERS[name](g, b, ctx)
        except Exception as e:  # noqa: BLE001 - a heuristic may find nothing; the MILP did
            assert type(e).__name__ in ("NoPlan", "NoPlanProven")
            continue
        r = check(g, p, b)
        assert r.makespan >= simulate(g, mp).makespan - 1e-9
        assert r.makespan >= brute_force(g, b) - 1e-9


# -- every planner's plan is replayed by the simulator -----------------------------------------
@pytest.mark.parametrize("bw", [None, 2.0, math.inf])
@pytest.mark.parametrize("name", list(PLANNERS))
def test_every_planner_plan_is_valid(name, bw):
    for g in (chain_of(7, 6), random_dag(8, 9)):
        order = tuple(schedule(g).order)
        ctx = Context(bw, True, 1.0, order)
        for b in budgets(g, 4):
            try:
                p = PLANNERS[name](g, b, ctx)
            except Exception as e:  # noqa: BLE001
                assert type(e).__name__ in ("NoPlan", "NoPlanProven"), e
                continue
            check(g, p, b, bw if any(s.op == "offload" for s in p.steps) else None)


@pytest.mark.needs_data
@pytest.mark.parametrize("fname", ["vgg16_train.json", "fcn_8_vgg_train.json"])
def test_shared_checkmate_graphs(fname):
    g = load_taskgraph(require_shared_data("graphs", "checkmate", fname))
    peak = schedule(g, time_limit=1).peak
    b = max(int(0.9 * peak), lower_bound(g))
    plain = plan(g, b, time_limit=1)
    check(g, plain, b)
    bw = sum(buf.size for buf in g.buffers.values()) / g.total_time()  # "PCIe-like"
    off = plan(g, b, offload_bandwidth=bw * 10, time_limit=1)
    r = check(g, off, b, bw * 10)
    assert r.makespan <= simulate(g, plain).makespan
    for base in ("sqrt_n", "dtr"):
        assert plain.info["makespan"] <= plain.info["candidates"].get(base, math.inf)


def test_offload_beats_recompute_alone_when_bandwidth_allows():
    """A chain whose early activations are large: offloading them hides behind compute."""
    g = chain_graph([8, 8, 2, 2, 2, 2], [5] * 6, [5] * 6, grad=[1] * 6)
    b = 21  # between the lower bound (18) and the best schedule's peak (25)
    rec = plan(g, b, order=g.order)
    off = plan(g, b, offload_bandwidth=4.0, order=g.order)
    assert check(g, off, b, 4.0).makespan < check(g, rec, b).makespan
    assert rec.info["overhead"] > 0


# -- budgets: infeasible, parsing, bad arguments -----------------------------------------------
def test_infeasible_budget_names_the_smallest():
    g = chain_of(3)
    lb = lower_bound(g)
    with pytest.raises(InfeasibleBudget) as e:
        plan(g, lb - 1)
    assert e.value.smallest >= lb and str(e.value.smallest) in str(e.value)
    check(g, plan(g, e.value.smallest), e.value.smallest)
    assert brute_force(g, lb - 1) is None


def test_infeasible_budget_with_offload_is_the_lower_bound():
    g = random_dag(5, 8)
    lb = lower_bound(g)
    with pytest.raises(InfeasibleBudget) as e:
        plan(g, lb - 1, offload_bandwidth=1.0)
    assert e.value.smallest == lb
    check(g, plan(g, lb, offload_bandwidth=1.0), lb, 1.0)


def test_no_recompute_no_offload_needs_the_schedule_peak():
    g = chain_of(2)
    pk = schedule(g).peak
    assert plan(g, pk, recompute=False).info["overhead"] == 0.0
    with pytest.raises(InfeasibleBudget):
        plan(g, pk - 1, recompute=False, method="auto")


@pytest.mark.parametrize("text,peak,expected", [
    ("123456", None, 123456), ("64MiB", None, 64 * 2**20), ("2GB", None, 2 * 10**9),
    ("1.5kB", None, 1500), (0.5, 1000, 500), ("0.7", 1000, 700), (42, None, 42)])
def test_parse_budget(text, peak, expected):
    assert parse_budget(text, peak=peak) == expected


@pytest.mark.parametrize("bad", ["-5", "12 parsecs", "0.5", -1, None, True, "lots"])
def test_bad_budget_raises(bad):
    with pytest.raises(PlanError):
        parse_budget(bad)


@pytest.mark.parametrize("kw", [{"offload_bandwidth": 0}, {"offload_bandwidth": "fast"},
                                {"method": "magic"}, {"time_limit": 0}])
def test_bad_plan_arguments(kw):
    with pytest.raises(ThriftyError) as e:
        plan(chain_of(1), 10**6, **kw)
    assert "valid" in str(e.value) or "must" in str(e.value) or "give" in str(e.value)


def test_zero_size_buffers_and_disconnected_graph():
    g = TaskGraph([Task("a", writes=("x",), time=1.0), Task("b", reads=("x",), writes=("y",),
                                                          time=1.0),
                   Task("c", writes=("z",), time=1.0)],
                  [Buffer("x", 0, "a"), Buffer("y", 3, "b"), Buffer("z", 2, "c")])
    p = plan(g, 5)
    assert check(g, p, 5).makespan == 3.0


# -- property: auto plans are valid and never beat the exhaustive optimum -----------------------
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(2, 6), frac=st.floats(0.0, 1.0))
def test_auto_plans_are_valid(seed, n, frac):
    g = random_dag(seed, n)
    lb, pk = lower_bound(g), schedule(g).peak
    b = lb + int((pk - lb) * frac)
    best = brute_force(g, b)
    try:
        p = plan(g, b, time_limit=1.0)
    except InfeasibleBudget:
        assert best is None or b >= lb  # recompute-only feasibility is searched, not proven
        return
    r = check(g, p, b)
    assert best is not None and r.makespan >= best - 1e-9


# -- the CLI ------------------------------------------------------------------------------------
def _write(tmp_path, g):
    d = {"directed": True, "multigraph": False, "graph": {},
         "nodes": [{"id": t, "cost_cpu": g.tasks[t].time, "cost_ram": g.buffers[t].size,
                    "backward": False} for t in g.tasks],
         "links": [{"source": b, "target": t} for t in g.tasks for b in g.tasks[t].reads]}
    path = tmp_path / "g.json"
    path.write_text(json.dumps(d))
    return path


def test_cli_plan_json(tmp_path):
    from click.testing import CliRunner

    from thrifty.cli.memory_plan import plan as plan_cmd

    g = random_dag(27, 10, p=0.25)  # lower bound 21, best schedule peak 32
    path = _write(tmp_path, g)
    png = tmp_path / "m.png"
    res = CliRunner().invoke(plan_cmd, [str(path), "--budget", "0.8", "--json",
                                        "--offload-bandwidth", "5", "--plot", str(png),
                                        "--time-limit", "1"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert list(out) == ["budget", "peak", "makespan", "compute_time", "overhead", "steps"]
    assert out["peak"] <= out["budget"] == int(0.8 * schedule(g).peak)
    assert all(set(s) in ({"op", "task"}, {"op", "buffer"}) for s in out["steps"])
    assert png.stat().st_size > 1000


def test_cli_plan_infeasible_and_table(tmp_path):
    from click.testing import CliRunner

    from thrifty.cli.memory_plan import plan as plan_cmd

    path = _write(tmp_path, random_dag(12, 6))
    bad = CliRunner().invoke(plan_cmd, [str(path), "--budget", "1B"])
    assert bad.exit_code != 0 and "smallest feasible budget" in bad.output
    ok = CliRunner().invoke(plan_cmd, [str(path), "--budget", "0.9", "--time-limit", "1"])
    assert ok.exit_code == 0 and "overhead" in ok.output


def test_chain_recognition():
    ch = as_chain(chain_of(4, 5))
    assert ch.forward == tuple(f"f{i}" for i in range(5)) and ch.jmin == 1
    assert ch.backward[1:] == tuple(f"b{i}" for i in range(4))
    from thrifty.memory.budget.chain import ChainError

    with pytest.raises(ChainError):
        as_chain(random_dag(1, 8, p=0.6))


@pytest.mark.needs_data
def test_vgg16_is_a_chain_and_the_dp_fits():
    g = load_taskgraph(require_shared_data("graphs", "checkmate", "vgg16_train.json"))
    assert len(as_chain(g).forward) == 23
    b = int(0.9 * schedule(g, time_limit=1).peak)
    p = chain_plan(g, b, slots=300)
    check(g, p, b)


def test_public_facade_and_plan_info():
    import thrifty.memory as mem

    g = chain_of(6, 5)
    lb, pk = lower_bound(g), schedule(g).peak
    p = mem.plan(g, (lb + pk) // 2)
    r = check(g, p, (lb + pk) // 2)
    assert p.info["makespan"] == pytest.approx(r.makespan)
    assert p.info["overhead"] == pytest.approx(r.makespan / g.total_time() - 1)
    assert p.info["optimal"] == (p.info["overhead"] <= 1e-12)
    full = mem.plan(g, pk)
    assert full.info["optimal"] and full.info["overhead"] == 0.0

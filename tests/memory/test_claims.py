"""Every claim of the memory engine checked against exhaustive searches on small graphs.

The graphs mix every feature of the memory model: results named explicitly (inner buffers,
inputs, or none of the sinks), sinks that are not results, tasks with several outputs or
none, workspaces, graph inputs (read, unread, results), buffers of size 0 and buffers read
by several tasks.

Two oracles, written here and sharing no code with the planners:

* :func:`least_peak`: the least eager-free peak over **all topological orders**, by a
  search over executed sets (the memory resident after a set of tasks has run does not
  depend on the order it ran in, so this enumerates every order's peak without listing
  orders one by one);
* :func:`least_budget`: the least peak over **all plans** (ARCHITECTURE.md's plan model as
  :func:`thrifty.memory.simulate` replays it) that recompute and/or offload, or neither.
  A plan's peak depends only on its sequence of states (tasks computed at least once,
  buffers resident, buffers on the host), and there are finitely many states, so a
  bottleneck shortest path over them (Dijkstra on "peak so far") gives the exact least
  peak of every plan, of any length, with any number of recomputations, offloads and
  prefetches. Time does not enter: the simulator accounts memory by step, so the copy
  bandwidth changes makespans, never peaks.

With no recompute and no offload both oracles must agree; with offload the least budget
has a closed form (:func:`least_budget_offloading`), checked against the search
(``test_oracles_agree``) and used in the main test, where the search with offload would
take most of the time.

The main property test draws 2,000 graphs of at most 7 tasks and checks, on each: every
schedule claim (``optimal``, the lower bound, for ``auto``, ``liu``, ``sp``, ``exact``, with
and without the reductions; the reductions keep the least peak), the per-task and budget
lower bounds, and for one variant drawn per graph (recompute only, offload only, both,
neither) :func:`~thrifty.memory.budget.smallest_feasible` and :func:`~thrifty.memory.budget.plan`
at the least budget and one byte below it: every plan is replayed by the simulator, and
every ``InfeasibleBudget`` is checked (called infeasible only when it is, its ``smallest``
the true least budget when said proven, and above the refused budget). The descent search
(:mod:`thrifty.memory.budget.descent`) is checked on every graph: its lower bound at depths 1
to 3 is at most the least budget of recompute-only plans, and it never proves a budget
of a recompute-only plan infeasible at the least budget, and where every task leads to a
result it proves the budget one byte below infeasible and its plan at the least budget
replays within it.
"""

from __future__ import annotations

import heapq
import math
import random

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from thrifty.errors import InfeasibleBudget, ThriftyError
from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
from thrifty.memory import schedule, simulate
from thrifty.memory.budget import lower_bound, plan, smallest_feasible
from thrifty.memory.budget.chain import ChainError, as_chain
from thrifty.memory.budget.descent import (
    ancestors_of_results,
    descend,
    descent_bound,
    descent_plan,
)
from thrifty.memory.model import Plan
from thrifty.memory.order import Compact, reduce_graph


# -- oracles ---------------------------------------------------------------------------------
class _Bits:
    """Bit masks of a graph: tasks and buffers numbered in listing order."""

    def __init__(self, g: TaskGraph) -> None:
        self.tasks = list(g.tasks)
        self.bufs = list(g.buffers)
        bix = {b: i for i, b in enumerate(self.bufs)}
        self.size = [g.buffers[b].size for b in self.bufs]
        self.reads = [sum(1 << bix[b] for b in set(g.tasks[t].reads)) for t in self.tasks]
        self.writes = [sum(1 << bix[b] for b in g.tasks[t].writes) for t in self.tasks]
        self.ws = [g.tasks[t].workspace for t in self.tasks]
        self.inputs = sum(1 << bix[b] for b in self.bufs if g.buffers[b].producer is None)
        self.results = sum(1 << bix[b] for b in g.results)
        self.readers = [sum(1 << i for i, t in enumerate(self.tasks)
                            if b in g.tasks[t].reads) for b in self.bufs]

        self._mem: dict[int, int] = {}

    def mem(self, mask: int) -> int:
        total = self._mem.get(mask)
        if total is None:
            total = sum(s for i, s in enumerate(self.size) if mask >> i & 1)
            self._mem[mask] = total
        return total


def least_peak(g: TaskGraph) -> int:
    """The least eager-free peak over all topological orders of ``g``."""
    x = _Bits(g)
    n = len(x.tasks)
    full = (1 << n) - 1
    prod = [0] * n  # tasks whose outputs a task reads
    for t in range(n):
        for s in range(n):
            if x.reads[t] & x.writes[s]:
                prod[t] |= 1 << s

    def resident(done: int) -> int:
        """Buffers resident after the tasks in ``done`` ran (eager frees)."""
        made = x.inputs
        for t in range(n):
            if done >> t & 1:
                made |= x.writes[t]
        live = 0
        for b in range(len(x.bufs)):
            if made >> b & 1 and (x.results >> b & 1 or x.readers[b] & ~done):
                live |= 1 << b
        return live

    start = x.mem(x.inputs)
    best = {0: start}
    heap = [(start, 0)]
    while heap:
        v, done = heapq.heappop(heap)
        if v > best[done]:
            continue
        if done == full:
            return v
        mem = x.mem(resident(done))
        for t in range(n):
            if done >> t & 1 or prod[t] & ~done:
                continue
            w = max(v, mem + x.mem(x.writes[t]) + x.ws[t])
            nd = done | 1 << t
            if w < best.get(nd, math.inf):
                best[nd] = w
                heapq.heappush(heap, (w, nd))
    raise AssertionError("no complete order")  # pragma: no cover - graphs are DAGs


def least_budget(g: TaskGraph, recompute: bool, offload: bool) -> int:
    """The least peak of every plan of ``g`` (see the module docstring).

    A state is (tasks computed at least once, buffers resident, buffers on the host). Moves:
    compute a task whose reads are resident (again only with ``recompute``; it uses the
    resident bytes plus its outputs, a resident one counted twice, plus its workspace), free
    a resident buffer that is not a result, offload a resident buffer, prefetch one from the
    host (it uses the resident bytes plus its own). The goal: every task computed, every
    result resident. Two moves are always taken at once, which never raises the peak: a
    buffer nobody reads that is not a result is freed as soon as it is written, and (without
    recompute) so is a non-result buffer whose readers have all run.
    """
    x = _Bits(g)
    n = len(x.tasks)
    full = (1 << n) - 1
    nb = len(x.bufs)
    useless = sum(1 << b for b in range(nb) if not x.readers[b] and not x.results >> b & 1)

    drops: dict[int, int] = {}

    def tidy(done: int, res: int, host: int) -> tuple[int, int]:
        drop = drops.get(done)
        if drop is None:
            drop = useless
            if not recompute:
                for b in range(nb):
                    if not x.results >> b & 1 and not x.readers[b] & ~done:
                        drop |= 1 << b
            drops[done] = drop
        return res & ~drop, host & ~drop

    made = [x.inputs] * (full + 1)  # buffers that exist somewhere once a set of tasks ran
    for done in range(1, full + 1):
        low = (done & -done).bit_length() - 1
        made[done] = made[done & (done - 1)] | x.writes[low]
    r0, _ = tidy(0, x.inputs, 0)
    best = {(0, r0): x.mem(x.inputs)}
    heap = [(x.mem(x.inputs), 0, r0)]
    while heap:
        v, done, res = heapq.heappop(heap)
        if v > best[(done, res)]:
            continue
        if done == full and res & x.results == x.results:
            return v
        # With offload, offloading a buffer is never worse than freeing it (it keeps a copy
        # on the host), so every buffer that exists and is not resident is on the host.
        host = tidy(done, 0, made[done] & ~res)[1] if offload else 0
        mem = x.mem(res)
        moves: list[tuple[int, int, int]] = []
        for t in range(n):
            if (done >> t & 1 and not recompute) or x.reads[t] & ~res:
                continue
            use = mem + x.mem(x.writes[t]) + x.ws[t]
            nd = done | 1 << t
            moves.append((use, nd, tidy(nd, res | x.writes[t], 0)[0]))
        for b in range(nb):
            bit = 1 << b
            if res & bit:
                if offload or not x.results & bit:
                    moves.append((0, done, res & ~bit))
            elif host & bit:
                moves.append((mem + x.size[b], done, res | bit))
        for use, nd, nr in moves:
            w = max(v, use)
            if w < best.get((nd, nr), math.inf):
                best[(nd, nr)] = w
                heapq.heappush(heap, (w, nd, nr))
    raise AssertionError("no plan reaches the goal")  # pragma: no cover


def least_budget_offloading(g: TaskGraph) -> int:
    """The least peak of every plan that may offload (recomputing or not), in closed form.

    No plan does better: the inputs are all resident at the start, every task runs once at
    least with its reads resident and its outputs and workspace allocated, and the results
    are all resident at the end. Offloading reaches it: offload everything at the start;
    before each task (in any topological order) prefetch its reads and after it offload
    everything; at the end prefetch the results. (:func:`least_budget` agrees, checked by
    ``test_oracles_agree``.)
    """
    size = {b: buf.size for b, buf in g.buffers.items()}
    need = [sum(size[b] for b in set(t.reads) | set(t.writes)) + t.workspace
            for t in g.tasks.values()]
    return max([sum(size[b] for b, buf in g.buffers.items() if buf.producer is None),
                sum(size[b] for b in g.results), *need])


# -- graphs ----------------------------------------------------------------------------------
_SIZES = [0, 1, 2, 3, 4, 5, 8, 13, 100, 128]


def random_graph(rng: random.Random, max_tasks: int = 7) -> TaskGraph:
    """A random task graph of at most ``max_tasks`` tasks with every feature mixed in."""
    n = rng.randint(1, max_tasks)
    bufs = [Buffer(f"in{i}", rng.choice(_SIZES)) for i in range(rng.randint(0, 2))]
    tasks: list[Task] = []
    for t in range(n):
        avail = [b.id for b in bufs]
        k = min(len(avail), rng.choice([0, 1, 1, 2, 2, 3]))
        reads = tuple(rng.sample(avail, k))
        outs = tuple(f"b{t}_{j}" for j in range(rng.choice([1, 1, 1, 1, 2, 2, 0])))
        tasks.append(Task(f"t{t}", reads=reads, writes=outs,
                          workspace=rng.choice([0, 0, 0, 1, 3, 7, 50]),
                          time=float(rng.randint(0, 3))))
        bufs.extend(Buffer(b, rng.choice(_SIZES), f"t{t}") for b in outs)
    results = None
    if bufs and rng.random() < 0.5:  # explicit: any buffers, inner ones and inputs included
        results = rng.sample([b.id for b in bufs], rng.randint(0, min(3, len(bufs))))
    return TaskGraph(tasks, bufs, results=results, name="random")


def describe(g: TaskGraph) -> str:
    """The graph as Python literals, to paste into a regression test."""
    tasks = [(t.id, t.reads, t.writes, t.workspace, t.time) for t in g.tasks.values()]
    bufs = [(b.id, b.size, b.producer) for b in g.buffers.values()]
    return f"tasks={tasks}\nbuffers={bufs}\nresults={sorted(g.results)}"


def graph(tasks: list[tuple], buffers: list[tuple], results: list[str] | None) -> TaskGraph:
    """The graph :func:`describe` printed."""
    return TaskGraph([Task(t, reads=r, writes=w, workspace=ws, time=tm)
                      for t, r, w, ws, tm in tasks], [Buffer(*b) for b in buffers],
                     results=results, name="regression")


def test_oracles_agree_without_recompute_or_offload_on_the_issue_graph() -> None:
    g = issue_graph()
    assert least_peak(g) == least_budget(g, False, False) == 228
    assert least_budget(g, True, True) == 228


def issue_graph() -> TaskGraph:
    """The smallest counter-example of the SP algorithm's claim (a result read later)."""
    return TaskGraph([Task("t0", writes=("b0",)), Task("t2", writes=("b2",)),
                      Task("t3", reads=("b0",), writes=("b3",))],
                     [Buffer("b0", 128, "t0"), Buffer("b2", 128, "t2"),
                      Buffer("b3", 100, "t3")], results=["b0"], name="sp_results")


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.integers(0, 2**32))
def test_oracles_agree(seed: int) -> None:
    g = random_graph(random.Random(seed))
    note(describe(g))
    assert least_peak(g) == least_budget(g, False, False)
    assert least_budget(g, True, False) <= least_peak(g)
    assert least_budget(g, True, True) == least_budget(g, False, True) == \
        least_budget_offloading(g)


# -- schedules -------------------------------------------------------------------------------
def check_schedule_claims(g: TaskGraph) -> None:
    best = least_peak(g)
    c = Compact.of(g)
    assert c.lower_bound() <= best
    assert all(b <= best for b in c.task_bounds())
    assert all(c.task_bound(t) <= best for t in range(c.n))
    for method, reduce in (("auto", True), ("auto", False), ("liu", True), ("sp", True),
                           ("exact", True), ("exact", False)):
        try:
            r = schedule(g, method=method, time_limit=2.0, reduce=reduce)
        except ThriftyError:
            assert method in ("liu", "sp")  # refused: the graph is not of their kind
            continue
        assert simulate(g, r.order).peak == r.peak >= best
        assert r.lower_bound <= best, (method, reduce)
        if r.optimal:
            assert r.peak == best, (method, reduce, r.method)
    red = reduce_graph(g)
    assert least_peak(red.graph) == best
    order = schedule(red.graph, method="exact", reduce=False).order
    assert simulate(g, red.expand(order)).peak == simulate(red.graph, order).peak == best


# -- plans -----------------------------------------------------------------------------------
VARIANTS = [(True, None), (False, 100.0), (True, 100.0), (False, None)]
"""(recompute, offload bandwidth): recompute only, offload only, both, neither."""


def check_plan(g: TaskGraph, p: Plan, budget: int, recompute: bool, bw: float | None,
               least: int) -> None:
    sim = simulate(g, p, offload_bandwidth=bw if bw is not None else math.inf)
    assert sim.peak <= budget
    assert recompute or not sim.recomputed
    assert bw is not None or not sim.offloaded
    assert p.info["lower_bound"] <= least
    if p.info["optimal"]:  # no plan is faster than computing every task once
        assert sim.makespan <= g.total_time() * (1 + 1e-9) + 1e-12


def least_of(g: TaskGraph, recompute: bool, offload: bool) -> int:
    """The least budget of each variant, by the cheapest exact oracle."""
    if offload:
        return least_budget_offloading(g)
    return least_budget(g, True, False) if recompute else least_peak(g)


def check_plan_claims(g: TaskGraph, variants: list[tuple[bool, float | None]] = VARIANTS,
                      time_limit: float = 0.5) -> None:
    """Lower bounds against the least budgets; then, per variant, the smallest feasible
    budget and plans at the least budget and just below it."""
    assert lower_bound(g) <= least_budget_offloading(g)
    assert lower_bound(g, offload=False) <= least_budget(g, True, False)
    check_descent(g, least_budget(g, True, False))
    for recompute, bw in variants:
        least = least_of(g, recompute, bw is not None)
        small, proven = smallest_feasible(g, bw, recompute, time_limit=time_limit)
        assert small >= least
        assert not proven or small == least, (recompute, bw, small, least)
        for budget in sorted({max(0, least - 1), least, small}):
            try:
                p = plan(g, budget, offload_bandwidth=bw, recompute=recompute,
                         time_limit=time_limit)
            except InfeasibleBudget as e:
                msg = str(e)
                assert e.smallest is not None and e.smallest > budget, msg
                assert e.smallest >= least, msg
                if "infeasible" in msg:  # a claim: no plan fits
                    assert budget < least, msg
                if "(proven" in msg:
                    assert e.smallest == least, msg
                continue
            check_plan(g, p, budget, recompute, bw, least)


def check_descent(g: TaskGraph, least: int) -> None:
    """The descent search (recompute only): never a false proof; exact, and its plan within
    the least budget, when every task leads to a result."""
    assert descend(g, least).status != "infeasible"
    assert all(descent_bound(g, depth) <= least for depth in (1, 2, 3))
    below = descend(g, least - 1).status
    assert below != "unknown"
    if len(ancestors_of_results(g)) == len(g.tasks):
        assert below == "infeasible"
        p, d = descent_plan(g, least)
        assert p is not None and d.status == "found"
        sim = simulate(g, p)
        assert sim.peak <= least
        assert not sim.offloaded


@settings(max_examples=2000, deadline=None, derandomize=True)
@given(st.integers(0, 2**32), st.sampled_from(VARIANTS))
def test_every_claim_holds_on_random_small_graphs(seed: int,
                                                  variant: tuple[bool, float | None]) -> None:
    """2,000 graphs: every schedule claim, the lower bounds of every variant, and the plans
    of one variant (drawn per graph: recompute only, offload only, both, or neither)."""
    g = random_graph(random.Random(seed))
    note(describe(g))
    check_schedule_claims(g)
    check_plan_claims(g, [variant])


# -- the counter-examples found, kept as regression tests ------------------------------------
def test_sp_algorithm_keeps_a_result_that_is_read_later() -> None:
    """The SP algorithm took a result read by a task for an edge freed by its reader."""
    g = issue_graph()
    r = schedule(g)
    assert r.peak == 228 and r.optimal
    p = plan(g, 240)
    assert simulate(g, p).peak <= 240
    with pytest.raises(InfeasibleBudget, match="infeasible") as e:
        plan(g, 227, recompute=False)
    assert e.value.smallest == 228
    g2 = graph([("t0", (), ("b0",), 0, 0.0), ("t1", (), ("b1",), 0, 0.0),
                ("t2", (), ("b2",), 0, 0.0), ("t3", ("b0",), ("b3",), 0, 0.0),
                ("t4", (), ("b4",), 0, 0.0)],
               [("b0", 2, "t0"), ("b1", 0, "t1"), ("b2", 0, "t2"), ("b3", 0, "t3"),
                ("b4", 1, "t4")], ["b0"])
    for method in ("auto", "sp"):
        r = schedule(g2, method=method)
        assert r.peak == least_peak(g2) == 2 and r.optimal


def test_inputs_that_are_results_may_wait_in_host_memory() -> None:
    """With offload, an input that is a result is not pinned: the lower bound was too high
    and called a feasible budget infeasible "(proven)"."""
    g = graph([("t0", ("in0",), ("b0",), 0, 0.0), ("t1", (), ("b1",), 3, 2.0)],
              [("in0", 1, None), ("b0", 1, "t0"), ("b1", 0, "t1")], ["b0", "in0"])
    assert least_budget_offloading(g) == least_budget(g, False, True) == 3
    assert lower_bound(g) == 3 and lower_bound(g, offload=False) == 4
    p = plan(g, 3, offload_bandwidth=100.0, recompute=False)
    assert simulate(g, p).peak <= 3
    check_plan_claims(g)


def test_unread_inputs_are_dropped_before_the_first_task() -> None:
    g = graph([("t0", (), ("b0",), 0, 0.0), ("t1", (), ("b1",), 0, 0.0),
               ("t2", (), ("b2",), 0, 0.0)],
              [("in0", 1, None), ("b0", 0, "t0"), ("b1", 0, "t1"), ("b2", 1, "t2")], [])
    p = plan(g, 1, recompute=False)
    assert simulate(g, p).peak == 1 == least_peak(g)
    check_plan_claims(g)


def test_no_recompute_means_no_recompute() -> None:
    """Eviction took a buffer read by the task it made room for as dead, freed it, and
    recomputed its producer although recompute was not allowed."""
    g = graph([("t0", (), (), 0, 0.0), ("t1", (), ("b1", "b1x"), 0, 0.0),
               ("t2", (), ("b2",), 0, 0.0), ("t3", (), ("b3",), 0, 0.0),
               ("t4", ("in0", "b1x", "b2"), ("b4",), 0, 0.0)],
              [("in0", 2, None), ("b1", 2, "t1"), ("b1x", 0, "t1"), ("b2", 1, "t2"),
               ("b3", 0, "t3"), ("b4", 0, "t4")], ["b1", "b3", "b4"])
    p = plan(g, 3, offload_bandwidth=100.0, recompute=False)
    assert not simulate(g, p).recomputed
    check_plan_claims(g)


def test_chain_planner_refuses_results_that_are_read() -> None:
    """The chain DP freed activations that were results (its plan went over budget)."""
    g = graph([("t0", (), ("b0",), 7, 0.0), ("t1", ("b0",), ("b1",), 50, 2.0),
               ("t2", ("b1",), ("b2",), 0, 0.0), ("t3", ("b2", "b1"), ("b3",), 1, 3.0),
               ("t4", ("b3", "b1"), ("b4",), 3, 3.0)],
              [("b0", 2, "t0"), ("b1", 8, "t1"), ("b2", 1, "t2"), ("b3", 13, "t3"),
               ("b4", 100, "t4")], ["b0", "b2", "b3"])
    with pytest.raises(ChainError, match="result"):
        as_chain(g)
    least = least_budget(g, True, False)
    assert least == 127
    with pytest.raises(InfeasibleBudget, match="no plan found"):  # no longer a PlanError
        plan(g, least - 1)
    check_plan_claims(g)

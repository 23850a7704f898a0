"""Tests of the independent simulator: schedules, plans, timing, and every kind of bad step."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from thrifty.errors import PlanError, ThriftyError
from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
from thrifty.memory import Plan, ScheduleResult, simulate
from thrifty.memory.order import Compact


def diamond() -> TaskGraph:
    """::

        a(x:10, t1)
        |        \\
        b(y:1,t4) |
        |        /
        c(z:2, t1)   reads x and y
    """
    return TaskGraph(
        [Task("a", writes=("x",), time=1.0), Task("b", writes=("y",), time=4.0),
         Task("c", reads=("x", "y"), writes=("z",), time=1.0)],
        [Buffer("x", 10, "a"), Buffer("y", 1, "b"), Buffer("z", 2, "c")])


def chain_with_input() -> TaskGraph:
    """``w`` (input, 3 bytes) -> a(x:5) -> b(y:2); ``b`` has 4 bytes of workspace."""
    return TaskGraph(
        [Task("a", reads=("w",), writes=("x",), time=2.0),
         Task("b", reads=("x",), writes=("y",), time=3.0, workspace=4)],
        [Buffer("w", 3), Buffer("x", 5, "a"), Buffer("y", 2, "b")])


# -- schedules ------------------------------------------------------------------------------

def test_order_peak_and_timeline() -> None:
    r = simulate(diamond(), ["a", "b", "c"])
    assert r.peak == 13  # c runs with x, y resident and allocates z
    assert [s.resident for s in r.timeline] == [10, 11, 13]
    assert (r.makespan, r.compute_time) == (6.0, 6.0)
    assert [(s.start, s.end) for s in r.timeline] == [(0.0, 1.0), (1.0, 5.0), (5.0, 6.0)]
    assert r.recomputed == () and r.offloaded == ()


def test_order_inputs_resident_then_freed_and_workspace_counted() -> None:
    r = simulate(chain_with_input(), ["a", "b"])
    # a: w(3) + x(5) = 8; w freed after a; b: x(5) + y(2) + ws(4) = 11
    assert [s.resident for s in r.timeline] == [8, 11]
    assert r.peak == 11


def test_schedule_result_is_replayed_by_its_order() -> None:
    sr = ScheduleResult(order=("b", "a", "c"), peak=13, optimal=False, lower_bound=13)
    assert simulate(diamond(), sr).peak == 13


def test_unread_input_counts_at_start() -> None:
    g = TaskGraph([Task("a", writes=("x",))], [Buffer("big", 100), Buffer("x", 1, "a")],
                  results=["x"])
    assert simulate(g, ["a"]).peak == 100


@pytest.mark.parametrize(("order", "match"), [
    (["a", "c", "b"], r"step 1 \(compute 'c'\): reads buffer 'y'.*producer 'b'"),
    (["a", "b"], r"step 2 .*'c'.*never computed"),
    (["a", "b", "c", "a"], r"step 3 .*already ran at step 0"),
    (["a", "q", "c"], r"step 1 .*'q'.*unknown task id"),
    ("abc", r"got the string"),
])
def test_bad_orders_name_the_step(order: object, match: str) -> None:
    with pytest.raises(PlanError, match=match):
        simulate(diamond(), order)  # type: ignore[arg-type]


# -- plans ----------------------------------------------------------------------------------

def test_plan_with_explicit_frees_matches_the_schedule() -> None:
    g = chain_with_input()
    plan = Plan.from_steps([("compute", "a"), ("free", "w"), ("compute", "b"), ("free", "x")])
    r = simulate(g, plan)
    assert r.peak == simulate(g, ["a", "b"]).peak == 11
    assert [s.op for s in r.timeline] == ["compute", "free", "compute", "free"]
    assert [s.resident for s in r.timeline] == [8, 5, 11, 2]


def test_plan_without_frees_keeps_everything() -> None:
    g = chain_with_input()
    r = simulate(g, Plan.from_steps([("compute", "a"), ("compute", "b")]))
    assert r.peak == 3 + 5 + 2 + 4


def test_recompute_is_counted_and_its_resident_output_counted_twice() -> None:
    g = chain_with_input()
    twice = Plan.from_steps([("compute", "a"), ("compute", "a"), ("free", "x"),
                             ("free", "x")])
    with pytest.raises(PlanError, match=r"step 3 \(free 'x'\).*not resident"):
        simulate(g, twice)  # two computes of a leave one x, not two
    steps = [("compute", "a"), ("free", "x"), ("compute", "a"), ("compute", "a"),
             ("compute", "b"), ("free", "x"), ("free", "w")]
    r = simulate(g, Plan.from_steps(steps))
    assert r.recomputed == ("a", "a")
    assert r.compute_time == 2.0 * 3 + 3.0
    # the third compute of a runs while x is resident: 3 + 5 + 5
    assert r.timeline[3].resident == 13
    assert r.peak == 14  # b: w 3 + x 5 + y 2 + ws 4


def test_transfers_overlap_compute_and_prefetch_blocks_its_reader() -> None:
    g = diamond()
    plan = Plan.from_steps([("compute", "a"), ("compute", "b"), ("offload", "x"),
                            ("prefetch", "x"), ("compute", "c")], info={"offload_bandwidth": 10})
    r = simulate(g, plan)
    by_op = {(s.op, s.target): s for s in r.timeline}
    assert (by_op["offload", "x"].start, by_op["offload", "x"].end) == (1.0, 2.0)  # during b
    assert (by_op["prefetch", "x"].start, by_op["prefetch", "x"].end) == (5.0, 6.0)
    assert (by_op["compute", "c"].start, by_op["compute", "c"].end) == (6.0, 7.0)
    assert (r.makespan, r.compute_time) == (7.0, 6.0)
    assert r.offloaded == ("x",)
    assert [s.resident for s in r.timeline] == [10, 11, 11, 11, 13]


def test_offload_frees_memory_only_when_its_copy_ends() -> None:
    g = diamond()
    plan = Plan.from_steps([("compute", "a"), ("offload", "x"), ("compute", "b"),
                            ("prefetch", "x"), ("compute", "c")])
    r = simulate(g, plan, offload_bandwidth=5)
    assert r.peak == 13
    assert [s.resident for s in r.timeline][:3] == [10, 10, 1]
    b = r.timeline[2]
    assert (b.start, b.end) == (3.0, 7.0)  # waits for the 2-unit copy of x, issued at t=1
    assert r.makespan == 7.0 + 2.0 + 1.0


def test_infinite_bandwidth_makes_copies_instant() -> None:
    plan = Plan.from_steps([("compute", "a"), ("offload", "x"), ("compute", "b"),
                            ("prefetch", "x"), ("compute", "c")])
    r = simulate(diamond(), plan, offload_bandwidth=math.inf)
    assert r.makespan == r.compute_time == 6.0


@pytest.mark.parametrize(("steps", "match"), [
    ([("compute", "c")], r"step 0 \(compute 'c'\): reads buffer 'x'.*not resident"),
    ([("compute", "a"), ("free", "y")], r"step 1 \(free 'y'\).*not resident"),
    ([("compute", "a"), ("compute", "b"), ("compute", "c"), ("free", "z")],
     r"step 3 \(free 'z'\).*result"),
    ([("compute", "a"), ("compute", "b"), ("offload", "x"), ("compute", "c")],
     r"step 3 \(compute 'c'\).*'x'.*offloaded"),
    ([("compute", "a"), ("prefetch", "x")], r"step 1 \(prefetch 'x'\).*already resident"),
    ([("prefetch", "x")], r"step 0 \(prefetch 'x'\).*no copy"),
    ([("offload", "y")], r"step 0 \(offload 'y'\).*not resident"),
    ([("compute", "zz")], r"step 0 \(compute 'zz'\).*unknown task"),
    ([("free", "zz")], r"step 0 \(free 'zz'\).*unknown buffer"),
    ([("compute", "a"), ("compute", "b")], r"step 2 .*'c'.*never computed"),
    ([("compute", "a"), ("compute", "b"), ("compute", "c"), ("offload", "z")],
     r"step 4 .*'z'.*result buffer is offloaded"),
])
def test_bad_plans_name_the_first_bad_step(steps: list, match: str) -> None:
    with pytest.raises(PlanError, match=match):
        simulate(diamond(), Plan.from_steps(steps), offload_bandwidth=1.0)


def test_transfers_without_bandwidth_are_refused() -> None:
    plan = Plan.from_steps([("compute", "a"), ("compute", "b"), ("offload", "x")])
    with pytest.raises(PlanError, match="no offload_bandwidth"):
        simulate(diamond(), plan)
    with pytest.raises(PlanError, match="must be a number > 0"):
        simulate(diamond(), plan, offload_bandwidth=0.0)


def test_plan_error_is_a_thrifty_error() -> None:
    assert issubclass(PlanError, ThriftyError)


# -- differential: the simulator against a from-scratch recount ----------------------------

@st.composite
def dag_and_order(draw: st.DrawFn) -> tuple[TaskGraph, list[int]]:
    n = draw(st.integers(1, 9))
    edges = [(i, j) for j in range(n) for i in range(j) if draw(st.booleans())]
    sizes = draw(st.lists(st.integers(0, 20), min_size=n + 2, max_size=n + 2))
    ws = draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))
    reads_input = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    tasks = []
    for j in range(n):
        reads = tuple(f"b{i}" for i, k in edges if k == j)
        if reads_input[j]:
            reads += ("in",)
        tasks.append(Task(f"t{j}", reads=reads, writes=(f"b{j}",), workspace=ws[j]))
    bufs = [Buffer(f"b{j}", sizes[j], f"t{j}") for j in range(n)]
    bufs += [Buffer("in", sizes[n]), Buffer("idle", sizes[n + 1])]
    g = TaskGraph(tasks, bufs)
    prio = draw(st.permutations(range(n)))
    # a random topological order: repeatedly take the ready task of least priority
    done: list[int] = []
    while len(done) < n:
        ready = [j for j in range(n) if j not in done
                 and all(i in done for i, k in edges if k == j)]
        done.append(min(ready, key=lambda j: prio[j]))
    return g, done


def recount(g: TaskGraph, order: list[str]) -> int:
    """The eager-free peak by recounting the live set from scratch before every task."""
    pos = {t: i for i, t in enumerate(order)}
    peak = sum(b.size for b in g.buffers.values() if b.producer is None)
    for k, t in enumerate(order):
        live = 0
        for b, buf in g.buffers.items():
            made = buf.producer is None or pos[buf.producer] < k
            needed = b in g.results or any(pos[r] >= k for r in g.readers[b])
            if made and needed:
                live += buf.size
        task = g.tasks[t]
        peak = max(peak, live + sum(g.buffers[b].size for b in task.writes) + task.workspace)
    return peak


def order_as_plan(g: TaskGraph, order: list[str]) -> Plan:
    """The same schedule written as a plan with explicit frees."""
    pos = {t: i for i, t in enumerate(order)}
    steps: list[tuple[str, object]] = []
    for b, buf in g.buffers.items():
        if buf.producer is None and not g.readers[b] and b not in g.results:
            steps.append(("free", b))
    for k, t in enumerate(order):
        steps.append(("compute", t))
        for b in list(g.tasks[t].reads) + list(g.tasks[t].writes):
            if b in g.results or ("free", b) in steps:
                continue
            if max((pos[r] for r in g.readers[b]), default=k) == k:
                steps.append(("free", b))
    return Plan.from_steps(steps)


@settings(max_examples=150, deadline=None)
@given(dag_and_order())
def test_simulator_agrees_with_recount_plan_and_compact(case: tuple[TaskGraph, list[int]]) -> None:
    g, idx = case
    order = [f"t{j}" for j in idx]
    expected = recount(g, order)
    assert simulate(g, order).peak == expected
    assert simulate(g, order_as_plan(g, order)).peak == expected
    c = Compact.of(g)
    pos = {t: i for i, t in enumerate(c.ids)}
    assert c.peak_of([pos[t] for t in order]) == expected

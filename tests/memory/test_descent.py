"""The descent search for recompute-only plans: its proofs and plans on hand-made graphs and
on the shared layered graphs (the property test in ``test_claims.py`` checks it against an
exhaustive search over all plans)."""

from __future__ import annotations

import pytest

from thrifty.errors import InfeasibleBudget
from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
from thrifty.graph.taskgraph_io import load_taskgraph
from thrifty.memory.budget import lower_bound, plan
from thrifty.memory.budget.descent import descend, descent_bound, descent_plan
from thrifty.memory.schedule import schedule
from thrifty.memory.simulate import simulate
from thrifty.testing import require_shared_data


def fork_join() -> TaskGraph:
    """``a`` read by ``b`` and ``c``, both read by ``d``: while the later of ``b`` and ``c``
    runs, the other, ``a`` and its own output are resident (30 bytes), though no task
    touches more than 21."""
    return TaskGraph([Task("t0", writes=("a",), time=1.0),
                      Task("t1", reads=("a",), writes=("b",), time=1.0),
                      Task("t2", reads=("a",), writes=("c",), time=1.0),
                      Task("t3", reads=("b", "c"), writes=("d",), time=1.0)],
                     [Buffer("a", 10, "t0"), Buffer("b", 10, "t1"), Buffer("c", 10, "t2"),
                      Buffer("d", 1, "t3")], name="fork_join")


def test_descent_proves_what_the_task_bound_cannot() -> None:
    g = fork_join()
    assert lower_bound(g, offload=False) == 21
    assert descend(g, 29).status == "infeasible"
    p, d = descent_plan(g, 30)
    assert d.status == "found" and p is not None
    assert simulate(g, p).peak <= 30
    assert descent_bound(g, depth=0) == 21 and descent_bound(g, depth=1) == 30
    with pytest.raises(InfeasibleBudget, match="infeasible with recompute .an exhaustive") as e:
        plan(g, 25, time_limit=0.5)
    assert e.value.smallest is not None and e.value.smallest >= 30


def test_descent_recomputes_to_fit() -> None:
    """A chain whose first activation is read last: keeping it costs 100 bytes all along,
    recomputing it from the input costs time only."""
    g = TaskGraph([Task("f0", reads=("x",), writes=("a0",), time=1.0),
                   Task("f1", reads=("a0",), writes=("a1",), time=1.0),
                   Task("f2", reads=("a1",), writes=("a2",), time=1.0),
                   Task("f3", reads=("a2", "a0"), writes=("y",), time=1.0)],
                  [Buffer("x", 1), Buffer("a0", 100, "f0"), Buffer("a1", 100, "f1"),
                   Buffer("a2", 100, "f2"), Buffer("y", 1, "f3")], results=["y", "x"])
    peak = simulate(g, schedule(g).order).peak
    assert peak == 301
    p, d = descent_plan(g, 202)
    assert p is not None
    sim = simulate(g, p)
    assert sim.peak <= 202 and sim.recomputed == ("f0",)
    assert descend(g, 201).status == "infeasible"


def test_search_limits_give_unknown_not_a_proof() -> None:
    g = fork_join()
    assert descend(g, 29, max_sets=1).status == "unknown"


@pytest.mark.needs_data
def test_layered_n100_at_nine_tenths_of_the_best_peak() -> None:
    """No eviction plan fits 0.9 of the best schedule's peak on this graph; a descent does,
    recomputing, and ``plan`` returns it."""
    g = load_taskgraph(require_shared_data("graphs", "layered", "random_layered_n100.json"))
    peak = simulate(g, schedule(g, time_limit=2).order).peak
    b = int(0.9 * peak)
    p = plan(g, b, recompute=True, time_limit=1.0)
    sim = simulate(g, p)
    assert sim.peak <= b < peak
    assert sim.recomputed and not sim.offloaded
    assert p.info["peak"] == sim.peak


@pytest.mark.needs_data
def test_descent_bound_on_layered_n100_is_valid_and_above_the_task_bound() -> None:
    """Above the largest task footprint, and below the peak of a plan that replays."""
    g = load_taskgraph(require_shared_data("graphs", "layered", "random_layered_n100.json"))
    bound = descent_bound(g, depth=2)
    assert bound > lower_bound(g, offload=False)
    p, _ = descent_plan(g, int(bound / 0.9))
    assert p is not None and bound <= simulate(g, p).peak

"""Tests of minimum-peak scheduling: exact algorithms against brute force, heuristics, files."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from thrifty.errors import ThriftyError
from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
from thrifty.memory import schedule, simulate
from thrifty.memory.order import (
    HEURISTICS,
    Compact,
    exact_order,
    is_in_forest,
    liu_in_tree,
    sp_decompose,
    sp_order,
)
from thrifty.memory.order.generate import (
    nn_like,
    random_dag,
    random_in_tree,
    random_layered,
    random_out_tree,
    series_parallel,
)
from thrifty.testing import require_shared_data

# -- helpers --------------------------------------------------------------------------------


def topological_orders(c: Compact) -> Iterator[list[int]]:
    """Every topological order of ``c`` (small graphs only)."""
    indeg = [len(p) for p in c.preds]
    order: list[int] = []
    used = [False] * c.n

    def rec() -> Iterator[list[int]]:
        if len(order) == c.n:
            yield list(order)
            return
        for t in range(c.n):
            if indeg[t] == 0 and not used[t]:
                used[t] = True
                order.append(t)
                for s in c.succs[t]:
                    indeg[s] -= 1
                yield from rec()
                for s in c.succs[t]:
                    indeg[s] += 1
                order.pop()
                used[t] = False

    yield from rec()


def brute_force_peak(g: TaskGraph) -> int:
    """The least peak over all topological orders, each replayed by the simulator."""
    c = Compact.of(g)
    return min(simulate(g, c.to_ids(o)).peak for o in topological_orders(c))


def relabel(g: TaskGraph, seed: int) -> TaskGraph:
    """The same graph with tasks and buffers renamed and listed in a shuffled order."""
    rng = np.random.default_rng(seed)
    tnames = {t: f"T{k}" for k, t in enumerate(rng.permutation(len(g.tasks)))}
    tmap = {t: tnames[i] for i, t in enumerate(g.tasks)}
    bmap = {b: f"B{k}" for b, k in zip(g.buffers, rng.permutation(len(g.buffers)))}
    tasks = [Task(tmap[t.id], tuple(bmap[b] for b in t.reads), tuple(bmap[b] for b in t.writes),
                  t.time, t.workspace) for t in g.tasks.values()]
    bufs = [Buffer(bmap[b.id], b.size, None if b.producer is None else tmap[b.producer])
            for b in g.buffers.values()]
    order = rng.permutation(len(tasks))
    border = rng.permutation(len(bufs))
    return TaskGraph([tasks[i] for i in order], [bufs[i] for i in border],
                     results=[bmap[b] for b in g.results])


def check_valid(g: TaskGraph, r) -> None:  # noqa: ANN001
    assert sorted(map(repr, r.order)) == sorted(map(repr, g.tasks))
    assert simulate(g, r.order).peak == r.peak
    assert r.lower_bound <= r.peak
    if r.optimal:
        assert r.lower_bound == r.peak


# -- small drawn graphs ---------------------------------------------------------------------

def test_fork_join_runs_the_branch_that_frees_memory_first() -> None:
    """::

              s            s writes sa (1 byte) and sb (5 bytes)
             / \\
        ws 9 a   b          a needs 9 bytes of workspace, b shrinks sb to 1 byte
             \\ /
              t

    Running ``a`` first holds ``sb`` (5) during its workspace: 1 + 5 + 1 + 9 = 16. Running
    ``b`` first: 1 + 1 (bt) + 1 (at) + 9 = 12.
    """
    g = TaskGraph([Task("s", writes=("sa", "sb")),
                   Task("a", reads=("sa",), writes=("at",), workspace=9),
                   Task("b", reads=("sb",), writes=("bt",)),
                   Task("t", reads=("at", "bt"), writes=("out",))],
                  [Buffer("sa", 1, "s"), Buffer("sb", 5, "s"), Buffer("at", 1, "a"),
                   Buffer("bt", 1, "b"), Buffer("out", 1, "t")])
    r = schedule(g)
    assert r.order == ("s", "b", "a", "t")
    assert (r.peak, r.optimal, r.method) == (12, True, "sp")
    assert schedule(g, method="exact").peak == 12
    assert schedule(g, method="bfs").peak == 16


def test_in_tree_runs_the_costlier_subtree_first() -> None:
    """::

        a(1) -> b(8) --\\
                       e(1)
        c(6) -> d(1) --/

    Left first: b needs 1 + 8 = 9, then d with B (8) and C (6) resident: 8 + 6 + 1 = 15.
    Right first:
    c 6, d 6 + 1 = 7, a 1 + 1, b 1 + 1 + 8 = 10, e 8 + 1 + 1 = 10.
    """
    g = TaskGraph([Task("a", writes=("A",)), Task("b", reads=("A",), writes=("B",)),
                   Task("c", writes=("C",)), Task("d", reads=("C",), writes=("D",)),
                   Task("e", reads=("B", "D"), writes=("E",))],
                  [Buffer("A", 1, "a"), Buffer("B", 8, "b"), Buffer("C", 6, "c"),
                   Buffer("D", 1, "d"), Buffer("E", 1, "e")])
    r = schedule(g)
    assert (r.peak, r.optimal, r.method) == (10, True, "liu")
    assert r.order.index("d") < r.order.index("b")
    assert schedule(g, method="file").peak == 15


def test_results_stay_and_inputs_count() -> None:
    """``w`` (input, 4) -> a(x: 2) -> b(y: 3); ``x`` is also a result.::

        w -> a -> b
    """
    g = TaskGraph([Task("a", reads=("w",), writes=("x",)),
                   Task("b", reads=("x",), writes=("y",))],
                  [Buffer("w", 4), Buffer("x", 2, "a"), Buffer("y", 3, "b")],
                  results=["x", "y"])
    r = schedule(g)
    assert (r.peak, r.optimal) == (6, True)
    assert simulate(g, r.order).timeline[-1].resident == 5


def test_sizes_beyond_64_bits_stay_exact() -> None:
    """::

        a(x: 2^70) -> b(y: 2^70) -> c(z: 3), c also reads x
    """
    g = TaskGraph([Task("a", writes=("x",)), Task("b", reads=("x",), writes=("y",)),
                   Task("c", reads=("x", "y"), writes=("z",))],
                  [Buffer("x", 2**70, "a"), Buffer("y", 2**70, "b"), Buffer("z", 3, "c")])
    r = schedule(g)
    assert (r.peak, r.optimal) == (2**71 + 3, True)
    assert simulate(g, r.order).peak == 2**71 + 3


def test_empty_graph() -> None:
    r = schedule(TaskGraph([], [Buffer("in", 7)]))
    assert (r.order, r.peak, r.optimal) == ((), 7, True)


# -- exact algorithms against brute force ---------------------------------------------------

@pytest.mark.parametrize("seed", range(24))
def test_exact_search_matches_brute_force(seed: int) -> None:
    g = random_dag(4 + seed % 5, edge_prob=0.3, seed=seed, workspace=seed % 2 == 0)
    best = brute_force_peak(g)
    res = exact_order(Compact.of(g))
    assert res.optimal and res.peak == best
    r = schedule(g)
    check_valid(g, r)
    assert r.peak == best and r.optimal


@pytest.mark.parametrize("seed", range(12))
def test_exact_search_below_an_upper_bound(seed: int) -> None:
    g = random_dag(7, edge_prob=0.25, seed=100 + seed)
    c = Compact.of(g)
    best = brute_force_peak(g)
    above = exact_order(c, upper_bound=best + 1)
    assert above.peak == best
    at = exact_order(c, upper_bound=best)
    assert at.order is None and at.optimal and at.lower_bound == best


def test_exact_search_out_of_time_gives_a_true_lower_bound() -> None:
    g = random_layered(120, width=10, seed=3)
    c = Compact.of(g)
    res = exact_order(c, time_limit=0.2)
    full = schedule(g, method="heuristic")
    assert not res.optimal and res.order is None
    assert c.lower_bound() <= res.lower_bound <= full.peak


@pytest.mark.parametrize("seed", range(20))
def test_liu_matches_brute_force_on_in_trees(seed: int) -> None:
    g = random_in_tree(4 + seed % 6, seed=seed, workspace=seed % 2 == 1)
    c = Compact.of(g)
    assert is_in_forest(c)
    assert c.peak_of(liu_in_tree(c)) == brute_force_peak(g)


@pytest.mark.parametrize("seed", range(12))
def test_liu_matches_the_exact_search_on_larger_in_trees(seed: int) -> None:
    g = random_in_tree(14 + seed, seed=seed, workspace=seed % 3 == 0,
                       max_size=(3, 10, 1000)[seed % 3])
    c = Compact.of(g)
    res = exact_order(c, time_limit=30)
    assert res.optimal
    assert c.peak_of(liu_in_tree(c)) == res.peak


@pytest.mark.parametrize("seed", range(20))
def test_sp_matches_brute_force(seed: int) -> None:
    g = series_parallel(4 + seed % 5, seed=seed, branch_prob=(0.3, 0.6, 0.9)[seed % 3])
    c = Compact.of(g)
    order = sp_order(c)
    assert order is not None
    assert c.peak_of(order) == brute_force_peak(g)


@pytest.mark.parametrize("seed", range(16))
def test_sp_matches_the_exact_search_on_larger_graphs(seed: int) -> None:
    g = series_parallel(12 + seed, seed=seed, max_size=(3, 100)[seed % 2],
                        branch_prob=(0.4, 0.7)[seed % 2])
    if seed % 2:
        g = TaskGraph([Task(t.id, t.reads, t.writes, t.time, (7 * hash(t.id)) % 40)
                       for t in g.tasks.values()], g.buffers.values())
    c = Compact.of(g)
    res = exact_order(c, time_limit=30)
    assert res.optimal
    order = sp_order(c)
    assert order is not None and c.peak_of(order) == res.peak


@pytest.mark.parametrize("seed", range(8))
def test_out_trees_with_a_buffer_per_child_are_solved_by_the_sp_algorithm(seed: int) -> None:
    g = random_out_tree(5 + seed % 4, seed=seed, edge_buffers=True)
    r = schedule(g)
    assert r.method in ("sp", "liu") and r.optimal  # a path is an in-tree too
    assert r.peak == brute_force_peak(g)


def test_sp_recognition() -> None:
    shared = series_parallel(20, seed=1, edge_buffers=False)  # a fork's buffer read twice
    assert sp_decompose(Compact.of(shared)) is None
    assert sp_decompose(Compact.of(series_parallel(20, seed=1))) is not None
    # the "N" graph a->c, a->d, b->d is the smallest non-series-parallel shape
    n_graph = TaskGraph([Task("a", writes=("ac", "ad")), Task("b", writes=("bd",)),
                         Task("c", reads=("ac",), writes=("C",)),
                         Task("d", reads=("ad", "bd"), writes=("D",))],
                        [Buffer("ac", 1, "a"), Buffer("ad", 1, "a"), Buffer("bd", 1, "b"),
                         Buffer("C", 1, "c"), Buffer("D", 1, "d")])
    assert sp_decompose(Compact.of(n_graph)) is None


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 7), st.floats(0.0, 0.8), st.integers(0, 10_000), st.booleans())
def test_schedule_is_optimal_and_bounded_on_random_dags(n: int, p: float, seed: int,
                                                        ws: bool) -> None:
    g = random_dag(n, edge_prob=p, seed=seed, workspace=ws)
    best = brute_force_peak(g)
    r = schedule(g)
    check_valid(g, r)
    assert r.peak == best and r.optimal
    assert Compact.of(g).lower_bound() <= best


@pytest.mark.parametrize("make", [
    lambda: random_dag(8, seed=5, workspace=True),
    lambda: random_in_tree(9, seed=6),
    lambda: series_parallel(9, seed=7),
    lambda: random_out_tree(8, seed=8),
], ids=["dag", "in_tree", "sp", "out_tree"])
@pytest.mark.parametrize("perm", range(3))
def test_renaming_tasks_and_buffers_keeps_the_peak(make, perm: int) -> None:  # noqa: ANN001
    g = make()
    h = relabel(g, perm)
    r, s = schedule(g), schedule(h)
    check_valid(h, s)
    assert (s.peak, s.optimal) == (r.peak, r.optimal)
    assert s.peak == brute_force_peak(g)


# -- lower bounds and local improvement ----------------------------------------------------

def graph_with_inputs_and_results(seed: int) -> TaskGraph:
    """A random DAG whose tasks also read two inputs, with one inner buffer a result."""
    base = random_dag(8, edge_prob=0.3, seed=seed, workspace=True)
    rng = np.random.default_rng(seed)
    tasks = []
    for t in base.tasks.values():
        extra = tuple(f"in{k}" for k in range(2) if rng.random() < 0.3)
        tasks.append(Task(t.id, t.reads + extra, t.writes, t.time, t.workspace))
    bufs = [*base.buffers.values(), Buffer("in0", 7), Buffer("in1", 3), Buffer("idle", 2)]
    return TaskGraph(tasks, bufs, results=[*base.results, 0])


@pytest.mark.parametrize("seed", range(8))
def test_task_bounds_hold_in_every_order_and_agree_with_the_walk(seed: int) -> None:
    g = graph_with_inputs_and_results(seed)
    c = Compact.of(g)
    bounds = c.task_bounds()
    assert bounds == [c.task_bound(t) for t in range(c.n)] == c.task_bounds_of(range(c.n))
    # in sampled orders, every task uses at least its bound while it runs
    for k, o in enumerate(topological_orders(c)):
        during, _ = c.profile(o)
        assert all(during[i] >= bounds[t] for i, t in enumerate(o))
        if k == 200:
            break
    assert c.lower_bound() <= brute_force_peak(g)


@pytest.mark.parametrize("seed", range(10))
def test_local_improvement_with_a_whole_window_is_exact(seed: int) -> None:
    from thrifty.memory.order.heuristics import bfs
    from thrifty.memory.order.local import improve_order

    g = random_dag(8, edge_prob=0.2, seed=200 + seed, workspace=True)
    c = Compact.of(g)
    start = bfs(c)
    better = improve_order(c, start, window=8, max_window=8, time_limit=10.0)
    assert simulate(g, c.to_ids(better)).peak == c.peak_of(better)
    assert c.peak_of(better) == brute_force_peak(g) <= c.peak_of(start)


def test_local_improvement_never_worsens_a_large_order() -> None:
    from thrifty.memory.order.heuristics import dfs
    from thrifty.memory.order.local import improve_order

    g = random_layered(600, width=10, seed=21)
    c = Compact.of(g)
    start = dfs(c)
    better = improve_order(c, start, time_limit=1.0)
    assert simulate(g, c.to_ids(better)).peak == c.peak_of(better) <= c.peak_of(start)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 400), st.integers(0, 10**6), st.integers(0, 10**6), st.integers(1, 40))
def test_window_replay_and_task_sets_agree_with_the_whole_profile(n: int, seed: int, cut: int,
                                                                  width: int) -> None:
    from thrifty.memory.order.exact import Lattice
    from thrifty.memory.order.heuristics import greedy_delta

    def mask(tasks: list[int]) -> int:
        return sum(1 << t for t in tasks)

    g = graph_with_inputs_and_results(seed) if seed % 3 == 0 else random_layered(
        n, width=4, seed=seed)
    c = Compact.of(g)
    order = greedy_delta(c)
    during, after = c.profile(order)
    lat = Lattice(c)
    lo = cut % c.n
    hi = min(c.n, lo + width)
    start, span = mask(order[:lo]), mask(order[lo:hi])
    mem = after[lo - 1] if lo else c.start_mem
    assert lat.replay(start, mem, order[lo:hi]) == (during[lo:hi], after[lo:hi])
    assert lat._todo(span) == [t for t in lat.by_bound if (span >> t) & 1]
    assert c.task_bounds_of(order[lo:hi]) == [c.task_bound(t) for t in order[lo:hi]]
    # the window's own lattice: same steps, same search outcome as the whole graph's
    sub, win = lat.window(order[lo:hi], lambda t: t in order[:lo])
    local = [win.index(t) for t in order[lo:hi]]
    assert sub.replay(0, mem, local) == (during[lo:hi], after[lo:hi])
    peak = max(during[lo:hi])
    for ub in (None, peak, peak + 1):
        found, v, bound, finished, states = lat.search(start, start | span, mem, 0, ub,
                                                        float("inf"), 10**6)
        sfound, sv, sbound, sfinished, sstates = sub.search(0, (1 << len(win)) - 1, mem, 0,
                                                            ub, float("inf"), 10**6)
        assert (None if sfound is None else [win[i] for i in sfound]) == found
        assert (sv, sbound, sfinished, sstates) == (v, bound, finished, states)


def test_large_training_graph_is_proven_optimal_by_the_bound_at_its_peak() -> None:
    g = nn_like(1600, seed=3)  # 6402 tasks: above the dense-bound size
    r = schedule(g, time_limit=1.0)
    check_valid(g, r)
    assert r.optimal


# -- heuristics and baselines ---------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(HEURISTICS))
@pytest.mark.parametrize("make", [
    lambda: random_layered(150, width=6, seed=1),
    lambda: nn_like(10, seed=2),
    lambda: random_dag(30, edge_prob=0.1, seed=3, workspace=True),
], ids=["layered", "nn_like", "dag"])
def test_every_heuristic_gives_a_valid_order(name: str, make) -> None:  # noqa: ANN001
    g = make()
    r = schedule(g, method=name)
    check_valid(g, r)
    assert r.method == name


def test_auto_is_never_worse_than_any_baseline() -> None:
    g = random_layered(300, width=12, seed=9)
    r = schedule(g, time_limit=1.0)
    check_valid(g, r)
    assert set(r.info["peaks"]) == set(HEURISTICS)
    assert r.peak <= min(r.info["peaks"].values())


def test_file_baseline_is_the_listed_order_or_the_files_own() -> None:
    from thrifty.graph.taskgraph_io import read_taskgraph

    g = random_dag(12, edge_prob=0.3, seed=4)
    listed = TaskGraph(reversed(list(g.tasks.values())), g.buffers.values())
    assert schedule(g, method="file").order == tuple(g.tasks)  # listed topologically
    assert schedule(listed, method="file").order == listed.order  # not: Kahn's order
    tf = read_taskgraph(require_shared_data("graphs", "layered", "random_layered_n100.json"))
    assert tf.order is not None
    assert schedule(tf, method="file").order == tuple(tf.order)


def test_reference_order_is_the_file_baseline() -> None:
    g = nn_like(3, seed=0)
    rev_ok = list(g.order)
    r = schedule(g, method="file", reference_order=rev_ok)
    assert list(r.order) == rev_ok
    with pytest.raises(ThriftyError, match="not a topological order"):
        schedule(g, method="file", reference_order=rev_ok[::-1])
    with pytest.raises(ThriftyError, match="unknown task"):
        schedule(g, reference_order=["nope"])


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"method": "magic"}, "unknown scheduling method 'magic'; valid methods are auto"),
    ({"method": "liu"}, "not an in-forest"),
    ({"method": "sp"}, "not series-parallel"),
    ({"time_limit": -1.0}, "time_limit"),
])
def test_bad_arguments_are_refused(kwargs: dict, match: str) -> None:
    with pytest.raises(ThriftyError, match=match):
        schedule(nn_like(2, seed=0), **kwargs)


# -- scale ----------------------------------------------------------------------------------

def test_five_thousand_tasks_schedule_quickly() -> None:
    g = random_layered(5000, width=24, seed=11)
    t0 = time.perf_counter()
    r = schedule(g, time_limit=0.5)
    elapsed = time.perf_counter() - t0
    check_valid(g, r)
    assert r.peak <= min(r.info["peaks"].values())
    assert elapsed < 60, f"5000 tasks took {elapsed:.1f} s"


def test_large_graph_with_no_time_left_keeps_the_best_heuristic() -> None:
    """Above EXACT_MAX_TASKS the time limit counts from the call's start: with none, the
    beam search completes greedily at once and no window is re-solved."""
    from thrifty.memory.schedule import EXACT_MAX_TASKS

    g = random_layered(EXACT_MAX_TASKS + 200, width=24, seed=5)
    r = schedule(g, time_limit=0.0)
    check_valid(g, r)
    assert "beam" in r.info["peaks"] and "+local" not in r.method
    assert r.peak == min(r.info["peaks"].values())


def test_large_trees_and_sp_graphs_are_solved_exactly() -> None:
    tree = random_in_tree(3000, seed=4, workspace=True)
    r = schedule(tree)
    check_valid(tree, r)
    assert r.optimal and r.method == "liu"
    sp = series_parallel(3000, seed=4)
    r = schedule(sp)
    check_valid(sp, r)
    assert r.optimal and r.method == "sp"


# -- shared graph files ---------------------------------------------------------------------

def shared_files() -> list[str]:
    return [f"{d}/{n}" for d, names in (
        ("checkmate", [f"{m}_{k}.json" for m in ("vgg16", "vgg19", "mobilenet", "resnet50",
                                                 "fcn_8_vgg", "segnet", "vgg_unet")
                       for k in ("train", "test")]),
        ("layered", [f"random_layered_n{n}.json" for n in (100, 250, 500, 1000)]),
    ) for n in names]


@pytest.mark.parametrize("name", shared_files())
def test_every_shared_graph_gets_a_valid_schedule(name: str) -> None:
    from thrifty.graph.taskgraph_io import read_taskgraph

    path = require_shared_data("graphs", *name.split("/"))
    tf = read_taskgraph(path)
    r = schedule(tf, time_limit=1.0)
    check_valid(tf.graph, r)
    assert r.peak <= min(r.info.get("peaks", {"ours": r.peak}).values())
    if name.startswith("checkmate"):
        assert r.optimal, f"{name}: peak {r.peak}, lower bound {r.lower_bound}"
    if name.endswith("n100.json"):
        assert r.optimal


# -- the command line -----------------------------------------------------------------------

def test_cli_json_is_exactly_the_stable_format(tmp_path: Path) -> None:
    from thrifty.cli.memory_schedule import schedule as schedule_cmd
    from thrifty.graph.taskgraph_io import save_taskgraph

    g = random_in_tree(12, seed=1)
    path = tmp_path / "tree.json"
    save_taskgraph(g, path)
    out = CliRunner().invoke(schedule_cmd, [str(path), "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert list(data) == ["peak", "optimal", "lower_bound", "order"]
    r = schedule(g)
    assert data == {"peak": r.peak, "optimal": True, "lower_bound": r.peak,
                    "order": list(r.order)}
    table = CliRunner().invoke(schedule_cmd, [str(path), "--method", "bfs"])
    assert table.exit_code == 0 and "peak" in table.output


def test_cli_reports_bad_files(tmp_path: Path) -> None:
    from thrifty.cli.memory_schedule import schedule as schedule_cmd

    bad = tmp_path / "bad.json"
    bad.write_text('{"nodes": [{"id": 0, "weird": 1}], "links": []}')
    out = CliRunner().invoke(schedule_cmd, [str(bad), "--json"])
    assert out.exit_code != 0
    assert "Error" in out.output

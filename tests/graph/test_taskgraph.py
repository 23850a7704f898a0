"""TaskGraph: structure computed once (readers, order, results, inputs), validation errors,
and cycles named in the error."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from thrifty.errors import CycleError, GraphError
from thrifty.graph.taskgraph import Buffer, Task, TaskGraph, find_cycle


def _node_graph(edges: list[tuple[str, str]], nodes: list[str], sizes: dict | None = None,
                name: str = "g") -> TaskGraph:
    """One task + one output buffer per node (the node-link convention)."""
    sizes = sizes or {}
    reads: dict[str, list[str]] = {n: [] for n in nodes}
    for u, v in edges:
        reads[v].append(u)
    tasks = [Task(n, reads=tuple(reads[n]), writes=(n,), time=1.0) for n in nodes]
    buffers = [Buffer(n, sizes.get(n, 1), n) for n in nodes]
    return TaskGraph(tasks, buffers, name=name)


def test_diamond_structure() -> None:
    r"""
        a
       / \
      b   c
       \ /
        d
    """
    g = _node_graph([("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")], ["a", "b", "c", "d"])
    assert g.order == ("a", "b", "c", "d")
    assert g.readers == {"a": ("b", "c"), "b": ("d",), "c": ("d",), "d": ()}
    assert g.results == frozenset({"d"})
    assert g.inputs == ()
    assert g.predecessors("d") == ("b", "c")
    assert g.successors("a") == ("b", "c")
    assert g.total_time() == 4.0
    assert len(g) == 4
    assert repr(g) == "TaskGraph('g', tasks=4, buffers=4, results=1)"


def test_inputs_multiple_writes_and_explicit_results() -> None:
    r"""
      x (input)
      |
      t1 --> y, z
      |      |
      t2 <---+  (t2 reads y and z, writes w)
    """
    g = TaskGraph(
        [Task("t1", reads=("x",), writes=("y", "z"), time=2.0, workspace=16),
         Task("t2", reads=("y", "z"), writes=("w",), time=3.0)],
        [Buffer("x", 8), Buffer("y", 4, "t1"), Buffer("z", 4, "t1"), Buffer("w", 2, "t2")],
        results=["w", "y"])
    assert g.inputs == ("x",)
    assert g.order == ("t1", "t2")
    assert g.predecessors("t2") == ("t1",)  # once, though t2 reads two of t1's buffers
    assert g.readers["x"] == ("t1",)
    assert g.results == frozenset({"w", "y"})


def test_order_is_stable_in_insertion_order_when_unconstrained() -> None:
    g = _node_graph([], ["c", "a", "b"])
    assert g.order == ("c", "a", "b")
    assert g.results == frozenset({"a", "b", "c"})


def test_a_task_reading_a_buffer_twice_is_listed_twice_as_reader() -> None:
    g = TaskGraph([Task("a", writes=("x",)), Task("b", reads=("x", "x"), writes=("y",))],
                  [Buffer("x", 1, "a"), Buffer("y", 1, "b")])
    assert g.readers["x"] == ("b", "b")
    assert g.predecessors("b") == ("a",)


_BAD_GRAPHS = [
    ("duplicate task", lambda: TaskGraph([Task("a"), Task("a")], []), "duplicate task id 'a'"),
    ("duplicate buffer", lambda: TaskGraph([], [Buffer("x", 1), Buffer("x", 2)]),
     "duplicate buffer id 'x'"),
    ("negative size", lambda: TaskGraph([], [Buffer("x", -1)]), "size -1; sizes are integers"),
    ("float size", lambda: TaskGraph([], [Buffer("x", 1.5)]), "size 1.5"),
    ("bool size", lambda: TaskGraph([], [Buffer("x", True)]), "size True"),
    ("negative time", lambda: TaskGraph([Task("a", time=-1.0)], []),
     "time -1.0; times are numbers >= 0"),
    ("nan time", lambda: TaskGraph([Task("a", time=math.nan)], []), "time nan"),
    ("negative workspace", lambda: TaskGraph([Task("a", workspace=-4)], []),
     "negative workspace -4"),
    ("unknown read", lambda: TaskGraph([Task("a", reads=("q",))], []),
     "reads unknown buffer 'q'"),
    ("unknown write", lambda: TaskGraph([Task("a", writes=("q",))], []),
     "writes unknown buffer 'q'"),
    ("write of another's buffer", lambda: TaskGraph(
        [Task("a", writes=("x",)), Task("b", writes=("y",))],
        [Buffer("x", 1, "b"), Buffer("y", 1, "b")]), "writes buffer 'x' whose producer is 'b'"),
    ("unknown producer", lambda: TaskGraph([], [Buffer("x", 1, "ghost")]),
     "unknown producer 'ghost'"),
    ("producer not writing", lambda: TaskGraph([Task("a")], [Buffer("x", 1, "a")]),
     "names producer 'a', which does not list it"),
    ("unknown result", lambda: TaskGraph([], [Buffer("x", 1)], results=["y"]),
     "results name unknown buffers"),
]


@pytest.mark.parametrize(("build", "message"), [pytest.param(b, m, id=i)
                                                for i, b, m in _BAD_GRAPHS])
def test_validation_errors_name_what_is_wrong(build, message: str) -> None:
    with pytest.raises(GraphError, match=message):
        build()


def test_a_cycle_is_named_in_edge_direction() -> None:
    r"""
      s --> a --> b --> c
            ^           |
            +-----------+
    """
    with pytest.raises(CycleError) as info:
        _node_graph([("s", "a"), ("a", "b"), ("b", "c"), ("c", "a")], ["s", "a", "b", "c"],
                    name="loop")
    cycle = info.value.cycle
    assert sorted(cycle) == ["a", "b", "c"]
    k = cycle.index("a")
    assert cycle[k:] + cycle[:k] == ["a", "b", "c"]
    assert str(info.value).startswith("loop: the graph has a cycle: ")
    assert "'a' -> 'b' -> 'c' -> 'a'" in str(info.value) or \
        "'b' -> 'c' -> 'a' -> 'b'" in str(info.value) or \
        "'c' -> 'a' -> 'b' -> 'c'" in str(info.value)


def test_a_self_loop_is_a_cycle_of_one() -> None:
    with pytest.raises(CycleError) as info:
        _node_graph([("a", "a")], ["a"])
    assert info.value.cycle == ["a"]


def test_find_cycle_on_an_empty_set() -> None:
    assert find_cycle([], lambda v: []) == []


@st.composite
def _dags(draw) -> tuple[list[str], list[tuple[str, str]]]:
    n = draw(st.integers(1, 15))
    names = draw(st.permutations([f"n{i}" for i in range(n)]))  # names say nothing of order
    edges = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1))
                          .filter(lambda e: e[0] < e[1]).map(lambda e: (names[e[0]],
                                                                        names[e[1]])),
                          unique=True, max_size=3 * n))
    listing = draw(st.permutations(names))
    return list(listing), edges


@settings(max_examples=60, deadline=None)
@given(_dags())
def test_order_is_topological_and_readers_match_edges(dag) -> None:
    nodes, edges = dag
    g = _node_graph(edges, nodes)
    pos = {t: i for i, t in enumerate(g.order)}
    assert sorted(g.order) == sorted(nodes)
    assert all(pos[u] < pos[v] for u, v in edges)
    for n in nodes:
        assert sorted(g.readers[n]) == sorted(v for u, v in edges if u == n)
    assert g.results == frozenset(n for n in nodes if not any(u == n for u, _ in edges))


@settings(max_examples=60, deadline=None)
@given(_dags(), st.data())
def test_a_back_edge_gives_a_cycle_error_naming_a_real_cycle(dag, data) -> None:
    nodes, edges = dag
    if not edges:
        edges = [(nodes[0], nodes[0])]
    else:  # close a path u -> v with v -> u
        u, v = data.draw(st.sampled_from(edges))
        edges = [*edges, (v, u)]
    with pytest.raises(CycleError) as info:
        _node_graph(edges, nodes)
    cycle = info.value.cycle
    assert cycle and len(set(cycle)) == len(cycle)
    edge_set = set(edges)
    assert all((cycle[i], cycle[(i + 1) % len(cycle)]) in edge_set for i in range(len(cycle)))

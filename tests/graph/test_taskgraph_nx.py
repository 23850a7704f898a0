"""TaskGraph to and from networkx, and what the planners accept: a TaskGraph, a file read by
read_taskgraph, a networkx DiGraph, or a path; anything else is a clear ThriftyError."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from thrifty import memory
from thrifty.errors import CycleError, GraphError, ThriftyError
from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
from thrifty.graph.taskgraph_io import (
    as_taskgraph,
    load_taskgraph,
    read_taskgraph,
    save_taskgraph,
    taskgraph_diff,
    taskgraph_from_networkx,
    taskgraph_to_networkx,
)
from thrifty.testing import require_shared_data


def _chain_graph() -> nx.DiGraph:
    """0 -> 1 -> 3, 0 -> 2 -> 3 (a diamond), Checkmate attributes."""
    G = nx.DiGraph()
    for v, (ram, cpu) in enumerate([(8, 1.0), (4, 2.0), (2, 3.0), (1, 4.0)]):
        G.add_node(v, cost_ram=ram, cost_cpu=cpu, name=f"op{v}", backward=v > 1)
    G.add_edges_from([(0, 1), (0, 2), (2, 3), (1, 3)])
    return G


def test_from_networkx_reads_sizes_times_attrs_and_edge_order() -> None:
    g = TaskGraph.from_networkx(_chain_graph())
    assert [(b.id, b.size, b.producer) for b in g.buffers.values()] == [
        (0, 8, 0), (1, 4, 1), (2, 2, 2), (3, 1, 3)]
    assert [t.time for t in g.tasks.values()] == [1.0, 2.0, 3.0, 4.0]
    assert g.tasks[3].reads == (2, 1)  # in the order the edges into 3 were added
    assert all(t.writes == (t.id,) for t in g.tasks.values())
    assert dict(g.tasks[2].attrs) == {"name": "op2", "backward": True}
    assert g.results == frozenset({3})


def test_layered_attributes_and_explicit_attribute_names() -> None:
    G = nx.DiGraph([("a", "b")])
    nx.set_node_attributes(G, {"a": 5, "b": 6}, "out_cost")
    nx.set_node_attributes(G, {"a": 0.5, "b": 1.5}, "duration")
    nx.set_node_attributes(G, 7, "param_cost")
    g = taskgraph_from_networkx(G)
    assert g.buffers["b"].size == 6 and g.tasks["a"].time == 0.5
    assert dict(g.tasks["a"].attrs) == {"param_cost": 7}
    h = TaskGraph.from_networkx(G, size="param_cost", time="out_cost", name="mine")
    assert h.name == "mine" and h.buffers["a"].size == 7 and h.tasks["b"].time == 6.0


def test_to_networkx_and_back_is_exact_for_any_read_order() -> None:
    g = TaskGraph([Task("x", writes=("x",), time=1.0), Task("y", writes=("y",), time=2.0),
                   Task("z", reads=("y", "x"), writes=("z",), time=3.0, attrs={"k": [1]})],
                  [Buffer("x", 3, "x"), Buffer("y", 4, "y"), Buffer("z", 5, "z")],
                  results=["x", "z"], name="three")
    for shape, (size, time) in {"checkmate": ("cost_ram", "cost_cpu"),
                                "layered": ("out_cost", "duration")}.items():
        G = g.to_networkx(shape)
        assert isinstance(G, nx.DiGraph) and G.graph["name"] == "three"
        assert G.nodes["z"] == {size: 5, time: 3.0, "k": [1]}
        assert list(G.predecessors("z")) == ["y", "x"]
        assert sorted(G.graph["results"]) == ["x", "z"]
        assert taskgraph_diff(g, TaskGraph.from_networkx(G), names=True) == []


@pytest.mark.needs_data
@pytest.mark.parametrize("name", ["checkmate/vgg16_train.json", "checkmate/resnet50_test.json",
                                  "layered/random_layered_n250.json"])
def test_shared_graphs_through_networkx(name: str) -> None:
    path = require_shared_data("graphs", *name.split("/"))
    f = read_taskgraph(path)
    G = taskgraph_to_networkx(f.graph, f.format)
    ref = nx.node_link_graph(json.loads(path.read_text()), edges="links",
                             **({"source": "0", "target": "1", "name": "name"}
                                if f.format == "layered" else {}))
    assert set(G.edges) == set(ref.edges) and list(G.nodes) == list(ref.nodes)
    assert taskgraph_diff(f.graph, TaskGraph.from_networkx(G)) == []


@st.composite
def _dags(draw) -> nx.DiGraph:
    n = draw(st.integers(1, 12))
    G = nx.DiGraph()
    for v in draw(st.permutations(range(n))):
        G.add_node(v, cost_ram=draw(st.integers(0, 2**40)),
                   cost_cpu=draw(st.floats(0, 1e9, allow_nan=False)))
    for v in range(n):
        for u in draw(st.lists(st.integers(0, v - 1), unique=True, max_size=3)) if v else []:
            G.add_edge(u, v)
    return G


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_dags())
def test_random_dags_round_trip_and_keep_their_edges(G: nx.DiGraph) -> None:
    g = TaskGraph.from_networkx(G)
    assert {(b, t.id) for t in g.tasks.values() for b in t.reads} == set(G.edges)
    assert all(g.buffers[v].size == G.nodes[v]["cost_ram"] for v in G)
    pos = {t: i for i, t in enumerate(g.order)}
    assert all(pos[u] < pos[v] for u, v in G.edges)
    back = TaskGraph.from_networkx(g.to_networkx())
    assert taskgraph_diff(g, back, names=True) == []


def test_a_multigraph_reads_repeated_edges_once() -> None:
    G = nx.MultiDiGraph([(0, 1), (0, 1)])
    nx.set_node_attributes(G, 1, "cost_ram")
    nx.set_node_attributes(G, 1, "cost_cpu")
    assert TaskGraph.from_networkx(G).tasks[1].reads == (0,)


@pytest.mark.parametrize(("make", "error", "message"), [
    (lambda: nx.Graph([(0, 1)]), GraphError, "undirected"),
    (lambda: nx.DiGraph(), GraphError, "no nodes"),
    (lambda: nx.DiGraph([(0, 1)]), GraphError, "unknown node attribute shape"),
    (lambda: _with(_chain_graph(), 2, cost_ram=-1), GraphError,
     "node 2: attribute 'cost_ram' is -1"),
    (lambda: _with(_chain_graph(), 1, cost_cpu=float("nan")), GraphError,
     "node 1: attribute 'cost_cpu' is nan"),
    (lambda: _with(_chain_graph(), 3, cost_ram=2**70), GraphError, "at most 2\\*\\*60"),
    (lambda: _without(_chain_graph(), 3, "cost_cpu"), GraphError,
     "node 3 has no attribute 'cost_cpu'"),
    (lambda: _cyclic(), CycleError, "cycle: 1 -> 2 -> 1|cycle: 2 -> 1 -> 2"),
])
def test_bad_networkx_graphs(make, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        TaskGraph.from_networkx(make())


def _with(G: nx.DiGraph, v: int, **attrs: object) -> nx.DiGraph:
    G.nodes[v].update(attrs)
    return G


def _without(G: nx.DiGraph, v: int, attr: str) -> nx.DiGraph:
    del G.nodes[v][attr]
    return G


def _cyclic() -> nx.DiGraph:
    G = _chain_graph()
    G.add_edge(2, 1)
    G.add_edge(1, 2)
    return G


@pytest.mark.parametrize(("g", "message"), [
    (TaskGraph([Task("a", writes=("x",))], [Buffer("x", 1, "a")]), "exactly one buffer"),
    (TaskGraph([Task("a", reads=("i",), writes=("a",))], [Buffer("i", 1), Buffer("a", 1, "a")]),
     "is an input"),
    (TaskGraph([Task("a", writes=("a",), kernel="k")], [Buffer("a", 1, "a")]),
     "workspace or kernel"),
    (TaskGraph([Task("a", writes=("a",), attrs={"cost_ram": 1})], [Buffer("a", 1, "a")]),
     "attributes \\['cost_ram'\\] that the checkmate shape uses"),
])
def test_graphs_networkx_nodes_cannot_hold(g: TaskGraph, message: str) -> None:
    with pytest.raises(GraphError, match=message):
        g.to_networkx()


# --- what the planners accept -------------------------------------------------------------------
def _small() -> TaskGraph:
    return TaskGraph.from_networkx(_chain_graph(), name="diamond")


def test_as_taskgraph_takes_each_kind(tmp_path: Path) -> None:
    g = _small()
    path = tmp_path / "g.json"
    save_taskgraph(g, path)
    assert as_taskgraph(g) is g
    for obj in (_chain_graph(), path, str(path), read_taskgraph(path)):
        assert taskgraph_diff(g, as_taskgraph(obj)) == []
    assert taskgraph_diff(g, load_taskgraph(_chain_graph())) == []
    f = as_taskgraph(path, file=True)
    assert not isinstance(f, TaskGraph) and f.path == path


@pytest.mark.parametrize("bad", [None, 3, 2.5, b"g.json", ["g.json"], {"nodes": []}, object()])
@pytest.mark.parametrize("call", ["schedule", "plan", "load_taskgraph", "memory.load"])
def test_planners_refuse_what_is_no_graph_clearly(bad: object, call: str) -> None:
    fn = {"schedule": memory.schedule, "plan": lambda g: memory.plan(g, 100),
          "load_taskgraph": load_taskgraph, "memory.load": memory.load}[call]
    with pytest.raises(ThriftyError, match="expected a TaskGraph, a networkx DiGraph or the "
                       "path of a task-graph file; got "
                       + ("None" if bad is None else type(bad).__name__)):
        fn(bad)


def test_planners_take_a_networkx_graph_and_a_path(tmp_path: Path) -> None:
    g = _small()
    path = tmp_path / "diamond.dot"
    save_taskgraph(g, path)
    expected = memory.schedule(g)
    for obj in (_chain_graph(), path, str(path)):
        r = memory.schedule(obj)
        assert r.peak == expected.peak == memory.simulate(g, r.order).peak
        p = memory.plan(obj, expected.peak)
        assert memory.simulate(g, p).peak <= expected.peak


def test_a_missing_path_or_a_directory_names_it(tmp_path: Path) -> None:
    with pytest.raises(ThriftyError, match="nope.json: no such file"):
        memory.schedule(tmp_path / "nope.json")
    (tmp_path / "d.json").mkdir()
    with pytest.raises(ThriftyError, match="d.json: is a directory"):
        memory.plan(str(tmp_path / "d.json"), 10)


def test_a_file_given_to_schedule_keeps_its_reference_order(tmp_path: Path) -> None:
    g = _small()
    f = replace(read_taskgraph(_saved(g, tmp_path)), order=(0, 2, 1, 3))
    r = memory.schedule(f, method="file")
    assert r.order == (0, 2, 1, 3)


def _saved(g: TaskGraph, tmp_path: Path) -> Path:
    path = tmp_path / "g.json"
    save_taskgraph(g, path)
    return path


@pytest.mark.needs_data
@pytest.mark.parametrize("name", ["vgg16_test", "segnet_train"])
def test_dot_written_by_pydot_from_networkx_reads_as_from_networkx(name: str) -> None:
    """pydot (independent of our writer) writes the DiGraph; our DOT reader agrees."""
    import pydot  # noqa: F401 - networkx.nx_pydot needs it

    from thrifty.graph.taskgraph_io import taskgraph_from_dot

    g = load_taskgraph(require_shared_data("graphs", "checkmate", f"{name}.json"))
    G = nx.relabel_nodes(g.to_networkx(), {v: f"n {v}" for v in g.tasks})
    for _, d in G.nodes(data=True):  # DOT nodes hold size and time; other attributes
        d.update(size=d.pop("cost_ram"), time=d.pop("cost_cpu"))  # go in "attrs" as JSON
        del d["name"], d["backward"]
    text = nx.nx_pydot.to_pydot(G).to_string()
    h = taskgraph_from_dot(text).graph
    assert taskgraph_diff(TaskGraph.from_networkx(G, size="size", time="time"), h) == []

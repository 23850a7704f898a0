"""Task-graph files: every shared graph loads as networkx reads it and round-trips through
each format; random task graphs round-trip; bad files give errors naming node, attribute,
file and line; loading is fast."""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace
from pathlib import Path

import networkx as nx
import pydot
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from thrifty.errors import CycleError, FileFormatError, GraphError
from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
from thrifty.graph.taskgraph_io import (
    FORMAT_NAME,
    load_taskgraph,
    read_taskgraph,
    save_taskgraph,
    taskgraph_diff,
    taskgraph_from_dot,
    taskgraph_from_node_link,
    taskgraph_to_dot,
    taskgraph_to_json,
    taskgraph_to_node_link,
)
from thrifty.testing import require_shared_data, shared_data_dir

# Nodes of the training graphs, as the shared data README lists them.
_TRAIN_NODES = {"vgg16": 45, "vgg19": 51, "mobilenet": 185, "resnet50": 353, "fcn_8_vgg": 73,
                "segnet": 77, "vgg_unet": 71}


def _graph_files() -> list:
    root = shared_data_dir()
    files = sorted((root / "graphs").glob("*/*.json")) if root else []
    if not files:
        return [pytest.param(None, id="no-shared-data")]
    return [pytest.param(f, id=f"{f.parent.name}/{f.name}") for f in files]


def _require(path: Path | None) -> Path:
    if path is None:
        return require_shared_data("graphs")
    return path


# --- every shared graph file ------------------------------------------------------------------
@pytest.mark.needs_data
@pytest.mark.parametrize("path", _graph_files())
def test_every_graph_file_loads_as_networkx_reads_it(path: Path | None) -> None:
    path = _require(path)
    data = json.loads(path.read_text())
    f = read_taskgraph(path)
    g = f.graph
    layered = path.parent.name == "layered"
    assert f.format == ("layered" if layered else "checkmate")
    ref = nx.node_link_graph(data, directed=True, multigraph=False, edges="links",
                             **({"source": "0", "target": "1", "name": "name"} if layered
                                else {}))
    size, cost = ("out_cost", "duration") if layered else ("cost_ram", "cost_cpu")
    assert set(g.tasks) == set(ref.nodes)
    for v in ref.nodes:
        t = g.tasks[v]
        assert t.writes == (v,)
        assert sorted(t.reads) == sorted(ref.predecessors(v))
        assert g.buffers[v].size == ref.nodes[v][size]
        assert t.time == ref.nodes[v][cost]
    assert set(ref.edges) == {(u, t.id) for t in g.tasks.values() for u in t.reads}
    src, dst = ("0", "1") if layered else ("source", "target")
    into: dict = {v: [] for v in ref.nodes}  # each task reads in the file's link order
    for link in data["links"]:
        if link[src] not in into[link[dst]]:
            into[link[dst]].append(link[src])
    assert all(g.tasks[v].reads == tuple(into[v]) for v in ref.nodes)
    assert list(g.tasks) == [n["name" if layered else "id"] for n in data["nodes"]]
    assert g.results == {v for v in ref.nodes if ref.out_degree(v) == 0}
    assert f.notes == () and g.inputs == ()
    assert sum(b.size for b in g.buffers.values()) == sum(d[size] for _, d in
                                                          ref.nodes(data=True))
    pos = {t: i for i, t in enumerate(g.order)}
    assert all(pos[u] < pos[v] for u, v in ref.edges)
    if layered:
        assert f.order == tuple(data["graph"]["order"])
        assert all("param_cost" in t.attrs for t in g.tasks.values())
    else:
        assert all({"name", "backward"} <= set(t.attrs) for t in g.tasks.values())
        stem = path.stem.rsplit("_", 1)[0]
        if path.stem.endswith("_train"):
            assert len(g) == _TRAIN_NODES[stem]


@pytest.mark.needs_data
@pytest.mark.parametrize("path", _graph_files())
@pytest.mark.parametrize("fmt", ["thrifty.json", "dot", "gv", "checkmate", "layered"])
def test_every_graph_file_round_trips(path: Path | None, fmt: str, tmp_path: Path) -> None:
    path = _require(path)
    f = read_taskgraph(path)
    if fmt == "layered" and f.format == "checkmate":
        with pytest.raises(GraphError, match="'name'.*the layered shape uses"):
            save_taskgraph(f, tmp_path / "x.json", format="layered")
        return
    out = tmp_path / ("x.json" if fmt in ("thrifty.json", "checkmate", "layered")
                      else f"x.{fmt}")
    save_taskgraph(f, out, format=fmt if fmt in ("checkmate", "layered") else None)
    back = read_taskgraph(out)
    assert taskgraph_diff(f.graph, back.graph, names=True) == []
    assert back.order == f.order
    assert dict(back.attrs) == dict(f.attrs)


@pytest.mark.needs_data
def test_a_1000_node_file_loads_well_under_a_second() -> None:
    path = require_shared_data("graphs", "layered", "random_layered_n1000.json")
    start = time.perf_counter()
    g = load_taskgraph(path)
    elapsed = time.perf_counter() - start
    assert len(g) == 1000
    assert elapsed < 1.0, f"loading took {elapsed:.2f} s"


def _big_node_link(n: int) -> dict:
    """A layered-looking DAG: node v reads up to five of the nodes before it."""
    nodes = [{"id": i, "cost_ram": (i * 7919) % 10**6, "cost_cpu": i % 97} for i in range(n)]
    links = [{"source": u, "target": v} for v in range(1, n)
             for u in {(v * 31 + k * 17) % v for k in range(5)}]
    return {"directed": True, "graph": {}, "nodes": nodes, "links": links}


# --- DOT against pydot --------------------------------------------------------------------------
def _unq(s: str) -> str:
    return s[1:-1].replace('\\"', '"').replace("\\\\", "\\") if s.startswith('"') else s


@pytest.mark.needs_data
@pytest.mark.parametrize("name", ["vgg16_test", "segnet_test"])
def test_our_dot_text_reads_the_same_in_pydot(name: str) -> None:
    """pydot (slow, but independent) sees the nodes, attributes and edges we read."""
    g = load_taskgraph(require_shared_data("graphs", "checkmate", f"{name}.json"))
    text = taskgraph_to_dot(g)
    (ref,) = pydot.graph_from_dot_data(text)
    ours = taskgraph_from_dot(text).graph
    ref_nodes = {int(_unq(n.get_name())): n.get_attributes() for n in ref.get_nodes()
                 if _unq(n.get_name()) not in ("node", "graph", "edge")}
    assert set(ref_nodes) == set(ours.tasks)
    for tid, attrs in ref_nodes.items():
        assert int(attrs["size"]) == ours.buffers[tid].size
        assert float(attrs["time"]) == ours.tasks[tid].time
        assert json.loads(_unq(attrs["attrs"])) == dict(ours.tasks[tid].attrs)
    ref_edges = sorted((int(_unq(e.get_source())), int(_unq(e.get_destination())))
                       for e in ref.get_edges())
    assert ref_edges == sorted((b, t.id) for t in ours.tasks.values() for b in t.reads)


def test_dot_reader_handles_the_language() -> None:
    text = r"""
    /* a block comment */
    strict digraph "tiny graph" {
      graph [attrs="{\"note\": \"hi\"}"];   // graph attribute statement
      node [time=1];                         # not at line start: part of nothing
      a [size=8]; "b" [size=4, time=2.5, label="b \"quoted\""]
      c [size="1" + "6"];
      a -> b -> c [color=red];
      subgraph cluster0 { d [size=0, time=0] }
      b -> d;
    }
    """.replace("# not at line start: part of nothing", "")
    f = taskgraph_from_dot(text)
    g = f.graph
    assert g.name == "tiny graph"
    assert g.order == ("a", "b", "c", "d")
    assert g.tasks["c"].reads == ("b",) and g.tasks["d"].reads == ("b",)
    assert g.buffers["c"].size == 16 and g.tasks["a"].time == 1.0 and g.tasks["b"].time == 2.5
    assert f.attrs == {"note": "hi"}


def test_dot_buffer_nodes_inputs_and_second_outputs() -> None:
    text = """digraph g {
      "in" [kind=buffer, size=100];
      t [time=3, workspace=64, kernel="gemm"];
      out2 [kind=buffer, size=7, id="[\\"t\\", 2]"];
      u [size=5, time=1];
      "in" -> t; t -> out2; out2 -> u;
    }"""
    g = taskgraph_from_dot(text).graph
    assert g.inputs == ("in",)
    assert g.tasks["t"].writes == (("t", 2),) and g.tasks["t"].kernel == "gemm"
    assert g.tasks["t"].workspace == 64
    assert g.tasks["u"].reads == (("t", 2),)
    assert g.buffers[("t", 2)].producer == "t"


# --- random task graphs round-trip --------------------------------------------------------------
_ID_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6)
_ATTR_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.text(max_size=5)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                 max_size=3),
    max_leaves=5)


@st.composite
def _ids(draw, n: int) -> list:
    style = draw(st.sampled_from(["int", "str", "tuple", "mixed"]))
    base = {
        "int": st.integers(-10**6, 10**12),
        "str": _ID_TEXT,
        "tuple": st.tuples(st.sampled_from(["op", "gemm", "12"]), st.integers(0, 99)),
        "mixed": st.one_of(st.integers(0, 50), _ID_TEXT,
                           st.tuples(_ID_TEXT, st.tuples(st.integers(0, 3)))),
    }[style]
    ids = draw(st.lists(base, min_size=n, max_size=n, unique=True))
    return [i for i in ids if not (isinstance(i, str) and i.startswith("buffer "))] \
        if style != "int" else ids


@st.composite
def task_graphs(draw, simple: bool = False) -> TaskGraph:
    """Random DAGs. ``simple``: one buffer per task with the task's id (node-link shape)."""
    n = draw(st.integers(1, 10))
    tids = draw(_ids(n))
    n = len(tids)
    tasks, buffers, produced = [], [], []
    inputs = [] if simple else [("input", k) for k in range(draw(st.integers(0, 2)))]
    buffers += [Buffer(b, draw(st.integers(0, 2**40))) for b in inputs]
    for tid in tids:
        available = produced + inputs
        reads = draw(st.lists(st.sampled_from(available), max_size=4, unique=simple)) \
            if available else []
        if simple:
            writes = [tid]
        else:
            extra = draw(st.integers(0, 2))
            own = [tid] if draw(st.booleans()) else []
            writes = own + [("out", repr(tid), k) for k in range(extra)]
        buffers += [Buffer(b, draw(st.integers(0, 2**40)), tid) for b in writes]
        produced += writes
        tasks.append(Task(
            tid, tuple(reads), tuple(writes),
            time=draw(st.floats(0, 1e12, allow_nan=False)),
            workspace=0 if simple else draw(st.integers(0, 2**20)),
            kernel=None if simple else draw(st.none() | st.text(max_size=5)),
            attrs=draw(st.dictionaries(st.sampled_from(["name", "backward", "flops", "x y"])
                                       if not simple else st.sampled_from(["backward", "flops"]),
                                       _ATTR_VALUES, max_size=3))))
    listing = draw(st.permutations(tasks))
    if simple:  # node-link files list a task's reads in the order of their producers' nodes
        pos = {t.id: k for k, t in enumerate(listing)}
        listing = [replace(t, reads=tuple(sorted(t.reads, key=pos.__getitem__)))
                   for t in listing]
    results = None
    if not simple and buffers and draw(st.booleans()):
        results = draw(st.lists(st.sampled_from([b.id for b in buffers]), unique=True))
    return TaskGraph(listing, buffers, results=results, name=draw(_ID_TEXT) or "g")


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task_graphs())
def test_random_task_graphs_round_trip_through_our_json(g: TaskGraph) -> None:
    back = taskgraph_from_json_text(json.dumps(taskgraph_to_json(g)))
    assert taskgraph_diff(g, back, names=True) == []


def taskgraph_from_json_text(text: str) -> TaskGraph:
    from thrifty.graph.taskgraph_io import taskgraph_from_json

    return taskgraph_from_json(json.loads(text)).graph


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task_graphs())
def test_random_task_graphs_round_trip_through_dot(g: TaskGraph) -> None:
    back = taskgraph_from_dot(taskgraph_to_dot(g)).graph
    assert taskgraph_diff(g, back, names=True) == []


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task_graphs(simple=True), st.sampled_from(["checkmate", "layered"]))
def test_simple_random_task_graphs_round_trip_through_node_link(g: TaskGraph,
                                                                shape: str) -> None:
    data = json.loads(json.dumps(taskgraph_to_node_link(g, shape=shape)))
    back = taskgraph_from_node_link(data)
    assert back.format == shape
    assert taskgraph_diff(g, back.graph, names=True) == []


def test_saving_into_a_file_and_loading_it_back(tmp_path: Path) -> None:
    g = TaskGraph([Task(("a", 1), writes=("x",), time=1.5, attrs={"flops": 10}),
                   Task("12", reads=("x", "x"), writes=("12",))],
                  [Buffer("x", 8, ("a", 1)), Buffer("12", 4, "12")], results=["x", "12"])
    for name in ("g.json", "g.dot", "g.gv"):
        save_taskgraph(g, tmp_path / name)
        assert taskgraph_diff(g, load_taskgraph(tmp_path / name)) == []
    assert json.loads((tmp_path / "g.json").read_text())["format"] == FORMAT_NAME


# --- errors -------------------------------------------------------------------------------------
def _node_link(nodes: list[dict], links: list[dict], **graph) -> dict:
    return {"directed": True, "multigraph": False, "graph": graph, "nodes": nodes,
            "links": links}


def _write_json(tmp_path: Path, data: object, name: str = "g.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(data))
    return p


_N2 = [{"id": 0, "cost_ram": 8, "cost_cpu": 1}, {"id": 1, "cost_ram": 4, "cost_cpu": 2}]


@pytest.mark.parametrize(("nodes", "links", "message"), [
    ([{"id": 0, "bytes": 8}], [], "unknown node attribute shape.*checkmate.*'cost_ram'.*"
                                  "layered.*'out_cost'"),
    ([_N2[0], {"id": 1, "cost_cpu": 2}], [], "node 1 has no attribute 'cost_ram'"),
    ([_N2[0], {"id": 1, "cost_ram": 2}], [], "node 1 has no attribute 'cost_cpu'"),
    ([_N2[0], {"id": 1, "cost_ram": -2, "cost_cpu": 1}], [],
     "node 1: attribute 'cost_ram' is -2"),
    ([_N2[0], {"id": 1, "cost_ram": "big", "cost_cpu": 1}], [],
     "node 1: attribute 'cost_ram' is 'big'; it must be a number"),
    ([_N2[0], {"id": 1, "cost_ram": 2, "cost_cpu": True}], [],
     "node 1: attribute 'cost_cpu' is True"),
    ([{"out_cost": 1, "duration": 1, "name": 0}, {"out_cost": 1, "duration": "x", "name": 1}],
     [], "node 1: attribute 'duration' is 'x'"),
    (_N2, [{"source": 0, "target": 7}], "link 0 .* names unknown node 7"),
    (_N2, [{"from": 0, "to": 1}], "understood links are"),
    ([_N2[0], {"cost_ram": 1, "cost_cpu": 1}], [], "node 1 has no 'id' to identify it"),
    (_N2 + [dict(_N2[0])], [], "duplicate node id 0"),
])
def test_bad_node_link_files_name_node_and_attribute(tmp_path: Path, nodes, links,
                                                     message: str) -> None:
    path = _write_json(tmp_path, _node_link(nodes, links))
    with pytest.raises(FileFormatError, match=message) as info:
        load_taskgraph(path)
    assert str(path) in str(info.value)


def test_fractional_sizes_are_rounded_and_the_notes_say_so(tmp_path: Path) -> None:
    nodes = [{"id": 0, "cost_ram": 8.4, "cost_cpu": 1}, {"id": 1, "cost_ram": 3.5,
                                                         "cost_cpu": 2}]
    f = read_taskgraph(_write_json(tmp_path, _node_link(nodes, [])))
    assert f.graph.buffers[0].size == 8 and f.graph.buffers[1].size == 4
    assert f.notes and "rounded" in f.notes[0] and "0, 1" in f.notes[0]


def test_a_cyclic_file_names_the_file_and_a_cycle(tmp_path: Path) -> None:
    nodes = [{"id": i, "cost_ram": 1, "cost_cpu": 1} for i in range(4)]
    links = [{"source": 0, "target": 1}, {"source": 1, "target": 2},
             {"source": 2, "target": 3}, {"source": 3, "target": 1}]
    path = _write_json(tmp_path, _node_link(nodes, links, name="loopy"))
    with pytest.raises(CycleError) as info:
        load_taskgraph(path)
    assert str(path) in str(info.value) and "has a cycle" in str(info.value)
    assert sorted(info.value.cycle) == [1, 2, 3]


def test_a_layered_order_that_is_not_topological_is_refused(tmp_path: Path) -> None:
    nodes = [{"out_cost": 1, "duration": 1, "param_cost": 0, "name": i} for i in range(3)]
    links = [{"0": 0, "1": 1}, {"0": 1, "1": 2}]
    path = _write_json(tmp_path, _node_link(nodes, links, order=[0, 2, 1]))
    with pytest.raises(FileFormatError, match="not a topological order: task 2 comes before"):
        read_taskgraph(path)
    path = _write_json(tmp_path, _node_link(nodes, links, order=[0, 1]))
    with pytest.raises(FileFormatError, match="must list every task once"):
        read_taskgraph(path)


def test_invalid_json_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "g.json"
    path.write_text('{\n "nodes": [\n  {"id": 0,,}\n ]\n}\n')
    with pytest.raises(FileFormatError, match="invalid JSON") as info:
        load_taskgraph(path)
    assert info.value.line == 3


@pytest.mark.parametrize(("patch", "message"), [
    ({"version": 2}, "version 2 is not supported"),
    ({"taskz": []}, "unknown keys \\['taskz'\\] in the top level; valid keys"),
    ({"tasks": [{"id": "a", "writes": ["x"], "tiem": 1}]}, "unknown keys \\['tiem'\\] in task"),
    ({"tasks": [{"id": "a", "writes": ["x"], "time": -1}]}, "node 'a': attribute 'time' is -1"),
    ({"buffers": [{"id": "x", "size": 1.5, "producer": "a"}]}, "'size' is 1.5; it must be an int"),
    ({"tasks": [{"id": 1.5}]}, "ids must be strings, integers or arrays"),
    ({"results": ["nope"]}, "results name unknown buffers"),
    ({"tasks": [{"id": "a", "writes": "x"}]}, "'writes' must be a list of buffer ids"),
    ({"buffers": [{"id": "x", "producer": "a"}]}, "must be an object with 'id' and 'size'"),
])
def test_bad_thrifty_json_files(tmp_path: Path, patch: dict, message: str) -> None:
    data = {"format": FORMAT_NAME, "version": 1, "name": "t",
            "tasks": [{"id": "a", "writes": ["x"], "time": 1}],
            "buffers": [{"id": "x", "size": 4, "producer": "a"}]}
    data.update(patch)
    with pytest.raises((FileFormatError, GraphError), match=message) as info:
        load_taskgraph(_write_json(tmp_path, data))
    assert "g.json" in str(info.value)


def test_json_that_is_neither_format(tmp_path: Path) -> None:
    with pytest.raises(FileFormatError, match="neither"):
        load_taskgraph(_write_json(tmp_path, {"hello": 1}))


@pytest.mark.parametrize(("text", "line", "message"), [
    ("digraph g {\n a [size=1, time=1];\n a -> ;\n}", 3, "expected a name"),
    ("digraph g {\n a [size=1, time=1]\n", 3, "ends before the closing"),
    ("graph g {\n a -- b\n}", 1, "undirected 'graph'"),
    ("digraph g {\n a [size=1, time=1];\n b [size=1, time=1];\n a -- b\n}", 4,
     "undirected edge"),
    ("digraph g {\n a [size=1];\n}", 2, "node 'a' has no attribute 'time'"),
    ("digraph g {\n a [size=1, time=1];\n b [size=-3, time=1];\n}", 3,
     "node 'b': attribute 'size' is -3"),
    ("digraph g {\n a [size=1, time=fast];\n}", 2, "attribute 'time' is 'fast'"),
    ("digraph g {\n a [time=1];\n b [size=1, time=1];\n a -> b\n}", 4, "'a' has no 'size'"),
    ("digraph g {\n x [kind=buffer, size=1];\n y [kind=buffer, size=1];\n\n x -> y\n}", 5,
     "joins two buffer nodes"),
    ("digraph g {\n a [size=1, time=1, attrs=\"[1]\"];\n}", 2, "must be a JSON object"),
    ("digraph g {\n a:p [size=1, time=1];\n}", 2, "ports"),
    ("digraph g {\n a [size=1, time=1];\n} extra", 3, "text after the closing"),
    ("digraph g {\n a @ b\n}", 2, "expected|unexpected"),
])
def test_bad_dot_files_name_the_line(tmp_path: Path, text: str, line: int,
                                     message: str) -> None:
    path = tmp_path / "g.dot"
    path.write_text(text)
    with pytest.raises(FileFormatError, match=message) as info:
        load_taskgraph(path)
    assert info.value.line == line
    assert str(path) in str(info.value)


def test_a_cyclic_dot_file_names_file_and_cycle(tmp_path: Path) -> None:
    path = tmp_path / "c.gv"
    path.write_text("digraph c { a [size=1, time=1]; b [size=1, time=1]; a -> b -> a }")
    with pytest.raises(CycleError, match="c.gv.*has a cycle"):
        load_taskgraph(path)


@pytest.mark.parametrize(("g", "fmt", "message"), [
    (TaskGraph([Task("a", writes=("x",))], [Buffer("x", 1, "a")]), "checkmate",
     "exactly one buffer with its own id"),
    (TaskGraph([Task("a", reads=("i",), writes=("a",))], [Buffer("i", 1), Buffer("a", 1, "a")]),
     "layered", "is an input"),
    (TaskGraph([Task("a", writes=("a",), workspace=8)], [Buffer("a", 1, "a")]), "checkmate",
     "workspace or kernel"),
    (TaskGraph([Task(1.5, writes=("a",))], [Buffer("a", 1, 1.5)]), "thrifty",
     "task id 1.5 is a float"),
    (TaskGraph([Task("a", writes=("a",), attrs={"f": object()})], [Buffer("a", 1, "a")]),
     "thrifty", "attrs cannot be written as JSON"),
    (TaskGraph([Task("a", writes=("a",), time=float("inf"))], [Buffer("a", 1, "a")]), "dot",
     "files hold finite times"),
])
def test_graphs_a_format_cannot_hold_are_refused(tmp_path: Path, g: TaskGraph, fmt: str,
                                                 message: str) -> None:
    with pytest.raises(GraphError, match=message):
        save_taskgraph(g, tmp_path / ("g.dot" if fmt == "dot" else "g.json"), format=fmt)


@pytest.mark.parametrize("g", [
    TaskGraph([Task(0), Task("0"), Task("0 #2")], []),  # int and str ids of the same text
    TaskGraph([Task(0, reads=("0",), writes=(0,)),
               Task("0", reads=(0,), writes=(("out", 1),))],
              [Buffer("0", 8), Buffer(0, 4, 0), Buffer(("out", 1), 2, "0")], results=[0, "0"]),
    TaskGraph([Task("buffer x", writes=("q",)), Task("r", writes=("x",))],
              [Buffer("q", 1, "buffer x"), Buffer("x", 1, "r")]),  # a task named as a buffer
], ids=["int-and-str", "buffers-too", "task-named-buffer"])
def test_ids_of_the_same_text_get_distinct_dot_nodes(g: TaskGraph) -> None:
    text = taskgraph_to_dot(g)
    assert taskgraph_diff(g, taskgraph_from_dot(text).graph, names=True) == []


@pytest.mark.parametrize(("name", "fmt", "message"), [
    ("g.txt", None, "unknown task-graph file extension '.txt'; valid: .json, .dot, .gv"),
    ("g.json", "yaml", "unknown task-graph format 'yaml'; valid: thrifty, checkmate"),
])
def test_unknown_extension_or_format(tmp_path: Path, name: str, fmt: str | None,
                                     message: str) -> None:
    g = TaskGraph([Task("a", writes=("a",))], [Buffer("a", 1, "a")])
    with pytest.raises((FileFormatError, GraphError), match=message):
        save_taskgraph(g, tmp_path / name, format=fmt)
    (tmp_path / "g.txt").write_text("")
    with pytest.raises(FileFormatError, match="valid: .json, .dot, .gv"):
        load_taskgraph(tmp_path / "g.txt")


# --- hostile files: every loader error names the file and what is wrong ------------------------
_ONE = '{"id": 0, "cost_ram": 1, "cost_cpu": 1}'


_HOSTILE = [
    ("deep.json", "[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ("deep_id.json", '{"nodes": [{"id": ' + "[" * 990 + "]" * 990
     + ', "cost_ram": 1, "cost_cpu": 1}]}', "nested too deeply"),
    ("deep.dot", "digraph g {" + "{" * 5000 + "}" * 5000 + "}", "nested too deeply"),
    ("deep_attrs.dot", 'digraph g { a [size=1, time=1, attrs="' + "[" * 5000 + '"] }',
     "nested too deeply"),
    ("digits.json", '{"nodes": [{"id": 0, "cost_ram": ' + "9" * 5000 + ', "cost_cpu": 1}]}',
     "more digits than Python reads"),
    ("digits.dot", "digraph g { a [size=" + "9" * 5000 + ", time=1] }",
     "node 'a': attribute 'size' is '9999"),
    ("time.json", '{"nodes": [{"id": 0, "cost_ram": 1, "cost_cpu": 1' + "0" * 400 + "}]}",
     "node 0: attribute 'cost_cpu' is 1000.* beyond the range of floating point"),
    ("size.json", '{"nodes": [{"id": 0, "cost_ram": 1' + "0" * 30 + ', "cost_cpu": 1}]}',
     "node 0: attribute 'cost_ram' is 1000.* bytes; sizes must be at most 2\\*\\*60"),
    ("total.json", '{"nodes": [' + ",".join(f'{{"id": {i}, "cost_ram": {2**59}, "cost_cpu": 1}}'
                                          for i in range(3)) + "]}",
     "total 1729382256910270464 bytes, more than 2\\*\\*60"),
    ("inf.json", '{"nodes": [{"id": 0, "cost_ram": Infinity, "cost_cpu": 1}]}',
     "node 0: attribute 'cost_ram' is inf; it must be a finite number"),
    ("nan.json", '{"nodes": [{"id": 0, "cost_ram": 1, "cost_cpu": NaN}]}',
     "node 0: attribute 'cost_cpu' is nan; it must be a finite number"),
    ("neg.json", '{"format": "thrifty-taskgraph", "version": 1, "tasks": [{"id": "t", '
     '"workspace": -4}], "buffers": []}', "node 't': attribute 'workspace' is -4"),
    ("nan.dot", 'digraph g { a [size=1, time="nan"] }', "node 'a': attribute 'time' is nan"),
    ("junk.json", bytes(range(256)), "not UTF-8 text: byte 0x80 at offset 128"),
    ("junk.dot", b"\xff\xfe\x00d\x00i", "not UTF-8 text: byte 0xff at offset 0"),
    ("cut.json", '{"nodes": [' + _ONE[:-7], "invalid JSON: .*column"),
    ("cut.dot", "digraph g { a [size=1, time=1]; a -> ", "DOT: expected a name .* end of file"),
    ("empty.json", "", "invalid JSON"),
    ("dup.json", '{"nodes": [' + _ONE + "," + _ONE + "]}", "node 1: duplicate node id 0"),
    ("dup.dot", 'digraph g { a [size=1, time=1, id="1"]; b [size=1, time=1, id="1"] }',
     "duplicate task id 1"),
    ("dup_ours.json", '{"format": "thrifty-taskgraph", "version": 1, "tasks": [{"id": "t"}, '
     '{"id": "t"}], "buffers": []}', "duplicate task id 't'"),
    ("dangling.json", '{"nodes": [' + _ONE + '], "links": [{"source": 0, "target": 3}]}',
     "link 0 \\(0 -> 3\\) names unknown node 3"),
    ("dangling_ours.json", '{"format": "thrifty-taskgraph", "version": 1, "tasks": [{"id": "t",'
     ' "reads": ["nope"]}], "buffers": []}', "task 't' reads unknown buffer 'nope'"),
    ("self.json", '{"nodes": [' + _ONE + '], "links": [{"source": 0, "target": 0}]}',
     "has a cycle: 0 -> 0"),
    ("graph.json", '{"nodes": [' + _ONE + '], "graph": [1]}', "\"graph\" is \\[1\\]"),
    ("order.json", '{"nodes": [' + _ONE + '], "graph": {"order": 7}}',
     "graph.order is 7, not a list"),
    ("results.dot", 'digraph g { results="[1.5]"; a [size=1, time=1] }',
     "graph attribute 'results' must list ids: 1.5 is not"),
    ("list.json", "[1, 2]", "neither"),
    ("long_kind.dot", "digraph g { a [size=1, time=1, kind=" + "9" * 5000 + "] }",
     "has kind='9999.* ...>; valid: task, buffer"),
    ("long_id.json", '{"nodes": [' + ",".join(['{"id": "' + "x" * 5000
                                              + '", "cost_ram": 1, "cost_cpu": 1}'] * 2)
     + "]}", "node 1: duplicate node id 'xxxx.* ...>"),
    ("long_name.json", '{"format": "thrifty-taskgraph", "version": 1, "name": "' + "n" * 9000
     + '", "tasks": [{"id": "t", "reads": ["' + "b" * 9000 + '"]}], "buffers": []}',
     "nnnn ...: task 't' reads unknown buffer 'bbbb.* ...>"),
    ("long_cycle.json", '{"nodes": [' + ",".join(f'{{"id": {i}, "cost_ram": 1, "cost_cpu": 1}}'
                                               for i in range(50)) + '], "links": ['
     + ",".join(f'{{"source": {i}, "target": {(i + 1) % 50}}}' for i in range(50)) + "]}",
     "has a cycle: (\\d+ -> ){12}\\.\\.\\."),
]


def _write(path: Path, content: str | bytes) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


@pytest.mark.parametrize(("name", "content", "message"), _HOSTILE)
def test_hostile_files_give_errors_naming_file_and_fault(tmp_path: Path, name: str,
                                                          content: str | bytes,
                                                          message: str) -> None:
    path = _write(tmp_path / name, content)
    with pytest.raises((FileFormatError, GraphError)) as info:
        load_taskgraph(path)
    text = str(info.value)
    assert re.search(message, text), text
    assert str(path) in text and "\n" not in text and len(text) < 400


def test_a_directory_and_a_missing_file_are_named(tmp_path: Path) -> None:
    (tmp_path / "d.json").mkdir()
    with pytest.raises(FileFormatError, match="d.json: is a directory"):
        load_taskgraph(tmp_path / "d.json")
    with pytest.raises(FileFormatError, match="none.dot: no such file"):
        load_taskgraph(tmp_path / "none.dot")


def test_a_byte_order_mark_is_read_as_utf8(tmp_path: Path) -> None:
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(_node_link(_N2, [])).encode())
    assert len(load_taskgraph(path)) == 2


@pytest.mark.parametrize(("name", "content", "message"), _HOSTILE)
@pytest.mark.parametrize("command", [["schedule"], ["plan", "--budget", "0.5"]])
def test_memory_commands_print_one_error_line_for_hostile_files(
        tmp_path: Path, name: str, content: str | bytes, message: str,
        command: list[str]) -> None:
    from click.testing import CliRunner

    from thrifty.cli.main import main

    path = _write(tmp_path / name, content)
    r = CliRunner().invoke(main, ["memory", command[0], str(path), *command[1:]])
    assert r.exit_code != 0 and isinstance(r.exception, SystemExit), r.exception
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.output
    assert str(path) in lines[0] and re.search(message, lines[0])

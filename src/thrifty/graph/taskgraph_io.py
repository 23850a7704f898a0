"""Task-graph files: networkx node-link JSON, our own JSON, and Graphviz DOT.

Three file formats, all read into and written from :class:`~thrifty.graph.taskgraph.TaskGraph`:

* **node-link JSON** as written by :func:`networkx.node_link_data`, in the two attribute
  shapes of published memory-planning benchmarks: the *checkmate* shape of Jain et al.,
  "Checkmate: Breaking the Memory Wall with Optimal Tensor Rematerialization" (MLSys 2020):
  nodes ``{id, name, cost_ram, cost_cpu, backward}``, links ``{source, target}``; and the
  *layered* shape of Gagrani et al., "Neural Topological Ordering for Computation Graphs"
  (NeurIPS 2022), as used by Moccasin (Bartan et al., ICML 2023): nodes ``{name, out_cost,
  duration, param_cost}``, links keyed ``"0"`` (source) and ``"1"`` (target), and a
  reference topological order in ``graph.order``.
  A node is one task and its one output buffer, both with the node's id (``id``, else
  ``name``); a link ``u -> v`` means task ``v`` reads buffer ``u``. The buffer size is
  ``cost_ram``/``out_cost`` in bytes (a number >= 0; a size that is not a whole number of
  bytes is rounded to the nearest integer, and :attr:`TaskGraphFile.notes` says so); the
  task time is ``cost_cpu``/``duration``, kept in the file's own units. Every other node
  attribute (``name``, ``backward``, ``param_cost``) is kept in :attr:`Task.attrs`.
* **thrifty JSON** (``"format": "thrifty-taskgraph"``, documented in
  ``docs/taskgraph-json.md``): every field of every task and buffer, exactly.
* **DOT** (``.dot``/``.gv``): a node with ``size`` and ``time`` attributes is a task with its
  output buffer, an edge ``u -> v`` makes ``v`` read ``u``'s buffer; nodes with
  ``kind=buffer`` are buffers of their own (graph inputs, second outputs), and ``attrs``
  holds a task's attributes as JSON. The reader is a small DOT parser of our own: pydot's
  parser took 19 s or more for a 1000-node, 6000-edge graph on our 2-core machine, reorders edges
  (losing the order of a task's reads) and fails on a node attribute called ``name``; the
  tests check our reader against pydot on files both can read.

Task and buffer ids in files are strings, integers, or (nested) arrays of them, which are
read as tuples.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from thrifty.errors import CycleError, FileFormatError, GraphError
from thrifty.graph.taskgraph import Buffer, Task, TaskGraph

__all__ = ["TaskGraphFile", "load_taskgraph", "read_taskgraph", "save_taskgraph",
           "taskgraph_to_json", "taskgraph_from_json", "taskgraph_to_node_link",
           "taskgraph_from_node_link", "taskgraph_to_dot", "taskgraph_from_dot",
           "taskgraph_diff", "FORMATS", "FORMAT_NAME", "FORMAT_VERSION"]

#: Formats :func:`save_taskgraph` writes (and :attr:`TaskGraphFile.format` reports).
FORMATS: tuple[str, ...] = ("thrifty", "checkmate", "layered", "dot")
#: The ``format`` field of our JSON, and its version.
FORMAT_NAME = "thrifty-taskgraph"
FORMAT_VERSION = 1
_EXTENSIONS = {".json": "thrifty", ".dot": "dot", ".gv": "dot"}


@dataclass(frozen=True, slots=True)
class TaskGraphFile:
    """A :class:`TaskGraph` together with what its file said beside it.

    Attributes
    ----------
    graph:
        The task graph.
    format:
        One of :data:`FORMATS`: ``"checkmate"`` and ``"layered"`` are the two node-link
        shapes.
    order:
        The file's own reference topological order (``graph.order`` of a layered file, or
        ``order`` of ours), checked to be a topological order of ``graph``; else ``None``.
    attrs:
        Other graph-level attributes of the file (``pos``, cost tags, ...).
    notes:
        What the reader changed, such as sizes rounded to whole bytes.
    path:
        Where it was read from, or ``None``.

    Example
    -------
    >>> f = read_taskgraph("../shared/data/graphs/layered/random_layered_n100.json")
    ... # doctest: +SKIP
    >>> f.format, len(f.order), f.graph.tasks[0].attrs["param_cost"]  # doctest: +SKIP
    ('layered', 100, 0)
    """

    graph: TaskGraph
    format: str
    order: tuple[Hashable, ...] | None = None
    attrs: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    path: Path | None = None


# --- entry points ---------------------------------------------------------------------------
def read_taskgraph(path: str | Path) -> TaskGraphFile:
    """Read a task-graph file (node-link or thrifty ``.json``, ``.dot``/``.gv``).

    Raises
    ------
    FileFormatError
        Malformed file, unknown attribute shape, missing/negative/non-numeric size or time
        (naming the node and the attribute), unknown extension.
    CycleError
        The graph has a cycle; the message names the file and one cycle.
    GraphError
        Other structural problems (dangling references), naming the file.
    """
    p = Path(path)
    fmt = _format_for(p, None, reading=True)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise FileFormatError(p, f"cannot read: {exc}") from exc
    if fmt == "dot":
        return taskgraph_from_dot(text, path=p)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FileFormatError(p, f"invalid JSON: {exc.msg} (column {exc.colno})",
                              exc.lineno) from exc
    if isinstance(data, dict) and data.get("format") == FORMAT_NAME:
        return taskgraph_from_json(data, path=p)
    if isinstance(data, dict) and "nodes" in data:
        return taskgraph_from_node_link(data, path=p)
    raise FileFormatError(
        p, f"a task-graph JSON file is either ours (\"format\": \"{FORMAT_NAME}\") or networkx "
        "node-link data (with \"nodes\" and \"links\"); this one is neither")


def load_taskgraph(path: str | Path) -> TaskGraph:
    """Read a task-graph file and return just the :class:`TaskGraph`.

    Example
    -------
    >>> g = load_taskgraph("../shared/data/graphs/checkmate/vgg16_train.json")  # doctest: +SKIP
    >>> len(g), g.tasks[0].attrs["name"]  # doctest: +SKIP
    (45, 'block1_conv1')
    """
    return read_taskgraph(path).graph


def save_taskgraph(g: TaskGraph | TaskGraphFile, path: str | Path,
                   format: str | None = None) -> None:  # noqa: A002 - the public name
    """Write ``g`` to ``path``; the format follows the extension unless given.

    ``.json`` writes ours, ``.dot``/``.gv`` DOT; ``format="checkmate"`` or ``"layered"``
    writes node-link JSON in that shape (only for graphs where every task writes exactly
    one buffer with its own id). Given a :class:`TaskGraphFile`, its order and graph-level
    attributes are written too. Task callables (``Task.fn``) are never written.
    """
    p = Path(path)
    fmt = _format_for(p, format, reading=False)
    if fmt == "dot":
        p.write_text(taskgraph_to_dot(g), encoding="utf-8")
        return
    data = taskgraph_to_json(g) if fmt == "thrifty" else taskgraph_to_node_link(g, shape=fmt)
    p.write_text(_dump_json(data), encoding="utf-8")


def _dump_json(data: Mapping[str, Any]) -> str:
    """JSON with one task, buffer, node or link per line (C encoder: fast, diff-friendly)."""
    parts = []
    for key, value in data.items():
        head = json.dumps(key) + ": "
        if isinstance(value, list) and value and isinstance(value[0], dict):
            items = ",\n  ".join(json.dumps(v, allow_nan=False) for v in value)
            parts.append(f"{head}[\n  {items}\n ]")
        else:
            parts.append(head + json.dumps(value, allow_nan=False))
    return "{\n " + ",\n ".join(parts) + "\n}\n"


def _format_for(p: Path, format: str | None, reading: bool) -> str:  # noqa: A002
    if format is not None:
        if format not in FORMATS:
            raise GraphError(f"unknown task-graph format {format!r}; valid: "
                             f"{', '.join(FORMATS)}")
        return format
    ext = p.suffix.lower()
    if ext not in _EXTENSIONS:
        raise FileFormatError(
            p, f"unknown task-graph file extension {ext or '(none)'!r}; valid: "
            f"{', '.join(_EXTENSIONS)}" + ("" if reading else
                                           " (or pass format= one of " + ", ".join(FORMATS)
                                           + ")"))
    return _EXTENSIONS[ext]


def _build(tasks: list[Task], buffers: list[Buffer], results: Iterable[Hashable] | None,
           name: str, path: Path | None) -> TaskGraph:
    """Construct the TaskGraph, naming the file in any structural error."""
    try:
        return TaskGraph(tasks, buffers, results=results, name=name)
    except CycleError as exc:
        raise CycleError(f"{path}: {exc}" if path else str(exc), exc.cycle) from exc
    except GraphError as exc:
        raise GraphError(f"{path}: {exc}" if path else str(exc)) from exc


def _check_order(order: Iterable[Any], g: TaskGraph, path: Path | None,
                 where: str) -> tuple[Hashable, ...]:
    """The file's reference order, checked to be a topological order of ``g``."""
    try:
        seq = tuple(_decode_id(v) for v in order)
    except (TypeError, ValueError) as exc:
        raise FileFormatError(path, f"{where} is not a list of task ids: {exc}") from None
    if len(seq) != len(g.tasks) or set(seq) != set(g.tasks):
        missing = [t for t in g.tasks if t not in set(seq)][:5]
        extra = [t for t in seq if t not in g.tasks][:5]
        raise FileFormatError(
            path, f"{where} must list every task once ({len(g.tasks)} tasks, {len(seq)} "
            f"entries; missing {missing}, unknown {extra})")
    pos = {t: i for i, t in enumerate(seq)}
    for t in seq:
        for p in g.predecessors(t):
            if pos[p] > pos[t]:
                raise FileFormatError(
                    path, f"{where} is not a topological order: task {t!r} comes before its "
                    f"predecessor {p!r}")
    return seq


# --- ids and numbers ------------------------------------------------------------------------
def _encode_id(x: Hashable, what: str) -> Any:
    """str and int stay; tuples become lists; anything else cannot be written."""
    if isinstance(x, bool) or not isinstance(x, (str, int, tuple)):
        raise GraphError(
            f"{what} {x!r} is a {type(x).__name__}; files hold ids that are strings, "
            "integers or tuples of them")
    if isinstance(x, tuple):
        return [_encode_id(v, what) for v in x]
    return x


def _decode_id(v: Any) -> Hashable:
    t = type(v)
    if t is int or t is str:
        return v
    if isinstance(v, list):
        return tuple(_decode_id(x) for x in v)
    if isinstance(v, bool) or not isinstance(v, (str, int)):
        raise ValueError(f"{v!r} is not a string, an integer or an array of them")
    return v


def _number(value: Any, path: Path | None, node: Any, attr: str, line: int | None = None,
            ) -> float:
    """A finite number >= 0, or a FileFormatError naming the node and attribute."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FileFormatError(
            path, f"node {node!r}: attribute {attr!r} is {value!r}; it must be a number >= 0",
            line)
    if not math.isfinite(value) or value < 0:
        raise FileFormatError(
            path, f"node {node!r}: attribute {attr!r} is {value!r}; it must be a finite "
            "number >= 0", line)
    return value


def _text_number(text: str) -> Any:
    """A DOT attribute's text as an int or float where it is one, else the text itself."""
    if text.isdigit():
        return int(text)
    try:
        return int(text) if _INT.fullmatch(text.strip()) else float(text)
    except ValueError:
        return text


def _size(value: Any, path: Path | None, node: Any, attr: str, rounded: list[Hashable],
          line: int | None = None) -> int:
    v = _number(value, path, node, attr, line)
    if isinstance(v, int):
        return v
    if v != int(v):
        rounded.append(node)
    return int(round(v))


def _rounding_notes(rounded: list[Hashable], attr: str) -> tuple[str, ...]:
    if not rounded:
        return ()
    shown = ", ".join(map(repr, rounded[:5])) + (" ..." if len(rounded) > 5 else "")
    return (f"{len(rounded)} {attr} values were not whole bytes and were rounded to the "
            f"nearest integer (nodes {shown})",)


# --- networkx node-link JSON ----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Shape:
    name: str
    size: str
    time: str
    id_keys: tuple[str, ...]
    source: str
    target: str


_SHAPES = (
    _Shape("checkmate", "cost_ram", "cost_cpu", ("id", "name"), "source", "target"),
    _Shape("layered", "out_cost", "duration", ("id", "name"), "0", "1"),
)


def taskgraph_from_node_link(data: Mapping[str, Any], path: Path | None = None,
                             name: str | None = None) -> TaskGraphFile:
    """Build a TaskGraph from networkx node-link data in the checkmate or layered shape.

    Example
    -------
    >>> f = taskgraph_from_node_link({"directed": True, "graph": {}, "nodes": [
    ...     {"id": 0, "cost_ram": 8, "cost_cpu": 1}, {"id": 1, "cost_ram": 4, "cost_cpu": 2}],
    ...     "links": [{"source": 0, "target": 1}]})
    >>> f.format, f.graph.order, f.graph.tasks[1].reads
    ('checkmate', (0, 1), (0,))
    """
    nodes = data.get("nodes")
    links = data.get("links", data.get("edges", []))
    if not isinstance(nodes, list) or not isinstance(links, list):
        raise FileFormatError(path, "node-link data needs lists \"nodes\" and \"links\"")
    if data.get("directed") is False:
        raise FileFormatError(path, "the node-link graph is undirected; task graphs are "
                              "directed (\"directed\": true)")
    shape = _detect_shape(nodes, path)
    graph_attrs = dict(data.get("graph") or {})
    label = name or str(graph_attrs.get("name") or (path.stem if path else "taskgraph"))
    tasks_reads: dict[Hashable, list[Hashable]] = {}
    meta: dict[Hashable, tuple[int, float, dict[str, Any]]] = {}
    rounded: list[Hashable] = []
    for k, node in enumerate(nodes):
        if not isinstance(node, dict):
            raise FileFormatError(path, f"node {k} is {node!r}, not an object")
        nid = _node_id(node, shape, k, path)
        if nid in meta:
            raise FileFormatError(path, f"node {k}: duplicate node id {nid!r}")
        for attr in (shape.size, shape.time):
            if attr not in node:
                raise FileFormatError(path, f"node {nid!r} has no attribute {attr!r} (the "
                                      f"{shape.name} shape gives every node {shape.size!r} "
                                      f"and {shape.time!r})")
        size = _size(node[shape.size], path, nid, shape.size, rounded)
        time = float(_number(node[shape.time], path, nid, shape.time))
        id_key = "id" if "id" in node else "name"
        attrs = {a: v for a, v in node.items() if a not in (id_key, shape.size, shape.time)}
        meta[nid] = (size, time, attrs)
        tasks_reads[nid] = []
    src_key, dst_key = _link_keys(links, path)
    for k, link in enumerate(links):
        try:
            u, v = _decode_id(link[src_key]), _decode_id(link[dst_key])
        except (KeyError, TypeError, ValueError):
            raise FileFormatError(path, f"link {k} is {link!r}; expected keys "
                                  f"{src_key!r} and {dst_key!r} naming node ids") from None
        for end in (u, v):
            if end not in meta:
                raise FileFormatError(path, f"link {k} ({u!r} -> {v!r}) names unknown node "
                                      f"{end!r}")
        reads = tasks_reads[v]
        if u not in reads:
            reads.append(u)
    tasks = [Task(nid, reads=tuple(tasks_reads[nid]), writes=(nid,), time=t,
                  attrs=dict(a)) for nid, (_, t, a) in meta.items()]
    buffers = [Buffer(nid, s, nid) for nid, (s, _, _) in meta.items()]
    results = graph_attrs.pop("results", None)
    if results is not None:
        try:
            results = [_decode_id(r) for r in results]
        except (TypeError, ValueError) as exc:
            raise FileFormatError(path, f"graph.results must list buffer ids: {exc}") from None
    g = _build(tasks, buffers, results, label, path)
    order = graph_attrs.pop("order", None)
    checked = _check_order(order, g, path, "graph.order") if order is not None else None
    return TaskGraphFile(g, shape.name, checked, graph_attrs,
                         _rounding_notes(rounded, shape.size), path)


def _detect_shape(nodes: list[Any], path: Path | None) -> _Shape:
    first = next((n for n in nodes if isinstance(n, dict)), {})
    for shape in _SHAPES:
        if shape.size in first:
            return shape
    understood = "; ".join(f"{s.name}: nodes with {s.size!r} (bytes) and {s.time!r} (time)"
                           for s in _SHAPES)
    raise FileFormatError(
        path, f"unknown node attribute shape (first node has {sorted(first)}); understood "
        f"shapes are {understood}" if nodes else "the node-link data has no nodes")


def _node_id(node: Mapping[str, Any], shape: _Shape, k: int, path: Path | None) -> Hashable:
    for key in shape.id_keys:
        if key in node:
            try:
                return _decode_id(node[key])
            except ValueError as exc:
                raise FileFormatError(path, f"node {k}: {key!r} {exc}") from None
    raise FileFormatError(path, f"node {k} has neither 'id' nor 'name' to identify it")


def _link_keys(links: list[Any], path: Path | None) -> tuple[str, str]:
    if not links:
        return "source", "target"
    first = links[0] if isinstance(links[0], dict) else {}
    for s, t in (("source", "target"), ("0", "1")):
        if s in first and t in first:
            return s, t
    raise FileFormatError(
        path, f"link 0 has keys {sorted(first)}; understood links are {{source, target}} "
        "(checkmate) and {\"0\", \"1\"} (layered)")


def taskgraph_to_node_link(g: TaskGraph | TaskGraphFile, shape: str = "checkmate",
                           ) -> dict[str, Any]:
    """networkx node-link data in the ``"checkmate"`` or ``"layered"`` attribute shape.

    Only graphs where every task writes exactly one buffer with the task's own id, and
    every buffer has a producer, fit this format (that is what a node means); workspaces
    and kernels have no place in it either. Non-default results go to ``graph.results``.
    """
    g, order, file_attrs = _unwrap(g)
    shapes = {s.name: s for s in _SHAPES}
    if shape not in shapes:
        raise GraphError(f"unknown node-link shape {shape!r}; valid: {', '.join(shapes)}")
    sh = shapes[shape]
    id_key = "id" if shape == "checkmate" else "name"
    reserved = {id_key, sh.size, sh.time}
    nodes = []
    for t in g.tasks.values():
        if t.writes != (t.id,):
            raise GraphError(
                f"{g.name}: task {t.id!r} writes {t.writes!r}; node-link files need every task "
                "to write exactly one buffer with its own id (save as thrifty JSON instead)")
        if t.workspace or t.kernel is not None:
            raise GraphError(
                f"{g.name}: task {t.id!r} has a workspace or kernel, which node-link files "
                "cannot hold (save as thrifty JSON instead)")
        clash = reserved & set(t.attrs)
        if clash:
            raise GraphError(f"{g.name}: task {t.id!r} has attributes {sorted(clash)} that "
                             f"the {shape} shape uses for itself")
        node = {id_key: _encode_id(t.id, "task id"), sh.size: g.buffers[t.id].size,
                sh.time: t.time}
        node.update(t.attrs)
        nodes.append(node)
    for b in g.buffers.values():
        if b.producer is None:
            raise GraphError(f"{g.name}: buffer {b.id!r} is an input (no producer); node-link "
                             "files cannot hold inputs (save as thrifty JSON instead)")
    links = [{sh.source: _encode_id(b, "buffer id"), sh.target: _encode_id(t.id, "task id")}
             for t in g.tasks.values() for b in t.reads]
    graph: dict[str, Any] = {"name": g.name, **file_attrs}
    if order is not None:
        graph["order"] = [_encode_id(t, "task id") for t in order]
    if g.results != _default_results(g):
        graph["results"] = [_encode_id(b, "buffer id") for b in _sorted_ids(g.results)]
    return {"directed": True, "multigraph": False, "graph": graph, "nodes": nodes,
            "links": links}


def _unwrap(g: TaskGraph | TaskGraphFile) -> tuple[TaskGraph, tuple | None, dict[str, Any]]:
    if isinstance(g, TaskGraphFile):
        return g.graph, g.order, dict(g.attrs)
    if not isinstance(g, TaskGraph):
        raise GraphError(f"expected a TaskGraph or TaskGraphFile, got {type(g).__name__}")
    return g, None, {}


def _default_results(g: TaskGraph) -> frozenset:
    return frozenset(b for b, r in g.readers.items() if not r)


def _sorted_ids(ids: Iterable[Hashable]) -> list[Hashable]:
    return sorted(ids, key=lambda x: (type(x).__name__, repr(x)))


# --- thrifty JSON ---------------------------------------------------------------------------
_TASK_KEYS = ("id", "reads", "writes", "time", "workspace", "kernel", "attrs")
_BUFFER_KEYS = ("id", "size", "producer")
_TOP_KEYS = ("format", "version", "name", "tasks", "buffers", "results", "order", "attrs")


def taskgraph_to_json(g: TaskGraph | TaskGraphFile) -> dict[str, Any]:
    """Our JSON form of ``g`` (see ``docs/taskgraph-json.md``); every field, exactly.

    Example
    -------
    >>> g = TaskGraph([Task("a", writes=("x",), time=1.0)], [Buffer("x", 8, "a")])
    >>> d = taskgraph_to_json(g)
    >>> d["tasks"][0]["writes"], d["buffers"][0], d["results"]
    (['x'], {'id': 'x', 'size': 8, 'producer': 'a'}, ['x'])
    """
    g, order, file_attrs = _unwrap(g)
    tasks = []
    for t in g.tasks.values():
        attrs = dict(t.attrs)
        _check_json(attrs, f"{g.name}: task {t.id!r} attrs")
        if not math.isfinite(t.time):
            raise GraphError(f"{g.name}: task {t.id!r} has time {t.time!r}; files hold finite "
                             "times")
        tasks.append({"id": _encode_id(t.id, "task id"),
                      "reads": [_encode_id(b, "buffer id") for b in t.reads],
                      "writes": [_encode_id(b, "buffer id") for b in t.writes],
                      "time": float(t.time), "workspace": int(t.workspace),
                      "kernel": t.kernel, "attrs": attrs})
    buffers = [{"id": _encode_id(b.id, "buffer id"), "size": b.size,
                "producer": None if b.producer is None else _encode_id(b.producer, "task id")}
               for b in g.buffers.values()]
    out: dict[str, Any] = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "name": g.name,
                           "tasks": tasks, "buffers": buffers,
                           "results": [_encode_id(b, "buffer id")
                                       for b in _sorted_ids(g.results)]}
    if order is not None:
        out["order"] = [_encode_id(t, "task id") for t in order]
    if file_attrs:
        _check_json(file_attrs, f"{g.name}: graph attrs")
        out["attrs"] = file_attrs
    return out


def _check_json(value: Any, what: str) -> None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise GraphError(f"{what} cannot be written as JSON: {exc}") from None


def taskgraph_from_json(data: Mapping[str, Any], path: Path | None = None) -> TaskGraphFile:
    """Build a TaskGraph from our JSON form (see ``docs/taskgraph-json.md``)."""
    if data.get("format") != FORMAT_NAME:
        raise FileFormatError(path, f"\"format\" is {data.get('format')!r}, not {FORMAT_NAME!r}")
    if data.get("version") != FORMAT_VERSION:
        raise FileFormatError(path, f"version {data.get('version')!r} is not supported; this "
                              f"reader reads version {FORMAT_VERSION}")
    _unknown_keys(data, _TOP_KEYS, "the top level", path)
    for key in ("tasks", "buffers"):
        if not isinstance(data.get(key), list):
            raise FileFormatError(path, f"{key!r} must be a list")
    tasks = [_task_from_json(k, d, path) for k, d in enumerate(data["tasks"])]
    rounded: list[Hashable] = []
    buffers = [_buffer_from_json(k, d, path, rounded) for k, d in enumerate(data["buffers"])]
    if rounded:  # our own files hold integer sizes: a fraction is an error here
        raise FileFormatError(path, f"buffer {rounded[0]!r}: 'size' must be an integer "
                              "number of bytes")
    results = data.get("results")
    try:
        res = None if results is None else [_decode_id(r) for r in results]
    except (TypeError, ValueError) as exc:
        raise FileFormatError(path, f"'results' must list buffer ids: {exc}") from None
    name = str(data.get("name") or (path.stem if path else "taskgraph"))
    g = _build(tasks, buffers, res, name, path)
    order = data.get("order")
    checked = _check_order(order, g, path, "'order'") if order is not None else None
    attrs = data.get("attrs") or {}
    if not isinstance(attrs, dict):
        raise FileFormatError(path, "'attrs' must be an object")
    return TaskGraphFile(g, "thrifty", checked, dict(attrs), (), path)


def _unknown_keys(d: Mapping[str, Any], valid: tuple[str, ...], where: str,
                  path: Path | None) -> None:
    if d.keys() <= set(valid):
        return
    unknown = [k for k in d if k not in valid]
    if unknown:
        raise FileFormatError(path, f"unknown keys {unknown} in {where}; valid keys: "
                              f"{', '.join(valid)}")


def _task_from_json(k: int, d: Any, path: Path | None) -> Task:
    if not isinstance(d, dict) or "id" not in d:
        raise FileFormatError(path, f"task {k} must be an object with an 'id'")
    for key in ("reads", "writes"):
        if not isinstance(d.get(key, []), list):
            raise FileFormatError(path, f"task {k}: {key!r} must be a list of buffer ids")
    try:
        tid = _decode_id(d["id"])
        reads = tuple(_decode_id(b) for b in d.get("reads", []))
        writes = tuple(_decode_id(b) for b in d.get("writes", []))
    except (TypeError, ValueError) as exc:
        raise FileFormatError(path, f"task {k}: ids must be strings, integers or arrays of "
                              f"them: {exc}") from None
    _unknown_keys(d, _TASK_KEYS, f"task {tid!r}", path)
    time = float(_number(d.get("time", 0.0), path, tid, "time"))
    workspace = _number(d.get("workspace", 0), path, tid, "workspace")
    if not isinstance(workspace, int):
        raise FileFormatError(path, f"task {tid!r}: 'workspace' must be an integer number of "
                              "bytes")
    kernel = d.get("kernel")
    if kernel is not None and not isinstance(kernel, str):
        raise FileFormatError(path, f"task {tid!r}: 'kernel' must be a string or null")
    attrs = d.get("attrs", {})
    if not isinstance(attrs, dict):
        raise FileFormatError(path, f"task {tid!r}: 'attrs' must be an object")
    return Task(tid, reads, writes, time, workspace, kernel=kernel,
                attrs=dict(attrs))


def _buffer_from_json(k: int, d: Any, path: Path | None, rounded: list[Hashable]) -> Buffer:
    if not isinstance(d, dict) or "id" not in d or "size" not in d:
        raise FileFormatError(path, f"buffer {k} must be an object with 'id' and 'size'")
    try:
        bid = _decode_id(d["id"])
        producer = None if d.get("producer") is None else _decode_id(d["producer"])
    except (TypeError, ValueError) as exc:
        raise FileFormatError(path, f"buffer {k}: {exc}") from None
    _unknown_keys(d, _BUFFER_KEYS, f"buffer {bid!r}", path)
    return Buffer(bid, _size(d["size"], path, bid, "size", rounded), producer)


# --- DOT ------------------------------------------------------------------------------------
_DOT_TOKEN = re.compile(r"""\s*(
    "(?:[^"\\]|\\.)*"                      # quoted string
  | //[^\n]* | /\*.*?\*/ | (?<![^\n])\#[^\n]*  # comments, preprocessor lines
  | -> | --                                # edge operators
  | -?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)     # numeral
  | [A-Za-z_0-9\x80-\U0010ffff]+           # identifier
  | \S                                     # punctuation, or a character DOT does not allow
)""", re.VERBOSE | re.DOTALL)
_PUNCT = set("{}[];,=:+<")
_KEYWORDS = {"strict", "graph", "digraph", "node", "edge", "subgraph"}
_INT = re.compile(r"-?[0-9]+")
_DOT_NUMERAL = re.compile(r"-?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)")
_IDENT_START = re.compile(r"[A-Za-z_0-9\x80-\U0010ffff.\-]")


@dataclass(slots=True)
class _DotGraph:
    name: str | None = None
    attrs: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, tuple[dict[str, str], int]] = field(default_factory=dict)  # -> token
    edges: list[tuple[str, str, int]] = field(default_factory=list)


class _DotParser:
    """Recursive descent over the DOT grammar; keeps node and edge order as written.

    Tokens are plain strings (one regex pass, no positions); a token's line is found again
    only when a message needs it.
    """

    def __init__(self, text: str, path: Path | None) -> None:
        self.text, self.path = text, path
        self.toks: list[str] = _DOT_TOKEN.findall(text)
        if "//" in text or "/*" in text or "#" in text:
            self.toks = [t for t in self.toks if not t.startswith(("//", "/*", "#"))]
        self.toks.append("")  # end of file
        self.g = _DotGraph()

    def line_of(self, k: int) -> int:
        """The line of token ``k`` (re-scans the text: for messages only)."""
        j = 0
        for m in _DOT_TOKEN.finditer(self.text):
            if m.group(1).startswith(("//", "/*", "#")):
                continue
            if j == k:
                return self.text.count("\n", 0, m.start(1)) + 1
            j += 1
        return self.text.count("\n") + 1

    def error(self, msg: str, k: int) -> FileFormatError:
        return FileFormatError(self.path, f"DOT: {msg}", self.line_of(k))

    def _found(self, k: int) -> str:
        return repr(self.toks[k]) if self.toks[k] else "end of file"

    def _ident(self, k: int) -> tuple[str, int]:
        t = self.toks[k]
        if t[:1] == '"':
            if "\\" not in t and self.toks[k + 1] != "+":
                return t[1:-1], k + 1
            out = _unquote(t)
            while self.toks[k + 1] == "+" and self.toks[k + 2][:1] == '"':
                out += _unquote(self.toks[k + 2])
                k += 2
            return out, k + 1
        if t and t not in _PUNCT and t not in ("->", "--") and _IDENT_START.match(t):
            return t, k + 1
        if t == "<":
            raise self.error("HTML strings (<...>) are not supported", k)
        raise self.error(f"expected a name or a quoted string, found {self._found(k)}", k)

    def _expect(self, value: str, k: int) -> int:
        if self.toks[k].lower() != value:
            raise self.error(f"expected {value!r}, found {self._found(k)}", k)
        return k + 1

    def parse(self) -> _DotGraph:
        k = 0
        if self.toks[k].lower() == "strict":
            k += 1
        if self.toks[k].lower() == "graph":
            raise self.error("an undirected 'graph'; task graphs are directed: use 'digraph'",
                             k)
        k = self._expect("digraph", k)
        if self.toks[k] != "{":
            self.g.name, k = self._ident(k)
        k = self._expect("{", k)
        k = self._stmts(k, {})
        k = self._expect("}", k)
        if self.toks[k]:
            raise self.error("text after the closing '}'", k)
        return self.g

    def _attr_list(self, k: int) -> tuple[dict[str, str], int]:
        out: dict[str, str] = {}
        toks = self.toks
        while toks[k] == "[":
            k += 1
            while toks[k] != "]":
                key, k = self._ident(k)
                k = self._expect("=", k)
                out[key], k = self._ident(k)
                if toks[k] in (",", ";"):
                    k += 1
            k += 1
        return out, k

    def _stmts(self, k: int, node_defaults: dict[str, str]) -> int:
        node_defaults = dict(node_defaults)
        toks, nodes, edges = self.toks, self.g.nodes, self.g.edges
        while True:
            t = toks[k]
            if t == "}":
                return k
            if t == ";":
                k += 1
                continue
            if not t:
                raise self.error("the file ends before the closing '}'", k)
            low = t.lower()
            if low in _KEYWORDS and t[:1] != '"':
                if low in ("graph", "node", "edge"):
                    attrs, k = self._attr_list(k + 1)
                    if low == "graph":
                        self.g.attrs.update(attrs)
                    elif low == "node":
                        node_defaults.update(attrs)
                    continue
                if low == "subgraph":
                    k += 1
                    if toks[k] != "{":
                        _, k = self._ident(k)
                else:
                    raise self.error(f"{t!r} is a keyword and cannot start a statement here", k)
            if toks[k] == "{":
                k = self._stmts(k + 1, node_defaults)
                k = self._expect("}", k)
                if toks[k] in ("->", "--"):
                    raise self.error("edges from subgraphs are not supported", k)
                continue
            if toks[k + 1] == "=":
                key, k = self._ident(k)
                self.g.attrs[key], k = self._ident(k + 1)
                continue
            start = k
            name, k = self._ident(k)
            if name not in nodes:
                nodes[name] = (dict(node_defaults), start)
            if toks[k] == ":":
                raise self.error("node ports (name:port) are not supported", k)
            if toks[k] != "->" and toks[k] != "--":
                if toks[k] == "[":
                    attrs, k = self._attr_list(k)
                    nodes[name][0].update(attrs)
                continue
            while toks[k] in ("->", "--"):
                if toks[k] == "--":
                    raise self.error("undirected edge '--' in a task graph; use '->'", k)
                if toks[k + 1] == "{" or toks[k + 1].lower() == "subgraph":
                    raise self.error("edges to subgraphs are not supported", k + 1)
                at = k + 1
                nxt, k = self._ident(k + 1)
                if nxt not in nodes:
                    nodes[nxt] = (dict(node_defaults), at)
                if toks[k] == ":":
                    raise self.error("node ports (name:port) are not supported", k)
                edges.append((name, nxt, start))
                name = nxt
            if toks[k] == "[":
                _, k = self._attr_list(k)

def _unquote(s: str) -> str:
    body = s[1:-1]
    if "\\" not in body:
        return body
    return re.sub(r"\\(.)", lambda m: "" if m.group(1) == "\n" else (
        m.group(1) if m.group(1) in "\"\\" else m.group(0)), body, flags=re.DOTALL)


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _dot_name_id(name: str) -> Hashable:
    return int(name) if _INT.fullmatch(name) else name


def taskgraph_from_dot(text: str, path: Path | None = None) -> TaskGraphFile:
    """Build a TaskGraph from DOT text.

    Node attributes: ``time`` (task time), ``size`` (bytes of the task's own output
    buffer), ``workspace``, ``kernel``, ``attrs`` (a JSON object), ``id`` (the id as JSON,
    when the node name alone does not give it: names that are integers become int ids),
    ``kind=buffer`` for a buffer node of its own (with ``size``). Graph attributes
    ``results`` and ``order`` are JSON lists of ids, ``attrs`` a JSON object. Other
    attributes (``label``, ``shape``, colours) are ignored.

    Example
    -------
    >>> f = taskgraph_from_dot('digraph g { a [size=8, time=1]; b [size=4, time=2]; a -> b }')
    >>> f.graph.order, f.graph.tasks["b"].reads, f.graph.buffers["a"].size
    (('a', 'b'), ('a',), 8)
    """
    parser = _DotParser(text, path)
    dot = parser.parse()
    try:
        tasks, bufs, rounded = _dot_tasks(dot)
    except FileFormatError as exc:  # raised with path None and line = a token index
        message = str(exc).split(": ", 1)[1]
        raise FileFormatError(path, message, None if exc.line is None
                              else parser.line_of(exc.line)) from None
    results = _dot_json(dot.attrs, "results", list, "the graph", path, None)
    name = dot.name or (path.stem if path else "taskgraph")
    g = _build(tasks, bufs, None if results is None else [_decode_id(r) for r in results],
               name, path)
    order = _dot_json(dot.attrs, "order", list, "the graph", path, None)
    checked = _check_order(order, g, path, "graph attribute 'order'") if order else None
    file_attrs = _dot_json(dot.attrs, "attrs", dict, "the graph", path, None) or {}
    return TaskGraphFile(g, "dot", checked, file_attrs,
                         _rounding_notes(rounded, "size"), path)


def _dot_tasks(dot: _DotGraph) -> tuple[list[Task], list[Buffer], list[Hashable]]:
    """Tasks and buffers of parsed DOT; errors carry path None and a token index as line."""
    path = None
    rounded: list[Hashable] = []
    task_of: dict[str, Hashable] = {}
    buffer_of: dict[str, Hashable] = {}  # node name -> buffer id (own buffer or buffer node)
    specs: dict[Hashable, dict[str, Any]] = {}
    buffers: dict[Hashable, list[Any]] = {}  # id -> [size, producer]
    for nname, (a, line) in dot.nodes.items():
        nid = _dot_id(a, nname, path, line)
        kind = a.get("kind", "task")
        if kind == "buffer":
            if "size" not in a:
                raise FileFormatError(path, f"DOT: buffer node {nname!r} has no attribute "
                                      "'size'", line)
            if nid in buffers:
                raise FileFormatError(path, f"DOT: duplicate buffer id {nid!r}", line)
            buffers[nid] = [_size(_text_number(a["size"]), path, nid, "size", rounded, line),
                            None]
            buffer_of[nname] = nid
            continue
        if kind != "task":
            raise FileFormatError(path, f"DOT: node {nname!r} has kind={kind!r}; valid: task, "
                                  "buffer", line)
        if "time" not in a:
            raise FileFormatError(path, f"DOT: node {nname!r} has no attribute 'time' (task "
                                  "nodes give 'time', and 'size' for their output buffer)",
                                  line)
        if nid in specs:
            raise FileFormatError(path, f"DOT: duplicate task id {nid!r}", line)
        spec: dict[str, Any] = {
            "time": float(_number(_text_number(a["time"]), path, nid, "time", line)), "reads": [],
            "writes": [], "kernel": a.get("kernel"),
            "workspace": _size(_text_number(a.get("workspace", "0")), path, nid, "workspace",
                               rounded, line),
            "attrs": _dot_json(a, "attrs", dict, nname, path, line) or {}}
        specs[nid] = spec
        task_of[nname] = nid
        if "size" in a:
            if nid in buffers:
                raise FileFormatError(path, f"DOT: duplicate buffer id {nid!r}", line)
            buffers[nid] = [_size(_text_number(a["size"]), path, nid, "size", rounded, line),
                            nid]
            spec["writes"].append(nid)
            buffer_of[nname] = nid
    reads_of = {name: specs[tid]["reads"] for name, tid in task_of.items()}
    for u, v, line in dot.edges:
        if v in reads_of and u in buffer_of:
            reads_of[v].append(buffer_of[u])
        elif u in task_of and v in buffer_of and v not in task_of:
            buf = buffers[buffer_of[v]]
            if buf[1] is not None:
                raise FileFormatError(path, f"DOT: buffer node {v!r} has two producers "
                                      f"({buf[1]!r} and {task_of[u]!r})", line)
            buf[1] = task_of[u]
            specs[task_of[u]]["writes"].append(buffer_of[v])
        elif v in task_of:
            raise FileFormatError(path, f"DOT: edge {u!r} -> {v!r}: {u!r} has no 'size', so "
                                  "no output buffer for the target to read", line)
        else:
            raise FileFormatError(path, f"DOT: edge {u!r} -> {v!r} joins two buffer nodes; "
                                  "an edge goes from a task to a buffer or into a task", line)
    tasks = [Task(tid, tuple(s["reads"]), tuple(s["writes"]), s["time"], s["workspace"],
                  kernel=s["kernel"], attrs=s["attrs"])
             for tid, s in specs.items()]
    bufs = [Buffer(bid, size, producer) for bid, (size, producer) in buffers.items()]
    return tasks, bufs, rounded


def _dot_id(a: Mapping[str, str], nname: str, path: Path | None, line: int) -> Hashable:
    if "id" not in a:
        return _dot_name_id(nname)
    try:
        return _decode_id(json.loads(a["id"]))
    except (ValueError, TypeError) as exc:
        raise FileFormatError(path, f"DOT: node {nname!r}: 'id' must be a JSON string, "
                              f"integer or array: {exc}", line) from None


def _dot_json(a: Mapping[str, str], key: str, kind: type, what: str, path: Path | None,
              line: int | None) -> Any:
    if key not in a:
        return None
    try:
        value = json.loads(a[key])
    except ValueError as exc:
        raise FileFormatError(path, f"DOT: {what}: attribute {key!r} is not JSON: {exc}",
                              line) from None
    if not isinstance(value, kind):
        raise FileFormatError(path, f"DOT: {what}: attribute {key!r} must be a JSON "
                              f"{'object' if kind is dict else 'array'}", line)
    return value


def taskgraph_to_dot(g: TaskGraph | TaskGraphFile) -> str:
    """DOT text for ``g`` that :func:`taskgraph_from_dot` reads back equal.

    A task that writes a buffer with its own id first is one box node with ``size`` and
    ``time``; other buffers (inputs, further outputs) are ellipse nodes ``kind=buffer``.
    Edges are written reader by reader in the order of each task's reads.

    Example
    -------
    >>> g = TaskGraph([Task("a", writes=("a",), time=1.0), Task("b", reads=("a",),
    ...                writes=("b",), time=2.0)], [Buffer("a", 8, "a"), Buffer("b", 4, "b")])
    >>> print(taskgraph_to_dot(g))  # doctest: +NORMALIZE_WHITESPACE
    digraph "taskgraph" {
      node [shape=box];
      "a" [time=1.0, size=8];
      "b" [time=2.0, size=4];
      "a" -> "b";
    }
    """
    g, order, file_attrs = _unwrap(g)
    lines = [f"digraph {_quote(g.name)} {{"]
    if g.results != _default_results(g):
        lines.append(f"  results={_quote(_json_ids(_sorted_ids(g.results)))};")
    if order is not None:
        lines.append(f"  order={_quote(_json_ids(order))};")
    if file_attrs:
        _check_json(file_attrs, f"{g.name}: graph attrs")
        lines.append(f"  attrs={_quote(json.dumps(file_attrs, allow_nan=False))};")
    lines.append("  node [shape=box];")
    own: dict[Hashable, str] = {}  # buffer id -> node name, for buffers folded into a task
    names: set[str] = set()
    for t in g.tasks.values():
        name = _id_name(t.id, "task id")
        a = [f"time={_dot_float(t.time, g.name, t.id)}"]
        if t.writes and t.writes[0] == t.id:
            own[t.id] = name
            a.append(f"size={g.buffers[t.id].size}")
        if t.workspace:
            a.append(f"workspace={int(t.workspace)}")
        if t.kernel is not None:
            a.append(f"kernel={_quote(t.kernel)}")
        if t.attrs:
            _check_json(dict(t.attrs), f"{g.name}: task {t.id!r} attrs")
            a.append(f"attrs={_quote(json.dumps(dict(t.attrs), allow_nan=False))}")
        if _dot_name_id(name) != t.id or type(_dot_name_id(name)) is not type(t.id):
            a.append(f"id={_quote(_json_id(t.id))}")
        names.add(name)
        lines.append(f"  {_quote(name)} [{', '.join(a)}];")
    buf_node: dict[Hashable, str] = dict(own)
    for b in g.buffers.values():
        if b.id in own:
            continue
        name = "buffer " + _id_name(b.id, "buffer id")
        if name in names:
            raise GraphError(f"{g.name}: buffer {b.id!r} would share the DOT node name "
                             f"{name!r} with a task; rename one")
        names.add(name)
        buf_node[b.id] = name
        lines.append(f"  {_quote(name)} [kind=buffer, shape=ellipse, size={b.size}, "
                     f"id={_quote(_json_id(b.id))}];")
    for t in g.tasks.values():
        for w in t.writes:
            if w not in own:
                lines.append(f"  {_quote(_id_name(t.id, 'task id'))} -> {_quote(buf_node[w])};")
    for t in g.tasks.values():
        tname = _quote(_id_name(t.id, "task id"))
        for r in t.reads:
            lines.append(f"  {_quote(buf_node[r])} -> {tname};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _id_name(x: Hashable, what: str) -> str:
    enc = _encode_id(x, what)
    return enc if isinstance(enc, str) else json.dumps(enc)


def _json_ids(ids: Iterable[Hashable]) -> str:
    return json.dumps([_encode_id(x, "id") for x in ids])


def _json_id(x: Hashable) -> str:
    return json.dumps(_encode_id(x, "id"))


def _dot_float(x: float, name: str, tid: Hashable) -> str:
    if not math.isfinite(x):
        raise GraphError(f"{name}: task {tid!r} has time {x!r}; files hold finite times")
    text = repr(float(x))
    return text if _DOT_NUMERAL.fullmatch(text) else _quote(text)  # 1e-10 is no DOT numeral


# --- comparison -----------------------------------------------------------------------------
def taskgraph_diff(a: TaskGraph, b: TaskGraph, names: bool = False) -> list[str]:
    """The differences between two task graphs, as sentences; empty when they are equal.

    Compares every field of every task (including ``attrs``, excluding ``fn``) and buffer,
    the results and the topological order; the names only when ``names`` is true.

    Example
    -------
    >>> g = TaskGraph([Task("a", writes=("x",), time=1.0)], [Buffer("x", 8, "a")])
    >>> h = TaskGraph([Task("a", writes=("x",), time=2.0)], [Buffer("x", 4, "a")])
    >>> taskgraph_diff(g, h)
    ["task 'a': time 1.0 != 2.0", "buffer 'x': size 8 != 4"]
    """
    out: list[str] = []
    if names and a.name != b.name:
        out.append(f"name {a.name!r} != {b.name!r}")
    out += _diff_maps("task", a.tasks, b.tasks, _TASK_FIELDS)
    out += _diff_maps("buffer", a.buffers, b.buffers, ("size", "producer"))
    if a.results != b.results:
        out.append(f"results {_sorted_ids(a.results)} != {_sorted_ids(b.results)}")
    if a.order != b.order:
        out.append("topological order differs")
    return out


_TASK_FIELDS = ("reads", "writes", "time", "workspace", "kernel", "attrs")


def _diff_maps(what: str, a: Mapping, b: Mapping, fields: tuple[str, ...]) -> Iterator[str]:
    for k in a:
        if k not in b:
            yield f"{what} {k!r} only in the first"
            continue
        for f in fields:
            x, y = getattr(a[k], f), getattr(b[k], f)
            if f == "attrs":
                x, y = dict(x), dict(y)
            if x != y:
                yield f"{what} {k!r}: {f} {x!r} != {y!r}"
    for k in b:
        if k not in a:
            yield f"{what} {k!r} only in the second"

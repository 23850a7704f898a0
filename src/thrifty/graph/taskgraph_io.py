"""Task-graph files: networkx node-link JSON, our own JSON, and Graphviz DOT.

The public entry point of :mod:`thrifty.graph.formats` (one module per format):

* **node-link JSON** (:mod:`~thrifty.graph.formats.node_link`), read and written through
  networkx, in the two attribute shapes of published memory-planning benchmarks: the
  *checkmate* shape of Jain et al. (MLSys 2020) (``cost_ram``, ``cost_cpu``) and the *layered*
  shape of Gagrani et al. (NeurIPS 2022) (``out_cost``, ``duration``, ``graph.order``). A node
  is one task and its one output buffer (:mod:`~thrifty.graph.formats.nx`);
* **thrifty JSON** (:mod:`~thrifty.graph.formats.ours`, ``"format": "thrifty-taskgraph"``,
  documented in ``docs/taskgraph-json.md``): every field of every task and buffer, exactly;
* **DOT** (:mod:`~thrifty.graph.formats.dot`, ``.dot``/``.gv``), with a reader of our own for
  the measured reasons written there.

:func:`as_taskgraph` turns what a user may hold (a TaskGraph, a file read by
:func:`read_taskgraph`, a networkx DiGraph, a path) into a TaskGraph, or says clearly what
it got instead. Every error reading a file names the file and what is wrong in it.

Task and buffer ids in files are strings, integers, or (nested) arrays of them, which are
read as tuples.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from thrifty.errors import FileFormatError, GraphError
from thrifty.graph.formats.common import (
    FORMATS,
    TaskGraphFile,
    dump_json,
    show,
    sorted_ids,
)
from thrifty.graph.formats.dot import taskgraph_from_dot, taskgraph_to_dot
from thrifty.graph.formats.node_link import taskgraph_from_node_link, taskgraph_to_node_link
from thrifty.graph.formats.ours import (
    FORMAT_NAME,
    FORMAT_VERSION,
    taskgraph_from_json,
    taskgraph_to_json,
)
from thrifty.graph.taskgraph import TaskGraph

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["TaskGraphFile", "as_taskgraph", "load_taskgraph", "read_taskgraph",
           "save_taskgraph", "taskgraph_to_json", "taskgraph_from_json",
           "taskgraph_to_node_link", "taskgraph_from_node_link", "taskgraph_to_dot",
           "taskgraph_from_dot", "taskgraph_from_networkx", "taskgraph_to_networkx",
           "taskgraph_diff", "FORMATS", "FORMAT_NAME", "FORMAT_VERSION"]

_EXTENSIONS = {".json": "thrifty", ".dot": "dot", ".gv": "dot"}


# --- entry points ---------------------------------------------------------------------------
def read_taskgraph(path: str | os.PathLike[str]) -> TaskGraphFile:
    """Read a task-graph file (node-link or thrifty ``.json``, ``.dot``/``.gv``).

    Raises
    ------
    FileFormatError
        Unreadable or malformed file (not UTF-8 text, invalid or too deeply nested JSON,
        DOT syntax), unknown attribute shape, missing/negative/non-finite/non-numeric size
        or time (naming the node and the attribute), unknown extension.
    CycleError
        The graph has a cycle; the message names the file and one cycle.
    GraphError
        Other structural problems (dangling references), naming the file; or ``path`` is
        not a path.
    """
    p = _as_path(path)
    fmt = _format_for(p, None, reading=True)
    text = _read_text(p)
    if fmt == "dot":
        return taskgraph_from_dot(text, path=p)
    return _from_json_text(text, p)


def _as_path(path: Any) -> Path:
    if isinstance(path, (str, os.PathLike)):
        try:
            return Path(path)
        except TypeError:  # a PathLike whose __fspath__ gives bytes
            pass
    raise GraphError(f"expected the path of a task-graph file, got {type(path).__name__} "
                     f"{show(path)}")


def _read_text(p: Path) -> str:
    if p.is_dir():
        raise FileFormatError(p, "is a directory, not a task-graph file")
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise FileFormatError(p, "no such file") from None
    except OSError as exc:
        raise FileFormatError(p, f"cannot read: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise FileFormatError(p, f"not UTF-8 text: byte {data[exc.start]:#04x} at offset "
                              f"{exc.start} ({exc.reason}); a task-graph file is JSON or DOT "
                              "text") from None


def _from_json_text(text: str, p: Path) -> TaskGraphFile:
    try:
        data = json.loads(text)
    except RecursionError:
        raise FileFormatError(p, "nested too deeply to read (arrays or objects inside one "
                              "another beyond Python's recursion limit)") from None
    except json.JSONDecodeError as exc:
        raise FileFormatError(p, f"invalid JSON: {exc.msg} (column {exc.colno})",
                              exc.lineno) from None
    except ValueError as exc:  # an integer of more digits than Python converts
        raise FileFormatError(p, "a number in the file has more digits than Python reads "
                              f"({str(exc).split(':', 1)[0]})") from None
    if isinstance(data, dict) and data.get("format") == FORMAT_NAME:
        return taskgraph_from_json(data, path=p)
    if isinstance(data, dict) and "nodes" in data:
        return taskgraph_from_node_link(data, path=p)
    raise FileFormatError(
        p, f"a task-graph JSON file is either ours (\"format\": \"{FORMAT_NAME}\") or "
        "networkx node-link data (with \"nodes\" and \"links\"); this one is neither")


def load_taskgraph(source: Any) -> TaskGraph:
    """The :class:`TaskGraph` of a file, a networkx DiGraph, or a TaskGraph (as it is).

    See :func:`as_taskgraph`.

    Example
    -------
    >>> g = load_taskgraph("../shared/data/graphs/checkmate/vgg16_train.json")  # doctest: +SKIP
    >>> len(g), g.tasks[0].attrs["name"]  # doctest: +SKIP
    (45, 'block1_conv1')
    """
    return as_taskgraph(source)


@overload
def as_taskgraph(obj: Any, file: Literal[False] = ...) -> TaskGraph: ...


@overload
def as_taskgraph(obj: Any, file: Literal[True]) -> TaskGraph | TaskGraphFile: ...


def as_taskgraph(obj: Any, file: bool = False) -> TaskGraph | TaskGraphFile:
    """``obj`` as a TaskGraph: what every planner calls on its argument first.

    Accepts a :class:`TaskGraph`, a :class:`TaskGraphFile`, a :class:`networkx.DiGraph`
    in a node-link shape (see :func:`taskgraph_from_networkx`), or the path of a
    task-graph file (``str`` or ``os.PathLike``). With ``file=True`` a TaskGraphFile (given,
    or read from a path) is returned whole, so that its reference order can serve.

    Raises
    ------
    GraphError
        ``obj`` is none of these (``None``, a number, ...), naming what it is.
    FileFormatError, CycleError
        The file or the networkx graph is not a valid task graph.

    Example
    -------
    >>> import networkx as nx
    >>> G = nx.DiGraph([(0, 1)])
    >>> nx.set_node_attributes(G, {0: 8, 1: 4}, "cost_ram")
    >>> nx.set_node_attributes(G, 1.0, "cost_cpu")
    >>> as_taskgraph(G).tasks[1].reads
    (0,)
    >>> as_taskgraph(None)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    thrifty.errors.GraphError: expected a TaskGraph, a networkx DiGraph or ...; got None
    """
    if isinstance(obj, TaskGraph):
        return obj
    if isinstance(obj, TaskGraphFile):
        return obj if file else obj.graph
    if isinstance(obj, (str, os.PathLike)):
        f = read_taskgraph(obj)
        return f if file else f.graph
    nx_module = sys.modules.get("networkx")  # a networkx graph means networkx is imported
    if nx_module is not None and isinstance(obj, nx_module.Graph):
        return taskgraph_from_networkx(obj)
    raise GraphError("expected a TaskGraph, a networkx DiGraph or the path of a task-graph "
                     f"file; got {'None' if obj is None else type(obj).__name__}")


def taskgraph_from_networkx(G: nx.DiGraph, size: str | None = None, time: str | None = None,
                            name: str | None = None) -> TaskGraph:
    """The TaskGraph of a networkx DiGraph: node ``v`` is task ``v`` writing buffer ``v``.

    ``size`` and ``time`` name the node attributes holding the output's bytes and the
    task's time; by default those of the node-link shape the first node has: ``cost_ram``
    and ``cost_cpu`` (Checkmate), or ``out_cost`` and ``duration`` (layered graphs). An edge
    ``u -> v`` makes ``v`` read ``u``. Other node attributes go to :attr:`Task.attrs`; graph
    attributes ``name`` and ``results`` are read. See :mod:`thrifty.graph.formats.nx`.
    """
    from thrifty.graph.formats.nx import from_networkx

    return from_networkx(G, size, time, name)[0]


def taskgraph_to_networkx(g: TaskGraph, shape: str = "checkmate") -> nx.DiGraph:
    """A networkx DiGraph of ``g`` in the ``"checkmate"`` or ``"layered"`` attribute shape.

    Only graphs where every task writes exactly one buffer with its own id (and no inputs,
    workspaces or kernels) fit; :func:`taskgraph_from_networkx` reads it back equal.
    """
    from thrifty.graph.formats.nx import to_networkx

    return to_networkx(g, shape)


def save_taskgraph(g: TaskGraph | TaskGraphFile, path: str | os.PathLike[str],
                   format: str | None = None) -> None:  # noqa: A002 - the public name
    """Write ``g`` to ``path``; the format follows the extension unless given.

    ``.json`` writes ours, ``.dot``/``.gv`` DOT; ``format="checkmate"`` or ``"layered"``
    writes node-link JSON in that shape (only for graphs where every task writes exactly
    one buffer with its own id). Given a :class:`TaskGraphFile`, its order and graph-level
    attributes are written too. Task callables (``Task.fn``) are never written.
    """
    p = _as_path(path)
    fmt = _format_for(p, format, reading=False)
    if fmt == "dot":
        p.write_text(taskgraph_to_dot(g), encoding="utf-8")
        return
    data = taskgraph_to_json(g) if fmt == "thrifty" else taskgraph_to_node_link(g, shape=fmt)
    p.write_text(dump_json(data), encoding="utf-8")


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


# --- comparison -----------------------------------------------------------------------------
def taskgraph_diff(a: TaskGraph, b: TaskGraph, names: bool = False) -> list[str]:
    """The differences between two task graphs, as sentences; empty when they are equal.

    Compares every field of every task (including ``attrs``, excluding ``fn``) and buffer,
    the results and the topological order; the names only when ``names`` is true.

    Example
    -------
    >>> from thrifty.graph.taskgraph import Buffer, Task
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
        out.append(f"results {sorted_ids(a.results)} != {sorted_ids(b.results)}")
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

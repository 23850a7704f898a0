"""thrifty's own task-graph JSON (``"format": "thrifty-taskgraph"``, version 1).

Every field of every task and buffer, exactly; documented in ``docs/taskgraph-json.md``.
Unknown keys are refused with the list of valid ones (a typo is an error, not a silently
ignored field); sizes and workspaces are whole bytes, times finite numbers >= 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from thrifty.errors import GraphError
from thrifty.graph.formats.common import (
    TaskGraphFile,
    build,
    check_json,
    check_order,
    decode_id,
    decode_ids,
    depth_guarded,
    encode_id,
    fail,
    number,
    show,
    size,
    sorted_ids,
    unwrap,
)
from thrifty.graph.taskgraph import Buffer, Task, TaskGraph

#: The ``format`` field of our JSON, and its version.
FORMAT_NAME = "thrifty-taskgraph"
FORMAT_VERSION = 1

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
    g, order, file_attrs = unwrap(g)
    tasks = []
    for t in g.tasks.values():
        attrs = dict(t.attrs)
        check_json(attrs, f"{g.name}: task {show(t.id)} attrs")
        if not math.isfinite(t.time):
            raise GraphError(f"{g.name}: task {show(t.id)} has time {t.time!r}; files hold "
                             "finite times")
        tasks.append({"id": encode_id(t.id, "task id"),
                      "reads": [encode_id(b, "buffer id") for b in t.reads],
                      "writes": [encode_id(b, "buffer id") for b in t.writes],
                      "time": float(t.time), "workspace": int(t.workspace),
                      "kernel": t.kernel, "attrs": attrs})
    buffers = [{"id": encode_id(b.id, "buffer id"), "size": b.size,
                "producer": None if b.producer is None else encode_id(b.producer, "task id")}
               for b in g.buffers.values()]
    out: dict[str, Any] = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "name": g.name,
                           "tasks": tasks, "buffers": buffers,
                           "results": [encode_id(b, "buffer id")
                                       for b in sorted_ids(g.results)]}
    if order is not None:
        out["order"] = [encode_id(t, "task id") for t in order]
    if file_attrs:
        check_json(file_attrs, f"{g.name}: graph attrs")
        out["attrs"] = file_attrs
    return out


@depth_guarded
def taskgraph_from_json(data: Mapping[str, Any], path: Path | None = None) -> TaskGraphFile:
    """Build a TaskGraph from our JSON form (see ``docs/taskgraph-json.md``)."""
    if not isinstance(data, Mapping):
        fail(path, f"a task graph is a JSON object, not {type(data).__name__}")
    if data.get("format") != FORMAT_NAME:
        fail(path, f"\"format\" is {show(data.get('format'))}, not {FORMAT_NAME!r}")
    if data.get("version") != FORMAT_VERSION:
        fail(path, f"version {show(data.get('version'))} is not supported; this reader reads "
             f"version {FORMAT_VERSION}")
    _unknown_keys(data, _TOP_KEYS, "the top level", path)
    for key in ("tasks", "buffers"):
        if not isinstance(data.get(key), list):
            fail(path, f"{key!r} must be a list")
    tasks = [_task_from_json(k, d, path) for k, d in enumerate(data["tasks"])]
    buffers = [_buffer_from_json(k, d, path) for k, d in enumerate(data["buffers"])]
    results = data.get("results")
    res = None if results is None else decode_ids(results, path, "'results'")
    name = str(data.get("name") or (path.stem if path else "taskgraph"))
    g = build(tasks, buffers, res, name, path)
    order = data.get("order")
    checked = check_order(order, g, path, "'order'") if order is not None else None
    attrs = data.get("attrs") or {}
    if not isinstance(attrs, dict):
        fail(path, "'attrs' must be an object")
    return TaskGraphFile(g, "thrifty", checked, dict(attrs), (), path)


def _unknown_keys(d: Mapping[str, Any], valid: tuple[str, ...], where: str,
                  path: Path | None) -> None:
    unknown = [k for k in d if k not in valid]
    if unknown:
        fail(path, f"unknown keys {show(unknown)} in {where}; valid keys: {', '.join(valid)}")


def _task_from_json(k: int, d: Any, path: Path | None) -> Task:
    if not isinstance(d, dict) or "id" not in d:
        fail(path, f"task {k} must be an object with an 'id'")
    for key in ("reads", "writes"):
        if not isinstance(d.get(key, []), list):
            fail(path, f"task {k}: {key!r} must be a list of buffer ids")
    try:
        tid = decode_id(d["id"])
        reads = tuple(decode_id(b) for b in d.get("reads", []))
        writes = tuple(decode_id(b) for b in d.get("writes", []))
    except ValueError as exc:
        fail(path, f"task {k}: ids must be strings, integers or arrays of them: {exc}")
    _unknown_keys(d, _TASK_KEYS, f"task {show(tid)}", path)
    time = number(d.get("time", 0.0), path, tid, "time")
    workspace = size(d.get("workspace", 0), path, tid, "workspace", None)
    kernel = d.get("kernel")
    if kernel is not None and not isinstance(kernel, str):
        fail(path, f"task {show(tid)}: 'kernel' must be a string or null")
    attrs = d.get("attrs", {})
    if not isinstance(attrs, dict):
        fail(path, f"task {show(tid)}: 'attrs' must be an object")
    return Task(tid, reads, writes, time, workspace, kernel=kernel, attrs=dict(attrs))


def _buffer_from_json(k: int, d: Any, path: Path | None) -> Buffer:
    if not isinstance(d, dict) or "id" not in d or "size" not in d:
        fail(path, f"buffer {k} must be an object with 'id' and 'size'")
    try:
        bid = decode_id(d["id"])
        producer = None if d.get("producer") is None else decode_id(d["producer"])
    except ValueError as exc:
        fail(path, f"buffer {k}: {exc}")
    _unknown_keys(d, _BUFFER_KEYS, f"buffer {show(bid)}", path)
    return Buffer(bid, size(d["size"], path, bid, "size", None), producer)

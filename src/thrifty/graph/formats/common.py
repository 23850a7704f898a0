"""What every task-graph reader and writer shares: the file type, ids, numbers, checks.

Every check here raises a :class:`~thrifty.errors.FileFormatError` naming the file (and the
line, where known) when a file is being read, or a :class:`~thrifty.errors.GraphError`
when the data came from memory (a dict, a networkx graph).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from thrifty.errors import CycleError, FileFormatError, GraphError
from thrifty.graph.taskgraph import Buffer, Task, TaskGraph, short_repr

#: Formats :func:`~thrifty.graph.taskgraph_io.save_taskgraph` writes (and
#: :attr:`TaskGraphFile.format` reports).
FORMATS: tuple[str, ...] = ("thrifty", "checkmate", "layered", "dot")

MAX_BYTES = 2**60
"""The largest size, workspace, or total of the sizes and the largest workspace, that a file
may give: 1 EiB, which leaves the planners' signed 64-bit byte counts 8x headroom for their
sums (a total of 2**63 wrapped around in them)."""


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


# --- errors -------------------------------------------------------------------------------------
def fail(path: Path | None, message: str, line: int | None = None) -> NoReturn:
    """Raise FileFormatError naming ``path`` (and ``line``), or GraphError without a file."""
    if path is None:
        raise GraphError(message if line is None else f"line {line}: {message}")
    raise FileFormatError(path, message, line)


def depth_guarded(read: Callable[..., TaskGraphFile]) -> Callable[..., TaskGraphFile]:
    """Wrap a reader so that data nested beyond the recursion limit (JSON arrays, DOT
    subgraphs) is an error naming the file, not a RecursionError."""

    @functools.wraps(read)
    def guarded(*args: Any, **kwargs: Any) -> TaskGraphFile:
        try:
            return read(*args, **kwargs)
        except RecursionError:
            fail(kwargs.get("path"), "nested too deeply to read (arrays, objects or subgraphs "
                 "inside one another beyond Python's recursion limit)")

    return guarded


show = short_repr
"""``repr(value)`` cut short, so that messages stay one short line."""


def build(tasks: list[Task], buffers: list[Buffer], results: Iterable[Hashable] | None,
          name: str, path: Path | None) -> TaskGraph:
    """Construct the TaskGraph, naming the file in any structural error.

    The sizes of all buffers and the largest workspace must total at most
    :data:`MAX_BYTES`, so that every peak fits the 64-bit counts of the planners.
    """
    total = sum(b.size for b in buffers) + max((t.workspace for t in tasks), default=0)
    if total > MAX_BYTES:
        fail(path, f"the buffers and the largest workspace total {total} bytes, more than "
             "2**60 (1 EiB; the memory planners count bytes in 64-bit integers)")
    try:
        return TaskGraph(tasks, buffers, results=results, name=name)
    except CycleError as exc:
        raise CycleError(f"{path}: {exc}" if path else str(exc), exc.cycle) from None
    except GraphError as exc:
        raise GraphError(f"{path}: {exc}" if path else str(exc)) from None


def check_order(order: Any, g: TaskGraph, path: Path | None,
                where: str) -> tuple[Hashable, ...]:
    """The file's reference order, checked to be a topological order of ``g``."""
    if not isinstance(order, list):
        fail(path, f"{where} is {show(order)}, not a list of task ids")
    try:
        seq = tuple(decode_id(v) for v in order)
    except ValueError as exc:
        fail(path, f"{where} is not a list of task ids: {exc}")
    if len(seq) != len(g.tasks) or set(seq) != set(g.tasks):
        listed = set(seq)
        missing = [t for t in g.tasks if t not in listed][:5]
        extra = [t for t in seq if t not in g.tasks][:5]
        fail(path, f"{where} must list every task once ({len(g.tasks)} tasks, {len(seq)} "
             f"entries; missing {show(missing)}, unknown {show(extra)})")
    pos = {t: i for i, t in enumerate(seq)}
    for t in seq:
        for p in g.predecessors(t):
            if pos[p] > pos[t]:
                fail(path, f"{where} is not a topological order: task {show(t)} comes before "
                     f"its predecessor {show(p)}")
    return seq


def decode_ids(values: Any, path: Path | None, where: str) -> list[Hashable]:
    """A JSON list of ids, or an error naming ``where``."""
    if not isinstance(values, list):
        fail(path, f"{where} is {show(values)}; it must be a list of ids")
    try:
        return [decode_id(v) for v in values]
    except ValueError as exc:
        fail(path, f"{where} must list ids: {exc}")


# --- ids ----------------------------------------------------------------------------------------
def encode_id(x: Hashable, what: str) -> Any:
    """str and int stay; tuples become lists; anything else cannot be written."""
    if isinstance(x, bool) or not isinstance(x, (str, int, tuple)):
        raise GraphError(
            f"{what} {show(x)} is a {type(x).__name__}; files hold ids that are strings, "
            "integers or tuples of them")
    if isinstance(x, tuple):
        return [encode_id(v, what) for v in x]
    return x


def decode_id(v: Any) -> Hashable:
    """A JSON id: a string, an integer, or an array of ids (read as a tuple)."""
    t = type(v)
    if t is int or t is str:
        return v
    if t is list:
        return tuple(decode_id(x) for x in v)
    raise ValueError(f"{show(v)} is not a string, an integer or an array of them")


# --- numbers ------------------------------------------------------------------------------------
def number(value: Any, path: Path | None, node: Any, attr: str,
           line: int | None = None) -> float:
    """A finite float >= 0, or an error naming the node and attribute."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        fail(path, f"node {show(node)}: attribute {attr!r} is {show(value)}; it must be a "
             "number >= 0", line)
    try:
        x = float(value)
    except OverflowError:
        fail(path, f"node {show(node)}: attribute {attr!r} is {show(value)}, beyond the "
             "range of floating point; it must be a finite number >= 0", line)
    if not math.isfinite(x) or x < 0:
        fail(path, f"node {show(node)}: attribute {attr!r} is {show(value)}; it must be a "
             "finite number >= 0", line)
    return x


def size(value: Any, path: Path | None, node: Any, attr: str, rounded: list[Hashable] | None,
         line: int | None = None) -> int:
    """Whole bytes in ``[0, MAX_BYTES]``; a fraction is rounded (and noted in ``rounded``)
    when ``rounded`` is a list, refused when it is ``None``."""
    if isinstance(value, int) and not isinstance(value, bool):
        if 0 <= value <= MAX_BYTES:
            return value
        if value > MAX_BYTES:
            fail(path, f"node {show(node)}: attribute {attr!r} is {show(value)} bytes; sizes "
                 "must be at most 2**60 bytes (1 EiB)", line)
    x = number(value, path, node, attr, line)
    if x > MAX_BYTES:
        fail(path, f"node {show(node)}: attribute {attr!r} is {show(value)} bytes; sizes must "
             "be at most 2**60 bytes (1 EiB)", line)
    if x != int(x):
        if rounded is None:
            fail(path, f"node {show(node)}: attribute {attr!r} is {show(value)}; it must be an "
                 "integer number of bytes", line)
        rounded.append(node)
    return int(round(x))


def rounding_notes(rounded: list[Hashable], attr: str) -> tuple[str, ...]:
    """The note :attr:`TaskGraphFile.notes` carries about sizes rounded to whole bytes."""
    if not rounded:
        return ()
    shown = ", ".join(map(show, rounded[:5])) + (" ..." if len(rounded) > 5 else "")
    return (f"{len(rounded)} {attr} values were not whole bytes and were rounded to the "
            f"nearest integer (nodes {shown})",)


# --- writing ------------------------------------------------------------------------------------
def unwrap(g: TaskGraph | TaskGraphFile) -> tuple[TaskGraph, tuple | None, dict[str, Any]]:
    """The graph, the file's order and graph attributes of a TaskGraph or TaskGraphFile."""
    if isinstance(g, TaskGraphFile):
        return g.graph, g.order, dict(g.attrs)
    if not isinstance(g, TaskGraph):
        raise GraphError(f"expected a TaskGraph or TaskGraphFile, got {type(g).__name__}")
    return g, None, {}


def default_results(g: TaskGraph) -> frozenset:
    """The results a graph has when none are named: every buffer no task reads."""
    return frozenset(b for b, r in g.readers.items() if not r)


def sorted_ids(ids: Iterable[Hashable]) -> list[Hashable]:
    """Ids in a stable order (by type name, then repr), for writing sets."""
    return sorted(ids, key=lambda x: (type(x).__name__, repr(x)))


def check_json(value: Any, what: str) -> None:
    """Raise GraphError when ``value`` cannot be written as strict JSON."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise GraphError(f"{what} cannot be written as JSON: {exc}") from None


def dump_json(data: Mapping[str, Any]) -> str:
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

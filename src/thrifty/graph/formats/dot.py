"""Graphviz DOT task graphs (``.dot``, ``.gv``): a reader and a writer of our own.

A node with ``size`` and ``time`` attributes is a task with its output buffer, an edge
``u -> v`` makes ``v`` read ``u``'s buffer; nodes with ``kind=buffer`` are buffers of their
own (graph inputs, second outputs), and ``attrs`` holds a task's attributes as JSON. The
format is described in ``docs/taskgraph-json.md``.

Why not pydot (or networkx's ``read_dot``, which calls pydot), measured with pydot 4.0.1 on
the 2-core machine this project runs on, on the DOT text of
``shared/data/graphs/layered/random_layered_n1000.json`` (1000 nodes, 5875 edges, 166 kB):

* reading: pydot 10.5 s, ``networkx.nx_pydot.read_dot`` 10.9 s, this reader 0.043 s (240x);
* writing: pydot's ``to_string`` 0.145 s (after building its objects), this writer 0.017 s;
* pydot returns edges grouped by endpoint pair, not in file order (``a -> t; b -> t;
  a -> t`` comes back as ``a->t, a->t, b->t``), which loses the order of a task's reads;
* pydot's parser fails with a TypeError on a node attribute called ``name``.

The tests check that pydot reads the files written here the same way on small graphs.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from thrifty.errors import FileFormatError, GraphError
from thrifty.graph.formats.common import (
    TaskGraphFile,
    build,
    check_json,
    check_order,
    decode_id,
    decode_ids,
    default_results,
    depth_guarded,
    encode_id,
    fail,
    number,
    rounding_notes,
    show,
    size,
    sorted_ids,
    unwrap,
)
from thrifty.graph.taskgraph import Buffer, Task, TaskGraph

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
_TOKENS = Path("<dot>")  # stands for the file while lines are still token indices
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
        return show(self.toks[k]) if self.toks[k] else "end of file"

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
                    raise self.error(f"{show(t)} is a keyword and cannot start a statement here", k)
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


def _text_number(text: str) -> Any:
    """A DOT attribute's text as an int or float where it is one, else the text itself."""
    try:
        return int(text) if _INT.fullmatch(text.strip()) else float(text)
    except ValueError:  # not a number, or an integer of more digits than Python converts
        return text


@depth_guarded
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
    except FileFormatError as exc:  # raised naming _TOKENS, with a token index as the line
        message = str(exc).split(": ", 1)[1]
        fail(path, message, None if exc.line is None else parser.line_of(exc.line))
    results = _dot_json(dot.attrs, "results", list, "the graph", path, None)
    name = dot.name or (path.stem if path else "taskgraph")
    g = build(tasks, bufs, None if results is None
              else decode_ids(results, path, "graph attribute 'results'"), name, path)
    order = _dot_json(dot.attrs, "order", list, "the graph", path, None)
    checked = check_order(order, g, path, "graph attribute 'order'") if order else None
    file_attrs = _dot_json(dot.attrs, "attrs", dict, "the graph", path, None) or {}
    return TaskGraphFile(g, "dot", checked, file_attrs,
                         rounding_notes(rounded, "size"), path)


def _dot_tasks(dot: _DotGraph) -> tuple[list[Task], list[Buffer], list[Hashable]]:
    """Tasks and buffers of parsed DOT; errors name _TOKENS, with a token index as the line."""
    path = _TOKENS
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
                raise FileFormatError(path, f"DOT: buffer node {show(nname)} has no attribute "
                                      "'size'", line)
            if nid in buffers:
                raise FileFormatError(path, f"DOT: duplicate buffer id {show(nid)}", line)
            buffers[nid] = [size(_text_number(a["size"]), path, nid, "size", rounded, line),
                            None]
            buffer_of[nname] = nid
            continue
        if kind != "task":
            raise FileFormatError(path, f"DOT: node {show(nname)} has kind={show(kind)}; valid: "
                                  "task, buffer", line)
        if "time" not in a:
            raise FileFormatError(path, f"DOT: node {show(nname)} has no attribute 'time' (task "
                                  "nodes give 'time', and 'size' for their output buffer)",
                                  line)
        if nid in specs:
            raise FileFormatError(path, f"DOT: duplicate task id {show(nid)}", line)
        spec: dict[str, Any] = {
            "time": float(number(_text_number(a["time"]), path, nid, "time", line)), "reads": [],
            "writes": [], "kernel": a.get("kernel"),
            "workspace": size(_text_number(a.get("workspace", "0")), path, nid, "workspace",
                               rounded, line),
            "attrs": _dot_json(a, "attrs", dict, nname, path, line) or {}}
        specs[nid] = spec
        task_of[nname] = nid
        if "size" in a:
            if nid in buffers:
                raise FileFormatError(path, f"DOT: duplicate buffer id {show(nid)}", line)
            buffers[nid] = [size(_text_number(a["size"]), path, nid, "size", rounded, line),
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
                raise FileFormatError(path, f"DOT: buffer node {show(v)} has two producers "
                                      f"({show(buf[1])} and {show(task_of[u])})", line)
            buf[1] = task_of[u]
            specs[task_of[u]]["writes"].append(buffer_of[v])
        elif v in task_of:
            raise FileFormatError(path, f"DOT: edge {show(u)} -> {show(v)}: {show(u)} has no "
                                  "'size', so no output buffer for the target to read", line)
        else:
            raise FileFormatError(path, f"DOT: edge {show(u)} -> {show(v)} joins two buffer nodes; "
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
        return decode_id(json.loads(a["id"]))
    except (ValueError, TypeError) as exc:
        raise FileFormatError(path, f"DOT: node {show(nname)}: 'id' must be a JSON string, "
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
    g, order, file_attrs = unwrap(g)
    lines = [f"digraph {_quote(g.name)} {{"]
    if g.results != default_results(g):
        lines.append(f"  results={_quote(_json_ids(sorted_ids(g.results)))};")
    if order is not None:
        lines.append(f"  order={_quote(_json_ids(order))};")
    if file_attrs:
        check_json(file_attrs, f"{g.name}: graph attrs")
        lines.append(f"  attrs={_quote(json.dumps(file_attrs, allow_nan=False))};")
    lines.append("  node [shape=box];")
    own: dict[Hashable, str] = {}  # buffer id -> node name, for buffers folded into a task
    tnode, bnode = _node_names(g)
    for t in g.tasks.values():
        name = tnode[t.id]
        a = [f"time={_dot_float(t.time, g.name, t.id)}"]
        if t.writes and t.writes[0] == t.id:
            own[t.id] = name
            a.append(f"size={g.buffers[t.id].size}")
        if t.workspace:
            a.append(f"workspace={int(t.workspace)}")
        if t.kernel is not None:
            a.append(f"kernel={_quote(t.kernel)}")
        if t.attrs:
            check_json(dict(t.attrs), f"{g.name}: task {show(t.id)} attrs")
            a.append(f"attrs={_quote(json.dumps(dict(t.attrs), allow_nan=False))}")
        if _dot_name_id(name) != t.id or type(_dot_name_id(name)) is not type(t.id):
            a.append(f"id={_quote(_json_id(t.id))}")
        lines.append(f"  {_quote(name)} [{', '.join(a)}];")
    buf_node: dict[Hashable, str] = dict(own)
    for b in g.buffers.values():
        if b.id in own:
            continue
        name = buf_node[b.id] = bnode[b.id]
        lines.append(f"  {_quote(name)} [kind=buffer, shape=ellipse, size={b.size}, "
                     f"id={_quote(_json_id(b.id))}];")
    for t in g.tasks.values():
        for w in t.writes:
            if w not in own:
                lines.append(f"  {_quote(tnode[t.id])} -> {_quote(buf_node[w])};")
    for t in g.tasks.values():
        tname = _quote(tnode[t.id])
        for r in t.reads:
            lines.append(f"  {_quote(buf_node[r])} -> {tname};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _node_names(g: TaskGraph) -> tuple[dict[Hashable, str], dict[Hashable, str]]:
    """A distinct DOT node name per task and per buffer not folded into its task.

    A node's name is its id's text (``"buffer "`` before a buffer's); ids whose texts
    coincide (the integer ``0`` and the string ``"0"``, a task and a buffer both named
    ``x``) keep the first name, and the others get ``"NAME #k"``, unused by any id: their
    real id travels in the node's ``id`` attribute, which the reader prefers."""
    tnat = {t.id: _id_name(t.id, "task id") for t in g.tasks.values()}
    folded = {t.id for t in g.tasks.values() if t.writes and t.writes[0] == t.id}
    bnat = {b.id: "buffer " + _id_name(b.id, "buffer id") for b in g.buffers.values()
            if b.id not in folded}
    reserved = set(tnat.values()) | set(bnat.values())
    used: set[str] = set()

    def pick(natural: str) -> str:
        name, k = natural, 2
        while name in used or (name != natural and name in reserved):
            name, k = f"{natural} #{k}", k + 1
        used.add(name)
        return name

    tnode = {tid: pick(n) for tid, n in tnat.items()}
    return tnode, {bid: pick(n) for bid, n in bnat.items()}


def _id_name(x: Hashable, what: str) -> str:
    enc = encode_id(x, what)
    return enc if isinstance(enc, str) else json.dumps(enc)


def _json_ids(ids: Iterable[Hashable]) -> str:
    return json.dumps([encode_id(x, "id") for x in ids])


def _json_id(x: Hashable) -> str:
    return json.dumps(encode_id(x, "id"))


def _dot_float(x: float, name: str, tid: Hashable) -> str:
    if not math.isfinite(x):
        raise GraphError(f"{name}: task {show(tid)} has time {show(x)}; files hold finite times")
    text = repr(float(x))
    return text if _DOT_NUMERAL.fullmatch(text) else _quote(text)  # 1e-10 is no DOT numeral

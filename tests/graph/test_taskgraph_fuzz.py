"""Fuzzing the task-graph files: generated node-link JSON, thrifty JSON and DOT files, mutated
byte-wise and structurally, fed to ``load_taskgraph`` and to ``thrifty memory schedule`` and
``thrifty memory plan``.

The only outcomes allowed: a correct result (the unmutated file gives back its graph; a plan
or schedule replays to the peak it reports) or a ThriftyError whose message names the file
on one line; the CLI prints one ``Error:`` line and exits non-zero, never a traceback.
"""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path

from click.testing import CliRunner
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from thrifty.cli.main import main
from thrifty.errors import GraphError, ThriftyError
from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
from thrifty.graph.taskgraph_io import load_taskgraph, save_taskgraph, taskgraph_diff
from thrifty.memory import simulate

_FORMATS = ("thrifty", "checkmate", "layered", "dot")
_SETTINGS = settings(max_examples=250, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow,
                                            HealthCheck.function_scoped_fixture])


@st.composite
def _graphs(draw, simple: bool) -> TaskGraph:
    """Small random task graphs; ``simple``: one output per task with its id (node-link)."""
    n = draw(st.integers(1, 7))
    ids = draw(st.lists(st.integers(0, 99) | st.text("abc xy\"\\{}->", min_size=1, max_size=4)
                        | st.tuples(st.sampled_from(["op", "t"]), st.integers(0, 3)),
                        min_size=n, max_size=n, unique=True))
    ids = [i for i in ids if not (isinstance(i, str) and i.startswith("buffer "))] or [0]
    tasks, buffers, made = [], [], []
    inputs = [] if simple else [("in", k) for k in range(draw(st.integers(0, 2)))]
    buffers += [Buffer(b, draw(st.integers(0, 10**6))) for b in inputs]
    for tid in ids:
        pool = made + inputs
        reads = draw(st.lists(st.sampled_from(pool), unique=True, max_size=3)) if pool else []
        if simple:  # node-link lists reads in the order of the producers' nodes
            reads.sort(key=made.index)
        writes = [tid] if simple or draw(st.booleans()) else [("out", repr(tid))]
        buffers += [Buffer(b, draw(st.integers(0, 10**6)), tid) for b in writes]
        made += writes
        tasks.append(Task(tid, tuple(reads), tuple(writes),
                          time=draw(st.floats(0, 1e3, allow_nan=False)),
                          workspace=0 if simple else draw(st.integers(0, 100)),
                          attrs=draw(st.dictionaries(st.sampled_from(["flops", "note"]),
                                                     st.integers(0, 9), max_size=1))))
    return TaskGraph(tasks, buffers, name="fuzz")


@st.composite
def _files(draw) -> tuple[str, TaskGraph, bytes]:
    fmt = draw(st.sampled_from(_FORMATS))
    g = draw(_graphs(simple=fmt in ("checkmate", "layered")))
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / ("g.dot" if fmt == "dot" else "g.json")
        save_taskgraph(g, path, format=fmt)
        return fmt, g, path.read_bytes()


_JUNK = st.sampled_from([
    b"", b"\x00", b"\xff\xfe", b"{", b"}", b"[", b"]", b",", b'"', b"->", b";", b"-1", b"1e999",
    b"NaN", b"Infinity", b"9" * 400, b"9" * 5000, b"null", b"true", b"[" * 3000, b"{" * 3000,
    b"digraph", b"subgraph {", b"\n", b"\\", b"/*", b"#", b"<", b"\xc3\x28", b"\xef\xbb\xbf",
]) | st.binary(max_size=8)


@st.composite
def _byte_mutation(draw, data: bytes) -> bytes:
    """Truncate, delete, insert, overwrite or duplicate bytes (1 to 3 times)."""
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(data)))
        j = draw(st.integers(i, min(len(data), i + 40)))
        kind = draw(st.sampled_from(["truncate", "delete", "insert", "replace", "duplicate"]))
        if kind == "truncate":
            data = data[:i]
        elif kind == "delete":
            data = data[:i] + data[j:]
        elif kind == "insert":
            data = data[:i] + draw(_JUNK) + data[i:]
        elif kind == "replace":
            data = data[:i] + draw(_JUNK) + data[j:]
        else:
            data = data[:j] + data[i:j] + data[j:]
    return data


_VALUES = st.sampled_from([
    None, True, -1, 0, 1, 2**40, 2**61, 10**30, 10**400, 0.5, -0.0, 1e308, "x", "", [], {},
    [1, 2], {"a": 1}, [[1]], "__DEEP__", "__NAN__", "__INF__", "__BIG__",
])
_DEEP = {'"__DEEP__"': "[" * 5000 + "]" * 5000, '"__NAN__"': "NaN", '"__INF__"': "-Infinity",
         '"__BIG__"': "7" * 4400}


def _pick(draw, x):
    """A random dict or list inside the JSON value ``x`` (``x`` itself included)."""
    containers = [x]
    stack = [x]
    while stack:
        y = stack.pop()
        for v in (y.values() if isinstance(y, dict) else y):
            if isinstance(v, (dict, list)):
                containers.append(v)
                stack.append(v)
    return draw(st.sampled_from(containers))


@st.composite
def _json_mutation(draw, data: bytes) -> bytes:
    """Set, delete, duplicate or insert entries of the parsed JSON, then write it again."""
    doc = json.loads(data)
    for _ in range(draw(st.integers(1, 3))):
        c = _pick(draw, doc)
        kind = draw(st.sampled_from(["set", "delete", "duplicate", "link"]))
        if isinstance(c, dict) and c:
            key = draw(st.sampled_from(sorted(c)))
            if kind == "delete":
                del c[key]
            else:
                c[key] = copy.deepcopy(draw(_VALUES))
        elif isinstance(c, list) and c:
            k = draw(st.integers(0, len(c) - 1))
            if kind == "delete":
                del c[k]
            elif kind == "duplicate":
                c.append(json.loads(json.dumps(c[k])))
            elif kind == "link" and isinstance(c[k], dict) and len(c[k]) == 2:
                a, b = list(c[k])  # a link: add the reverse (a cycle) or a dangling end
                c.append({a: c[k][b], b: draw(st.sampled_from([c[k][a], 12345]))})
            else:
                c[k] = copy.deepcopy(draw(_VALUES))
    text = json.dumps(doc)
    for key, value in _DEEP.items():
        text = text.replace(key, value)
    return text.encode()


@st.composite
def _dot_mutation(draw, data: bytes) -> bytes:
    """Delete, duplicate or reverse statements, or set an attribute to a junk value."""
    lines = data.decode().split("\n")
    for _ in range(draw(st.integers(1, 3))):
        k = draw(st.integers(0, len(lines) - 1))
        kind = draw(st.sampled_from(["delete", "duplicate", "reverse", "attr", "nest"]))
        if kind == "delete":
            del lines[k]
        elif kind == "duplicate":
            lines.insert(k, lines[k])
        elif kind == "reverse" and " -> " in lines[k]:
            u, v = lines[k].strip().rstrip(";").split(" -> ", 1)
            lines.append(f"  {v} -> {u};")
        elif kind == "attr" and "=" in lines[k]:
            head, _, rest = lines[k].partition("=")
            junk = draw(st.sampled_from(['-5', '"1e999"', '"nan"', "9" * 5000, '"[1"',
                                         '""', "x", '"{\\"a\\": [[[1]]]}"', "1.5"]))
            lines[k] = head + "=" + junk + rest[rest.find(",") if "," in rest else len(rest):]
        elif kind == "nest":
            lines.insert(k, "{" * 3000 + "}" * 3000)
    return "\n".join(lines).encode()


@st.composite
def _mutated(draw) -> tuple[str, TaskGraph, bytes, bytes]:
    fmt, g, data = draw(_files())
    kind = draw(st.sampled_from(["none", "bytes", "structure", "structure"]))
    if kind == "bytes":
        return fmt, g, data, draw(_byte_mutation(data))
    if kind == "structure":
        mutate = _dot_mutation if fmt == "dot" else _json_mutation
        return fmt, g, data, draw(mutate(data))
    return fmt, g, data, data


def _check_error(exc: ThriftyError, path: Path) -> None:
    message = str(exc)
    assert str(path) in message, message
    assert "\n" not in message and len(message) < 1000, message


@_SETTINGS
@given(case=_mutated())
def test_load_taskgraph_gives_the_graph_or_a_clear_error(case, tmp_path: Path) -> None:
    fmt, g, original, data = case
    path = tmp_path / ("g.dot" if fmt == "dot" else "g.json")
    path.write_bytes(data)
    try:
        h = load_taskgraph(path)
    except ThriftyError as exc:
        assert data != original, f"the unmutated file fails: {exc}"
        _check_error(exc, path)
        event(f"{fmt}: {type(exc).__name__}")
        return
    event(f"{fmt}: loads")
    if data == original:
        assert taskgraph_diff(g, h) == []
    again = tmp_path / "again.json"  # whatever loaded is a graph our own format holds
    try:
        save_taskgraph(h, again)
    except GraphError as exc:  # but for NaN or infinity in free attributes (not JSON)
        assert "cannot be written as JSON: Out of range float" in str(exc)
        return
    assert taskgraph_diff(h, load_taskgraph(again)) == []


_RUNNER = CliRunner()


def _run_cli(args: list[str], path: Path) -> dict | None:
    r = _RUNNER.invoke(main, args)
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise AssertionError(f"{args}: {type(r.exception).__name__}: {r.exception}")
    if r.exit_code == 0:
        return json.loads(r.output)
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.output
    assert str(path) in lines[0] or "infeasible" in lines[0], r.output
    assert "Traceback" not in r.output
    return None


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=_mutated(), budget=st.sampled_from(["0.8", "1000000", "1"]))
def test_memory_commands_give_a_result_or_one_error_line(case, budget: str,
                                                         tmp_path: Path) -> None:
    fmt, g, original, data = case
    path = tmp_path / ("g.dot" if fmt == "dot" else "g.json")
    path.write_bytes(data)
    try:
        h = load_taskgraph(path)
    except ThriftyError:
        h = None
    out = _run_cli(["memory", "schedule", str(path), "--json", "--time-limit", "0.05"], path)
    assert (out is None) == (h is None)
    if h is not None and out is not None:
        order = [tuple(t) if isinstance(t, list) else t for t in out["order"]]
        assert simulate(h, order).peak == out["peak"] >= out["lower_bound"]
    out = _run_cli(["memory", "plan", str(path), "--budget", budget, "--json",
                    "--time-limit", "0.05"], path)
    if out is not None:
        assert h is not None and out["peak"] <= out["budget"]

"""networkx node-link JSON: read with :func:`networkx.node_link_graph`, written with
:func:`networkx.node_link_data`, in the attribute shapes of :mod:`thrifty.graph.formats.nx`.

networkx builds the graph but checks nothing: it merges duplicate node ids, adds a node for
a link's unknown end, and a node without the id key gets a counter as its id. So the data
is checked here first (every error names the file and the node or link), its ids decoded
(JSON arrays become tuples, all the way down, in nodes and links alike), and only then
handed to networkx. A node's id is its ``id`` key, else (every node of the layered
benchmarks) its ``name``. Link keys are ``source``/``target`` or ``"0"``/``"1"``.

Writing keeps networkx's link order (grouped by source node): a task's reads come back
ordered by their producers' place in the node list, which is how every published file
lists them; node-link files hold no other argument order.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any

from thrifty.errors import GraphError
from thrifty.graph.formats.common import (
    TaskGraphFile,
    check_order,
    decode_id,
    decode_ids,
    depth_guarded,
    encode_id,
    fail,
    rounding_notes,
    show,
    unwrap,
)
from thrifty.graph.formats.nx import SHAPES, detect_shape, from_networkx, to_networkx
from thrifty.graph.taskgraph import TaskGraph

_LINK_KEYS = (("source", "target"), ("0", "1"))


@depth_guarded
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
    import networkx as nx

    nodes, links, graph_attrs = _parts(data, path)
    shape = detect_shape(nodes[0], path)
    id_key = "id" if "id" in nodes[0] else "name"
    clean_nodes = _nodes(nodes, id_key, path)
    src, dst = _link_keys(links, path)
    clean_links = _links(links, src, dst, {n[id_key] for n in clean_nodes}, path)
    order = graph_attrs.pop("order", None)
    if "results" in graph_attrs:
        graph_attrs["results"] = decode_ids(graph_attrs["results"], path, "graph.results")
    G = nx.node_link_graph({"directed": True, "multigraph": False, "graph": graph_attrs,
                            "nodes": clean_nodes, "links": clean_links},
                           directed=True, multigraph=False, source=src, target=dst,
                           name=id_key, edges="links")
    g, rounded = from_networkx(G, shape.size, shape.time, name, path)
    checked = check_order(order, g, path, "graph.order") if order is not None else None
    attrs = {k: v for k, v in graph_attrs.items() if k != "results"}
    return TaskGraphFile(g, shape.name, checked, attrs, rounding_notes(rounded, shape.size),
                         path)


def _parts(data: Any, path: Path | None) -> tuple[list[Any], list[Any], dict[str, Any]]:
    if not isinstance(data, Mapping):
        fail(path, f"node-link data is a {type(data).__name__}, not an object")
    nodes = data.get("nodes")
    links = data.get("links", data.get("edges", []))
    if not isinstance(nodes, list) or not isinstance(links, list):
        fail(path, "node-link data needs lists \"nodes\" and \"links\"")
    if not nodes:
        fail(path, "the node-link data has no nodes")
    if data.get("directed") is False:
        fail(path, "the node-link graph is undirected; task graphs are directed "
             "(\"directed\": true)")
    graph = data.get("graph") or {}
    if not isinstance(graph, dict):
        fail(path, f"\"graph\" is {show(graph)}; it must be an object of graph attributes")
    return nodes, links, dict(graph)


def _nodes(nodes: list[Any], id_key: str, path: Path | None) -> list[dict[str, Any]]:
    """The nodes with decoded ids; duplicates and nodes without an id refused."""
    seen: set[Hashable] = set()
    out = []
    for k, node in enumerate(nodes):
        if not isinstance(node, dict):
            fail(path, f"node {k} is {show(node)}, not an object")
        if id_key not in node:
            fail(path, f"node {k} has no {id_key!r} to identify it (the first node is "
                 f"identified by {id_key!r}; every node must be)")
        try:
            nid = decode_id(node[id_key])
        except ValueError as exc:
            fail(path, f"node {k}: {id_key!r} {exc}")
        if nid in seen:
            fail(path, f"node {k}: duplicate node id {show(nid)}")
        seen.add(nid)
        out.append({**node, id_key: nid})
    return out


def _link_keys(links: list[Any], path: Path | None) -> tuple[str, str]:
    if not links:
        return "source", "target"
    first = links[0] if isinstance(links[0], dict) else {}
    for s, t in _LINK_KEYS:
        if s in first and t in first:
            return s, t
    fail(path, f"link 0 has keys {show(sorted(map(str, first)))}; understood links are "
         "{source, target} (checkmate) and {\"0\", \"1\"} (layered)")


def _links(links: list[Any], src: str, dst: str, known: set[Hashable],
           path: Path | None) -> list[dict[str, Any]]:
    """The links with decoded ends; unknown ends refused (networkx would add nodes)."""
    out = []
    for k, link in enumerate(links):
        try:
            u, v = decode_id(link[src]), decode_id(link[dst])
        except (KeyError, TypeError, ValueError):
            fail(path, f"link {k} is {show(link)}; expected keys {src!r} and {dst!r} naming "
                 "node ids")
        for end in (u, v):
            if end not in known:
                fail(path, f"link {k} ({show(u)} -> {show(v)}) names unknown node {show(end)}")
        out.append({src: u, dst: v})
    return out


def taskgraph_to_node_link(g: TaskGraph | TaskGraphFile, shape: str = "checkmate",
                           ) -> dict[str, Any]:
    """networkx node-link data in the ``"checkmate"`` or ``"layered"`` attribute shape.

    Only graphs where every task writes exactly one buffer with the task's own id, and
    every buffer has a producer, fit this format (that is what a node means); workspaces
    and kernels have no place in it either. Non-default results go to ``graph.results``.
    """
    import networkx as nx

    g, order, file_attrs = unwrap(g)
    G = to_networkx(g, shape)
    sh = SHAPES[shape]
    for t in g.tasks.values():
        encode_id(t.id, "task id")
        if sh.id_key in t.attrs:
            raise GraphError(f"{g.name}: task {show(t.id)} has attributes [{sh.id_key!r}] "
                             f"that the {shape} shape uses for itself")
    results = G.graph.pop("results", None)
    G.graph = {"name": g.name, **file_attrs}
    if order is not None:
        G.graph["order"] = list(order)
    if results is not None:
        G.graph["results"] = results
    data = nx.node_link_data(G, source=sh.source, target=sh.target, name=sh.id_key,
                             edges="links")
    data["nodes"] = [{sh.id_key: n.pop(sh.id_key), **n} for n in data["nodes"]]
    return _encoded(data)


def _encoded(data: dict[str, Any]) -> dict[str, Any]:
    """networkx's data with tuple ids as JSON arrays (json writes tuples as arrays too;
    this makes the dict itself JSON data)."""
    graph = dict(data["graph"])
    for key in ("order", "results"):
        if key in graph:
            graph[key] = [encode_id(x, "id") for x in graph[key]]
    nodes = [{k: encode_id(v, "task id") if i == 0 else v for i, (k, v) in enumerate(n.items())}
             for n in data["nodes"]]
    links = [{k: encode_id(v, "buffer id") for k, v in link.items()} for link in data["links"]]
    return {"directed": True, "multigraph": False, "graph": graph, "nodes": nodes,
            "links": links}

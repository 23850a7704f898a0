"""Seeded generators of task graphs for tests and benchmarks.

Trees (in and out), series-parallel graphs, random layered DAGs (in the spirit of the
generator of Gagrani et al., "Neural Topological Ordering for Computation Graphs",
NeurIPS 2022), NN-like training graphs (a forward pass with residual blocks and its
mirrored backward pass, the shape of the Checkmate graphs), and uniform random DAGs.
Each task writes one buffer named after it, unless said otherwise.

Example
-------
>>> g = random_in_tree(5, seed=0)
>>> len(g.tasks), len(g.results)
(5, 1)
"""

from __future__ import annotations

import numpy as np

from thrifty.graph.taskgraph import Buffer, Task, TaskGraph

__all__ = ["nn_like", "random_dag", "random_in_tree", "random_layered", "random_out_tree",
           "series_parallel"]


def _sizes(rng: np.random.Generator, n: int, lo: int, hi: int) -> list[int]:
    return [int(x) for x in rng.integers(lo, hi + 1, size=n)]


def _build(name: str, preds: list[list[int]], sizes: list[int], times: list[float],
           ws: list[int] | None = None) -> TaskGraph:
    n = len(preds)
    tasks = [Task(i, reads=tuple(preds[i]), writes=(i,), time=times[i],
                  workspace=0 if ws is None else ws[i]) for i in range(n)]
    bufs = [Buffer(i, sizes[i], i) for i in range(n)]
    return TaskGraph(tasks, bufs, name=name)


def random_dag(n: int, edge_prob: float = 0.3, seed: int = 0, max_size: int = 10,
               workspace: bool = False) -> TaskGraph:
    """A uniform random DAG: edge ``i -> j`` (``i < j``) with probability ``edge_prob``."""
    rng = np.random.default_rng(seed)
    adj = rng.random((n, n)) < edge_prob
    preds = [[i for i in range(j) if adj[i, j]] for j in range(n)]
    ws = _sizes(rng, n, 0, max_size // 2) if workspace else None
    return _build(f"random_dag_n{n}_s{seed}", preds, _sizes(rng, n, 0, max_size),
                  [float(x) for x in rng.integers(1, 10, size=n)], ws)


def random_in_tree(n: int, seed: int = 0, max_size: int = 10,
                   workspace: bool = False) -> TaskGraph:
    """A random in-tree: every task's output is read by its parent; one root (task n-1)."""
    rng = np.random.default_rng(seed)
    parent = [-1] * n
    reach = max(1, 2 * int(np.sqrt(n)))
    for i in range(n - 1):  # parent index > child index
        parent[i] = int(rng.integers(i + 1, min(n, i + 1 + reach)))
    preds: list[list[int]] = [[] for _ in range(n)]
    for i, p in enumerate(parent):
        if p >= 0:
            preds[p].append(i)
    ws = _sizes(rng, n, 0, max_size) if workspace else None
    return _build(f"in_tree_n{n}_s{seed}", preds, _sizes(rng, n, 1, max_size),
                  [1.0] * n, ws)


def random_out_tree(n: int, seed: int = 0, max_size: int = 10,
                    edge_buffers: bool = False) -> TaskGraph:
    """A random out-tree: task 0 is the root, every other task reads its parent's output.

    With ``edge_buffers`` a task writes one buffer per child (and leaves one result each),
    the edge model of Kayaaslan et al.; otherwise one buffer read by all its children.
    """
    rng = np.random.default_rng(seed)
    preds: list[list[int]] = [[]] + [[int(rng.integers(max(0, i - 2 * int(np.sqrt(n)) - 1), i))]
                                     for i in range(1, n)]
    sizes = _sizes(rng, 2 * n, 1, max_size)
    if not edge_buffers:
        return _build(f"out_tree_n{n}_s{seed}", preds, sizes[:n], [1.0] * n)
    kids: list[list[int]] = [[] for _ in range(n)]
    for i in range(1, n):
        kids[preds[i][0]].append(i)
    tasks = [Task(i, reads=tuple(f"{p}>{i}" for p in preds[i]),
                  writes=tuple(f"{i}>{k}" for k in kids[i]) or (f"{i}>out",), time=1.0)
             for i in range(n)]
    bufs = [Buffer(b, sizes[k % (2 * n)], t.id) for k, (t, b) in
            enumerate((t, b) for t in tasks for b in t.writes)]
    return TaskGraph(tasks, bufs, name=f"out_tree_edges_n{n}_s{seed}")


def series_parallel(n: int, seed: int = 0, max_size: int = 10, branch_prob: float = 0.5,
                    max_branches: int = 3, edge_buffers: bool = True) -> TaskGraph:
    """A random two-terminal series-parallel DAG of about ``n`` tasks.

    Built by replacing edges: a series step inserts a task on an edge, a parallel step
    adds a task beside an existing one (same predecessor and successor). With
    ``edge_buffers`` every edge carries its own buffer (the model of Kayaaslan et al.);
    otherwise each task writes one buffer read by all its successors.
    """
    rng = np.random.default_rng(seed)
    # nodes 0 (source) and 1 (sink); edges as a list of (u, v)
    edges: list[tuple[int, int]] = [(0, 1)]
    nxt = 2
    while nxt < n:
        k = int(rng.integers(len(edges)))
        u, v = edges[k]
        if rng.random() < branch_prob and nxt + 1 < n:
            w = nxt
            edges.append((u, w))
            edges.append((w, v))
            nxt += 1
            if rng.random() < 0.5 and max_branches > 2 and nxt < n:
                w2 = nxt
                edges.append((u, w2))
                edges.append((w2, v))
                nxt += 1
        else:
            w = nxt
            edges[k] = (u, w)
            edges.append((w, v))
            nxt += 1
    # topological numbering
    import networkx as nx

    dg = nx.DiGraph(edges)
    topo = list(nx.topological_sort(dg))
    pos = {v: i for i, v in enumerate(topo)}
    preds: list[list[int]] = [[] for _ in range(len(topo))]
    for u, v in set(edges):
        preds[pos[v]].append(pos[u])
    for p in preds:
        p.sort()
    m = len(topo)
    times = [float(x) for x in rng.integers(1, 10, size=m)]
    if not edge_buffers:
        return _build(f"sp_n{m}_s{seed}", preds, _sizes(rng, m, 1, max_size), times)
    tasks, bufs = [], []
    writes: list[list[str]] = [[] for _ in range(m)]
    reads: list[list[str]] = [[] for _ in range(m)]
    for v in range(m):
        for u in preds[v]:
            writes[u].append(f"{u}>{v}")
            reads[v].append(f"{u}>{v}")
    writes[m - 1].append(f"{m - 1}>out")
    sizes = _sizes(rng, sum(len(w) for w in writes), 1, max_size)
    k = 0
    for v in range(m):
        tasks.append(Task(v, reads=tuple(reads[v]), writes=tuple(writes[v]), time=times[v]))
        for b in writes[v]:
            bufs.append(Buffer(b, sizes[k], v))
            k += 1
    return TaskGraph(tasks, bufs, name=f"sp_edges_n{m}_s{seed}")


def random_layered(n: int, width: int = 8, seed: int = 0, edge_prob: float = 0.3,
                   skip_prob: float = 0.05, max_size: int = 5000) -> TaskGraph:
    """A random layered DAG: ``n`` tasks in layers of up to ``width``.

    Each task reads from the previous layer with probability ``edge_prob`` (at least one),
    and from older layers with ``skip_prob`` (at most three such reads).
    """
    rng = np.random.default_rng(seed)
    layers: list[list[int]] = [[0]]
    nid = 1
    while nid < n:
        w = int(rng.integers(1, width + 1))
        layers.append(list(range(nid, min(n, nid + w))))
        nid += w
    preds: list[list[int]] = [[] for _ in range(n)]
    for li in range(1, len(layers)):
        prev = layers[li - 1]
        for v in layers[li]:
            ps = {u for u in prev if rng.random() < edge_prob}
            if not ps:
                ps.add(prev[int(rng.integers(len(prev)))])
            if li >= 2:
                for _ in range(3):
                    if rng.random() < skip_prob:
                        old = layers[int(rng.integers(0, li - 1))]
                        ps.add(old[int(rng.integers(len(old)))])
            preds[v] = sorted(ps)
    return _build(f"layered_n{n}_w{width}_s{seed}", preds, _sizes(rng, n, 1, max_size),
                  [float(x) for x in rng.integers(1, 100, size=n)])


def nn_like(n_blocks: int, seed: int = 0, max_size: int = 1 << 20) -> TaskGraph:
    """A training graph: forward residual blocks, a loss, and the mirrored backward pass.

    Forward block ``i``: ``a_i = conv(x_i)``, ``x_{i+1} = add(a_i, x_i)``. Backward: each
    gradient task reads the upstream gradient and the forward activations its forward
    task read, as autograd would keep them. About ``4 * n_blocks + 2`` tasks.
    """
    rng = np.random.default_rng(seed)
    preds: list[list[int]] = []
    sizes: list[int] = []

    def add(ps: list[int], size: int) -> int:
        preds.append(sorted(set(ps)))
        sizes.append(size)
        return len(preds) - 1

    x = add([], int(rng.integers(max_size // 2, max_size)))
    fwd: list[tuple[int, int, int]] = []  # (x_in, conv, add)
    for _ in range(n_blocks):
        s = int(rng.integers(max_size // 4, max_size))
        a = add([x], s)
        y = add([a, x], s)
        fwd.append((x, a, y))
        x = y
    g = add([x], 8)  # loss, then its gradient seed
    for xin, a, _ in reversed(fwd):
        ga = add([g, a], sizes[a])           # grad of the conv output (reads it, as relu)
        g = add([ga, xin, g], sizes[xin])    # grad of the conv input (+ the skip)
    n = len(preds)
    return _build(f"nn_like_b{n_blocks}_s{seed}", preds, sizes,
                  [float(x) for x in rng.integers(1, 20, size=n)])

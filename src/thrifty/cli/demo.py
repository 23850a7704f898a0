"""``thrifty demo``: the main job on built-in generated data.

Traces a GCN layer written as a dense spec, runs it with the reference executor on a
generated power-law graph, and prints a summary table (``--json`` for the same as data).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click
import numpy as np

import thrifty as th
from thrifty.cli.common import emit_json, kv_table


@th.program
def gcn_layer(A, X, W):  # type: ignore[no-untyped-def]
    """One graph-convolution layer: relu(A @ (X @ W))."""
    return th.relu(A @ (X @ W))


def demo_inputs(scale: int, features: int, hidden: int, seed: int,
                matrix: Path | None = None) -> dict[str, Any]:
    """The demo's inputs: a generated R-MAT graph (or a matrix file) and dense features."""
    from thrifty.front.matrices import load_matrix, rmat

    A = load_matrix(matrix) if matrix is not None else rmat(scale, edge_factor=8, seed=seed,
                                                            symmetric=True)
    if A.shape[0] != A.shape[1]:
        raise click.BadParameter(f"{matrix}: the demo needs a square matrix (an adjacency), "
                                 f"got shape {A.shape}", param_hint="--matrix")
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((A.shape[0], features))
    W = rng.standard_normal((features, hidden)) / np.sqrt(features)
    return {"A": A, "X": X, "W": W}


def run_demo(scale: int = 13, features: int = 64, hidden: int = 32, seed: int = 0,
             matrix: Path | None = None) -> dict[str, Any]:
    """Run every step of the demo and return its figures."""
    inputs = demo_inputs(scale, features, hidden, seed, matrix)
    A = inputs["A"]
    t0 = time.perf_counter()
    graph = gcn_layer.trace(**inputs)
    t_trace = time.perf_counter() - t0
    t0 = time.perf_counter()
    Y = gcn_layer(**inputs)
    t_ref = time.perf_counter() - t0
    from thrifty.graph.ops import OPS

    dense_flops = sum(OPS[n.op].flops([graph[i].type for i in n.inputs], n.type, n.attrs)
                      for n in graph)
    return {
        "graph": {"source": str(matrix) if matrix else f"rmat(scale={scale}, seed={seed})",
                  "rows": A.shape[0], "nnz": int(A.nnz),
                  "density": A.nnz / float(A.shape[0] * A.shape[1])},
        "spec": {"nodes": len(graph), "ops": [n.op for n in graph if n.op != "input"],
                 "dense_flops": dense_flops},
        "reference": {"trace_seconds": t_trace, "run_seconds": t_ref,
                      "output_shape": list(Y.shape), "output_norm": float(np.linalg.norm(Y))},
    }


@click.command()
@click.option("--matrix", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A square sparse matrix file to use as the graph instead of R-MAT.")
@click.option("--scale", default=13, show_default=True, help="R-MAT graph of 2**scale vertices.")
@click.option("--seed", default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def demo(matrix: Path | None, scale: int, seed: int, as_json: bool) -> None:
    """Run a GCN layer written as a dense spec on a generated power-law graph."""
    try:
        figures = run_demo(scale=scale, seed=seed, matrix=matrix)
    except th.ThriftyError as e:
        raise click.ClickException(str(e)) from None
    if as_json:
        emit_json(figures)
        return
    g, s, r = figures["graph"], figures["spec"], figures["reference"]
    kv_table("thrifty demo: GCN layer relu(A @ (X @ W))", {
        "graph": g["source"], "vertices": g["rows"], "nonzeros": g["nnz"],
        "density": g["density"], "spec ops": " -> ".join(s["ops"]),
        "dense flops": s["dense_flops"], "trace (s)": r["trace_seconds"],
        "reference run (s)": r["run_seconds"], "output": f"{r['output_shape']}",
    })

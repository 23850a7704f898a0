"""Benchmark: minimum-peak scheduling against the baselines, on shared and generated graphs.

For every graph of ``../shared/data/graphs`` and generated in-trees, out-trees,
series-parallel graphs, random layered DAGs and NN-like training graphs (up to 50,000 tasks
in full mode), runs :func:`thrifty.memory.schedule` and reports its peak, whether it is
proven optimal, the gap to the proven lower bound, the solve time, and each baseline's peak
as a ratio to ours (file order, dask.order, DFS, BFS, greedy least-peak-first), each run on
its own (``schedule(method=name)``), with dask.order's time. Our order is replayed by
:func:`thrifty.memory.simulate` and must give the same peak.

The peak-preserving reductions (:mod:`thrifty.memory.order.reduce`) are reported too: the
tasks left after them (graphs of up to ``REDUCE_MAX_TASKS`` tasks), and the same schedule
run without them (``schedule(reduce=False)``): its peak, whether it is proven, its time.

Usage::

    python benchmarks/memory_schedule.py --quick     # a few minutes on 2 cores
    python benchmarks/memory_schedule.py             # full: up to 50,000 tasks
    python benchmarks/memory_schedule.py --graphs 'n50000|b12500'   # the 50,000-task graphs

Writes ``benchmarks/results/memory_schedule.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import time
from collections.abc import Callable
from pathlib import Path

import dask
import numpy as np
import scipy
from rich.console import Console
from rich.table import Table

from thrifty.graph.taskgraph import TaskGraph
from thrifty.graph.taskgraph_io import TaskGraphFile, read_taskgraph
from thrifty.memory import schedule, simulate
from thrifty.memory.order import BASELINES, reduce_graph
from thrifty.memory.order.generate import (
    nn_like,
    random_in_tree,
    random_layered,
    random_out_tree,
    series_parallel,
)
from thrifty.memory.schedule import REDUCE_MAX_TASKS
from thrifty.testing import shared_data_dir

RESULTS = Path(__file__).resolve().parent / "results" / "memory_schedule.json"


def machine() -> dict[str, object]:
    return {"platform": platform.platform(), "python": platform.python_version(),
            "cpu_count": os.cpu_count(), "processor": platform.processor() or platform.machine(),
            "numpy": np.__version__, "scipy": scipy.__version__, "dask": dask.__version__}


def instances(quick: bool) -> list[tuple[str, str, Callable[[], TaskGraph | TaskGraphFile]]]:
    """(category, label, loader) for every graph of the run."""
    out: list[tuple[str, str, Callable[[], TaskGraph | TaskGraphFile]]] = []
    root = shared_data_dir()
    if root is not None:
        for path in sorted((root / "graphs").glob("*/*.json")):
            out.append((path.parent.name, path.stem, lambda p=path: read_taskgraph(p)))
    tree_n = (500, 5000) if quick else (1000, 10000, 50000)
    sp_n = (500, 5000) if quick else (1000, 10000, 50000)
    layered_n = (1000, 5000) if quick else (1000, 10000, 50000)
    nn_blocks = (250, 1250) if quick else (250, 2500, 12500)
    for n in tree_n:
        out.append(("in-tree", f"in_tree_n{n}", lambda n=n: random_in_tree(n, seed=n,
                                                                             workspace=True)))
    for n in (16, 24):  # one output buffer read by every child: the exact search only
        out.append(("out-tree", f"out_tree_n{n}", lambda n=n: random_out_tree(n, seed=n)))
    for n in tree_n:  # one buffer per child: series-parallel
        out.append(("out-tree (edge)", f"out_tree_edges_n{n}",
                    lambda n=n: random_out_tree(n, seed=n, edge_buffers=True)))
    for n in sp_n:
        out.append(("series-parallel", f"sp_n{n}", lambda n=n: series_parallel(n, seed=n)))
    for n in layered_n:
        out.append(("layered-gen", f"layered_n{n}", lambda n=n: random_layered(n, width=24,
                                                                               seed=n)))
    for b in nn_blocks:
        out.append(("nn-like", f"nn_like_b{b}", lambda b=b: nn_like(b, seed=b)))
    return out


def run(quick: bool, time_limit: float, graphs: str | None = None) -> dict[str, object]:
    rows = []
    for category, label, load in instances(quick):
        if graphs is not None and not re.search(graphs, label):
            continue
        g = load()
        graph = g.graph if isinstance(g, TaskGraphFile) else g
        t0 = time.perf_counter()
        r = schedule(g, time_limit=time_limit)
        seconds = time.perf_counter() - t0
        sim = simulate(graph, r.order).peak
        if sim != r.peak:
            raise AssertionError(f"{label}: schedule says {r.peak}, simulate says {sim}")
        t0 = time.perf_counter()
        plain = schedule(g, time_limit=time_limit, reduce=False)
        plain_seconds = time.perf_counter() - t0
        reduction = r.info.get("reduction")
        if reduction is None and len(graph.tasks) <= REDUCE_MAX_TASKS:  # solved before it
            t0 = time.perf_counter()
            red = reduce_graph(graph)
            reduction = {**red.info, "seconds": time.perf_counter() - t0}
        baselines, times = {}, {}
        for name in BASELINES:
            t1 = time.perf_counter()
            b = schedule(g, method=name)
            times[name] = time.perf_counter() - t1
            baselines[name] = b.peak
        rows.append({"category": category, "graph": label, "tasks": len(graph.tasks),
                     "peak": r.peak, "optimal": r.optimal, "lower_bound": r.lower_bound,
                     "method": r.method, "seconds": seconds, "baselines": baselines,
                     "baseline_seconds": times,
                     "tasks_reduced": None if reduction is None else reduction["tasks_after"],
                     "reduction": reduction,
                     "unreduced": {"peak": plain.peak, "optimal": plain.optimal,
                                   "lower_bound": plain.lower_bound, "method": plain.method,
                                   "seconds": plain_seconds}})
    return {"machine": machine(), "quick": quick, "time_limit": time_limit, "graphs": graphs,
            "rows": rows}


def show(result: dict[str, object], console: Console) -> None:
    m = result["machine"]
    console.print(f"[bold]memory_schedule[/bold] ({'quick' if result['quick'] else 'full'}, "
                  f"exact-search limit {result['time_limit']} s) on {m['platform']}, "
                  f"{m['cpu_count']} CPUs; numpy {m['numpy']}, scipy {m['scipy']}, "
                  f"dask {m['dask']}")
    t = Table(title="peak of each baseline / our peak (1.000 = as good as ours)")
    for col in ("category", "graph", "tasks", "reduced", "ours: method", "proven", "peak / LB",
                "time s", "unreduced: proven", "peak", "s", *BASELINES, "dask s"):
        t.add_column(col, justify="left" if col in ("category", "graph") else "right")
    for row in result["rows"]:  # type: ignore[attr-defined]
        peak = row["peak"]
        ratios = [f"{row['baselines'][k] / peak:.3f}" if k in row["baselines"] and peak
                  else "-" for k in BASELINES]
        gap = f"{peak / row['lower_bound']:.3f}" if row["lower_bound"] else "-"
        plain = row["unreduced"]
        reduced = "-" if row["tasks_reduced"] is None else str(row["tasks_reduced"])
        t.add_row(row["category"], row["graph"], str(row["tasks"]), reduced, row["method"],
                  "yes" if row["optimal"] else "no", gap, f"{row['seconds']:.2f}",
                  "yes" if plain["optimal"] else "no", f"{plain['peak'] / peak:.3f}",
                  f"{plain['seconds']:.2f}", *ratios,
                  f"{row['baseline_seconds']['dask']:.2f}")
    console.print(t)
    s = Table(title="proven optima and targets")
    for col in ("category", "graphs", "proven optimal", "without reductions", "tasks",
                "after reductions", "largest", "max time s"):
        s.add_column(col)
    cats: dict[str, list[dict]] = {}
    for row in result["rows"]:  # type: ignore[attr-defined]
        cats.setdefault(row["category"], []).append(row)
    for cat, rs in cats.items():
        red = [r for r in rs if r["tasks_reduced"] is not None]
        s.add_row(cat, str(len(rs)), str(sum(r["optimal"] for r in rs)),
                  str(sum(r["unreduced"]["optimal"] for r in rs)),
                  str(sum(r["tasks"] for r in red)) if red else "-",
                  str(sum(r["tasks_reduced"] for r in red)) if red else "-",
                  str(max(r["tasks"] for r in rs)), f"{max(r['seconds'] for r in rs):.2f}")
    rows = result["rows"]  # type: ignore[assignment]
    s.add_row("all", str(len(rows)), str(sum(r["optimal"] for r in rows)),
              str(sum(r["unreduced"]["optimal"] for r in rows)), "", "", "", "")
    console.print(s)
    console.print("tasks / after reductions: over the graphs of up to "
                  f"{REDUCE_MAX_TASKS} tasks (larger ones are not reduced)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller generated graphs")
    ap.add_argument("--time-limit", type=float, default=None,
                    help="seconds for the exact search per graph (default 2 quick, 10 full)")
    ap.add_argument("--graphs", default=None, metavar="REGEX",
                    help="only the graphs whose label matches (e.g. 'n50000|b12500': the "
                         "50,000-task ones)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    limit = args.time_limit if args.time_limit is not None else (2.0 if args.quick else 10.0)
    result = run(args.quick, limit, args.graphs)
    show(result, Console(width=200))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    Console().print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

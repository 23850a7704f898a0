"""Benchmark: planning under a memory budget (recompute and offload) against the baselines.

For graphs of ``../shared/data/graphs`` (Checkmate training graphs, random layered DAGs),
generated forward/backward chains and NN-like training graphs, and budgets of 0.9, 0.8,
0.7, 0.6 and 0.5 of the best schedule's peak, reports the overhead (makespan / total compute
- 1, as replayed by :func:`thrifty.memory.simulate`) of:

* ``ours``: :func:`thrifty.memory.plan` (``method="auto"`` without the MILP: the chain DP
  where the graph is a chain, eviction with look-ahead refined by local search, and the
  baselines below as fall-backs; it keeps the best), recompute only;
* ``milp``: the Checkmate-style MILP (HiGHS) within its time limit, where the graph is small;
* ``sqrt_n``: Chen et al.'s segmented checkpointing (segment size swept; needs forward/
  backward marks);
* ``ckpt_all``: the best schedule, nothing recomputed (fits only at 1.0);
* ``dtr``: DTR's greedy (staleness, no look-ahead), recompute only;
* ``ours+pcie`` / ``ours+nvlink``: ours with offloading at a PCIe-like and an NVLink-like
  bandwidth;
* ``milp+pcie``: the MILP with paging (POET-style stages, see
  :mod:`thrifty.memory.budget.milp`) at the PCIe-like bandwidth, where the graph is small;
  its replayed overhead (its own staged objective, an upper bound, is in the JSON).

The bandwidth is set per graph from its own rate of producing data,
``r = (bytes of all buffers) / (total compute time)``: PCIe-like is ``r`` (moving every
buffer once takes as long as the whole computation), NVLink-like ``10 r``.

"inf" marks a budget below the proven lower bound (no plan exists); "-" a method that found
no plan (or does not apply). Every plan is replayed by the simulator and checked to fit.

Usage::

    python benchmarks/memory_plan.py --quick   # minutes on 2 cores, short MILP limit
    python benchmarks/memory_plan.py           # all shared graphs, larger ones, longer limits

Writes ``benchmarks/results/memory_plan.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy
from rich.console import Console
from rich.table import Table

from thrifty.errors import InfeasibleBudget
from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
from thrifty.memory.budget import PLANNERS, Context, NoPlan, lower_bound, plan
from thrifty.memory.budget.chain import chain_plan
from thrifty.memory.model import Plan
from thrifty.memory.order.generate import nn_like
from thrifty.memory.schedule import schedule
from thrifty.memory.simulate import simulate
from thrifty.testing import shared_data_dir

RESULTS = Path(__file__).resolve().parent / "results" / "memory_plan.json"
FRACTIONS = (0.9, 0.8, 0.7, 0.6, 0.5)


def machine() -> dict[str, object]:
    return {"platform": platform.platform(), "python": platform.python_version(),
            "cpu_count": os.cpu_count(), "processor": platform.processor() or platform.machine(),
            "numpy": np.__version__, "scipy": scipy.__version__}


def chain(n: int, seed: int) -> TaskGraph:
    """A forward/backward chain in the Checkmate shape (B_i reads a_{i-1}, a_i, δ_i)."""
    rng = random.Random(seed)
    sizes = [rng.randint(1, 16) << 20 for _ in range(n)]
    tasks, bufs = [], []
    for i in range(n):
        tasks.append(Task(f"f{i}", reads=(f"a{i-1}",) if i else (), writes=(f"a{i}",),
                          time=float(rng.randint(1, 10)), attrs={"backward": False}))
        bufs.append(Buffer(f"a{i}", sizes[i], f"f{i}"))
    for i in range(n - 2, -1, -1):
        reads = (f"a{i}", f"a{i+1}") + ((f"d{i+1}",) if i < n - 2 else ())
        tasks.append(Task(f"b{i}", reads=reads, writes=(f"d{i}",),
                          time=float(rng.randint(2, 20)), attrs={"backward": True}))
        bufs.append(Buffer(f"d{i}", sizes[i], f"b{i}"))
    return TaskGraph(tasks, bufs, name=f"chain_n{n}")


def instances(quick: bool) -> list[tuple[str, Callable[[], TaskGraph]]]:
    from thrifty.graph.taskgraph_io import load_taskgraph

    out: list[tuple[str, Callable[[], TaskGraph]]] = []
    root = shared_data_dir()
    if root is not None:
        paths = sorted((root / "graphs").glob("*/*.json"))
        if quick:
            keep = ("vgg16_train", "fcn_8_vgg_train", "mobilenet_train", "random_layered_n100",
                    "random_layered_n250")
            paths = [p for p in paths if p.stem in keep]
        out += [(p.stem, lambda p=p: load_taskgraph(p)) for p in paths]
    out += [(f"chain_n{n}", lambda n=n: chain(n, n)) for n in ((12, 30) if quick
                                                                else (12, 30, 100))]
    out += [(f"nn_like_b{b}", lambda b=b: nn_like(b, seed=b)) for b in ((10, 250) if quick
                                                                        else (10, 250, 2500,
                                                                              12500))]
    return out


def run_planner(g: TaskGraph, budget: int, fn: Callable[..., Plan],
                bw: float | None, **kw: object) -> tuple[float | None, float, Plan | None]:
    t0 = time.perf_counter()
    try:
        p = fn(g, budget, **kw)
    except (NoPlan, InfeasibleBudget):
        return None, time.perf_counter() - t0, None
    dt = time.perf_counter() - t0
    r = simulate(g, p, offload_bandwidth=bw)  # the oracle
    assert r.peak <= budget, (g.name, budget, r.peak)
    return r.makespan / g.total_time() - 1.0, dt, p


def bench(label: str, g: TaskGraph, quick: bool, milp_limit: float,
          limit: float) -> list[dict]:
    s = schedule(g, time_limit=2.0 if quick else 10.0)
    order = tuple(s.order)
    lb = lower_bound(g)
    rate = sum(b.size for b in g.buffers.values()) / max(g.total_time(), 1e-12)
    bws = {"pcie": rate, "nvlink": 10 * rate}
    rows = []
    for frac in FRACTIONS:
        b = int(frac * s.peak)
        row: dict = {"graph": label, "tasks": len(g.tasks), "fraction": frac, "budget": b,
                     "lower_bound": lb, "schedule_peak": s.peak}
        if b < lb:
            row["infeasible"] = True
            rows.append(row)
            continue
        ctx = Context(None, True, limit, order)
        row["ours"], row["t_ours"], p = run_planner(g, b, plan, None, time_limit=limit,
                                                    order=order, use_milp=False)
        row["by"] = p.method if p is not None else None
        if len(g.tasks) <= (60 if quick else 120):
            mctx = Context(None, True, milp_limit, order)
            row["milp"], row["t_milp"], p = run_planner(g, b, PLANNERS["milp"], None, ctx=mctx)
            row["milp_optimal"] = bool(p is not None and p.info.get("optimal"))
        for name, key in (("sqrt_n", "sqrt_n"), ("checkpoint_all", "ckpt_all"), ("dtr", "dtr")):
            row[key], row["t_" + key], _ = run_planner(g, b, PLANNERS[name], None, ctx=ctx)
        for tag, bw in bws.items():
            row["ours+" + tag], row["t_ours+" + tag], _ = run_planner(
                g, b, plan, bw, offload_bandwidth=bw, time_limit=limit, order=order,
                use_milp=False)
        if len(g.tasks) <= (60 if quick else 120):
            pctx = Context(bws["pcie"], True, milp_limit, order)
            row["milp+pcie"], row["t_milp+pcie"], p = run_planner(
                g, b, PLANNERS["milp"], bws["pcie"], ctx=pctx)
            row["milp+pcie_optimal"] = bool(p is not None and p.info.get("optimal"))
            if p is not None:  # the MILP's own cost: an upper bound of the replayed one
                row["milp+pcie_objective"] = p.info["objective"] / g.total_time() - 1.0
        rows.append(row)
    return rows


COLUMNS = ("ours", "milp", "sqrt_n", "ckpt_all", "dtr", "ours+pcie", "milp+pcie",
           "ours+nvlink")
STARRED = {"milp": "milp_optimal", "milp+pcie": "milp+pcie_optimal"}


def fmt(v: object, star: bool = False) -> str:
    if v is None:
        return "-"
    return (f"{100 * v:.1f}%" + ("*" if star else "")) if isinstance(v, float) else str(v)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer graphs, short limits")
    ap.add_argument("--milp-limit", type=float, default=None,
                    help="seconds for the MILP (default: 5 with --quick, 120 in full)")
    ap.add_argument("--only", default=None, help="run only graphs whose label contains this")
    args = ap.parse_args()
    quick = args.quick
    milp_limit, limit = (5.0, 1.0) if quick else (120.0, 10.0)
    if args.milp_limit is not None:
        milp_limit = args.milp_limit
    console = Console(width=200)
    info = machine()
    console.print(f"[bold]memory_plan[/] {'--quick' if quick else 'full'}: {info}")
    console.print(f"MILP time limit {milp_limit} s; local search {limit} s; seeds fixed")
    t0 = time.perf_counter()
    chain_plan(chain(3, 0), 2**40)  # loads the chain DP's compiled kernel, outside every row
    console.print(f"chain DP kernel loaded in {time.perf_counter() - t0:.2f} s (numba import "
                  "and its disk cache; the first call of a process pays it once)")
    rows: list[dict] = []
    out = RESULTS if not args.only else RESULTS.with_name(f"memory_plan_{args.only}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    for label, load in instances(quick):
        if args.only and args.only not in label:
            continue
        g = load()
        t0 = time.perf_counter()
        rows += bench(label, g, quick, milp_limit, limit)
        console.print(f"  {label}: {len(g.tasks)} tasks, {time.perf_counter() - t0:.1f} s")
        # the rows so far, so that a long run stopped early still leaves its figures
        out.write_text(json.dumps({"machine": info, "quick": quick, "milp_limit": milp_limit,
                                   "limit": limit, "rows": rows, "partial": True},
                                  indent=1, default=str))
    t = Table(title="overhead (makespan / compute - 1) at budget = fraction x best schedule "
                    "peak; * = MILP proven optimal (milp+pcie: in its staged plan space)")
    for c in ("graph", "tasks", "budget", *COLUMNS, "ours by", "t_ours", "t_milp",
              "t_milp+pcie"):
        t.add_column(c, justify="right")
    for r in rows:
        if r.get("infeasible"):
            t.add_row(r["graph"], str(r["tasks"]), f"{r['fraction']}", *(["inf"] * len(COLUMNS)),
                      "", "", "")
            continue
        t.add_row(r["graph"], str(r["tasks"]), f"{r['fraction']}",
                  *(fmt(r.get(c), bool(r.get(STARRED.get(c, ""), False)))
                    for c in COLUMNS), str(r.get("by") or "-"),
                  f"{r['t_ours']:.2f}s", f"{r['t_milp']:.2f}s" if "t_milp" in r else "",
                  f"{r['t_milp+pcie']:.2f}s" if "t_milp+pcie" in r else "")
    console.print(t)
    feasible = [r for r in rows if not r.get("infeasible") and r.get("ours") is not None]
    summary = {
        "rows": len(rows), "feasible": len(feasible),
        "ours_worse_than_sqrt_n": sum(1 for r in feasible if r.get("sqrt_n") is not None
                                      and r["ours"] > r["sqrt_n"] + 1e-12),
        "ours_worse_than_dtr": sum(1 for r in feasible if r.get("dtr") is not None
                                   and r["ours"] > r["dtr"] + 1e-12),
        "milp_solved": sum(1 for r in feasible if r.get("milp") is not None),
        "milp_proven_optimal": sum(1 for r in feasible if r.get("milp_optimal")),
        "ours_within_1pct_of_proven_milp": sum(1 for r in feasible if r.get("milp_optimal")
                                               and r["ours"] <= r["milp"] + 0.01),
        "ours_within_1pct_of_milp": sum(1 for r in feasible if r.get("milp") is not None
                                        and r["ours"] <= r["milp"] + 0.01),
        "ours_better_than_milp_incumbent": sum(1 for r in feasible if r.get("milp") is not None
                                               and r["ours"] < r["milp"] - 1e-12),
        "milp+pcie_solved": sum(1 for r in feasible if r.get("milp+pcie") is not None),
        "milp+pcie_proven_optimal": sum(1 for r in feasible if r.get("milp+pcie_optimal")),
        "ours+pcie_within_1pct_of_proven_milp+pcie": sum(
            1 for r in feasible if r.get("milp+pcie_optimal") and r.get("ours+pcie") is not None
            and r["ours+pcie"] <= r["milp+pcie"] + 0.01),
        "ours+pcie_worse_than_milp+pcie_by_over_1pct": [
            (r["graph"], r["fraction"]) for r in feasible if r.get("milp+pcie") is not None
            and r.get("ours+pcie") is not None and r["ours+pcie"] > r["milp+pcie"] + 0.01],
        "offload_strictly_better": sum(1 for r in feasible if r.get("ours+pcie") is not None
                                       and r["ours+pcie"] < r["ours"] - 1e-12),
        "median_time_ratio_milp_over_ours": float(np.median(
            [r["t_milp"] / max(r["t_ours"], 1e-9) for r in feasible if "t_milp" in r]
            or [math.nan])),
    }
    console.print(summary)
    out.write_text(json.dumps({"machine": info, "quick": quick, "milp_limit": milp_limit,
                                   "limit": limit, "rows": rows, "summary": summary},
                                  indent=1, default=str))
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()

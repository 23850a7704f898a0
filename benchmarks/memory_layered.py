"""Benchmark: recompute-only plans on the shared random layered graphs, against the bounds.

For each ``../shared/data/graphs/layered/random_layered_n*.json`` graph: the best schedule's
peak (:func:`thrifty.memory.schedule`), two proven lower bounds of recompute-only plans
(:func:`thrifty.memory.budget.lower_bound` with ``offload=False``, and
:func:`thrifty.memory.budget.descent.descent_bound` at ``--depth``), the plan that
:func:`thrifty.memory.plan` returns at ``--fraction`` of the peak (recompute only; its
planner, peak, overhead and time), and a bisection with the descent search
(:mod:`thrifty.memory.budget.descent`, ``--limit`` seconds a try) for the smallest budget
at which it finds a plan; a try whose search exhausts proves its budget infeasible, and the
largest such budget + 1 is then a proven bound. Every plan is replayed by
:func:`thrifty.memory.simulate`. All figures are fractions of the best schedule's peak.

Usage::

    python benchmarks/memory_layered.py --limit 60 --steps 3   # about 10 minutes
    python benchmarks/memory_layered.py --steps 0    # the plans at --fraction only

Writes ``benchmarks/results/memory_layered.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from thrifty.errors import InfeasibleBudget
from thrifty.graph.taskgraph_io import load_taskgraph
from thrifty.memory.budget import lower_bound, plan
from thrifty.memory.budget.descent import descent_bound, descent_plan
from thrifty.memory.schedule import schedule
from thrifty.memory.simulate import simulate
from thrifty.testing import shared_data_dir

RESULTS = Path(__file__).resolve().parent / "results" / "memory_layered.json"


def bisect(g, lo: int, hi: int, steps: int, limit: float) -> tuple[int, int, int]:
    """``(smallest budget found feasible, largest proven infeasible or -1, tries)``: descent
    searches between ``lo`` (not tried) and ``hi`` (feasible)."""
    proven = -1
    for i in range(steps):
        if hi - lo <= 1:
            return hi, proven, i
        mid = (lo + hi) // 2
        p, d = descent_plan(g, mid, time_limit=limit)
        if p is not None:
            assert simulate(g, p).peak <= mid
            hi = mid
        else:
            lo = mid
            if d.status == "infeasible":
                proven = max(proven, mid)
    return hi, proven, steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fraction", type=float, default=0.9)
    ap.add_argument("--limit", type=float, default=10.0, help="seconds per descent search")
    ap.add_argument("--steps", type=int, default=5, help="bisection steps below --fraction")
    ap.add_argument("--only", default=None, help="only graphs whose name contains this")
    ap.add_argument("--depth", type=int, default=2, help="steps of the descent bound")
    args = ap.parse_args()
    root = shared_data_dir()
    if root is None:
        raise SystemExit("needs ../shared/data")
    console = Console(width=160)
    console.print(f"memory_layered: python {platform.python_version()}, {vars(args)}")
    rows = []
    for path in sorted((root / "graphs" / "layered").glob("random_layered_n*.json"),
                       key=lambda p: int(p.stem.rsplit("n", 1)[1])):
        if args.only and args.only not in path.stem:
            continue
        g = load_taskgraph(path)
        peak = simulate(g, schedule(g, time_limit=10.0).order).peak
        b = int(args.fraction * peak)
        row = {"graph": path.stem, "tasks": len(g.tasks), "peak": peak, "budget": b,
               "lower_bound": lower_bound(g, offload=False) / peak}
        t0 = time.perf_counter()
        row["descent_bound"] = max(descent_bound(g, args.depth), lower_bound(g, offload=False))
        row["descent_bound"] /= peak
        row["t_bound"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        try:
            p = plan(g, b, recompute=True, time_limit=args.limit)
        except InfeasibleBudget as e:
            row.update(plan=None, message=str(e))
        else:
            sim = simulate(g, p)
            assert sim.peak <= b
            row.update(plan=p.method, plan_peak=sim.peak / peak,
                       overhead=sim.compute_time / g.total_time() - 1)
        row["t_plan"] = time.perf_counter() - t0
        hi = round(row["plan_peak"] * peak) if row.get("plan") else peak
        lo = int(row["lower_bound"] * peak) - 1
        t0 = time.perf_counter()
        small, proven, tries = bisect(g, lo, hi, args.steps if row.get("plan") else 0,
                                      args.limit)
        row.update(smallest=small / peak, proven_infeasible=proven / peak if proven >= 0
                   else None, tries=tries, t_bisect=time.perf_counter() - t0)
        rows.append(row)
        console.print(row)
    t = Table(title=f"recompute only, fractions of the best schedule's peak (plan at "
                    f"{args.fraction})")
    for c in ("graph", "peak", "task bound", "descent bound", "plan", "its peak", "overhead",
              "t plan", "smallest found", "proven infeasible"):
        t.add_column(c, justify="right")
    for r in rows:
        t.add_row(r["graph"], str(r["peak"]), f"{r['lower_bound']:.3f}",
                  f"{r['descent_bound']:.3f}", str(r["plan"]),
                  f"{r['plan_peak']:.4f}" if r.get("plan") else "-",
                  f"{r['overhead']:.1%}" if r.get("plan") else "-", f"{r['t_plan']:.1f}s",
                  f"{r['smallest']:.3f}",
                  "-" if r["proven_infeasible"] is None else f"{r['proven_infeasible']:.3f}")
    console.print(t)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1))
    console.print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()

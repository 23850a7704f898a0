"""Benchmark: how the scheduler's and the planner's time grow with the size of the graph.

On graphs of growing size, of one family (``--family``): random layered DAGs
(:func:`thrifty.memory.order.generate.random_layered`, width 24, the shape of the schedule
benchmark's generated graphs; the default) or NN-like training graphs
(:func:`thrifty.memory.order.generate.nn_like`, ``(n + 2) // 4`` residual blocks, seeded by
the block count as in ``memory_plan.py``: 12,500 blocks make the 50,002-task graph), times
:func:`thrifty.memory.schedule` (``time_limit`` small: the heuristics, bounds and
reductions are what grows) and :func:`thrifty.memory.budget.plan` at a budget of
``--fraction`` of the best schedule's peak (given the order, so that the scheduler is not
timed twice), and prints each time, the time per task, and the exponent ``k`` of the least
squares fit ``time ~ n^k`` over the sizes measured (``k`` close to 1: linear; n log n over
this range fits ``k`` of about 1.1). Times are the process's CPU time (``time.process_time``:
a busy shared machine slows the wall clock, not this), with the wall time alongside.

Usage::

    python benchmarks/memory_scale.py --sizes 5000 10000 50000 200000
    python benchmarks/memory_scale.py --sizes 5000 10000 --plan-sizes 5000 10000   # short
    python benchmarks/memory_scale.py --fraction 0.95 --offload   # PCIe-like offload allowed
    python benchmarks/memory_scale.py --family nn_like --fraction 0.7 --time-limit 10

``--time-limit`` is the local search's CPU time (the planner stops its search there), so a
plan's time is about the fixed passes plus that limit; a tiny limit (``--time-limit 0.01
--schedule-limit 10``) times the planner's passes alone, whose growth the fitted exponent
then measures.

The outcome column says whether a plan was found, and when not, whether the budget is
proven infeasible (below the proven lower bound) or only no plan was found; ``lb / peak`` is
that lower bound as a fraction of the best schedule's peak. The last line gives the
process's peak resident memory. The rows go to
``benchmarks/results/memory_scale_<family>[_offload]_<fraction>_<time limit>.json`` as well.

Timings on a shared machine are noisy: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from thrifty.graph.taskgraph import TaskGraph
from thrifty.memory import schedule, simulate
from thrifty.memory.budget import lower_bound, plan
from thrifty.memory.order.generate import nn_like, random_layered

RESULTS = Path(__file__).resolve().parent / "results"


def make(family: str, n: int) -> TaskGraph:
    """The graph of ``family`` with about ``n`` tasks."""
    if family == "nn_like":
        blocks = max(1, (n + 2) // 4)  # 4 blocks + 2 tasks: 50,000 -> the 50,002-task graph
        return nn_like(blocks, seed=blocks)
    return random_layered(n, width=24, seed=n)


def fitted_exponent(sizes: list[int], seconds: list[float]) -> float | None:
    """Least-squares slope of log(seconds) against log(size)."""
    pts = [(math.log(n), math.log(s)) for n, s in zip(sizes, seconds) if s > 0]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--family", choices=("layered", "nn_like"), default="layered",
                    help="random layered DAGs of width 24, or NN-like training graphs")
    ap.add_argument("--sizes", type=int, nargs="+", default=[5000, 10000, 50000, 200000])
    ap.add_argument("--plan-sizes", type=int, nargs="*", default=None,
                    help="sizes to plan (default: all)")
    ap.add_argument("--fraction", type=float, default=0.9)
    ap.add_argument("--time-limit", type=float, default=1.0,
                    help="the planner's time_limit (s), and the scheduler's unless "
                         "--schedule-limit is given")
    ap.add_argument("--schedule-limit", type=float, default=None,
                    help="the scheduler's time_limit (s); default: --time-limit")
    ap.add_argument("--offload", action="store_true",
                    help="allow offloading at a PCIe-like bandwidth (total bytes / total "
                         "compute time, as in memory_plan.py)")
    args = ap.parse_args()
    plan_sizes = set(args.sizes if args.plan_sizes is None else args.plan_sizes)
    console = Console(width=160)
    title = ("layered graphs (width 24)" if args.family == "layered"
             else "NN-like training graphs")
    how = "offload allowed" if args.offload else "recompute only"
    table = Table(title=f"{title}: time against tasks, budget {args.fraction} of the best "
                        f"schedule's peak, {how}")
    for col in ("tasks", "schedule CPU s", "µs/task", "method", "lb / peak", "plan CPU s",
                "µs/task", "outcome", "peak / best"):
        table.add_column(col, justify="right")
    rows: list[tuple[int, float, float | None]] = []
    records: list[dict[str, object]] = []
    for size in args.sizes:
        g = make(args.family, size)
        n = len(g.tasks)
        t0, w0 = time.process_time(), time.perf_counter()
        r = schedule(g, time_limit=args.schedule_limit or args.time_limit)
        ts, ws = time.process_time() - t0, time.perf_counter() - w0
        tp: float | None = None
        wp: float | None = None
        planner, ratio = "", ""
        rec: dict[str, object] = {"tasks": n, "schedule_cpu_s": ts, "schedule_wall_s": ws,
                                  "schedule_method": r.method, "peak": r.peak}
        bw = (sum(b.size for b in g.buffers.values()) / g.total_time() if args.offload
              else None)
        lb = lower_bound(g, offload=bw is not None) / r.peak
        if size in plan_sizes:
            budget = int(args.fraction * r.peak)
            t0, w0 = time.process_time(), time.perf_counter()
            try:
                p = plan(g, budget, offload_bandwidth=bw, order=r.order,
                         time_limit=args.time_limit, use_milp=False)
                tp, wp = time.process_time() - t0, time.perf_counter() - w0
                sim = simulate(g, p, offload_bandwidth=bw)  # the independent oracle
                assert sim.peak <= budget, (n, sim.peak, budget)
                overhead = sim.makespan / g.total_time() - 1.0
                planner = f"{p.method}, overhead {100 * overhead:.2f}%"
                ratio = f"{sim.peak / r.peak:.3f}"
                rec.update(method=p.method, overhead=overhead, plan_peak=sim.peak)
            except Exception as e:  # noqa: BLE001 - a row of the table says what failed
                tp, wp = time.process_time() - t0, time.perf_counter() - w0
                planner = ("infeasible (proven)" if "is infeasible" in str(e)
                           else "no plan found (not proven)" if "no plan found" in str(e)
                           else type(e).__name__)
            rec.update(budget=budget, plan_cpu_s=tp, plan_wall_s=wp, outcome=planner)
        rows.append((n, ts, tp))
        records.append({**rec, "lb_over_peak": lb})
        console.print(f"{n:,} tasks: schedule {ts:.2f} s CPU ({ws:.2f} s wall, {r.method}), plan "
                      f"{'-' if tp is None else f'{tp:.2f} s CPU ({wp:.2f} s wall)'} "
                      f"{planner} {ratio}")
        table.add_row(f"{n:,}", f"{ts:.2f}", f"{1e6 * ts / n:.0f}", r.method, f"{lb:.3f}",
                      "" if tp is None else f"{tp:.2f}",
                      "" if tp is None else f"{1e6 * tp / n:.0f}", planner, ratio)
    console.print(table)
    ks = fitted_exponent([n for n, _, _ in rows], [s for _, s, _ in rows])
    planned = [(n, tp) for n, _, tp in rows if tp is not None]
    kp = fitted_exponent([n for n, _ in planned], [t for _, t in planned])
    console.print(f"fitted exponent (time ~ n^k): schedule k = "
                  f"{'n/a' if ks is None else f'{ks:.2f}'}, plan k = "
                  f"{'n/a' if kp is None else f'{kp:.2f}'}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    console.print(f"peak resident memory of this process: {rss / 2**20:.2f} GiB")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / (f"memory_scale_{args.family}{'_offload' if args.offload else ''}_"
                     f"{args.fraction}_{args.time_limit}.json")
    out.write_text(json.dumps({"family": args.family, "fraction": args.fraction,
                               "offload": args.offload, "time_limit": args.time_limit,
                               "schedule_limit": args.schedule_limit or args.time_limit,
                               "rows": records, "schedule_exponent": ks,
                               "plan_exponent": kp, "peak_rss_gib": rss / 2**20}, indent=1))
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()

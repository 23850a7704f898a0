"""``thrifty memory plan FILE --budget B``: recompute and offload under a memory budget.

``--json`` prints exactly ``{"budget": int, "peak": int, "makespan": float,
"compute_time": float, "overhead": float, "steps": [{"op": "compute", "task": id} |
{"op": "free"|"offload"|"prefetch", "buffer": id}]}`` (peak and times as replayed by the
simulator); otherwise a summary table. ``B`` is bytes (``123456``, ``64MiB``, ``2GB``) or a
fraction below 1 of the best schedule's peak (``0.7``); ``BW`` is bytes per unit of the
file's time.

Example
-------
``thrifty memory plan ../shared/data/graphs/checkmate/vgg16_train.json --budget 0.9 --json``
"""

from __future__ import annotations

import json

import click

from thrifty.errors import ThriftyError


@click.command("plan")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--budget", "-b", required=True,
              help="Bytes (123456, 64MiB, 2GB) or a fraction in (0, 1] of the best "
                   "schedule's peak (0.7); see the README's option table.")
@click.option("--offload-bandwidth", type=float, default=None,
              help="Bytes per unit of the file's time; omit to forbid offloading.")
@click.option("--bandwidth", "bandwidth_alias", type=float, default=None, hidden=True,
              help="Deprecated alias of --offload-bandwidth.")
@click.option("--no-recompute", is_flag=True, help="Forbid recomputation.")
@click.option("--method", default="auto", show_default=True,
              help="auto, or one planner: checkpoint_all, chain, milp, evict, refine, "
                   "sqrt_n, dtr.")
@click.option("--time-limit", type=click.FloatRange(min=0.01), default=10.0,
              show_default=True, help="Seconds for the MILP and the local search.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="Draw memory over time to this image file (PNG, SVG, PDF).")
def plan(file: str, budget: str, offload_bandwidth: float | None,
         bandwidth_alias: float | None, no_recompute: bool, method: str, time_limit: float,
         as_json: bool, plot_path: str | None) -> None:
    """Plan FILE within a memory budget, recomputing and offloading at least time cost."""
    from thrifty.cli.common import deprecated_alias

    offload_bandwidth = deprecated_alias("--bandwidth", "--offload-bandwidth",
                                         bandwidth_alias, offload_bandwidth)
    from thrifty.cli.common import progress
    from thrifty.graph.taskgraph_io import load_taskgraph
    from thrifty.memory.budget import best_order, parse_budget
    from thrifty.memory.budget import plan as make_plan
    from thrifty.memory.simulate import simulate
    from thrifty.sizes import is_fraction

    try:
        with progress(f"reading {file}") as say:
            g = load_taskgraph(file)
            say(f"best schedule of {len(g.tasks)} tasks")
            order = best_order(g, min(time_limit, 10.0))
            peak = simulate(g, order).peak if is_fraction(budget) else None
            b = parse_budget(budget, peak=peak)
            say(f"planning within {b:,} bytes ({method}, up to {time_limit:g} s per planner)")
            p = make_plan(g, budget, offload_bandwidth=offload_bandwidth,
                          recompute=not no_recompute, method=method, time_limit=time_limit,
                          order=order)
            r = simulate(g, p, offload_bandwidth=offload_bandwidth)
    except ThriftyError as e:
        raise click.ClickException(str(e)) from e
    total = g.total_time()
    out = {"budget": b, "peak": r.peak, "makespan": r.makespan,
           "compute_time": r.compute_time,
           "overhead": (r.makespan / total - 1.0) if total > 0 else 0.0,
           "steps": [s.to_json() for s in p.steps]}
    if plot_path:
        from thrifty.memory.plot import plot_plan

        plot_plan(g, p, plot_path, offload_bandwidth=offload_bandwidth)
    if as_json:
        click.echo(json.dumps(out))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{g.name}: plan within {b:,} bytes ({p.method})")
    t.add_column("")
    t.add_column("value", justify="right")
    counts = {op: sum(1 for s in p.steps if s.op == op) for op in ("compute", "offload",
                                                                   "prefetch", "free")}
    rows = [("peak (bytes)", f"{r.peak:,}"), ("makespan", f"{r.makespan:.6g}"),
            ("compute time", f"{r.compute_time:.6g}"), ("overhead", f"{out['overhead']:.2%}"),
            ("recomputations", f"{len(r.recomputed)}"), ("offloads", str(counts["offload"])),
            ("prefetches", str(counts["prefetch"])), ("lower bound (bytes)",
                                                      f"{p.info.get('lower_bound', 0):,}")]
    for name, ms in p.info.get("candidates", {}).items():
        rows.append((f"  {name}", f"{(ms / total - 1.0) if total else 0.0:.2%}"))
    for k, v in rows:
        t.add_row(k, v)
    Console().print(t)


"""A plan's memory over time, drawn with matplotlib: resident bytes, the budget, and marks
for recomputations, offloads and prefetches.

The curve is the simulator's timeline (:func:`thrifty.memory.simulate`): during each
compute, the bytes in use (resident buffers plus the task's outputs and workspace); the
copy stream's transfers are drawn as spans below the curve.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

from thrifty.graph.taskgraph import TaskGraph
from thrifty.memory.model import Plan

__all__ = ["plot_plan"]


def plot_plan(g: TaskGraph, plan: Plan | Sequence[Hashable], path: str | Path | None = None,
              offload_bandwidth: float | None = None, title: str | None = None) -> Any:
    """Draw the memory timeline of ``plan`` (or of a schedule: an order of task ids) on
    ``g``; save to ``path`` (PNG, SVG, PDF). Memory is drawn in kB, MB, GB ... (SI units,
    as suits the peak), never in multiples of 1e10 bytes.

    Returns the matplotlib ``Figure``.

    Example
    -------
    >>> from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
    >>> g = TaskGraph([Task("a", writes=("x",), time=1.0)], [Buffer("x", 8, "a")])
    >>> fig = plot_plan(g, Plan.from_steps([("compute", "a")], budget=8))
    >>> len(fig.axes)
    1
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    from thrifty.memory.simulate import simulate
    from thrifty.sizes import bytes_unit, format_bytes

    r = simulate(g, plan, offload_bandwidth=offload_bandwidth)
    budget = plan.budget if isinstance(plan, Plan) else None
    scale, unit = bytes_unit(max(r.peak, budget or 0))
    fig, ax = plt.subplots(figsize=(10, 4), layout="constrained")
    xs: list[float] = []
    ys: list[float] = []
    seen: set = set()
    recomputes: list[tuple[float, float]] = []
    for rec in r.timeline:
        if rec.op != "compute":
            continue
        xs += [rec.start, rec.end]
        ys += [rec.resident / scale, rec.resident / scale]
        if rec.target in seen:
            recomputes.append(((rec.start + rec.end) / 2, rec.resident / scale))
        seen.add(rec.target)
    ax.plot(xs, ys, color="tab:blue", lw=1.2, label="memory in use")
    ax.fill_between(xs, ys, color="tab:blue", alpha=0.15)
    if budget is not None:
        ax.axhline(budget / scale, color="tab:red", ls="--", lw=1,
                   label=f"budget {format_bytes(budget)}")
    if recomputes:
        ax.scatter(*zip(*recomputes), marker="x", color="tab:orange", zorder=3,
                   label=f"recompute ({len(recomputes)})")
    for op, color in (("offload", "tab:purple"), ("prefetch", "tab:green")):
        spans = [rec for rec in r.timeline if rec.op == op]
        for k, rec in enumerate(spans):
            ax.axvspan(rec.start, max(rec.end, rec.start), ymax=0.04, color=color,
                       alpha=0.6, label=f"{op} ({len(spans)})" if k == 0 else None)
    ax.set_xlabel("time")
    ax.set_ylabel(f"memory ({unit})")
    ax.set_ylim(bottom=0)
    ax.set_title(title or f"{g.name}: peak {format_bytes(r.peak)}, makespan "
                 f"{r.makespan:.4g} (compute {r.compute_time:.4g})")
    ax.legend(loc="upper right", fontsize="small")
    if path is not None:
        fig.savefig(path, dpi=120)
        plt.close(fig)
    return fig

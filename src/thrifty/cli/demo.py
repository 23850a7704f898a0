"""``thrifty demo``: the three engines together on one program.

A two-layer GCN and a masked-attention block are written as dense specs. The demo

1. runs them with the dense reference executor (numpy), then specializes them to the
   graph's sparsity (sparse engine) and runs the specialized plans;
2. specializes both blocks as one program, plans its TaskGraph under a memory budget
   (``--budget``: a fraction in (0, 1] of the best schedule's peak, default 1.0, or bytes;
   offload to host memory allowed; a second, tight run at 85% of that peak) and executes
   it following that plan, measuring the real peak of resident bytes;
3. runs the GCN's specialized plan with bf16 inputs and fp32 accumulation, every kernel
   (CSR segments, gathered block panels, gemm) on the H100 matrix-unit model, and compares
   the observed error against a float64 run with the certified and a priori error bounds;

and prints one summary table (``--json`` for the same figures as data, ``--plot DIR`` for
PNG figures).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import numpy as np
import scipy.sparse as sp

import thrifty as th
from thrifty.cli.common import emit_json, log_bins, table


@th.program
def gcn2(A, X, W1, W2):  # type: ignore[no-untyped-def]
    """Two graph-convolution layers: relu(A @ (relu(A @ (X @ W1)) @ W2))."""
    H = th.relu(A @ (X @ W1))
    return th.relu(A @ (H @ W2))


@th.program
def attention(S, X, Wq, Wk, Wv):  # type: ignore[no-untyped-def]
    """Masked attention over the graph: softmax((X Wq)(X Wk)^T, mask=S) @ (X Wv)."""
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    return th.softmax(Q @ K.T, axis=1, mask=S) @ V


@th.program
def pipeline(A, X, W1, W2, Wq, Wk, Wv):  # type: ignore[no-untyped-def]
    """Both blocks in one program: the task graph the memory step plans."""
    H = th.relu(A @ (X @ W1))
    G = th.relu(A @ (H @ W2))
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    return G, th.softmax(Q @ K.T, axis=1, mask=A) @ V


def demo_inputs(scale: int, seed: int, matrix: Path | None = None) -> dict[str, Any]:
    """A generated R-MAT graph (or a square matrix file) and dense features and weights."""
    if matrix is not None:
        A = th.load_matrix(matrix)
        if A.shape[0] != A.shape[1]:
            raise th.ShapeError(f"{matrix}: the demo needs a square matrix (a graph's "
                                f"adjacency), got shape {A.shape}")
        if np.iscomplexobj(A.data):
            raise th.SpecError(f"{matrix}: the demo needs a real matrix, this one is complex")
        A = sp.csr_array(A, dtype=np.float64)
    else:
        A = th.rmat(scale, edge_factor=8, seed=seed, symmetric=True)
    n = A.shape[0]
    deg = np.asarray(abs(A).sum(axis=1)).ravel()
    scale_rows = sp.diags_array(1.0 / np.maximum(deg, 1.0))
    A = sp.csr_array(scale_rows @ A)  # row-normalised: mean aggregation over neighbours
    A.sum_duplicates()  # canonical once here (the product's indices come unsorted), not
    # again in every plan call (a plan sorts a copy of a non-canonical input each call)
    rng = np.random.default_rng(seed)
    f, h, o = 64, 32, 16
    return {"A": A, "X": rng.standard_normal((n, f)),
            "W1": rng.standard_normal((f, h)) / np.sqrt(f),
            "W2": rng.standard_normal((h, o)) / np.sqrt(h),
            "Wq": rng.standard_normal((f, o)) / np.sqrt(f),
            "Wk": rng.standard_normal((f, o)) / np.sqrt(f),
            "Wv": rng.standard_normal((f, o)) / np.sqrt(f)}


def _best_of(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    best, out = np.inf, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def _rel(a: Any, b: Any) -> float:
    a = a.toarray() if sp.issparse(a) else np.asarray(a)
    b = b.toarray() if sp.issparse(b) else np.asarray(b)
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-300)) if b.size else 0.0


def sparse_step(name: str, prog: th.Program, inputs: dict[str, Any],
                repeat: int, scheduler: Any = None) -> tuple[dict[str, Any], Any]:
    """Reference run, specialization, specialized runs; figures and the plan."""
    from thrifty.runtime.reference import evaluate

    graph = prog.trace(**inputs)
    t_ref, (ref,) = _best_of(lambda: evaluate(graph, inputs), max(1, repeat // 2))
    t0 = time.perf_counter()
    plan = prog.specialize(**inputs)
    t_inspect = time.perf_counter() - t0
    plan.run(inputs, scheduler=scheduler)  # warm-up (compiles kernels on first use)
    t_sparse, out = _best_of(lambda: plan.run(inputs, scheduler=scheduler), repeat)
    rep = plan.report()
    patterns = {}
    for node in graph:
        p = plan.propagation.effective[node.id]
        key = node.name or f"{node.op}_{node.id}"  # inputs by name, others op_id
        patterns[key] = {"op": node.op, "shape": list(node.type.shape),
                         "density": float(p.density)}
    return {"spec": name, "reference_seconds": t_ref, "inspect_seconds": t_inspect,
            "specialized_seconds": t_sparse, "speedup": t_ref / t_sparse,
            "max_relative_difference": _rel(out, ref), "tasks": rep["tasks"],
            "kernels": rep["kernels"], "dense_flops": rep["dense_flops"],
            "executed_flops": rep["executed_flops"], "patterns": patterns}, (plan, out)


def _planned_run(plan: Any, tg: Any, inputs: dict[str, Any], expected: tuple[Any, Any],
                 budget: int, bandwidth: float, scheduler: Any = None,
                 offload_dir: Path | None = None) -> tuple[dict[str, Any], Any]:
    from thrifty import memory
    from thrifty.runtime.execute import execute

    mplan = memory.plan(tg, budget, offload_bandwidth=bandwidth, time_limit=5.0)
    sim = memory.simulate(tg, mplan, offload_bandwidth=bandwidth)
    run = execute(tg, mplan, plan.feed(inputs), offload_bandwidth=bandwidth,
                  scheduler=scheduler or "sync", offload_dir=offload_dir)
    diff = max(_rel(run.results[b], e) for b, e in zip(plan.output_buffers(), expected))
    ops = [s.op for s in mplan.steps]
    return {"budget": budget, "planned_peak": sim.peak, "measured_peak": run.peak_bytes,
            "makespan": sim.makespan, "compute_time": sim.compute_time,
            "overhead": sim.makespan / sim.compute_time - 1 if sim.compute_time else 0.0,
            "recomputes": run.recomputes, "offloads": ops.count("offload"),
            "offload_files": run.files_written,
            "max_relative_difference": diff,
            "planner": mplan.info.get("planner", mplan.method)}, mplan


def memory_step(inputs: dict[str, Any], expected: tuple[Any, Any], budget: float | str,
                bandwidth: float, scheduler: Any = None,
                offload_dir: Path | None = None) -> tuple[dict[str, Any], Any]:
    """Specialize both blocks as one program, plan its TaskGraph under a budget, and execute
    it following the plan.

    ``budget`` follows the one rule of :mod:`thrifty.sizes`: bytes (``"8MB"``), or a
    fraction in (0, 1] of the best schedule's peak. A second, tight budget (85% of the best
    schedule's peak, or the proven lower bound if that is larger) shows recomputation and
    offloading at work. The unplanned peak (every buffer kept), the eager-free schedule,
    the best schedule and the proven lower bound are reported next to them.
    """
    from thrifty import memory
    from thrifty.memory.budget.bounds import lower_bound
    from thrifty.sizes import parse_budget

    plan = pipeline.specialize(**inputs)
    tg = plan.taskgraph
    unplanned = sum(b.size for b in tg.buffers.values())
    best = memory.schedule(tg, time_limit=2.0)
    lb = lower_bound(tg)
    main, mplan = _planned_run(plan, tg, inputs, expected,
                               parse_budget(budget, peak=best.peak), bandwidth, scheduler,
                               offload_dir)
    tight, tplan = _planned_run(plan, tg, inputs, expected, max(lb, int(0.85 * best.peak)),
                                bandwidth, scheduler, offload_dir)
    return {"tasks": len(tg), "unplanned_peak": unplanned,
            "eager_schedule_peak": memory.simulate(tg, tg.order).peak,
            "best_schedule_peak": best.peak, "lower_bound": lb,
            "budget_option": budget, "bandwidth": bandwidth,
            "offload_to": str(offload_dir) if offload_dir is not None else "host memory",
            "main": main, "tight": tight}, (tg, mplan, tplan)


def numerics_step(inputs: dict[str, Any], plan: Any = None,
                  unit_name: str = "h100") -> tuple[dict[str, Any], Any]:
    """The GCN in bf16 with fp32 accumulation on a unit model; observed error and bound.

    With ``plan`` (the GCN's specialized plan), every product runs as the sparse engine
    lowered it (CSR segments, gathered block panels, gemm), each kernel on the unit.
    """
    from thrifty.numerics import unit
    from thrifty.runtime.emulate import emulate

    gin = {k: inputs[k] for k in ("A", "X", "W1", "W2")}
    u = unit(unit_name, input="bf16", output="fp32")
    t0 = time.perf_counter()
    graph = plan.graph if plan is not None else gcn2.trace(**gin)
    r = emulate(graph, gin, u, plan=plan)
    seconds = time.perf_counter() - t0
    return {"unit": f"{unit_name} bf16 -> fp32", "seconds": seconds,
            "kernels_on_unit": dict(r.kernels),
            "observed_max_error": r.observed[0], "bound": r.bounds[0],
            "certified_bound": r.certified[0],
            "within_bound": r.within_bounds(),
            "output_max": float(np.max(np.abs(r.reference[0])))}, r


def write_plots(directory: Path, inputs: dict[str, Any], plans: dict[str, Any],
                mem: tuple[Any, Any, Any], emu: Any, bandwidth: float) -> list[str]:
    """Spy plots, the memory timeline with its budget, observed errors against the bound."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from thrifty.memory.plot import plot_plan

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    fig, axes = plt.subplots(1, 2, figsize=(10, 5))
    axes[0].spy(inputs["A"], markersize=0.2)
    axes[0].set_title("input A (graph adjacency)")
    att_plan = plans["attention"]
    scores = next(n for n in att_plan.graph if n.op == "softmax")
    p = att_plan.propagation.effective[scores.id]
    if p.elements is not None:
        axes[1].spy(p.elements, markersize=0.2)
    axes[1].set_title(f"propagated pattern of softmax scores (density {p.density:.2g})")
    fig.tight_layout()
    fig.savefig(directory / "patterns.png", dpi=120)
    plt.close(fig)
    written.append(str(directory / "patterns.png"))
    tg, mplan, tplan = mem
    for name, p_ in (("memory.png", mplan), ("memory_tight.png", tplan)):
        fig = plot_plan(tg, p_, directory / name, offload_bandwidth=bandwidth,
                        title=f"GCN + attention task graph, budget {p_.budget:,} B")
        plt.close(fig)
        written.append(str(directory / name))
    err = np.abs(emu.outputs[0] - emu.reference[0]).ravel()
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.hist(err[err > 0], bins=log_bins(err[err > 0]), log=True, color="tab:blue")
    ax.axvline(emu.certified[0], color="tab:red",
               label=f"certified bound {emu.certified[0]:.3g}")
    ax.axvline(emu.observed[0], color="tab:green", ls="--",
               label=f"largest observed {emu.observed[0]:.3g}")
    ax.set_xscale("log")
    ax.set_xlabel("|bf16 on H100 model - float64|")
    ax.set_ylabel("output entries")
    ax.legend()
    fig.tight_layout()
    fig.savefig(directory / "errors.png", dpi=120)
    plt.close(fig)
    written.append(str(directory / "errors.png"))
    return written


@contextlib.contextmanager
def _progress(enabled: bool) -> Iterator[Callable[[str], None]]:
    from thrifty.cli.common import progress

    with progress("starting", enabled) as say:
        yield say


def run_demo(scale: int = 12, seed: int = 0, matrix: Path | None = None,
             budget: float | str = 1.0, bandwidth: float = 16e9, repeat: int = 3,
             plot_dir: Path | None = None, progress: bool = False,
             scheduler: Any = None, offload_dir: Path | None = None) -> dict[str, Any]:
    """Run every step of the demo and return its figures.

    ``scheduler``: ``None`` (the specialized plans choose; plans are executed in this
    process), or a ``dask.distributed.Client`` that runs both. ``offload_dir``: offload to
    files in this directory (numpy memmaps) instead of host memory.
    """
    from thrifty.sizes import is_fraction, parse_budget

    if not is_fraction(budget):
        parse_budget(budget)  # bytes: refuse a malformed budget before any work
    with _progress(progress) as say:
        say("generating inputs")
        inputs = demo_inputs(scale, seed, matrix)
        A = inputs["A"]
        figures: dict[str, Any] = {"scheduler": "local" if scheduler is None else
                                   f"dask.distributed at {scheduler.scheduler.address}",
                                   "graph": {
            "source": str(matrix) if matrix else f"rmat(scale={scale}, seed={seed})",
            "vertices": A.shape[0], "nnz": int(A.nnz),
            "density": A.nnz / float(A.shape[0] * A.shape[1])}}
        say("GCN: reference and specialized runs")
        gin = {k: inputs[k] for k in ("A", "X", "W1", "W2")}
        figures["gcn"], (gplan, gout) = sparse_step("gcn2", gcn2, gin, repeat, scheduler)
        say("attention: reference and specialized runs")
        ain = {"S": A, **{k: inputs[k] for k in ("X", "Wq", "Wk", "Wv")}}
        figures["attention"], (aplan, aout) = sparse_step("attention", attention, ain,
                                                            repeat, scheduler)
        say("memory: planning both blocks' task graph under the budget, executing the plan")
        figures["memory"], mem = memory_step(inputs, (gout, aout), budget,
                                             bandwidth, scheduler, offload_dir)
        say("numerics: the GCN's specialized kernels in bf16 on the H100 unit model")
        figures["numerics"], emu = numerics_step(inputs, gplan)
        if plot_dir is not None:
            say("writing plots")
            figures["plots"] = write_plots(plot_dir, inputs,
                                           {"gcn": gplan, "attention": aplan}, mem, emu,
                                           bandwidth)
    return figures


def print_summary(f: dict[str, Any]) -> None:
    g, m, nm = f["graph"], f["memory"], f["numerics"]
    specs = (f["gcn"], f["attention"])
    table(f"thrifty demo on {g['source']}: {g['vertices']:,} vertices, {g['nnz']:,} edges",
          ["", *(s["spec"] for s in specs)],
          [("dense numpy reference (s)", *(s["reference_seconds"] for s in specs)),
           ("specialized plan (s)", *(s["specialized_seconds"] for s in specs)),
           ("speed-up", *(f"{s['speedup']:.1f}x" for s in specs)),
           ("inspection (s)", *(s["inspect_seconds"] for s in specs)),
           ("executed / dense flops",
            *(f"{s['executed_flops'] / max(s['dense_flops'], 1):.2g}" for s in specs)),
           ("kernels", *(", ".join(f"{k} {v}" for k, v in s["kernels"].items())
                         for s in specs)),
           ("max relative difference", *(f"{s['max_relative_difference']:.1e}"
                                         for s in specs))])
    runs = (m["main"], m["tight"])
    table("memory: both blocks as one task graph, planned under a budget (offload to "
          f"{m.get('offload_to', 'host memory')})",
          ["", f"--budget {m['budget_option']}", "tight: 85% of best schedule"],
          [("budget (bytes)", *(f"{r['budget']:,}" for r in runs)),
           ("planned peak (simulated)", *(f"{r['planned_peak']:,}" for r in runs)),
           ("measured peak (executed plan)", *(f"{r['measured_peak']:,}" for r in runs)),
           ("time overhead", *(f"{r['overhead']:.1%}" for r in runs)),
           ("recomputes / offloads", *(f"{r['recomputes']} / {r['offloads']}" for r in runs)),
           ("results vs unplanned (max rel. diff)",
            *(f"{r['max_relative_difference']:.1e}" for r in runs))])
    click.echo(f"  {m['tasks']} tasks; unplanned peak (every buffer kept) "
               f"{m['unplanned_peak']:,} B, eager-free schedule {m['eager_schedule_peak']:,} B,"
               f" best schedule {m['best_schedule_peak']:,} B, proven lower bound "
               f"{m['lower_bound']:,} B")
    table("numerics: the GCN with bf16 inputs and fp32 accumulation, against float64",
          ["", "value"],
          [("unit model", nm["unit"]),
           ("kernels on the unit (the specialized plan's)",
            ", ".join(f"{k} {v}" for k, v in nm.get("kernels_on_unit", {}).items())),
           ("max |error| observed", f"{nm['observed_max_error']:.3g}"),
           ("certified bound (componentwise, these inputs)", f"{nm['certified_bound']:.3g}"),
           ("a priori bound (input ranges only)", f"{nm['bound']:.3g}"),
           ("within both bounds", "yes" if nm["within_bound"] else "NO"),
           ("max |output|", f"{nm['output_max']:.3g}"),
           ("emulation (s)", nm["seconds"])])
    for p in f.get("plots", []):
        click.echo(f"wrote {p}")


@click.command()
@click.option("--matrix", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A square sparse matrix file to use as the graph instead of R-MAT.")
@click.option("--scale", default=12, show_default=True,
              help="Generated R-MAT graph of 2**scale vertices.")
@click.option("--seed", default=0, show_default=True)
@click.option("--budget", default="1.0", show_default=True,
              help="Memory budget: a fraction in (0, 1] of the best schedule's peak, or "
                   "bytes (8MB, 16MiB); see the README's option table.")
@click.option("--offload-bandwidth", "bandwidth", type=float, default=None,
              help="Offload bandwidth in bytes per second  [default: 16e9, PCIe-like]")
@click.option("--bandwidth", "bandwidth_alias", type=float, default=None, hidden=True,
              help="Deprecated alias of --offload-bandwidth.")
@click.option("--plot", "plot_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Write PNG figures into this directory.")
@click.option("--scheduler", "address", metavar="tcp://HOST:PORT",
              help="Run on an existing dask.distributed scheduler.")
@click.option("--local-cluster", "local_workers", type=int, metavar="N",
              help="Run on a new local Dask cluster of N worker processes.")
@click.option("--offload-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Offload to files in this directory (created if missing) instead of "
                   "host memory.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def demo(matrix: Path | None, scale: int, seed: int, budget: str, bandwidth: float | None,
         bandwidth_alias: float | None, plot_dir: Path | None, address: str | None,
         local_workers: int | None, offload_dir: Path | None, as_json: bool) -> None:
    """Sparse specialization, memory planning and emulated precision on one program."""
    from thrifty.cli.common import deprecated_alias
    from thrifty.runtime.cluster import connect

    bandwidth = deprecated_alias("--bandwidth", "--offload-bandwidth", bandwidth_alias,
                                 bandwidth)
    if bandwidth is None:
        bandwidth = 16e9
    try:
        with connect(address, local_workers) as client:
            figures = run_demo(scale=scale, seed=seed, matrix=matrix,
                               budget=budget, bandwidth=bandwidth,
                               plot_dir=plot_dir, progress=not as_json, scheduler=client,
                               offload_dir=offload_dir)
    except th.ThriftyError as e:
        raise click.ClickException(str(e)) from None
    if as_json:
        emit_json(figures)
    else:
        print_summary(figures)

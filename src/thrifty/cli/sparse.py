"""``thrifty sparse``: run and benchmark specialized sparse kernels."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click


@click.group()
def group() -> None:
    """Sparse engine: specialize dense specs to the sparsity of their inputs."""


def _fmt(x: Any, spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec)


@group.command("run")
@click.option("--kernel", type=click.Choice(["spmv", "spmm", "sddmm", "masked-spgemm", "gcn",
                                             "attention"]), required=True)
@click.option("--matrix", "matrix", type=click.Path(exists=True, dir_okay=False),
              required=True, help="A .mtx, .mat or Rutherford-Boeing file.")
@click.option("--k", "k", type=click.IntRange(1), default=64, show_default=True,
              help="Dense columns (SpMM, SDDMM, GCN, attention).")
@click.option("--repeat", type=click.IntRange(1), default=5, show_default=True)
@click.option("--scheduler", default="auto", show_default=True, metavar="SCHEDULER",
              help="auto (choose), sync, threads, or a Dask scheduler address "
                   "tcp://HOST:PORT.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="Draw the matrix's nonzero pattern (a spy plot) to this image file.")
def run(kernel: str, matrix: str, k: int, repeat: int, scheduler: str, seed: int,
        as_json: bool, plot_path: str | None) -> None:
    """Specialize KERNEL to a matrix file, time it, and compare with scipy."""
    import numpy as np
    import scipy.sparse as sp

    from thrifty.cli.common import progress, spy_plot
    from thrifty.errors import ThriftyError
    from thrifty.front.matrices import load_matrix
    from thrifty.sparse.bench import interleaved_times, make_inputs, peer_fns, programs

    with progress(f"reading {matrix}"):
        A = load_matrix(matrix)
    if plot_path:
        spy_plot(A, plot_path, f"{Path(matrix).name}: {A.shape[0]} x {A.shape[1]}, "
                               f"{A.nnz:,} nonzeros")
    prog = programs()[kernel]
    if kernel in ("masked-spgemm", "gcn", "attention") and A.shape[0] != A.shape[1]:
        raise click.UsageError(f"--kernel {kernel} needs a square matrix; {matrix} is "
                               f"{A.shape[0]} x {A.shape[1]}")
    inputs = make_inputs(kernel, A, np.random.default_rng(seed), k)
    with progress(f"specializing {kernel}") as say:
        try:
            plan = prog.specialize(**inputs)
        except ThriftyError as e:
            raise click.ClickException(str(e)) from None
        from thrifty.runtime.schedulers import resolve_scheduler

        try:
            sched = None if scheduler == "auto" else resolve_scheduler(scheduler)
        except ThriftyError as e:
            raise click.BadParameter(str(e), param_hint="--scheduler") from None
        say(f"timing {kernel} and scipy ({repeat} runs each)")
        peers = interleaved_times({"thrifty": lambda: plan.run(inputs, scheduler=sched),
                                   **peer_fns(kernel, A, inputs, ("scipy",))}, repeat)
    seconds = peers.pop("thrifty")
    rep = plan.report()
    out = {
        "kernel": kernel, "matrix": str(matrix), "shape": list(A.shape), "nnz": int(A.nnz),
        "k": k, "seconds": seconds, "gflops": rep["useful_flops"] / seconds / 1e9,
        "kernels": rep["kernels"], "tasks": rep["tasks"],
        "inspect_seconds": rep["inspect_seconds"], "useful_flops": rep["useful_flops"],
        "executed_flops": rep["executed_flops"], "comparison_seconds": peers,
        "output": "csr" if sp.issparse(plan.run(inputs, scheduler=sched)) else "dense",
    }
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{kernel} on {Path(matrix).name} ({A.shape[0]}x{A.shape[1]}, "
                    f"{A.nnz} nnz), k={k}")
    for c in ("implementation", "seconds", "GFLOP/s", "vs thrifty"):
        t.add_column(c)
    t.add_row("thrifty", _fmt(seconds), _fmt(out["gflops"]), "1")
    for name, s in peers.items():
        if s:
            t.add_row(name, _fmt(s), _fmt(rep["useful_flops"] / s / 1e9), _fmt(s / seconds))
    console = Console()
    console.print(t)
    console.print(f"kernels: {rep['kernels']}  tasks: {rep['tasks']}  "
            f"inspection: {rep['inspect_seconds']:.3g} s  "
            f"executed/useful flops: {rep['executed_flops'] / max(1, rep['useful_flops']):.3g}")


def bench_table(rows: list[dict[str, Any]], info: dict[str, Any]) -> Any:
    """The benchmark rows as a rich Table."""
    from rich.table import Table

    t = Table(title=f"thrifty sparse bench — {info['processor']}, {info['cpu_count']} cores, "
                    f"numpy {info['numpy']}, scipy {info['scipy']}, {info['threads']} threads, "
                    f"triad {rows[0]['triad_bandwidth_GBs']:.1f} GB/s" if rows else "empty")
    for col in ("instance", "kernel", "nnz", "ours ms", "GF/s", "exec/useful", "best peer",
                "vs best", "vs scipy", "vs full+mask", "vs pydata", "inspect ms", "payback",
                "BW frac", "kernels"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["instance"].replace("file:", ""), r["kernel"], str(r["nnz"]),
                  _fmt(r["ours_s"] * 1e3), _fmt(r["useful_gflops"]),
                  _fmt(r["executed_over_useful"]), r["best_baseline"] or "-",
                  _fmt(r["speedup_vs_best"]), _fmt(r["speedup_vs_scipy"]),
                  _fmt(r["speedup_vs_full_then_mask"]), _fmt(r["speedup_vs_pydata"]),
                  _fmt(r["inspect_s"] * 1e3), _fmt(r["payback_runs"], "d"),
                  _fmt(r.get("bandwidth_fraction")),
                  ",".join(f"{k}:{v}" for k, v in r["kernels"].items()))
    return t


@group.command("bench")
@click.option("--quick", is_flag=True, help="Small generated instances, 4 collection matrices.")
@click.option("--repeat", type=click.IntRange(5), default=5, show_default=True,
              help="Timed runs per measurement after a warm-up (median; at least 5).")
@click.option("--kernel", "kernels", multiple=True,
              type=click.Choice(["spmv", "spmm", "sddmm", "masked-spgemm", "gcn", "attention"]))
@click.option("--instance", "instances", multiple=True,
              help="poisson2d-N, poisson3d-N, rmat-SCALE or file:GROUP/NAME.mtx")
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="JSON output (default benchmarks/results/sparse_bench.json).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def bench(quick: bool, repeat: int, kernels: tuple[str, ...], instances: tuple[str, ...],
          out: str | None, as_json: bool) -> None:
    """Benchmark specialized plans against scipy, dense numpy, pydata sparse, graphblas."""
    from rich.console import Console

    from thrifty.sparse.bench import machine_info, run_benchmark, summarize

    console = Console(stderr=as_json, width=max(Console().width, 220))
    info = machine_info()
    rows = run_benchmark(quick=quick, kernels=kernels or None, instances=instances or None,
                         repeat=repeat, progress=lambda s: console.log(s))
    summary = summarize(rows)
    result = {"machine": info, "quick": quick, "repeat": repeat, "rows": rows,
              "summary": summary}
    path = Path(out) if out else Path("benchmarks") / "results" / "sparse_bench.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, default=str))
    if as_json:
        click.echo(json.dumps(result, indent=2, default=str))
        return
    console.print(bench_table(rows, info))
    from rich.table import Table

    s = Table(title="geometric means (targets: SpMM >= 1.5x scipy; SDDMM, masked SpGEMM >= 5x "
                    "full+mask; GCN, attention >= 2x scipy; >= 10x pydata; never < 0.9x best)")
    for col in ("kernel", "vs best", "worst vs best", "vs scipy", "vs full+mask", "vs pydata",
                "max payback runs"):
        s.add_column(col)
    for kernel, v in summary.items():
        s.add_row(kernel, _fmt(v["gmean_vs_best"]), _fmt(v["worst_vs_best"]),
                  _fmt(v["gmean_vs_scipy"]), _fmt(v["gmean_vs_full_then_mask"]),
                  _fmt(v["gmean_vs_pydata"]), _fmt(v["max_payback_runs"], "d"))
    console.print(s)
    console.print(f"JSON written to {path}")


@group.command("demo")
def demo() -> None:
    """A GCN layer on the Cora graph: the specialized plan next to the dense reference."""
    demo_run()


def demo_run() -> None:
    """Print a specialized GCN run next to the reference (used by ``thrifty demo``)."""
    import time

    import numpy as np
    import scipy.sparse as sp
    from rich.console import Console

    import thrifty as th
    from thrifty.front.matrices import load_matrix, poisson2d
    from thrifty.testing import shared_data_dir

    root = shared_data_dir()
    cora = root / "matrices" / "Planetoid" / "cora.mtx" if root else None
    A = load_matrix(cora) if cora is not None and cora.exists() else poisson2d(50)
    name = "cora" if cora is not None and cora.exists() else "poisson2d(50)"
    rng = np.random.default_rng(0)
    X, W = rng.standard_normal((A.shape[0], 64)), rng.standard_normal((64, 16))
    gcn = th.program(lambda A, X, W: th.relu(A @ (X @ W)))
    t0 = time.perf_counter()
    plan = gcn.specialize(A=A, X=X, W=W)
    t_inspect = time.perf_counter() - t0
    plan(A=A, X=X, W=W)
    t0 = time.perf_counter()
    Y = plan(A=A, X=X, W=W)
    t_plan = time.perf_counter() - t0
    from thrifty.runtime.reference import evaluate

    t0 = time.perf_counter()
    (R,) = evaluate(gcn.trace(A=A, X=X, W=W), {"A": A, "X": X, "W": W})
    t_ref = time.perf_counter() - t0
    err = float(np.max(np.abs(Y - R)) / max(1e-300, float(np.max(np.abs(R)))))
    rep = plan.report()
    c = Console()
    c.print(f"[bold]GCN layer relu(A @ (X @ W))[/] on {name}: {A.shape[0]} nodes, {A.nnz} "
            f"edges ({'sparse' if sp.issparse(A) else 'dense'})")
    c.print(f"  dense reference: {t_ref * 1e3:.2f} ms, {rep['dense_flops'] / 1e6:.1f} MFLOP")
    c.print(f"  specialized:     {t_plan * 1e3:.2f} ms, {rep['executed_flops'] / 1e6:.1f} MFLOP "
            f"(inspection {t_inspect * 1e3:.1f} ms), kernels {rep['kernels']}")
    c.print(f"  max relative difference: {err:.2e}")

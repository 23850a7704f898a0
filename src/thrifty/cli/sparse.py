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


KERNELS = ("spmv", "spmm", "sddmm", "masked-spgemm", "gcn", "attention")


def _program(kernel: str) -> Any:
    import thrifty as th

    return {
        "spmv": lambda: th.program(lambda A, x: A @ x),
        "spmm": lambda: th.program(lambda A, X: A @ X),
        "sddmm": lambda: th.program(lambda X, Y, S: (X @ Y.T) * S),
        "masked-spgemm": lambda: th.program(lambda L: (L @ L) * L),
        "gcn": lambda: th.program(lambda A, X, W: th.relu(A @ (X @ W))),
        "attention": lambda: th.program(lambda Q, K, V, S: th.softmax(Q @ K.T, mask=S) @ V),
    }[kernel]()


def _inputs(kernel: str, A: Any, seed: int, k: int) -> tuple[dict[str, Any], str, Any]:
    """Seeded inputs of ``kernel`` around ``A``, and a reference form of the computation
    (its name and a function) to time beside the plan."""
    import numpy as np
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    n, m = A.shape
    if kernel == "spmv":
        x = rng.standard_normal(m)
        return {"A": A, "x": x}, "scipy", lambda: A @ x
    if kernel == "spmm":
        X = rng.standard_normal((m, k))
        return {"A": A, "X": X}, "scipy", lambda: A @ X
    if kernel == "sddmm":
        X, Y = rng.standard_normal((n, k)), rng.standard_normal((m, k))
        return {"X": X, "Y": Y, "S": A}, "full_then_mask", \
            lambda: A.multiply(X @ Y.T).tocsr()
    if kernel == "masked-spgemm":
        L = sp.csr_array(sp.tril(A, -1))
        L.data[:] = 1.0
        return {"L": L}, "full_then_mask", lambda: (L @ L).multiply(L)
    if kernel == "gcn":
        X, W = rng.standard_normal((n, k)), rng.standard_normal((k, k))
        return {"A": A, "X": X, "W": W}, "scipy", lambda: np.maximum(A @ (X @ W), 0)
    Q, K_, V = (rng.standard_normal((n, k)) for _ in range(3))
    from thrifty.graph.ops import softmax_ref

    return ({"Q": Q, "K": K_, "V": V, "S": A}, "dense",
            lambda: softmax_ref(Q @ K_.T, A.toarray(), axis=1) @ V)


def _median_times(fns: dict[str, Any], repeat: int) -> dict[str, float]:
    """Median seconds per call, after a warm-up, the functions in a new random order each
    round (so that a varying machine load hits each alike)."""
    import statistics
    import time

    import numpy as np

    for f in fns.values():
        f()
    ts: dict[str, list[float]] = {k: [] for k in fns}
    keys = list(fns)
    rng = np.random.default_rng(0)
    for _ in range(repeat):
        for i in rng.permutation(len(keys)):
            t0 = time.perf_counter()
            fns[keys[i]]()
            ts[keys[i]].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in ts.items()}


@group.command("run")
@click.option("--kernel", type=click.Choice(list(KERNELS)), required=True)
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
    import scipy.sparse as sp

    from thrifty.cli.common import progress, spy_plot
    from thrifty.errors import ThriftyError
    from thrifty.front.matrices import load_matrix

    with progress(f"reading {matrix}"):
        A = load_matrix(matrix)
    if plot_path:
        spy_plot(A, plot_path, f"{Path(matrix).name}: {A.shape[0]} x {A.shape[1]}, "
                               f"{A.nnz:,} nonzeros")
    prog = _program(kernel)
    if kernel in ("masked-spgemm", "gcn", "attention") and A.shape[0] != A.shape[1]:
        raise click.UsageError(f"--kernel {kernel} needs a square matrix; {matrix} is "
                               f"{A.shape[0]} x {A.shape[1]}")
    inputs, ref_name, ref_fn = _inputs(kernel, A, seed, k)
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
        say(f"timing {kernel} and {ref_name} ({repeat} runs each)")
        peers = _median_times({"thrifty": lambda: plan.run(inputs, scheduler=sched),
                               ref_name: ref_fn}, repeat)
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


def _bench_script() -> Path | None:
    """``benchmarks/sparse_bench.py`` of the source checkout (the working directory's, else
    the one beside the sources thrifty is imported from), or None."""
    import thrifty

    for root in (Path.cwd(), Path(thrifty.__file__).resolve().parents[2]):
        p = root / "benchmarks" / "sparse_bench.py"
        if p.is_file():
            return p
    return None


@group.command("bench", context_settings={"ignore_unknown_options": True,
                                          "allow_extra_args": True, "help_option_names": []})
@click.pass_context
def bench(ctx: click.Context) -> None:
    """Run ``benchmarks/sparse_bench.py`` of the source checkout with these arguments
    (``--full``, ``--kernel``, ``--instance``, ``--k``, ``--repeat``, ``--threads``,
    ``--out``, ``--help``): plans against scipy, MKL, torch, graphblas, pydata, dense."""
    import importlib.util
    import sys

    path = _bench_script()
    if path is None:
        raise click.ClickException("the sparse benchmark lives in the source tree "
                                   "(benchmarks/sparse_bench.py); run this command from a "
                                   "checkout of thrifty")
    spec = importlib.util.spec_from_file_location("thrifty_sparse_bench", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # numba's cache locates compiled functions by module
    spec.loader.exec_module(mod)
    mod.main.main(args=list(ctx.args), prog_name="thrifty sparse bench",
                  standalone_mode=False)


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

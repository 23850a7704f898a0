"""A sparse plan's row panels on a dask.distributed cluster: 1 worker process against 2.

Instance: ``random-N-PERROW`` (``N`` rows, ``PERROW`` uniformly random columns a row, float64,
int32 indices; default 640000 x 16: 1.02e7 nonzeros). Kernels: SpMV and SpMM with
``k = 16`` and ``64``. For each cluster (a ``LocalCluster`` of 1 or 2 worker processes, one
thread each) and kernel:

* ``scatter once``: ``plan.distribute(client, {"A": A})``: A's row pieces sent to the
  workers that will run their panels (the cost paid once per matrix);
* ``same operand``: the median of ``--repeat`` runs with the same dense operand (already
  on the workers): submitting the panels, computing, gathering the output;
* ``new operand``: the median of runs with a new dense operand each call (broadcast to
  every worker first): what an iterative method that changes ``x`` every step pays;
* the in-process plan (``plan.run``, its own threads) as the context.

The ratio is the 1-worker time over the 2-worker time of the same column. Writes
``benchmarks/results/sparse_distributed[_quick].json`` and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy
import scipy.sparse as sp

import thrifty as th


def instance(n: int, per: int) -> sp.csr_array:
    """``n`` x ``n``, ``per`` random columns a row (duplicates summed), seeded."""
    rng = np.random.default_rng(0)
    cols = rng.integers(0, n, size=n * per, dtype=np.int32)
    indptr = np.arange(0, n * per + 1, per, dtype=np.int64)
    A = sp.csr_array((rng.standard_normal(n * per), cols, indptr), shape=(n, n))
    A.sum_duplicates()  # sorts the columns of each row, sums the repeats
    A.indptr = A.indptr.astype(np.int32)
    A.indices = A.indices.astype(np.int32)
    return A


def operand(n: int, k: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n) if k == 0 else rng.standard_normal((n, k))


def _median(fn: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_kernel(client: Any, plan: Any, A: sp.csr_array, k: int, repeat: int
                 ) -> dict[str, float]:
    """One kernel on one cluster: scatter once, per call with the same and new operands."""
    x = operand(A.shape[0], k, 1)
    t0 = time.perf_counter()
    handle = plan.distribute(client, {"A": A})
    scatter_a = time.perf_counter() - t0
    want = plan.run({"A": A, "x": x})
    got = handle.run({"A": A, "x": x})  # first run: the operand goes out; warm-up
    first = handle.timings
    assert np.allclose(got, want, rtol=1e-10, atol=1e-12)
    del got, want
    same = _median(lambda: handle.run({"A": A, "x": x}), repeat)
    fresh = [operand(A.shape[0], k, 2 + i) for i in range(repeat)]
    splits: list[float] = []

    def new_operand() -> None:
        handle.run({"A": A, "x": fresh.pop()})
        splits.append(handle.timings["scatter"])

    new = _median(new_operand, repeat)
    pieces = sum(len(v) for v in handle.placement()["A"].values())
    handle.forget()
    return {"scatter_A_s": scatter_a, "first_run_s": first["scatter"] + first["compute"],
            "same_operand_s": same, "new_operand_s": new,
            "operand_scatter_s": statistics.median(splits), "pieces": pieces}


def bench_cluster(workers: int, A: sp.csr_array, plans: dict[str, Any], ks: dict[str, int],
                  repeat: int) -> dict[str, dict[str, float]]:
    """Every kernel on a new LocalCluster of ``workers`` processes (1 thread each)."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                      dashboard_address=None, silence_logs=50,
                      memory_limit=0) as cluster, Client(cluster) as client:
        return {name: bench_kernel(client, plan, A, ks[name], repeat)
                for name, plan in plans.items()}


def in_process(plan: Any, A: sp.csr_array, k: int, repeat: int) -> float:
    x = operand(A.shape[0], k, 1)
    plan.run({"A": A, "x": x})
    return _median(lambda: plan.run({"A": A, "x": x}), repeat)


def run(n: int, per: int, repeat: int) -> dict[str, Any]:
    A = instance(n, per)
    ks = {"spmv": 0, "spmm16": 16, "spmm64": 64}
    prog = th.program(lambda A, x: A @ x)
    plans = {name: prog.specialize(A=A, x=operand(n, k, 1)) for name, k in ks.items()}
    inproc = {name: in_process(plan, A, ks[name], repeat) for name, plan in plans.items()}
    clusters = {w: bench_cluster(w, A, plans, ks, repeat) for w in (1, 2)}
    rows = []
    for name in ks:
        one, two = clusters[1][name], clusters[2][name]
        rows.append({"kernel": name, "k": ks[name], "in_process_s": inproc[name],
                     "workers_1": one, "workers_2": two,
                     "ratio_same": one["same_operand_s"] / two["same_operand_s"],
                     "ratio_new": one["new_operand_s"] / two["new_operand_s"],
                     "ratio_scatter_A": one["scatter_A_s"] / two["scatter_A_s"]})
    return {"instance": f"random-{n}-{per}", "rows_n": n, "nnz": int(A.nnz),
            "matrix_bytes": int(A.data.nbytes + A.indices.nbytes + A.indptr.nbytes),
            "repeat": repeat, "machine": _machine(), "results": rows}


def _machine() -> dict[str, Any]:
    import dask
    import distributed

    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "cpus": os.cpu_count(), "load_average": os.getloadavg(),
            "platform": platform.platform(), "python": sys.version.split()[0],
            "numpy": np.__version__, "scipy": scipy.__version__,
            "dask": dask.__version__, "distributed": distributed.__version__}


def print_table(result: dict[str, Any]) -> None:
    print(f"{result['instance']}: {result['nnz']:.3g} nonzeros, "
          f"{result['matrix_bytes'] / 1e6:.0f} MB of CSR; medians of {result['repeat']}")
    print("| kernel | in process | scatter A once (1 / 2 workers) | per call, same operand "
          "(1 / 2 workers) | ratio | per call, new operand (1 / 2) | ratio | "
          "operand scatter per call (1 / 2) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in result["results"]:
        one, two = r["workers_1"], r["workers_2"]
        print(f"| {r['kernel']} | {r['in_process_s']:.3f} s "
              f"| {one['scatter_A_s']:.2f} / {two['scatter_A_s']:.2f} s "
              f"| {one['same_operand_s']:.3f} / {two['same_operand_s']:.3f} s "
              f"| {r['ratio_same']:.2f}x "
              f"| {one['new_operand_s']:.3f} / {two['new_operand_s']:.3f} s "
              f"| {r['ratio_new']:.2f}x "
              f"| {one['operand_scatter_s']:.3f} / {two['operand_scatter_s']:.3f} s |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="160000 x 16 (2.6e6 nonzeros)")
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--per-row", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    n = args.rows or (160_000 if args.quick else 640_000)
    result = run(n, args.per_row, args.repeat)
    result["load_average_after"] = os.getloadavg()
    path = Path(args.out) if args.out else Path(__file__).resolve().parent / "results" / (
        "sparse_distributed_quick.json" if args.quick else "sparse_distributed.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, default=str))
    print_table(result)
    print(f"JSON written to {path}")


if __name__ == "__main__":
    main()

"""SpMM plans with and without streaming output stores, against MKL, in one run.

For each instance and width: the plan as it runs (streaming stores where
``thrifty.sparse.tasks.STREAM_MAX_K`` allows), the same plan with ordinary stores, the plan
cut into tasks as before the tasks became a multiple of the threads (ordinary stores), MKL
(``sparse-dot-mkl``), scipy and a STREAM triad, in shuffled rounds on the same 2 threads.
Prints medians and minima of the wall time, and MKL's time over each.

Usage::

    PYTHONPATH=src python benchmarks/spmm_stream.py [--k 16] [--repeat 30] [INSTANCE ...]
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sparse_bench import load, make_inputs, programs, triad_fn  # noqa: E402
from sparse_peers import _mkl, set_threads  # noqa: E402


def _plans(name: str, k: int) -> tuple[dict[str, Callable[[], Any]], np.ndarray]:
    from thrifty.runtime.sparse_run import specialize
    from thrifty.sparse import tasks as T
    from thrifty.sparse.cost import CostModel

    class ThreeTaskCost(CostModel):  # the task count before it became a multiple of threads
        def n_tasks(self, seconds: float) -> int:
            if seconds < 2 * self.min_task_seconds or self.threads <= 1:
                return 1
            return int(min(self.tasks_per_thread * self.threads,
                           max(1, seconds // self.min_task_seconds)))

    A = load(name)
    inp = make_inputs("spmm", A, np.random.default_rng(0), k)
    tr = programs()["spmm"].traced(**inp)
    plan = specialize(tr.graph, inp, structure=tr.structure, cost=CostModel(threads=2))
    old = specialize(tr.graph, inp, structure=tr.structure, cost=ThreeTaskCost(threads=2))
    max_k = T.STREAM_MAX_K

    def run(p: Any, stream: bool) -> Callable[[], Any]:
        def f() -> Any:
            T.STREAM_MAX_K = max_k if stream else 0
            return p.run(inp)
        return f

    mkl = _mkl()
    Am = sp.csr_matrix(A)
    X = inp["X"]
    fns = {"plan": run(plan, True), "plan, ordinary stores": run(plan, False),
           "plan, old task cut": run(old, False), "scipy": lambda: A @ X,
           "triad": triad_fn()}
    if mkl is not None:
        fns["mkl"] = lambda: mkl.dot_product_mkl(Am, X)
    return fns, A @ X


@click.command()
@click.option("--k", "ks", type=int, multiple=True, default=(16,))
@click.option("--repeat", type=int, default=30)
@click.argument("instances", nargs=-1)
def main(ks: tuple[int, ...], repeat: int, instances: tuple[str, ...]) -> None:
    set_threads(2)
    for name in instances or ("poisson2d-300", "poisson3d-40"):
        for k in ks:
            fns, ref = _plans(name, k)
            for key, f in fns.items():
                got = f()
                if key.startswith("plan") and not np.allclose(got, ref):
                    raise SystemExit(f"{key} differs from scipy on {name}")
                f()
            ts: dict[str, list[float]] = {key: [] for key in fns}
            rng = np.random.default_rng(0)
            load0 = os.getloadavg()[0]
            for _ in range(repeat):
                for i in rng.permutation(len(fns)):
                    key = list(fns)[i]
                    t0 = time.perf_counter()
                    fns[key]()
                    fns[key]()
                    ts[key].append((time.perf_counter() - t0) / 2)
            med = {key: statistics.median(v) for key, v in ts.items()}
            low = {key: min(v) for key, v in ts.items()}
            ref_key = "mkl" if "mkl" in fns else "scipy"
            print(f"{name} k={k} load {load0:.2f}-{os.getloadavg()[0]:.2f} "
                  f"(ms median / min; {ref_key} over each: median, min)")
            for key in fns:
                print(f"  {key:22s} {med[key] * 1e3:8.3f} / {low[key] * 1e3:8.3f}   "
                      f"{med[ref_key] / med[key]:5.2f} {low[ref_key] / low[key]:5.2f}")


if __name__ == "__main__":
    main()

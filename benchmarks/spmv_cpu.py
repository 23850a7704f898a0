"""Benchmark: one SpMV plan against scipy's ``A @ x`` in CPU time of one thread.

On a shared machine wall-clock medians swing by 2x and more with the other jobs' load
(``sparse_bench.py`` reports them; read its ratios with the load average beside them). The
CPU time of the calling thread, minimum over interleaved rounds, is much less sensitive:
this script times, per instance, a plan specialized with one thread (``CostModel(threads=1)``,
so that all its work is in the calling thread) called as ``plan.run(inputs)`` and as
``plan(A=A, x=x)``, and scipy's ``A @ x``, and prints scipy's time over the plan's (above 1:
the plan is faster). Run it with ``PYTHONPATH`` set to each source tree to compare trees.

Usage::

    PYTHONPATH=src python benchmarks/spmv_cpu.py [INSTANCE ...] [--rounds 31]

Instances are named as in ``sparse_bench.py`` (``poisson2d-300``, ``file:HB/bcsstk13.mtx``,
…); the default is its quick SpMV set plus the two generated ones with ≥ 10^6 nonzeros.
Writes ``benchmarks/results/spmv_cpu.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sparse_bench import load  # noqa: E402

DEFAULT = ["poisson2d-300", "poisson3d-40", "rmat-14", "random-50000-16",
           "file:HB/bcsstk13.mtx", "file:Planetoid/cora.mtx", "file:SNAP/ca-HepTh.mtx",
           "file:SuiteSparse_test/arrow.mtx", "poisson3d-64", "random-200000-16"]


def main() -> None:
    import thrifty as th
    from thrifty.runtime.sparse_run import specialize
    from thrifty.sparse.cost import CostModel

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("instances", nargs="*", default=DEFAULT)
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" /
                                         "spmv_cpu.json"))
    args = ap.parse_args()
    rows = []
    for name in args.instances:
        A = load(name)
        x = np.random.default_rng(0).standard_normal(A.shape[1])
        inputs = {"A": A, "x": x}
        tr = th.program(lambda A, x: A @ x).traced(**inputs)
        plan = specialize(tr.graph, inputs, structure=tr.structure, cost=CostModel(threads=1))
        fns = {"scipy": lambda A=A, x=x: A @ x,
               "run": lambda plan=plan, inputs=inputs: plan.run(inputs),
               "call": lambda plan=plan, A=A, x=x: plan(A=A, x=x)}
        want = A @ x
        for f in fns.values():
            np.testing.assert_allclose(f(), want, rtol=1e-10, atol=1e-12)
        t0 = time.perf_counter()
        for _ in range(5):
            A @ x
        inner = max(1, int(2e-3 / ((time.perf_counter() - t0) / 5)))
        best = dict.fromkeys(fns, float("inf"))
        for r in range(args.rounds):
            for k in (list(fns) if r % 2 else list(fns)[::-1]):
                f = fns[k]
                t0 = time.thread_time()
                for _ in range(inner):
                    f()
                best[k] = min(best[k], (time.thread_time() - t0) / inner)
        row = {"instance": name, "nnz": int(A.nnz), "kernels": plan.report()["kernels"],
               "scipy_us": best["scipy"] * 1e6, "run_us": best["run"] * 1e6,
               "call_us": best["call"] * 1e6, "scipy_over_run": best["scipy"] / best["run"],
               "scipy_over_call": best["scipy"] / best["call"]}
        rows.append(row)
        print(f"{name:34s} nnz {A.nnz:9d}  scipy {row['scipy_us']:9.1f} µs  "
              f"scipy/run {row['scipy_over_run']:.3f}  scipy/call {row['scipy_over_call']:.3f}",
              flush=True)
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "load_average": os.getloadavg(), "rounds": args.rounds, "rows": rows}
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

"""A dense matrix stored as CSR (Regtools/wing_500: 500 x 500, every entry stored) and
near-full patterns: a plan's products against dense numpy, by CPU time of the calling thread.

Two tables, each from shuffled interleaved rounds in one process, one BLAS thread:

- ``full``: on wing_500, ``A @ x`` and ``A @ X`` (k = 16, 64, 256) by the plan
  (``plan.run``, as ``sparse_bench.py`` calls it), by the per-call path plans had before
  the full-pattern kernel checked its own pattern (the index arrays compared with the
  inspected copy by :func:`thrifty.sparse.kernels.same_values`, then BLAS on the values'
  view), and by dense numpy's ``D @ X`` on the prebuilt dense matrix;
- ``near``: random 500 x 500 patterns of density 0.3-0.99, ``A @ X`` by the plan as made
  now (block rows of one column set sharing a gathered panel) and with
  ``PANEL_MAX_ENTRIES = 0`` (one panel per block row, as before), and dense numpy.

CPU time of the calling thread (``time.thread_time``) rather than wall time: on the
shared 2-core machine the wall time of a call is bimodal (it ran through, or its thread
lost its core), and every implementation here runs on the calling thread alone (BLAS
limited to one thread). The minimum and the median over the rounds are printed, with the
load average before and after; ``--out`` writes the JSON.

    PYTHONPATH=src python benchmarks/full_pattern.py [--rounds 25] [--out FILE]
"""

from __future__ import annotations

import json
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


def _sample(f: Callable[[], Any], inner: int) -> float:
    t0 = time.thread_time()
    for _ in range(inner):
        f()
    return (time.thread_time() - t0) / inner


def _race(fns: dict[str, Callable[[], Any]], rounds: int, ref: str) -> dict[str, Any]:
    """Minimum and median seconds per call of each, in shuffled rounds of about 4 ms."""
    inner = max(1, int(4e-3 / max(_sample(fns[ref], 2), 1e-7)))
    ts: dict[str, list[float]] = {n: [] for n in fns}
    for r in range(rounds):
        for n in np.random.default_rng(r).permutation(list(fns)):
            ts[str(n)].append(_sample(fns[str(n)], inner))
    return {n: {"min": min(v), "median": statistics.median(v)} for n, v in ts.items()}


def _full_case(A: sp.csr_array, kern: str, k: int, rounds: int) -> dict[str, Any]:
    """One row of the ``full`` table (``A``: wing_500)."""
    from sparse_bench import _inspect, make_inputs
    from thrifty.sparse import kernels as K

    D = A.toarray()
    ip, ix = A.indptr.copy(), A.indices.copy()
    inp = make_inputs(kern, A, np.random.default_rng(0), k)
    plan, _ = _inspect(kern, inp, 1, None)
    X = inp["x" if kern == "spmv" else "X"]

    def before() -> np.ndarray:  # the per-call path before: the inspected copy compared
        if not (K.same_values(A.indptr, ip) and K.same_values(A.indices, ix)):
            raise AssertionError("pattern changed")
        return np.asarray(np.matmul(A.data.reshape(A.shape), X))

    fns = {"plan": lambda: plan.run(inp), "before": before, "dense": lambda: D @ X}
    for n in ("plan", "before"):
        np.testing.assert_allclose(fns[n](), D @ X, rtol=1e-9, atol=1e-9)
    return {"instance": "Regtools/wing_500", "kernel": kern, "k": k,
            "times": _race(fns, rounds, "dense"), "kernels": plan.report()["kernels"]}


def full_rows(rounds: int) -> list[dict[str, Any]]:
    from sparse_bench import load

    A = load("file:Regtools/wing_500.mat")
    return [_full_case(A, kern, k, rounds)
            for kern, k in (("spmv", 1), ("spmm", 16), ("spmm", 64), ("spmm", 256))]


def _near_case(D: np.ndarray, X: np.ndarray, rounds: int) -> dict[str, Any]:
    """One row of the ``near`` table: ``A @ X`` for ``A`` the CSR form of ``D``."""
    import thrifty as th
    from thrifty.runtime.sparse_run import specialize
    from thrifty.sparse import lower_matmul as LM

    A = sp.csr_array(D)
    tr = th.program(lambda A, X: A @ X).traced(A=A, X=X)
    cap = LM.PANEL_MAX_ENTRIES
    plans = {}
    try:
        for name, c in (("joined", cap), ("per_block_row", 0)):
            LM.PANEL_MAX_ENTRIES = c
            plans[name] = specialize(tr.graph, {"A": A, "X": X}, structure=tr.structure)
    finally:
        LM.PANEL_MAX_ENTRIES = cap
    joined, per_row = plans["joined"], plans["per_block_row"]
    fns = {"joined": lambda: joined(A=A, X=X), "per_block_row": lambda: per_row(A=A, X=X),
           "dense": lambda: D @ X}
    for n in ("joined", "per_block_row"):
        np.testing.assert_allclose(fns[n](), D @ X, rtol=1e-9, atol=1e-9)
    return {"times": _race(fns, rounds, "dense"), "kernels": joined.report()["kernels"]}


def near_rows(rounds: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    rows = []
    for k in (16, 64, 256):
        for density in (0.3, 0.5, 0.75, 0.9, 0.99):
            D = rng.standard_normal((500, 500))
            D[rng.random((500, 500)) >= density] = 0
            rows.append({"density": density, "k": k,
                         **_near_case(D, rng.standard_normal((500, k)), rounds)})
    return rows


def _us(t: dict[str, float]) -> str:
    return f"{t['min'] * 1e6:8.1f} {t['median'] * 1e6:8.1f}"


@click.command()
@click.option("--rounds", default=25, show_default=True, type=click.IntRange(min=3))
@click.option("--out", type=click.Path(dir_okay=False), default=None)
def main(rounds: int, out: str | None) -> None:
    """Full and near-full patterns: the plan against dense numpy and the previous paths."""
    from threadpoolctl import threadpool_limits

    load0 = os.getloadavg()
    with threadpool_limits(1):
        full, near = full_rows(rounds), near_rows(rounds)
    load1 = os.getloadavg()
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load "
          f"{load0[0]:.2f} -> {load1[0]:.2f}; CPU time per call, us (min, median)")
    print("\nwing_500     plan (min med)     before (min med)   dense (min med)   "
          "dense/plan  dense/before (medians)")
    for r in full:
        t = r["times"]
        name = "SpMV" if r["kernel"] == "spmv" else f"SpMM k={r['k']}"
        print(f"{name:12s} {_us(t['plan'])}  {_us(t['before'])}  {_us(t['dense'])}   "
              f"{t['dense']['median'] / t['plan']['median']:6.2f}  "
              f"{t['dense']['median'] / t['before']['median']:6.2f}")
    print("\nnear-full 500x500  joined (min med)  per block row (min med)  dense (min med)"
          "  per-block-row/joined (medians)  plan's kernels")
    for r in near:
        t = r["times"]
        print(f"k={r['k']:3d} d={r['density']:.2f}     {_us(t['joined'])}  "
              f"{_us(t['per_block_row'])}   {_us(t['dense'])}   "
              f"{t['per_block_row']['median'] / t['joined']['median']:6.2f}   "
              f"{'+'.join(r['kernels'])}")
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "load": [load0, load1], "rounds": rounds, "full": full, "near": near}
    if out:
        Path(out).write_text(json.dumps(result, indent=1))
    print(json.dumps({"full": [{"kernel": r["kernel"], "k": r["k"],
                                "dense_over_plan": r["times"]["dense"]["median"]
                                / r["times"]["plan"]["median"]} for r in full]}))


if __name__ == "__main__":
    main()

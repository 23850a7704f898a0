"""The general ops on sparse operands: a plan's call against scipy's idiom for the same op.

Usage: ``python benchmarks/sparse_ops_bench.py [--n N] [--per-row K] [--rounds R]
[--ops SUBSTR ...]`` (``--ops``: only the ops whose names contain one of the strings).

One random ``n x n`` matrix with ``K`` entries per row plus its diagonal, and a second
holding half of its entries and as many others, in float64; every op is timed as a plan
call (inspection excluded, reported apart) and as the scipy/numpy expression a user would
write, op by op, the two back to back in random order after a warm-up call of each
(:func:`_time_pairs`); the table gives medians and scipy's time over the plan's (above
1: the plan is faster). Each plan's result is checked against scipy's before timing.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import time
from pathlib import Path

import numpy as np
import scipy
import scipy.sparse as sp

import thrifty as th


def _segment_softmax_cols(X: sp.csr_array, M: sp.csr_array) -> sp.csr_array:
    """scipy/numpy: softmax of X along columns over M's pattern (CSC order)."""
    Mc, Xc = sp.csc_array(M), sp.csc_array(X)
    Mc.sort_indices()
    Xc.sort_indices()
    cols = np.repeat(np.arange(Mc.shape[1]), np.diff(Mc.indptr))
    xcols = np.repeat(np.arange(Xc.shape[1]), np.diff(Xc.indptr))
    keys = xcols * Mc.shape[0] + Xc.indices
    q = cols * Mc.shape[0] + Mc.indices
    at = np.minimum(np.searchsorted(keys, q), max(len(keys) - 1, 0))
    v = np.where(keys[at] == q, Xc.data[at], 0.0) if len(keys) else np.zeros(len(q))
    ne = np.diff(Mc.indptr) > 0
    mx = np.zeros(Mc.shape[1])
    if Mc.nnz:
        mx[ne] = np.maximum.reduceat(v, Mc.indptr[:-1][ne])
    e = np.exp(v - mx[cols])
    tot = np.bincount(cols, weights=e, minlength=Mc.shape[1])
    return sp.csr_array(sp.csc_array((e / tot[cols], Mc.indices, Mc.indptr), shape=M.shape))


def _cases(A: sp.csr_array, B: sp.csr_array, x: np.ndarray, row: np.ndarray) -> dict:
    return {
        "einsum ij,ij->i": (lambda A, B: th.einsum("ij,ij->i", A, B),
                            lambda: np.asarray(A.multiply(B).sum(axis=1)).ravel()),
        "einsum ij,i->j": (lambda A, x: th.einsum("ij,i->j", A, x), lambda: A.T @ x),
        "einsum ii-> (trace)": (lambda A: th.einsum("ii->", A), lambda: A.diagonal().sum()),
        "einsum ij->ji": (lambda A: th.einsum("ij->ji", A), lambda: sp.csr_array(A.T)),
        "sum axis 0": (lambda A: A.sum(axis=0), lambda: np.asarray(A.sum(axis=0)).ravel()),
        "sum axis 1": (lambda A: A.sum(axis=1), lambda: np.asarray(A.sum(axis=1)).ravel()),
        "max axis 0": (lambda A: A.max(axis=0), lambda: A.max(axis=0).toarray()),
        "max axis 1": (lambda A: A.max(axis=1), lambda: A.max(axis=1).toarray()),
        "masked softmax axis 0": (lambda B, A: th.softmax(B, mask=A, axis=0),
                                  lambda: _segment_softmax_cols(B, A)),
        "A * row (broadcast)": (lambda A, row: A * row, lambda: sp.csr_array(A.multiply(row))),
    }


def _time_pairs(runs: dict, rounds: int) -> dict[str, dict[str, list[float]]]:
    """Per op (ops in shuffled order): one warm-up call of each side, then ``rounds``
    rounds of the plan and scipy back to back, in random order. Both sides of an op thus
    find its operands in the same cache state; when every call of every op was shuffled
    together, each sample followed a random other op (several of which stream 20-40 MB
    through the cache), and the medians of 7 such samples swung from 0.82x to 1.44x
    between runs for the same kernel (``einsum ij,i->j``)."""
    times: dict[str, dict[str, list[float]]] = {k: {"plan": [], "scipy": []} for k in runs}
    ops = list(runs)
    random.shuffle(ops)
    for k in ops:
        sides = {"plan": runs[k][0], "scipy": runs[k][1]}
        for f in sides.values():
            f()
        for _ in range(rounds):
            order = list(sides)
            random.shuffle(order)
            for w in order:
                t0 = time.perf_counter()
                sides[w]()
                times[k][w].append(time.perf_counter() - t0)
    return times


def _dense(v):
    return v.toarray() if sp.issparse(v) else np.asarray(v)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--per-row", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--ops", nargs="*", default=None,
                    help="only the ops whose names contain one of these strings")
    ap.add_argument("--json", default="benchmarks/results/sparse_ops_bench.json")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n = args.n
    A = sp.random_array((n, n), density=args.per_row / n, format="csr", rng=rng)
    A = sp.csr_array(A + sp.eye_array(n, format="csr"))
    # B: half of A's entries and as many others (the intersection is not empty)
    C = A.tocoo()
    half = rng.random(C.nnz) < 0.5
    k = int(half.sum())
    B = sp.csr_array((np.ones(2 * k), (np.concatenate([C.row[half], rng.integers(0, n, k)]),
                                       np.concatenate([C.col[half], rng.integers(0, n, k)]))),
                     shape=(n, n))
    B.sum_duplicates()
    for M in (A, B):
        M.data = rng.standard_normal(M.nnz)
        M.sort_indices()
    x, row = rng.standard_normal(n), rng.standard_normal((1, n))
    env = {"A": A, "B": B, "x": x, "row": row}
    runs = {}
    cases = {k: v for k, v in _cases(A, B, x, row).items()
             if args.ops is None or any(o in k for o in args.ops)}
    if not cases:
        raise SystemExit(f"--ops {args.ops} names none of {sorted(_cases(A, B, x, row))}")
    for name, (fn, peer) in cases.items():
        names = fn.__code__.co_varnames[:fn.__code__.co_argcount]
        inputs = {k: env[k] for k in names}
        t0 = time.perf_counter()
        plan = th.program(fn).specialize(**inputs)
        inspect = time.perf_counter() - t0
        got, want = plan(**inputs), peer()
        if sp.issparse(want):
            assert abs(sp.csr_array(got) - sp.csr_array(want)).max() <= 1e-12, name
        else:
            np.testing.assert_allclose(_dense(got).ravel(), np.ravel(want), rtol=1e-10,
                                       atol=1e-12)
        runs[name] = (lambda p=plan, i=inputs: p(**i), peer, inspect,
                      ",".join(sorted(plan.report()["kernels"])))
    times = _time_pairs(runs, args.rounds)
    rows = []
    print(f"n = {n}, nnz(A) = {A.nnz}, nnz(B) = {B.nnz}; medians of {args.rounds} rounds")
    print("| op | kernels | plan ms | scipy ms | scipy / plan | inspection ms |")
    print("|---|---|---|---|---|---|")
    for k, (_, _, inspect, kernels) in runs.items():
        tp, ts = np.median(times[k]["plan"]), np.median(times[k]["scipy"])
        rows.append({"op": k, "kernels": kernels, "plan_s": tp, "scipy_s": ts,
                     "inspect_s": inspect})
        print(f"| {k} | {kernels} | {tp * 1e3:.2f} | {ts * 1e3:.2f} | {ts / tp:.2f} | "
              f"{inspect * 1e3:.0f} |")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"n": n, "nnz": [A.nnz, B.nnz], "rows": rows,
                               "numpy": np.__version__, "scipy": scipy.__version__,
                               "machine": platform.machine()}, indent=1))


if __name__ == "__main__":
    main()

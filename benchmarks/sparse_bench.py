"""The sparse engine's benchmark: specialized plans against every peer, in one run.

Peers (``sparse_peers.py``): scipy, MKL through sparse-dot-mkl, torch.sparse on CPU,
python-graphblas, pydata sparse, dense numpy where it fits (finch-tensor-lite probed:
no sparse formats in its 0.1 release). Everyone gets the same number of threads
(threadpoolctl, numba, MKL, torch, graphblas; scipy's sparse kernels are single-threaded).

Kernels: SpMV, SpMM (k = 16, 64, 256), SDDMM, masked SpGEMM (triangle counting), a GCN layer,
masked attention. For SpMV/SpMM a STREAM triad runs in the same shuffled rounds as the
implementations, and each implementation's time is reported as a share of that bandwidth
for the bytes the product must move (values, indices, row pointers, the dense operand and
the output). Reporting follows Hoefler and Belli ("Scientific Benchmarking of Parallel
Computing Systems", SC 2015): medians of rounds in a new random order each, ratios to peers
measured in the same run, the machine and versions in the header.

Usage::

    python benchmarks/sparse_bench.py            # quick mode
    python benchmarks/sparse_bench.py --full     # every instance, k = 16, 64, 256

Writes ``benchmarks/results/sparse_bench[_full].json`` and prints the table.

MKL's OpenMP workers sleep as soon as a call returns (``KMP_BLOCKTIME=0``, unless the
environment sets it): by default Intel OpenMP spins them for 200 ms after each call, and in
shuffled rounds on 2 cores whichever implementation runs next shares the cores with them
(measured with ``KMP_BLOCKTIME=0`` and ``OMP_WAIT_POLICY=PASSIVE`` both set: a plan's SpMM
k = 16 on poisson2d-300, timed alternately with MKL, median 1.37-2.16 ms with spinning
workers against 1.24-1.55 ms without, its minimum 1.0-1.1 ms either way; MKL's own median
1.34-1.43 against 1.32-1.70 ms). GNU OpenMP's waiting (torch, graphblas, and numba's
threads, thrifty's among them) is left as it is: ``OMP_WAIT_POLICY=PASSIVE`` moved the
times of the algebra cases by 0.13-2.13x, peers' and thrifty's alike, in one run.
"""

from __future__ import annotations

import os

# before any library that starts OpenMP workers is loaded (see the docstring)
os.environ.setdefault("KMP_BLOCKTIME", "0")

import functools
import json
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click
import numba
import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sparse_peers import (  # noqa: E402
    DENSE_FIT,
    PeerForms,
    check_peers,
    finch_probe,
    gcn_layers,
    gcn_peers,
    product_peers,
    set_threads,
    versions,
)

KERNELS = ("spmv", "spmm", "sddmm", "masked-spgemm", "gcn", "gcn2", "attention")
TRIAD_N = 10**7


@numba.njit(parallel=True, nogil=True)
def _triad(a, b, c, s):  # pragma: no cover - compiled
    for i in numba.prange(a.shape[0]):
        a[i] = b[i] + s * c[i]


def triad_fn(n: int = TRIAD_N) -> Callable[[], None]:
    """One STREAM triad over ``n`` doubles on numba's threads (24 bytes per element)."""
    a, b, c = np.zeros(n), np.ones(n), np.ones(n)
    return lambda: _triad(a, b, c, 3.0)


def _rounds(sample_s: dict[str, float], repeat: int, budget: float) -> dict[str, int]:
    """Timed rounds per implementation: ``repeat`` each where that fits in ``budget``
    seconds, else one cap on each one's seconds (found by bisection: everyone's seconds up
    to the cap fill the budget) cuts the slowest first, and no one runs fewer than
    ``min(3, repeat)`` rounds (the only way past the budget): a slow peer no longer cuts
    the rounds of the fast ones."""
    lo = min(3, repeat)
    full = {k: repeat * t for k, t in sample_s.items()}
    cap = max(full.values(), default=0.0)
    if sum(full.values()) > budget:
        low, high = 0.0, cap
        for _ in range(60):
            mid = (low + high) / 2
            low, high = (mid, high) if sum(min(s, mid) for s in full.values()) <= budget \
                else (low, mid)
        cap = low
    return {k: max(lo, min(repeat, int(cap / max(t, 1e-12) + 1e-9)))
            for k, t in sample_s.items()}


def interleaved_times(fns: dict[str, Callable[[], Any]], repeat: int, seed: int = 0,
                      min_sample: float = 5e-3, budget: float = math.inf,
                      warmed: dict[str, float] | None = None,
                      rounds_out: dict[str, int] | None = None) -> dict[str, float]:
    """Median time per call of each function over up to ``repeat`` rounds, each round in a
    new (seeded) random order, so that a fluctuating load and a peer whose threads keep
    spinning after it returns hit every implementation alike. Calls faster than
    ``min_sample`` are repeated back to back within a sample (count set at the warm-up).
    Where the warm-up says that ``repeat`` rounds of everyone would take more than
    ``budget`` seconds, the slowest implementations run fewer rounds (no fewer than 3,
    spread evenly over the case's rounds: :func:`_rounds`); every implementation is still
    timed. ``warmed`` gives the time of a call already made (a slow peer is not called
    again to warm it up); ``rounds_out`` receives each one's number of rounds."""
    inner: dict[str, int] = {}
    sample_s: dict[str, float] = {}
    for k, f in fns.items():
        warm = (warmed or {}).get(k, 0.0)
        if warm < min_sample:
            t0 = time.perf_counter()
            f()
            warm = time.perf_counter() - t0
        if warm < min_sample:
            t0 = time.perf_counter()
            f()
            warm = min(warm, time.perf_counter() - t0)
        inner[k] = max(1, min(2000, int(min_sample / max(warm, 1e-7))))
        sample_s[k] = inner[k] * warm
    count = _rounds(sample_s, repeat, budget)
    total = max(count.values(), default=0)
    when = {k: set(np.round(np.linspace(0, total - 1, n)).astype(int).tolist())
            for k, n in count.items()}
    ts: dict[str, list[float]] = {k: [] for k in fns}
    keys = list(fns)
    rng = np.random.default_rng(seed)
    for r in range(total):
        for i in rng.permutation(len(keys)):
            k = keys[i]
            if r not in when[k]:
                continue
            f, n = fns[k], inner[k]
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            ts[k].append((time.perf_counter() - t0) / n)
    if rounds_out is not None:
        rounds_out.update({k: len(v) for k, v in ts.items()})
    return {k: statistics.median(v) for k, v in ts.items()}


# -- instances -------------------------------------------------------------------------------
def instance_names(full: bool) -> list[str]:
    """Generated instances, and collection matrices with >= 10^4 nonzeros when present."""
    gen = (["poisson2d-1000", "poisson3d-64", "poisson3d-100", "rmat-17", "random-200000-16"]
           if full else ["poisson2d-300", "poisson3d-40", "rmat-14", "random-50000-16"])
    from thrifty.testing import shared_matrix_index

    rows = [r for r in shared_matrix_index() if int(r["nnz"]) >= 10**4]
    pick = rows if full else [r for r in rows if r["name"] in
                              ("cora", "bcsstk13", "ca-HepTh", "arrow")]
    return gen + [f"file:{r['file']}" for r in pick]


def load(name: str) -> sp.csr_array:
    """The instance ``name`` as a canonical float64 CSR array."""
    from thrifty.front.matrices import load_matrix, poisson2d, poisson3d, rmat

    if name.startswith("file:"):
        from thrifty.testing import shared_data_dir

        return load_matrix(shared_data_dir() / "matrices" / name[5:])  # type: ignore[operator]
    kind, _, arg = name.partition("-")
    if kind == "poisson2d":
        return sp.csr_array(poisson2d(int(arg)))
    if kind == "poisson3d":
        return sp.csr_array(poisson3d(int(arg)))
    if kind == "rmat":
        G = rmat(int(arg), 16, seed=0)
        return sp.csr_array(((G + G.T) > 0).astype(np.float64))
    if kind == "blocks":  # block-sparse: dense bs x bs blocks, `per` per block row
        n, bs, per = (int(s) for s in arg.split("-"))
        rng = np.random.default_rng(0)
        nb = n // bs
        bi = np.repeat(np.arange(nb), per)
        bj = np.concatenate([rng.choice(nb, per, replace=False) for _ in range(nb)])
        grid = sp.csr_array((np.ones(len(bi)), (bi, bj)), shape=(nb, nb))
        return sp.csr_array(sp.kron(grid, np.ones((bs, bs)), format="csr"))
    if kind == "random":
        n, per = (int(s) for s in arg.split("-"))
        rng = np.random.default_rng(0)
        cols = rng.integers(0, n, size=n * per)
        rows = np.repeat(np.arange(n), per)
        A = sp.csr_array((rng.standard_normal(n * per), (rows, cols)), shape=(n, n))
        A.sum_duplicates()
        return A
    raise click.BadParameter(f"unknown instance {name!r}")


@functools.cache
def programs() -> dict[str, Any]:
    """The benchmark's programs (made once: their traces are reused across cases)."""
    import thrifty as th

    return {
        "spmv": th.program(lambda A, x: A @ x),
        "spmm": th.program(lambda A, X: A @ X),
        "sddmm": th.program(lambda X, Y, S: (X @ Y.T) * S),
        "masked-spgemm": th.program(lambda L: (L @ L) * L),
        "gcn": th.program(lambda A, X, W: th.relu(A @ (X @ W))),
        "gcn2": th.program(lambda A, X, W, W2: th.relu(A @ (th.relu(A @ (X @ W)) @ W2))),
        "attention": th.program(lambda Q, K, V, S: th.softmax(Q @ K.T, mask=S) @ V),
    }


def make_inputs(kernel: str, A: sp.csr_array, rng: np.random.Generator,
                k: int = 64) -> dict[str, Any]:
    n, m = A.shape
    if kernel == "spmv":
        return {"A": A, "x": rng.standard_normal(m)}
    if kernel == "spmm":
        return {"A": A, "X": rng.standard_normal((m, k))}
    if kernel == "sddmm":
        return {"X": rng.standard_normal((n, k)), "Y": rng.standard_normal((m, k)), "S": A}
    if kernel == "masked-spgemm":
        L = sp.csr_array(sp.tril(A, -1))
        L.data[:] = 1.0
        return {"L": L}
    if kernel in ("gcn", "gcn2"):
        W2 = {"W2": rng.standard_normal((k, k))} if kernel == "gcn2" else {}
        return {"A": A, "X": rng.standard_normal((n, k)), "W": rng.standard_normal((k, k)),
                **W2}
    return {"Q": rng.standard_normal((n, k)), "K": rng.standard_normal((n, k)),
            "V": rng.standard_normal((n, k)), "S": A}


def product_bytes(A: sp.csr_array, k: int) -> int:
    """Bytes a CSR product with ``k`` dense columns (SpMV: 1) must move at least."""
    n, m = A.shape
    it = A.data.itemsize
    return int(A.nnz * (it + A.indices.itemsize) + (n + 1) * A.indptr.itemsize +
               (m + n) * k * it)


# -- the other kernels' peers ---------------------------------------------------------------
def _spgemm_work(L: sp.csr_array) -> int:
    return int(np.dot(np.bincount(L.indices, minlength=L.shape[1]).astype(np.int64),
                      np.diff(L.indptr).astype(np.int64)))


def _attention_scipy(Q, K_, V, S):  # type: ignore[no-untyped-def]
    rows = np.repeat(np.arange(S.shape[0]), np.diff(S.indptr))
    scores = np.einsum("ij,ij->i", Q[rows], K_[S.indices])
    keep = S.data != 0
    starts, ne = S.indptr[:-1], np.diff(S.indptr) > 0
    mx = np.zeros(S.shape[0])
    if len(scores):
        mx[ne] = np.maximum.reduceat(np.where(keep, scores, -np.inf), starts[ne])
    mx = np.where(np.isfinite(mx), mx, 0)
    e = np.where(keep, np.exp(scores - mx[rows]), 0)
    tot = np.zeros(S.shape[0])
    if len(e):
        tot[ne] = np.add.reduceat(e, starts[ne])
    w = np.divide(e, tot[rows], out=np.zeros_like(e), where=tot[rows] > 0)
    return sp.csr_array((w, S.indices, S.indptr), shape=S.shape) @ V


def other_peers(kernel: str, A: sp.csr_array, inp: dict,
                forms: PeerForms | None = None) -> dict[str, Callable[[], Any]]:
    """The peers of SDDMM, masked SpGEMM, the GCN layers and masked attention."""
    n, m = A.shape
    fits = n * m <= DENSE_FIT
    out: dict[str, Callable[[], Any]] = {}
    if kernel == "sddmm":
        X, Y, S = inp["X"], inp["Y"], inp["S"]
        if fits:
            out["dense_then_mask"] = lambda: S.multiply(X @ Y.T).tocsr()
    elif kernel == "masked-spgemm":
        L = inp["L"]
        if _spgemm_work(L) <= 5e8:
            out["scipy_then_mask"] = lambda: (L @ L).multiply(L)
        try:
            import graphblas as gb

            G = gb.io.from_scipy_sparse(sp.csr_matrix(L))
            out["graphblas"] = lambda: G.mxm(G).new(mask=G.S)
        except Exception:  # noqa: BLE001 - optional peer
            pass
    elif kernel == "gcn":
        X, W = inp["X"], inp["W"]
        out.update(gcn_peers(A, X, W, forms))
    elif kernel == "gcn2":  # each peer's layer twice, the second on the first's output
        X, W, W2 = inp["X"], inp["W"], inp["W2"]
        for p, f in gcn_layers(A, forms).items():
            out[p] = (lambda layer: lambda: layer(layer(X, W), W2))(f)
    elif kernel == "attention":
        Q, K_, V, S = inp["Q"], inp["K"], inp["V"], inp["S"]
        out["scipy"] = lambda: _attention_scipy(Q, K_, V, S)
    return out


# -- the run ---------------------------------------------------------------------------------
def _cases(kernels: Sequence[str], ks: Sequence[int]) -> list[tuple[str, int]]:
    out = []
    for kern in kernels:
        if kern == "spmm":
            out += [("spmm", k) for k in ks]
        else:
            out.append((kern, 1 if kern == "spmv" else 64))
    return out


def _inspect(kernel: str, inp: dict[str, Any], threads: int,
             seen: set[str] | None) -> tuple[Any, float]:
    """The plan of ``kernel`` for ``inp`` and the seconds its inspection took.

    The first specialization may compile (or load from numba's cache) kernels, which is
    not inspection: it is timed again where it did (numba entered its compiler: a
    ``numba:compiler_lock`` event) or where it was the kernel's first in this process
    (``seen`` records those; None: always twice), else its own time is the figure."""
    from numba.core import event

    from thrifty.runtime.sparse_run import specialize
    from thrifty.sparse.cost import CostModel

    tr = programs()[kernel].traced(**inp)
    cost = CostModel(threads=threads)
    with event.install_recorder("numba:compiler_lock") as rec:
        t0 = time.perf_counter()
        plan = specialize(tr.graph, inp, structure=tr.structure, cost=cost)
        inspect = time.perf_counter() - t0
    if rec.buffer or seen is None or kernel not in seen:
        t0 = time.perf_counter()
        plan = specialize(tr.graph, inp, structure=tr.structure, cost=cost)
        inspect = time.perf_counter() - t0
    if seen is not None:
        seen.add(kernel)
    return plan, inspect


def bench_case(name: str, A: sp.csr_array, kernel: str, k: int, repeat: int,
               threads: int, triad: Callable[[], None],
               budget: float = math.inf, forms: PeerForms | None = None,
               seen: set[str] | None = None) -> dict[str, Any] | None:
    """One row: the plan, its peers (and the triad for SpMV/SpMM) in shuffled rounds.
    ``forms`` holds the instance in each peer's format (made here when not given);
    ``seen``: the kernels already specialized in this process (:func:`_inspect`)."""
    forms = PeerForms(A) if forms is None else forms
    phase: dict[str, float] = {}
    t0 = time.perf_counter()
    inp = make_inputs(kernel, A, np.random.default_rng(0), k)
    if kernel == "masked-spgemm" and _spgemm_work(inp["L"]) > 2e9:
        return None
    plan, inspect = _inspect(kernel, inp, threads, seen)
    phase["setup_and_plan"] = time.perf_counter() - t0
    product = kernel in ("spmv", "spmm")
    t0 = time.perf_counter()
    peers = (product_peers(A, inp["x" if kernel == "spmv" else "X"], forms) if product
             else other_peers(kernel, A, inp, forms))
    phase["peer_setup"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    warmed: dict[str, float] = {}
    ok = check_peers(peers, plan.run(inp), warmed)
    wrong = [p for p, good in ok.items() if not good]
    peers = {p: f for p, f in peers.items() if ok[p]}
    phase["check"] = time.perf_counter() - t0
    fns = {"thrifty": lambda: plan.run(inp), **peers}
    if product:
        fns["triad"] = triad
    t0 = time.perf_counter()
    rounds: dict[str, int] = {}
    t = interleaved_times(fns, repeat, budget=budget, warmed=warmed, rounds_out=rounds)
    phase["timed_rounds"] = time.perf_counter() - t0
    ours = t.pop("thrifty")
    rep = plan.report()
    row: dict[str, Any] = {
        "instance": name, "kernel": kernel, "k": k, "n": A.shape[0], "m": A.shape[1],
        "nnz": int(A.nnz), "thrifty_s": ours, "inspect_s": inspect,
        "kernels": rep["kernels"], "tasks": rep["tasks"],
        "useful_gflops": rep["useful_flops"] / ours / 1e9,
        "executed_over_useful": rep["executed_flops"] / max(1, rep["useful_flops"]),
        "wrong_peers": wrong, "rounds": rounds, "phase_s": phase, "first_call_s": warmed,
    }
    if product:
        bw = 24.0 * TRIAD_N / t.pop("triad")
        nbytes = product_bytes(A, k)
        row["triad_GBs"] = bw / 1e9
        row["bytes"] = nbytes
        row["bw_share"] = {"thrifty": nbytes / ours / bw,
                           **{p: nbytes / s / bw for p, s in t.items()}}
    row["peers_s"] = t
    row["vs"] = {p: s / ours for p, s in t.items()}
    if t:
        best = min(t, key=t.__getitem__)
        row["best_peer"], row["vs_best"] = best, t[best] / ours
        if t[best] > ours:
            row["payback_runs"] = int(np.ceil(inspect / (t[best] - ours)))
    return row


#: Seconds of timed rounds per case at most: where everyone's ``repeat`` rounds would take
#: longer, the slowest implementations run fewer rounds (never fewer than 3, never fewer
#: implementations; the fast ones, the plan's among them, keep theirs).
CASE_BUDGET = 8.0


def run(full: bool, kernels: Sequence[str], instances: Sequence[str] | None, ks: Sequence[int],
        repeat: int, threads: int, progress: Callable[[str], None] = print,
        budget: float = CASE_BUDGET) -> dict[str, Any]:
    """The whole benchmark as one JSON-able dict."""
    thread_report = set_threads(threads)
    triad = triad_fn()
    rows = []
    t_start = time.perf_counter()
    seen: set[str] = set()
    for name in instances or instance_names(full):
        A = load(name)
        forms = PeerForms(A)  # each peer's format of A, converted once for every case
        for kernel, k in _cases(kernels, ks):
            if kernel in ("masked-spgemm", "gcn", "gcn2", "attention") and A.shape[0] != A.shape[1]:
                continue
            if kernel == "spmm" and max(A.shape) * k > (7e7 if full else 2e7):
                continue  # the dense operands of every peer must fit beside the others'
            progress(f"[{time.perf_counter() - t_start:7.1f} s] {name} {kernel} k={k}")
            t0 = time.perf_counter()
            row = bench_case(name, A, kernel, k, repeat, threads, triad, budget, forms,
                             seen)
            if row is not None:
                row["bench_seconds"] = time.perf_counter() - t0
                rows.append(row)
    progress(f"[{time.perf_counter() - t_start:7.1f} s] done")
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": {"platform": platform.platform(), "processor": platform.processor() or
                    platform.machine(), "cpu_count": os.cpu_count(),
                    "python": platform.python_version(),
                    "load_average": os.getloadavg()},
        "versions": versions(), "threads": thread_report, "full": full, "repeat": repeat,
        "finchlite": finch_probe() if full else None,
        "rows": rows, "summary": summarize(rows),
    }


def _gmean(xs: Sequence[float | None]) -> float | None:
    vals = [x for x in xs if x]
    return float(np.exp(np.mean(np.log(vals)))) if vals else None


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per kernel (and k): geometric means against each peer and the issue's targets."""
    out: dict[str, Any] = {}
    for key in dict.fromkeys((r["kernel"], r["k"]) for r in rows):
        rs = [r for r in rows if (r["kernel"], r["k"]) == key]
        peers = sorted({p for r in rs for p in r["vs"]})
        s: dict[str, Any] = {f"gmean_vs_{p}": _gmean([r["vs"].get(p) for r in rs])
                             for p in peers}
        s["gmean_vs_best"] = _gmean([r.get("vs_best") for r in rs])
        big = [r for r in rs if r["nnz"] >= 10**5 and r.get("vs_best")]
        s["worst_vs_best_nnz_ge_1e5"] = min((r["vs_best"] for r in big), default=None)
        if key[0] == "spmv":
            shares = [r["bw_share"]["thrifty"] for r in rs if r["nnz"] >= 10**6]
            s["median_bw_share_nnz_ge_1e6"] = statistics.median(shares) if shares else None
            s["worst_vs_scipy"] = min((r["vs"].get("scipy", 0) for r in rs), default=None)
        out[f"{key[0]}" + (f"-k{key[1]}" if key[0] == "spmm" else "")] = s
    return out


def print_tables(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(width=250)
    v, rows = result["versions"], result["rows"]
    title = (f"thrifty sparse bench {result['date']} — {result['machine']['processor']}, "
             f"{result['machine']['cpu_count']} cores, threads {result['threads']['numba']}; "
             + ", ".join(f"{k} {x}" for k, x in v.items() if x))
    peers = sorted({p for r in rows for p in r["vs"]})
    t = Table(title=title)
    for c in ["instance", "kernel", "k", "nnz", "thrifty ms", *(f"vs {p}" for p in peers),
              "best peer", "vs best", "BW share", "best peer BW", "kernels"]:
        t.add_column(c)
    for r in rows:
        bw = r.get("bw_share", {})
        bp = r.get("best_peer")
        t.add_row(r["instance"].replace("file:", ""), r["kernel"], str(r["k"]), str(r["nnz"]),
                  f"{r['thrifty_s'] * 1e3:.3g}",
                  *(_f(r["vs"].get(p)) for p in peers), bp or "-", _f(r.get("vs_best")),
                  _f(bw.get("thrifty")), _f(bw.get(bp)),
                  ",".join(f"{a}:{b}" for a, b in r["kernels"].items()))
    con.print(t)
    s = Table(title="geometric means of speed-ups (> 1: thrifty faster)")
    keys = sorted({k for x in result["summary"].values() for k in x})
    s.add_column("kernel")
    for k in keys:
        s.add_column(k.replace("gmean_", ""))
    for kern, x in result["summary"].items():
        s.add_row(kern, *(_f(x.get(k)) for k in keys))
    con.print(s)


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


@click.command()
@click.option("--full", is_flag=True, help="Every instance and k = 16, 64, 256 "
              "(default: the quick mode, small instances, k = 64).")
@click.option("--quick", is_flag=True, help="The quick mode (the default; for `make bench`).")
@click.option("--kernel", "kernels", multiple=True, type=click.Choice(KERNELS))
@click.option("--instance", "instances", multiple=True,
              help="poisson2d-N, poisson3d-N, rmat-SCALE, random-N-PERROW or file:GROUP/NAME")
@click.option("--k", "ks", multiple=True, type=click.IntRange(1), help="SpMM widths.")
@click.option("--repeat", type=click.IntRange(3), default=9, show_default=True,
              help="Shuffled rounds (the median is reported).")
@click.option("--threads", type=click.IntRange(1), default=min(2, os.cpu_count() or 1),
              show_default=True)
@click.option("--case-budget", type=click.FloatRange(0, min_open=True), default=CASE_BUDGET,
              show_default=True, help="Seconds of timed rounds per case at most (fewer "
              "rounds, no fewer than 3, for its slowest implementations; never fewer peers).")
@click.option("--out", type=click.Path(dir_okay=False), default=None)
def main(full: bool, quick: bool, kernels: tuple[str, ...], instances: tuple[str, ...],
         ks: tuple[int, ...], repeat: int, threads: int, case_budget: float,
         out: str | None) -> None:
    """Benchmark thrifty's plans against scipy, MKL, torch, graphblas, pydata, dense."""
    if full and quick:
        raise click.UsageError("--full and --quick exclude each other")
    result = run(full, kernels or (KERNELS if full else ("spmv", "spmm")), instances or None,
                 ks or ((16, 64, 256) if full else (64,)), repeat, threads,
                 budget=case_budget)
    path = Path(out) if out else Path(__file__).resolve().parent / "results" / (
        "sparse_bench_full.json" if full else "sparse_bench.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, default=str))
    print_tables(result)
    print(f"JSON written to {path}")


if __name__ == "__main__":
    main()

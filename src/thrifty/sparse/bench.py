"""The sparse engine's benchmark: specialized plans against scipy, dense numpy, pydata
``sparse`` and python-graphblas, side by side in one run.

For each instance (collection matrices with at least 10^4 nonzeros, generated 2D/3D
Poisson matrices and R-MAT graphs) and each kernel (SpMV, SpMM with k = 64, SDDMM, masked
SpGEMM as triangle counting, a GCN layer, masked attention) it measures the median of
``repeat`` runs after a warm-up, with 2 threads for everyone (BLAS, graphblas, the Dask
thread pool). Reported: time, useful GFLOP/s, executed/useful flops, inspection time, the
number of runs after which inspection pays back, and for SpMV/SpMM the fraction of the
memory-bandwidth bound (from a triad measured in the same run), following the reporting
rules of Hoefler and Belli ("Scientific Benchmarking of Parallel Computing Systems", SC 2015):
medians, ratios to peers measured in the same run (round-robin, so that the load of a
shared machine hits every implementation alike), the machine in the header.

Example
-------
>>> rows = run_benchmark(quick=True, kernels=("spmv",), instances=("poisson2d-30",),
...                      repeat=3, peers=("scipy",))
>>> rows[0]["kernel"], rows[0]["instance"]
('spmv', 'poisson2d-30')
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numba
import numpy as np
import scipy
import scipy.sparse as sp

__all__ = ["run_benchmark", "machine_info", "triad_bandwidth", "summarize", "instance_names",
           "programs", "make_inputs", "peer_times", "peer_fns",
           "interleaved_times", "KERNELS"]

THREADS = 2
KERNELS = ("spmv", "spmm", "sddmm", "masked-spgemm", "gcn", "attention")
DENSE_FIT = 2.5e7  # dense n x m arrays up to this many elements are "where it fits"


@numba.njit(nogil=True, cache=True)
def _triad(a, b, c, s):  # pragma: no cover - compiled
    for i in range(a.shape[0]):
        a[i] = b[i] + s * c[i]


def triad_bandwidth(n: int = 10**7, repeat: int = 5) -> float:
    """STREAM-triad bandwidth (byte/s) with ``THREADS`` threads: 24 bytes per element."""
    a, b, c = np.zeros(n), np.ones(n), np.ones(n)
    halves = [(slice(0, n // 2)), slice(n // 2, n)]
    pool = ThreadPoolExecutor(THREADS)

    def run() -> None:
        list(pool.map(lambda h: _triad(a[h], b[h], c[h], 3.0), halves))

    run()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run()
        ts.append(time.perf_counter() - t0)
    pool.shutdown()
    return 24.0 * n / min(ts)


def machine_info() -> dict[str, Any]:
    """Platform, cores and library versions for the benchmark's header."""
    info = {"platform": platform.platform(), "processor": platform.processor() or
            platform.machine(), "cpu_count": os.cpu_count(), "python": platform.python_version(),
            "numpy": np.__version__, "scipy": scipy.__version__, "numba": numba.__version__,
            "threads": THREADS}
    for mod in ("sparse", "graphblas", "dask"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - optional peers
            info[mod] = None
    return info


def instance_names(quick: bool) -> list[str]:
    """Generated instances (and collection matrices with >= 10^4 nonzeros when present)."""
    gen = (["poisson2d-300", "poisson3d-40", "rmat-14"] if quick else
           ["poisson2d-1000", "poisson3d-100", "rmat-17"])
    names = list(gen)
    from thrifty.testing import shared_data_dir

    root = shared_data_dir()
    if root is not None and (root / "matrices" / "INDEX.tsv").exists():
        import csv

        with open(root / "matrices" / "INDEX.tsv") as f:
            rows = [r for r in csv.DictReader(f, delimiter="\t") if int(r["nnz"]) >= 10**4]
        pick = rows if not quick else [r for r in rows if r["name"] in
                                       ("cora", "bcsstk13", "ca-HepTh", "arrow")]
        names += [f"file:{r['file']}" for r in pick]
    return names


def _load(name: str) -> sp.csr_array:
    from thrifty.front.matrices import load_matrix, poisson2d, poisson3d, rmat

    kind, _, arg = name.partition("-")
    if name.startswith("file:"):
        from thrifty.testing import shared_data_dir

        return load_matrix(shared_data_dir() / "matrices" / name[5:])  # type: ignore[operator]
    if kind == "poisson2d":
        return poisson2d(int(arg))
    if kind == "poisson3d":
        return poisson3d(int(arg))
    if kind == "rmat":
        G = rmat(int(arg), 16, seed=0)
        return sp.csr_array(((G + G.T) > 0).astype(np.float64))
    raise ValueError(f"unknown instance {name!r}")


def peer_fns(kernel: str, A: sp.csr_array, inp: dict,
             peers: Sequence[str]) -> dict[str, Callable[[], Any]]:
    """The comparison implementations that apply (and fit in memory) for ``kernel``."""
    n, m = A.shape
    out: dict[str, Callable[[], Any]] = {}
    fits = n * m <= DENSE_FIT
    if kernel in ("spmv", "spmm"):
        X = inp["x" if kernel == "spmv" else "X"]
        out["scipy"] = (lambda: A @ X)
        if fits:
            D = A.toarray()
            out["dense"] = (lambda: D @ X)
    elif kernel == "sddmm":
        X, Y, S = inp["X"], inp["Y"], inp["S"]
        if fits:
            out["full_then_mask"] = (lambda: S.multiply(X @ Y.T).tocsr())
    elif kernel == "masked-spgemm":
        L = inp["L"]
        if _spgemm_work(L) <= 5e8:
            out["full_then_mask"] = (lambda: (L @ L).multiply(L))
    elif kernel == "gcn":
        X, W = inp["X"], inp["W"]
        out["scipy"] = (lambda: np.maximum(A @ (X @ W), 0))
    elif kernel == "attention":
        Q, K_, V, S = inp["Q"], inp["K"], inp["V"], inp["S"]
        out["scipy"] = (lambda: _attention_scipy(Q, K_, V, S))
        if fits:
            out["full_then_mask"] = (lambda: _attention_dense(Q, K_, V, S))
    if "pydata" in peers and kernel in ("spmv", "spmm", "gcn"):
        try:
            import sparse as pds

            C = pds.COO.from_scipy_sparse(A)
            if kernel == "spmv":
                out["pydata_matmul"] = (lambda: C @ inp["x"])
            else:
                X = inp["X"] if kernel == "spmm" else inp["X"] @ inp["W"]
                out["pydata_einsum"] = (lambda: pds.einsum("ij,jk->ik", C, X))
                out["pydata_matmul"] = (lambda: C @ X)
        except Exception:  # noqa: BLE001 - optional peer
            pass
    if "graphblas" in peers and kernel in ("spmv", "masked-spgemm"):
        try:
            import graphblas as gb

            if kernel == "spmv":
                G = gb.io.from_scipy_sparse(sp.csr_matrix(A))
                v = gb.Vector.from_dense(inp["x"])
                out["graphblas"] = (lambda: G.mxv(v).new())
            else:
                G = gb.io.from_scipy_sparse(sp.csr_matrix(inp["L"]))
                out["graphblas"] = (lambda: G.mxm(G).new(mask=G.S))
        except Exception:  # noqa: BLE001 - optional peer
            pass
    return out


def interleaved_times(fns: dict[str, Callable[[], Any]], repeat: int,
                      seed: int = 0, min_sample: float = 5e-3) -> dict[str, float]:
    """Median time per call of each function, measured in rounds (after a warm-up) so that
    a fluctuating machine load hits every implementation alike.

    Each round runs the functions in a new (seeded) random order: with a fixed order the
    same implementation always runs right after the same peer, and a peer whose OpenMP
    threads keep spinning after it returns (python-graphblas: both cores busy for a while)
    slows whoever comes next, up to 5x on a 0.1 ms SpMV. A function faster than
    ``min_sample`` is called several times back to back per sample (the count fixed from
    its warm-up), so that a sample of a 20 µs call is not timer and scheduler noise.
    """
    inner: dict[str, int] = {}
    for k, f in fns.items():
        t0 = time.perf_counter()
        f()
        warm = time.perf_counter() - t0
        if warm < min_sample:  # a second call, compiled and cached, sets the count
            t0 = time.perf_counter()
            f()
            warm = min(warm, time.perf_counter() - t0)
        inner[k] = max(1, min(1000, int(min_sample / max(warm, 1e-7))))
    ts: dict[str, list[float]] = {k: [] for k in fns}
    keys = list(fns)
    rng = np.random.default_rng(seed)
    for _ in range(repeat):
        for i in rng.permutation(len(keys)):
            k = keys[i]
            f, n = fns[k], inner[k]
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            ts[k].append((time.perf_counter() - t0) / n)
    return {k: statistics.median(v) for k, v in ts.items()}


def peer_times(kernel: str, A: sp.csr_array, inp: dict, peers: Sequence[str],
               repeat: int) -> dict[str, float]:
    """Median times of the comparison implementations."""
    return interleaved_times(peer_fns(kernel, A, inp, peers), repeat)


def _spgemm_work(L: sp.csr_array) -> int:
    return int(np.dot(np.bincount(L.indices, minlength=L.shape[1]).astype(np.int64),
                      np.diff(L.indptr).astype(np.int64)))


def _attention_scipy(Q, K_, V, S):
    rows = np.repeat(np.arange(S.shape[0]), np.diff(S.indptr))
    scores = np.einsum("ij,ij->i", Q[rows], K_[S.indices])
    keep = S.data != 0
    starts = S.indptr[:-1]
    ne = np.diff(S.indptr) > 0
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


def _attention_dense(Q, K_, V, S):
    from thrifty.graph.ops import softmax_ref

    return softmax_ref(Q @ K_.T, S.toarray(), axis=1) @ V


def programs() -> dict[str, Any]:
    import thrifty as th

    return {
        "spmv": th.program(lambda A, x: A @ x),
        "spmm": th.program(lambda A, X: A @ X),
        "sddmm": th.program(lambda X, Y, S: (X @ Y.T) * S),
        "masked-spgemm": th.program(lambda L: (L @ L) * L),
        "gcn": th.program(lambda A, X, W: th.relu(A @ (X @ W))),
        "attention": th.program(lambda Q, K, V, S: th.softmax(Q @ K.T, mask=S) @ V),
    }


def make_inputs(kernel: str, A: sp.csr_array, rng: np.random.Generator,
                k: int = 64) -> dict[str, Any]:
    """Seeded inputs of ``kernel`` around matrix ``A`` (``k`` dense columns)."""
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
    if kernel == "gcn":
        return {"A": A, "X": rng.standard_normal((n, k)), "W": rng.standard_normal((k, k))}
    S = sp.csr_array(A.real if np.iscomplexobj(A.data) else A)
    return {"Q": rng.standard_normal((n, k)), "K": rng.standard_normal((n, k)),
            "V": rng.standard_normal((n, k)), "S": S}


def _min_bytes(kernel: str, A: sp.csr_array) -> float:
    n, m = A.shape
    if kernel == "spmv":
        return 12.0 * A.nnz + 8.0 * (n + 1) * 2 + 8.0 * m
    return 12.0 * A.nnz + 8.0 * (n + 1) + 8.0 * 64 * (n + m)


def run_benchmark(quick: bool = True, kernels: Sequence[str] | None = None,
                  instances: Sequence[str] | None = None, repeat: int = 5,
                  peers: Sequence[str] = ("scipy", "dense", "pydata", "graphblas"),
                  progress: Callable[[str], None] | None = None,
                  bandwidth: float | None = None) -> list[dict[str, Any]]:
    """Run the benchmark; one row per (instance, kernel).

    Parameters
    ----------
    quick:
        Smaller generated instances and a subset of the collection.
    kernels, instances:
        Restrict the run (default: all kernels, :func:`instance_names`).
    repeat:
        Timed runs per measurement (median reported), after one warm-up.
    peers:
        Which optional peers to include (``pydata``, ``graphblas``).
    """
    from thrifty.sparse.cost import CostModel

    progs = programs()
    kernels = list(kernels or progs)
    instances = list(instances or instance_names(quick))
    bw = bandwidth or triad_bandwidth(10**6 if quick else 10**7)
    rows: list[dict[str, Any]] = []
    rng = np.random.default_rng(0)
    cost = CostModel(threads=THREADS)
    for name in instances:
        A = _load(name)
        for kernel in kernels:
            square = kernel in ("masked-spgemm", "gcn", "attention")
            if square and A.shape[0] != A.shape[1]:
                continue
            inp = make_inputs(kernel, A, rng)
            if kernel == "masked-spgemm" and _spgemm_work(inp["L"]) > (2e8 if quick else 2e9):
                continue
            if progress:
                progress(f"{name} {kernel}")
            prog = progs[kernel]
            from thrifty.runtime.sparse_run import RunnablePlan as SparsePlan
            from thrifty.runtime.sparse_run import specialize

            tr = prog.traced(**inp)
            # the first specialization also loads/compiles the numba kernels: not timed
            specialize(tr.graph, inp, structure=tr.structure, cost=cost)
            t0 = time.perf_counter()
            plan = specialize(tr.graph, inp, structure=tr.structure, cost=cost)
            inspect = time.perf_counter() - t0

            def run_ours(plan: SparsePlan = plan, inp: dict = inp) -> Any:
                return plan.run(inp)

            fns = {"ours": run_ours, **peer_fns(kernel, A, inp, peers)}
            peer = interleaved_times(fns, repeat)
            ours = peer.pop("ours")
            rep = plan.report()
            base = {k: v for k, v in peer.items() if v is not None and
                    k in ("scipy", "dense", "full_then_mask")}
            best_name = min(base, key=base.__getitem__) if base else None
            best = base[best_name] if best_name else None
            row: dict[str, Any] = {
                "instance": name, "kernel": kernel, "n": A.shape[0], "nnz": int(A.nnz),
                "ours_s": ours, "inspect_s": inspect, "useful_gflops":
                    rep["useful_flops"] / ours / 1e9 if ours > 0 else None,
                "executed_over_useful": rep["executed_flops"] / max(1, rep["useful_flops"]),
                "kernels": rep["kernels"], "tasks": rep["tasks"], "peers_s": peer,
                "best_baseline": best_name,
                "speedup_vs_best": (best / ours) if best else None,
                "speedup_vs_scipy": (peer["scipy"] / ours) if peer.get("scipy") else None,
                "speedup_vs_full_then_mask": (peer["full_then_mask"] / ours)
                    if peer.get("full_then_mask") else None,
            }
            pyd = [v for k, v in peer.items() if k.startswith("pydata") and v]
            row["speedup_vs_pydata"] = (min(pyd) / ours) if pyd else None
            if best and best > ours:
                row["payback_runs"] = int(np.ceil(inspect / (best - ours)))
            else:
                row["payback_runs"] = None
            if kernel in ("spmv", "spmm"):
                row["bandwidth_fraction"] = _min_bytes(kernel, A) / bw / ours
            rows.append(row)
    for r in rows:
        r["triad_bandwidth_GBs"] = bw / 1e9
    return rows


def _gmean(xs: Sequence[float]) -> float | None:
    xs = [x for x in xs if x]
    return float(np.exp(np.mean(np.log(xs)))) if xs else None


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Geometric means per kernel against the issue's targets."""
    out: dict[str, Any] = {}
    for kernel in dict.fromkeys(r["kernel"] for r in rows):
        rs = [r for r in rows if r["kernel"] == kernel]
        out[kernel] = {
            "gmean_vs_best": _gmean([r["speedup_vs_best"] for r in rs]),
            "gmean_vs_scipy": _gmean([r["speedup_vs_scipy"] for r in rs]),
            "gmean_vs_full_then_mask": _gmean([r["speedup_vs_full_then_mask"] for r in rs]),
            "gmean_vs_pydata": _gmean([r["speedup_vs_pydata"] for r in rs]),
            "worst_vs_best": min((r["speedup_vs_best"] for r in rs if r["speedup_vs_best"]),
                                 default=None),
            "max_payback_runs": max((r["payback_runs"] for r in rs
                                     if r["payback_runs"] is not None), default=None),
        }
    return out

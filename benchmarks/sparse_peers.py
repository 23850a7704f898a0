"""The peers of the sparse benchmark, each run with the same number of threads.

Peers: scipy (single-threaded: it has no thread control), MKL through ``sparse-dot-mkl``
(found in the virtual environment: ``MKL_RT`` points at ``sys.prefix/lib/libmkl_rt.so.*``
before the import), ``torch.sparse`` on CPU, python-graphblas (SuiteSparse:GraphBLAS),
pydata ``sparse`` (GCXS, its compressed format), dense numpy where the dense matrix fits.
finch-tensor-lite is probed, not raced: its 0.1 release has dense and element levels only
(no sparse level format) and runs its kernels through an interpreter
(:func:`finch_probe`). :func:`set_threads` sets every library's thread count.

:class:`PeerForms` converts an instance into each peer's format once (the benchmark reuses
the conversions for SpMV, every SpMM width and the GCN layers), and :func:`check_peers`
compares every peer's whole result with the plan's in one compiled pass (sparse results:
on the union of both patterns) before the peer is timed.
"""

from __future__ import annotations

import glob
import os
import sys
import time
import warnings
from collections.abc import Callable
from functools import cached_property
from typing import Any

import numba
import numpy as np
import scipy.sparse as sp

warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")

DENSE_FIT = 2.5e7  # dense n x m matrices up to this many elements are "where it fits"


def _mkl() -> Any:
    """sparse_dot_mkl with libmkl_rt from this environment (None when unavailable)."""
    if "MKL_RT" not in os.environ:
        libs = sorted(glob.glob(os.path.join(sys.prefix, "lib", "libmkl_rt.so*")))
        if libs:
            os.environ["MKL_RT"] = libs[0]
    try:
        import sparse_dot_mkl
    except Exception:  # noqa: BLE001 - optional peer
        return None
    return sparse_dot_mkl


def set_threads(n: int) -> dict[str, Any]:
    """Give every peer ``n`` threads; returns what each library reports afterwards."""
    import numba
    from threadpoolctl import threadpool_limits

    threadpool_limits(n)  # BLAS (numpy's and MKL's) and OpenMP runtimes
    numba.set_num_threads(n)
    out: dict[str, Any] = {"numba": numba.get_num_threads(), "scipy.sparse": 1}
    mkl = _mkl()
    if mkl is not None:
        mkl.mkl_set_num_threads(n)
        out["mkl"] = mkl.mkl_get_max_threads()
        out["mkl_version"] = mkl.mkl_get_version_string()
    try:
        import torch

        torch.set_num_threads(n)
        out["torch"] = torch.get_num_threads()
    except Exception:  # noqa: BLE001 - optional peer
        pass
    try:
        import graphblas as gb

        gb.ss.config["nthreads"] = n
        out["graphblas"] = gb.ss.config["nthreads"]
    except Exception:  # noqa: BLE001 - optional peer
        pass
    from threadpoolctl import threadpool_info

    out["threadpools"] = sorted({(p["internal_api"], p["num_threads"])
                                 for p in threadpool_info()})
    return out


def versions() -> dict[str, Any]:
    """Versions of the peers (None where absent)."""
    out: dict[str, Any] = {}
    for mod in ("numpy", "scipy", "numba", "sparse", "graphblas", "torch", "sparse_dot_mkl",
                "finchlite", "threadpoolctl"):
        try:
            if mod == "sparse_dot_mkl":
                m = _mkl()
                out[mod] = None if m is None else m.__version__
                continue
            out[mod] = getattr(__import__(mod), "__version__", "?")
        except Exception:  # noqa: BLE001 - optional peer
            out[mod] = None
    if out["finchlite"] == "?":
        from importlib.metadata import version

        out["finchlite"] = version("finch-tensor-lite")
    return out


class PeerForms:
    """An instance ``A`` in each peer's own format, converted on first use and then kept:
    the benchmark converts each instance once per peer, not once per kernel and width.
    A form that a peer cannot build is None (the peer is left out)."""

    def __init__(self, A: sp.csr_array) -> None:
        self.A = A

    @cached_property
    def mkl(self) -> sp.csr_matrix | None:
        """The scipy matrix sparse-dot-mkl takes (None without MKL)."""
        return None if _mkl() is None else sp.csr_matrix(self.A)

    @cached_property
    def torch(self) -> Any:
        """A ``torch.sparse_csr_tensor`` (int64 indices) sharing nothing with ``A``."""
        try:
            import torch
        except Exception:  # noqa: BLE001 - optional peer
            return None
        A = self.A
        return torch.sparse_csr_tensor(torch.from_numpy(A.indptr.astype(np.int64)),
                                       torch.from_numpy(A.indices.astype(np.int64)),
                                       torch.from_numpy(A.data), size=A.shape,
                                       check_invariants=False)

    @cached_property
    def graphblas(self) -> Any:
        """A python-graphblas Matrix."""
        try:
            import graphblas as gb

            return gb.io.from_scipy_sparse(sp.csr_matrix(self.A))
        except Exception:  # noqa: BLE001 - optional peer
            return None

    @cached_property
    def pydata(self) -> Any:
        """A pydata ``sparse.GCXS`` array."""
        try:
            import sparse as pds

            return pds.GCXS.from_scipy_sparse(self.A)
        except Exception:  # noqa: BLE001 - optional peer
            return None

    @cached_property
    def dense(self) -> np.ndarray | None:
        """The dense numpy array where it fits (``n * m <= DENSE_FIT``), else None."""
        n, m = self.A.shape
        return self.A.toarray() if n * m <= DENSE_FIT else None


def product_peers(A: sp.csr_array, X: np.ndarray,
                  forms: PeerForms | None = None) -> dict[str, Callable[[], Any]]:
    """``A @ X`` (SpMV for a vector ``X``, SpMM for a matrix) by every peer that applies.

    Each returns its library's natural result (graphblas keeps its own Vector/Matrix):
    the time of the product, not of a conversion. ``forms`` holds ``A`` already converted
    (one is made when not given).
    """
    f = PeerForms(A) if forms is None else forms
    vec = X.ndim == 1
    out: dict[str, Callable[[], Any]] = {"scipy": lambda: A @ X}
    mkl, Am = _mkl(), f.mkl
    if mkl is not None and Am is not None:
        out["mkl"] = lambda: mkl.dot_product_mkl(Am, X)
    At = f.torch
    if At is not None:
        import torch

        Xt = torch.from_numpy(X)
        out["torch"] = (lambda: torch.mv(At, Xt)) if vec else (lambda: torch.mm(At, Xt))
    G = f.graphblas
    if G is not None:
        import graphblas as gb

        if vec:
            v = gb.Vector.from_dense(X)
            out["graphblas"] = lambda: G.mxv(v).new()
        else:
            Xg = gb.Matrix.from_dense(X)
            out["graphblas"] = lambda: G.mxm(Xg).new()
    C = f.pydata
    if C is not None:
        out["pydata"] = lambda: C @ X
    D = f.dense
    if D is not None:
        out["dense"] = lambda: D @ X
    return out


def gcn_layers(A: sp.csr_array,
               forms: PeerForms | None = None) -> dict[str, Callable[[Any, Any], Any]]:
    """One layer ``relu(A @ (X @ W))`` as a function of ``(X, W)`` by scipy, MKL and torch
    (graphblas and pydata: see SpMM); a layer takes the previous layer's output as it is."""
    f = PeerForms(A) if forms is None else forms
    out: dict[str, Callable[[Any, Any], Any]] = {
        "scipy": lambda X, W: np.maximum(A @ (X @ W), 0)}
    mkl, Am = _mkl(), f.mkl
    if mkl is not None and Am is not None:
        out["mkl"] = lambda X, W: np.maximum(mkl.dot_product_mkl(Am, X @ W), 0)
    At = f.torch
    if At is not None:
        import torch

        out["torch"] = lambda X, W: torch.relu(torch.mm(At, torch.as_tensor(X) @
                                                        torch.as_tensor(W)))
    return out


def gcn_peers(A: sp.csr_array, X: np.ndarray, W: np.ndarray,
              forms: PeerForms | None = None) -> dict[str, Callable[[], Any]]:
    """``relu(A @ (X @ W))`` by scipy, MKL and torch (graphblas and pydata: see SpMM)."""
    return {p: (lambda layer: lambda: layer(X, W))(f)
            for p, f in gcn_layers(A, forms).items()}


@numba.njit(parallel=True, nogil=True, cache=True)
def _count_far(r, ref, rtol, atol):  # pragma: no cover - compiled
    """How many ``i`` fail ``np.isclose(r[i], ref[i], rtol, atol)`` (NaN never close)."""
    bad = 0
    for i in numba.prange(r.shape[0]):
        a, b = r[i], ref[i]
        if not (a == b or abs(a - b) <= atol + rtol * abs(b)):
            bad += 1
    return bad


def _as_result(r: Any, dense: bool = False) -> np.ndarray | sp.csr_array:
    """A peer's or the plan's result as a numpy array (always where ``dense``) or a
    canonical scipy CSR array."""
    mod = type(r).__module__.split(".")[0]
    if mod == "torch":
        r = r.numpy()
    elif mod == "graphblas":
        if r.ndim == 1 or dense:
            r = r.to_dense(fill_value=0)
        else:
            import graphblas as gb

            r = gb.io.to_scipy_sparse(r, format="csr")
    elif mod == "sparse":  # pydata
        r = r.to_scipy_sparse() if r.ndim == 2 and not dense else r.todense()
    if sp.issparse(r) and dense:
        r = r.toarray()
    if sp.issparse(r):
        r = sp.csr_array(r, dtype=np.float64)
        if not r.has_canonical_format:
            r = r.copy()  # never reorder the caller's (the plan's) buffers in place
            r.sum_duplicates()
        return r
    return np.asarray(r, dtype=np.float64)


def _on_union(a: sp.csr_array, b: sp.csr_array) -> tuple[np.ndarray, np.ndarray]:
    """The values of canonical CSR arrays ``a`` and ``b`` on the union of their patterns
    (zero where one lacks an entry), in the same order."""
    m = np.int64(a.shape[1])
    keys = [np.repeat(np.arange(x.shape[0], dtype=np.int64), np.diff(x.indptr)) * m +
            x.indices.astype(np.int64) for x in (a, b)]
    union = np.union1d(keys[0], keys[1])
    out = []
    for x, k in zip((a, b), keys, strict=True):
        v = np.zeros(len(union))
        v[np.searchsorted(union, k)] = x.data
        out.append(v)
    return out[0], out[1]


def results_match(r: Any, ref: Any, rtol: float = 1e-9, atol: float = 1e-9) -> bool:
    """Whether ``r`` equals ``ref`` elementwise to rounding, as ``np.allclose(r, ref,
    rtol, atol)`` on the dense forms would say, for every element: dense results in one
    compiled pass over the whole arrays (no temporaries; a sparse result of a dense
    reference made dense), sparse ones on the union of their patterns (entries absent from
    both are equal zeros)."""
    ref = _as_result(ref)
    r = _as_result(r, dense=not sp.issparse(ref))  # a dense reference fits densely
    if r.shape != ref.shape:
        return False
    if sp.issparse(r) or sp.issparse(ref):
        va, vb = _on_union(sp.csr_array(r), sp.csr_array(ref))
        return int(_count_far(va, vb, rtol, atol)) == 0
    a = np.ascontiguousarray(r).reshape(-1)
    b = np.ascontiguousarray(ref).reshape(-1)
    return int(_count_far(a, b, rtol, atol)) == 0


def check_peers(fns: dict[str, Callable[[], Any]], ref: Any,
                seconds: dict[str, float] | None = None) -> dict[str, bool]:
    """Whether each peer's result equals ``ref`` (to rounding, every element:
    :func:`results_match`): a peer that computed something else is not timed. The time
    of each peer's call goes into ``seconds`` when given (the benchmark's warm-up of that
    peer)."""
    ok = {}
    for k, f in fns.items():
        t0 = time.perf_counter()
        r = f()
        if seconds is not None:
            seconds[k] = time.perf_counter() - t0
        ok[k] = results_match(r, ref)
    return ok


def finch_probe(n: int = 60, k: int = 4) -> dict[str, Any]:
    """Time finch-tensor-lite on one small dense ``(n x n) @ (n x k)`` product (its 0.1
    release has no sparse level format to race on the benchmark's instances)."""
    try:
        import finchlite as fl
    except Exception as e:  # noqa: BLE001 - optional peer
        return {"available": False, "error": repr(e)}
    rng = np.random.default_rng(0)
    A, X = rng.standard_normal((n, n)), rng.standard_normal((n, k))
    fa, fx = fl.asarray(A), fl.asarray(X)
    t0 = time.perf_counter()
    r = np.asarray(fl.matmul(fa, fx))
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    fl.matmul(fa, fx)
    second = time.perf_counter() - t0
    t0 = time.perf_counter()
    A @ X
    numpy_s = time.perf_counter() - t0
    levels = sorted(n for n in dir(fl) if n.endswith("LevelFType"))
    return {"available": True, "shape": [n, n, k], "correct": bool(np.allclose(r, A @ X)),
            "first_call_s": first, "second_call_s": second, "numpy_s": numpy_s,
            "level_formats": levels}

"""The peers of the sparse benchmark, each run with the same number of threads.

Peers: scipy (single-threaded: it has no thread control), MKL through ``sparse-dot-mkl``
(found in the virtual environment: ``MKL_RT`` points at ``sys.prefix/lib/libmkl_rt.so.*``
before the import), ``torch.sparse`` on CPU, python-graphblas (SuiteSparse:GraphBLAS),
pydata ``sparse`` (GCXS, its compressed format), dense numpy where the dense matrix fits.
finch-tensor-lite is probed, not raced: its 0.1 release has dense and element levels only
(no sparse level format) and runs its kernels through an interpreter
(:func:`finch_probe`). :func:`set_threads` sets every library's thread count.
"""

from __future__ import annotations

import glob
import os
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

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


def product_peers(A: sp.csr_array, X: np.ndarray) -> dict[str, Callable[[], Any]]:
    """``A @ X`` (SpMV for a vector ``X``, SpMM for a matrix) by every peer that applies.

    Each returns its library's natural result (graphblas keeps its own Vector/Matrix):
    the time of the product, not of a conversion.
    """
    n, m = A.shape
    vec = X.ndim == 1
    out: dict[str, Callable[[], Any]] = {"scipy": lambda: A @ X}
    mkl = _mkl()
    if mkl is not None:
        Am = sp.csr_matrix(A)
        out["mkl"] = lambda: mkl.dot_product_mkl(Am, X)
    try:
        import torch

        At = torch.sparse_csr_tensor(torch.from_numpy(A.indptr.astype(np.int64)),
                                     torch.from_numpy(A.indices.astype(np.int64)),
                                     torch.from_numpy(A.data), size=A.shape,
                                     check_invariants=False)
        Xt = torch.from_numpy(X)
        out["torch"] = (lambda: torch.mv(At, Xt)) if vec else (lambda: torch.mm(At, Xt))
    except Exception:  # noqa: BLE001 - optional peer
        pass
    try:
        import graphblas as gb

        G = gb.io.from_scipy_sparse(sp.csr_matrix(A))
        if vec:
            v = gb.Vector.from_dense(X)
            out["graphblas"] = lambda: G.mxv(v).new()
        else:
            Xg = gb.Matrix.from_dense(X)
            out["graphblas"] = lambda: G.mxm(Xg).new()
    except Exception:  # noqa: BLE001 - optional peer
        pass
    try:
        import sparse as pds

        C = pds.GCXS.from_scipy_sparse(A)
        out["pydata"] = lambda: C @ X
    except Exception:  # noqa: BLE001 - optional peer
        pass
    if n * m <= DENSE_FIT:
        D = A.toarray()
        out["dense"] = lambda: D @ X
    return out


def gcn_layers(A: sp.csr_array) -> dict[str, Callable[[Any, Any], Any]]:
    """One layer ``relu(A @ (X @ W))`` as a function of ``(X, W)`` by scipy, MKL and torch
    (graphblas and pydata: see SpMM); a layer takes the previous layer's output as it is."""
    out: dict[str, Callable[[Any, Any], Any]] = {
        "scipy": lambda X, W: np.maximum(A @ (X @ W), 0)}
    mkl = _mkl()
    if mkl is not None:
        Am = sp.csr_matrix(A)
        out["mkl"] = lambda X, W: np.maximum(mkl.dot_product_mkl(Am, X @ W), 0)
    try:
        import torch

        At = torch.sparse_csr_tensor(torch.from_numpy(A.indptr.astype(np.int64)),
                                     torch.from_numpy(A.indices.astype(np.int64)),
                                     torch.from_numpy(A.data), size=A.shape,
                                     check_invariants=False)
        out["torch"] = lambda X, W: torch.relu(torch.mm(At, torch.as_tensor(X) @
                                                        torch.as_tensor(W)))
    except Exception:  # noqa: BLE001 - optional peer
        pass
    return out


def gcn_peers(A: sp.csr_array, X: np.ndarray, W: np.ndarray) -> dict[str, Callable[[], Any]]:
    """``relu(A @ (X @ W))`` by scipy, MKL and torch (graphblas and pydata: see SpMM)."""
    return {p: (lambda layer: lambda: layer(X, W))(f) for p, f in gcn_layers(A).items()}


def check_peers(fns: dict[str, Callable[[], Any]], ref: np.ndarray,
                seconds: dict[str, float] | None = None) -> dict[str, bool]:
    """Whether each peer's result equals ``ref`` (to rounding): a peer that computed
    something else is not timed. The time of each peer's call goes into ``seconds`` when
    given (the benchmark's warm-up of that peer)."""
    ok = {}
    for k, f in fns.items():
        t0 = time.perf_counter()
        r = f()
        if seconds is not None:
            seconds[k] = time.perf_counter() - t0
        mod = type(r).__module__.split(".")[0]
        if mod == "torch":
            r = r.numpy()
        elif mod == "graphblas":
            r = r.to_dense(fill_value=0)
        elif hasattr(r, "todense") and not isinstance(r, np.ndarray):
            r = r.todense()
        r = np.asarray(r)
        ok[k] = r.shape == ref.shape and bool(np.allclose(r, ref, rtol=1e-9, atol=1e-9))
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

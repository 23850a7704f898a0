"""Plans of ``A @ x`` and ``A @ X`` against dense numpy on awkward patterns, every dtype
the kernels serve, one task and row panels, twice per plan (the second run may write into
the first run's dropped output)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import thrifty as th
from thrifty.runtime.sparse_run import specialize
from thrifty.sparse.cost import CostModel

PANELS = CostModel(min_task_seconds=1e-7, parallel_seconds=0.0)  # row panels, threads
DTYPES = ["float32", "float64", "complex128"]


def _pattern(kind: str, n: int, m: int, rng: np.random.Generator) -> sp.csr_array:
    if kind == "empty-rows":
        A = sp.random_array((n, m), density=0.01, format="csr", rng=rng)
        keep = np.repeat(rng.random(n) < 0.4, np.diff(A.indptr))  # 60% of rows empty
        A.data[~keep] = 0
        A.eliminate_zeros()
        return sp.csr_array(A)
    if kind == "one-huge-row":
        A = sp.random_array((n, m), density=0.002, format="lil", rng=rng)
        A[n // 3, :] = rng.standard_normal(m)
        return sp.csr_array(A)
    if kind == "all-empty":
        return sp.csr_array((n, m))
    return sp.csr_array(sp.random_array((n, m), density=0.02, format="csr", rng=rng))


def _values(A: sp.csr_array, dtype: str, rng: np.random.Generator) -> sp.csr_array:
    A = A.astype(dtype)
    if np.dtype(dtype).kind == "c":
        A.data = A.data + 1j * rng.standard_normal(A.nnz)
    return A


def _dense(shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def _tol(dtype: str) -> float:
    return 2e-4 if dtype == "float32" else 1e-11


@pytest.mark.parametrize("cost", [None, PANELS], ids=["default", "panels"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["random", "empty-rows", "one-huge-row", "all-empty"])
@pytest.mark.parametrize("k", [0, 1, 16, 33, 64])  # 0: a vector (SpMV)
def test_product_plans_equal_dense_numpy(kind, dtype, k, cost):
    rng = np.random.default_rng(abs(hash((kind, dtype, k))) % 2**32)
    A = _values(_pattern(kind, 900, 700, rng), dtype, rng)
    shape = (700,) if k == 0 else (700, k)
    prog = th.program(lambda A, X: A @ X)
    X = _dense(shape, dtype, rng)
    tr = prog.traced(A=A, X=X)
    plan = specialize(tr.graph, {"A": A, "X": X}, structure=tr.structure, cost=cost)
    D = A.toarray()
    for _ in range(2):
        X = _dense(shape, dtype, rng)
        A.data[:] = _dense((A.nnz,), dtype, rng)  # new values, same arrays
        got = plan(A=A, X=X)
        assert got.dtype == np.dtype(dtype) and got.shape == (900,) + shape[1:]
        D = A.toarray()
        np.testing.assert_allclose(got, D @ X, rtol=_tol(dtype), atol=_tol(dtype))


@pytest.mark.parametrize("k", [0, 8])
def test_unsorted_and_duplicate_indices_are_canonicalised(k):
    rng = np.random.default_rng(5)
    indptr = np.array([0, 3, 3, 6])
    indices = np.array([2, 0, 2, 1, 1, 0])  # row 0: unsorted, column 2 twice; row 2: 1 twice
    data = rng.standard_normal(6)
    A = sp.csr_array((data, indices, indptr), shape=(3, 4))
    assert not A.has_canonical_format
    dense = np.zeros((3, 4))
    for r in range(3):
        for p in range(indptr[r], indptr[r + 1]):
            dense[r, indices[p]] += data[p]  # the oracle: duplicates add up
    X = rng.standard_normal((4,) if k == 0 else (4, k))
    prog = th.program(lambda A, X: A @ X)
    plan = prog.specialize(A=A, X=X)
    np.testing.assert_allclose(plan(A=A, X=X), dense @ X, rtol=1e-12)
    A2 = sp.csr_array((data * 2, indices.copy(), indptr.copy()), shape=(3, 4))
    np.testing.assert_allclose(plan(A=A2, X=X), 2 * dense @ X, rtol=1e-12)
    with pytest.raises(th.PatternError):
        plan(A=sp.csr_array((data, indices[::-1].copy(), indptr), shape=(3, 4)), X=X)

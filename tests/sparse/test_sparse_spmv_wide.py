"""The SpMV kernel for a vector larger than a core's L2 (``thrifty.sparse.kernels``'s wide
kernel: long scattered rows summed by vector gathers, the others by the narrow loop),
against scipy and dense numpy, and its pattern checks."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import thrifty as th
from thrifty.errors import PatternError
from thrifty.runtime.sparse_run import specialize
from thrifty.sparse import kernels as K
from thrifty.sparse.tasks import SpmvPanel, SpmvWhole

DTYPES = ["float64", "float32", "complex128", "int64"]


def _wide_columns(dtype: str) -> int:
    """Columns of an ``x`` just above the wide kernel's threshold."""
    return K.SPMV_GATHER_X_BYTES // np.dtype(dtype).itemsize + 17


def _mixed(n: int, m: int, dtype: str, seed: int) -> sp.csr_array:
    """Rows of every kind the wide kernel tells apart: empty, short, long and scattered
    (columns spanning much more than SPMV_GATHER_SPAN_BYTES), long and banded (a span
    below it), and exactly SPMV_GATHER_MIN_ROW entries, in mixed order."""
    rng = np.random.default_rng(seed)
    span = K.SPMV_GATHER_SPAN_BYTES // np.dtype(dtype).itemsize
    rows, cols = [], []
    for i in range(n):
        kind = i % 5
        if kind == 0:
            c = np.array([], dtype=np.int64)
        elif kind == 1:
            c = rng.choice(m, size=rng.integers(1, K.SPMV_GATHER_MIN_ROW), replace=False)
        elif kind == 2:
            c = rng.choice(m, size=rng.integers(K.SPMV_GATHER_MIN_ROW, 40), replace=False)
        elif kind == 3:
            start = rng.integers(0, m - span)
            c = start + rng.choice(span // 2, size=rng.integers(8, 30), replace=False)
        else:
            c = rng.choice(m, size=K.SPMV_GATHER_MIN_ROW, replace=False)
        rows.append(np.full(len(c), i))
        cols.append(np.sort(c))
    r, c = np.concatenate(rows), np.concatenate(cols)
    vals = rng.standard_normal(len(r))
    if np.dtype(dtype).kind == "c":
        vals = vals + 1j * rng.standard_normal(len(r))
    elif np.dtype(dtype).kind == "i":
        vals = rng.integers(-5, 6, len(r)).astype(float)
    return sp.csr_array((vals.astype(dtype), (r, c)), shape=(n, m))


def _x(m: int, dtype: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "i":
        return rng.integers(-4, 5, m).astype(dtype)
    x = rng.standard_normal(m)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(m)
    return x.astype(dtype)


def _close(got: np.ndarray, A: sp.csr_array, x: np.ndarray) -> None:
    """``got`` equals ``A @ x`` computed in float64/complex128 from the same values within
    the rounding bound of a sum of products in ``got``'s dtype, in any order:
    ``2 * (row length + 1) * eps * (|A| @ |x|)`` per row."""
    wide = np.complex128 if np.dtype(got.dtype).kind == "c" else np.float64
    exact = sp.csr_array(A.astype(wide)) @ x.astype(wide)
    eps = np.finfo(got.dtype).eps if np.dtype(got.dtype).kind != "i" else 0.0
    bound = 2 * (np.diff(A.indptr) + 1) * eps * (abs(A).astype(np.float64) @ abs(x))
    assert np.all(np.abs(got.astype(wide) - exact) <= bound)


def test_the_wide_kernel_is_chosen_above_the_threshold_only():
    assert K.spmv_kernel(_wide_columns("float64"), 8) is not K.spmv_kernel(1000, 8)
    assert K.spmv_kernel(K.SPMV_GATHER_X_BYTES // 8, 8) is K.spmv_kernel(1000, 8)
    assert K.spmv_kernel(K.SPMV_GATHER_X_BYTES // 8, 16) is not K.spmv_kernel(1000, 8)


@pytest.mark.parametrize("dtype", DTYPES)
def test_wide_spmv_equals_scipy_and_dense(dtype):
    m = _wide_columns(dtype)
    A, x = _mixed(300, m, dtype, 1), _x(m, dtype, 2)
    # the oracle itself against dense rows
    dense = np.array([A[[i]].toarray()[0].astype(np.complex128) @ x for i in range(0, 300, 7)])
    exact = sp.csr_array(A.astype(np.complex128)) @ x.astype(np.complex128)
    np.testing.assert_allclose(exact[::7], dense, rtol=1e-12, atol=1e-12)
    _close(A @ x, A, x)
    out = np.full(300, 7, dtype=dtype)
    K.spmv_rows(A.indptr, A.indices, A.data, x, out, 0, 300)
    _close(out, A, x)
    assert np.all(out[::5] == 0)  # empty rows written, not left as they were
    # a panel of rows, and the plan's tasks
    part = np.empty(120, dtype=dtype)
    K.spmv_rows(A.indptr, A.indices, A.data, x, part, 101, 221)
    _close(part, A[101:221], x)
    _close(SpmvWhole(dtype)(A, x), A, x)
    shared = np.empty(300, dtype=dtype)
    SpmvPanel(40, 260, dtype)(shared, A, x)
    _close(shared[40:260], A[40:260], x)


def test_wide_spmv_integers_are_exact():
    m = _wide_columns("int64")
    A, x = _mixed(200, m, "int64", 3), _x(m, "int64", 4)
    out = np.empty(200, dtype=np.int64)
    K.spmv_rows(A.indptr, A.indices, A.data, x, out, 0, 200)
    assert np.array_equal(out, A @ x)


@pytest.mark.parametrize("row_kind", [2, 3, 4])
@pytest.mark.parametrize("bad", [-1, "m", "huge"])
def test_a_bad_column_in_a_long_row_is_refused(row_kind, bad):
    m = _wide_columns("float64")
    A, x = _mixed(60, m, "float64", 5), _x(m, "float64", 6)
    i = 10 + row_kind  # rows 12, 13, 14: long scattered, long banded, exactly the minimum
    ix = A.indices.copy()
    p = A.indptr[i] + 3
    ix[p] = {-1: -1, "m": m, "huge": np.iinfo(ix.dtype).max}[bad]
    with pytest.raises(PatternError, match=f"row {i} "):
        K.spmv_rows(A.indptr, ix, A.data, x, np.empty(60), 0, 60)
    B = A.copy()
    B.indices = ix
    with pytest.raises(PatternError, match="specialize again"):
        SpmvWhole("float64")(B, x)
    with pytest.raises(PatternError, match="specialize again"):
        SpmvPanel(0, 60, "float64")(np.empty(60), B, x)


def test_a_plan_on_a_wide_vector_uses_the_checked_kernel():
    m = _wide_columns("float64")
    A, x = _mixed(200, m, "float64", 7), _x(m, "float64", 8)
    tr = th.program(lambda A, x: A @ x).traced(A=A, x=x)
    plan = specialize(tr.graph, {"A": A, "x": x}, structure=tr.structure)
    assert plan.report()["kernels"] == {"spmv_scipy": 1} and plan._spmv is not None
    np.testing.assert_allclose(plan(A=A, x=x), A @ x, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(plan.run({"A": A, "x": x}), A @ x, rtol=1e-12, atol=1e-12)
    # the inspected index array changed in place: a long row's column now out of range
    saved = A.indices[A.indptr[12] + 1]
    A.indices[A.indptr[12] + 1] = m + 3
    try:
        with pytest.raises(PatternError):
            plan(A=A, x=x)
        with pytest.raises(PatternError):
            plan.run({"A": A, "x": x})
    finally:
        A.indices[A.indptr[12] + 1] = saved
    np.testing.assert_allclose(plan(A=A, x=x), A @ x, rtol=1e-12, atol=1e-12)

"""The SpMV/SpMM kernels and their index checks on generated CSR inputs: results against
the dense product in float64, and malformed index arrays always refused (never read out of
bounds, never a silent result)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import thrifty as th
from thrifty.errors import PatternError
from thrifty.sparse import kernels as K
from thrifty.sparse.tasks import SpmvPanel, SpmvWhole

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def csr_parts(draw: st.DrawFn, canonical: bool = False) -> tuple[sp.csr_array, str]:
    """A CSR matrix with empty rows, and unless ``canonical`` unsorted and duplicate
    column indices; int32 or int64 indices; float32 or float64 values."""
    n = draw(st.integers(0, 40))
    m = draw(st.integers(1, 40))
    itype = draw(st.sampled_from(["int32", "int64"]))
    dtype = draw(st.sampled_from(["float32", "float64"]))
    lens = draw(st.lists(st.integers(0, 12), min_size=n, max_size=n))
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    cols = []
    for ln in lens:
        if canonical:
            c = np.sort(rng.choice(m, size=min(ln, m), replace=False))
        else:
            c = rng.integers(0, m, size=ln)  # unsorted, duplicates allowed
        cols.append(c)
    indptr = np.concatenate([[0], np.cumsum([len(c) for c in cols])]).astype(itype)
    indices = (np.concatenate(cols) if cols else np.zeros(0)).astype(itype)
    data = rng.integers(-4, 5, size=len(indices)).astype(dtype)  # exact in float32
    A = sp.csr_array((data, indices, indptr), shape=(n, m))
    return A, dtype


def _dense_product(A: sp.csr_array, X: np.ndarray) -> np.ndarray:
    """The product by dense float64 numpy: duplicates summed, as CSR defines them."""
    D = np.zeros(A.shape)
    for i in range(A.shape[0]):
        for p in range(A.indptr[i], A.indptr[i + 1]):
            D[i, A.indices[p]] += A.data[p]
    return D @ X.astype(np.float64)


@SETTINGS
@given(csr_parts(), st.data())
def test_spmv_kernels_equal_the_dense_product(case, data):
    A, dtype = case
    n, m = A.shape
    x = np.random.default_rng(0).integers(-3, 4, m).astype(dtype)
    ref = _dense_product(A, x)
    r0 = data.draw(st.integers(0, n))
    r1 = data.draw(st.integers(r0, n))
    out = np.full(r1 - r0, 77, dtype=dtype)
    K.spmv_rows(A.indptr, A.indices, A.data, x, out, r0, r1)
    np.testing.assert_array_equal(out, ref[r0:r1])  # small integers: exact
    np.testing.assert_array_equal(SpmvWhole(dtype)(A, x), ref)
    whole = np.full(n, 77, dtype=dtype)
    SpmvPanel(r0, r1, dtype)(whole, A, x)
    np.testing.assert_array_equal(whole[r0:r1], ref[r0:r1])
    assert K.indices_ok(A.indptr, A.indices, m, r0, r1)


@SETTINGS
@given(csr_parts(), st.integers(1, 300))
def test_spmm_kernel_equals_the_dense_product(case, k):
    A, dtype = case
    n, m = A.shape
    X = np.random.default_rng(k).integers(-3, 4, (m, k)).astype(dtype)
    out = np.full((n, k), 77, dtype=dtype)
    K.spmm_rows(A.indptr, A.indices, A.data, X, out, 0, n)
    np.testing.assert_array_equal(out, _dense_product(A, X))


@SETTINGS
@given(csr_parts(), st.sampled_from([8, 16, 32, 64, 128, 256]), st.data())
def test_spmm_streaming_kernel_equals_the_dense_product(case, k, data):
    # the kernel that writes rows by non-temporal vector stores, on a panel of rows of an
    # aligned output (the plan's pooled buffers) and, falling back, on an unaligned one
    from thrifty.sparse.outputs import aligned_empty

    A, dtype = case
    n, m = A.shape
    X = np.random.default_rng(k).integers(-3, 4, (m, k)).astype(dtype)
    ref = _dense_product(A, X)
    r0 = data.draw(st.integers(0, n))
    r1 = data.draw(st.integers(r0, n))
    whole = aligned_empty((n, k), dtype)
    whole[...] = 77
    K.spmm_rows(A.indptr, A.indices, A.data, X, whole[r0:r1], r0, r1, stream=True)
    np.testing.assert_array_equal(whole[r0:r1], ref[r0:r1])
    assert (whole[:r0] == 77).all() and (whole[r1:] == 77).all()
    shifted = np.full(n * k + 1, 77, dtype=dtype)[1:].reshape(n, k)
    K.spmm_rows(A.indptr, A.indices, A.data, X, shifted[r0:r1], r0, r1, stream=True)
    np.testing.assert_array_equal(shifted[r0:r1], ref[r0:r1])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(csr_parts(canonical=True), st.sampled_from([1, 3, 16, 64, 257]))
def test_plans_equal_the_dense_product_in_values_and_structure(case, k):
    A, dtype = case
    if A.shape[0] == 0:
        return
    X = np.random.default_rng(1).integers(-3, 4, (A.shape[1], k)).astype(dtype)
    arg = X[:, 0].copy() if k == 1 else X
    got = th.program(lambda A, X: A @ X)(A=A, X=arg)
    ref = _dense_product(A, arg)
    assert type(got) is np.ndarray and got.dtype == np.dtype(dtype) and got.shape == ref.shape
    np.testing.assert_array_equal(got, ref)


def _brute_ok(indptr: np.ndarray, indices: np.ndarray, m: int, r0: int, r1: int) -> bool:
    """Rows r0..r1-1 readable: pointers in 0..len(indices), non-decreasing; their column
    indices in 0..m-1."""
    p = [int(v) for v in indptr[r0:r1 + 1]]
    if any(v < 0 or v > len(indices) for v in p) or any(b < a for a, b in zip(p, p[1:])):
        return False
    return all(0 <= int(c) < m for c in indices[p[0]:p[-1]])


BAD_VALUES = [-1, -2**31, 2**31 - 1, 2**40, -2**40]


@SETTINGS
@given(csr_parts(), st.data())
def test_malformed_indices_are_refused_never_read(case, data):
    A, dtype = case
    n, m = A.shape
    indptr, indices = A.indptr.copy(), A.indices.copy()
    where = data.draw(st.sampled_from(["indices", "indptr"]))
    arr = indices if where == "indices" else indptr
    if len(arr) == 0:
        return
    pos = data.draw(st.integers(0, len(arr) - 1))
    info = np.iinfo(arr.dtype)
    bad = data.draw(st.sampled_from([v for v in [*BAD_VALUES, m, m + 5, len(indices) + 1]
                                     if info.min <= v <= info.max]))
    arr[pos] = bad
    ok = _brute_ok(indptr, indices, m, 0, n)
    assert K.indices_ok(indptr, indices, m, 0, n) == ok
    x = np.ones(m, dtype=dtype)
    B = A.copy()  # the malformed arrays put in place, as a caller could (no re-check)
    B.indptr, B.indices = indptr, indices
    calls = [lambda: K.check_indices(indptr, indices, m, 0, n),
             lambda: SpmvWhole(dtype)(B, x),
             lambda: SpmvPanel(0, n, dtype)(np.empty(n, dtype=dtype), B, x),
             lambda: K.spmv_rows(indptr, indices, A.data, x, np.empty(n, dtype=dtype), 0, n),
             lambda: K.spmm_rows(indptr, indices, A.data, np.ones((m, 3), dtype=dtype),
                                 np.empty((n, 3), dtype=dtype), 0, n)]
    for call in calls:
        if ok:
            call()  # still a valid matrix (the bad value landed where it is allowed)
        else:
            with pytest.raises(PatternError, match="specialize again"):
                call()


def test_short_value_or_pointer_arrays_are_refused():
    A = sp.random_array((50, 40), density=0.2, format="csr", rng=1)
    x = np.ones(40)
    short = A.copy()
    short.data = A.data[:-3]
    with pytest.raises(PatternError):
        K.spmv_rows(short.indptr, short.indices, short.data, x, np.empty(50), 0, 50)
    with pytest.raises(PatternError):
        K.spmm_rows(short.indptr, short.indices, short.data, np.ones((40, 2)),
                    np.empty((50, 2)), 0, 50)
    assert not K.indices_ok(A.indptr[:-5], A.indices, 40, 0, 50)  # pointers end early
    with pytest.raises(PatternError):
        K.check_indices(A.indptr, A.indices, 40, 10, 60)
    for fn in (SpmvWhole("float64"), lambda A, x: SpmvPanel(0, 50, "float64")(
            np.empty(50), A, x)):
        with pytest.raises(PatternError, match="specialize again"):
            fn(short, x)

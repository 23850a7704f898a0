"""A CSR operand holding every entry (a dense matrix stored as sparse): its products as the
dense matrix, the pattern still checked on every call, and near-full patterns against
dense numpy."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import thrifty as th
from thrifty.runtime.sparse_run import specialize
from thrifty.sparse import full_pattern as FP

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
DTYPES = ["float64", "float32", "complex128", "int64", "int32"]

product = th.program(lambda A, X: A @ X)


def _plan(inputs):
    tr = product.traced(**inputs)
    return specialize(tr.graph, inputs, structure=tr.structure)


def _full(D: np.ndarray, index_dtype: str = "int32") -> sp.csr_array:
    """``D`` as CSR holding every entry (its zeros stored too)."""
    m, n = D.shape
    return sp.csr_array((D.ravel().copy(), np.tile(np.arange(n), m).astype(index_dtype),
                         np.arange(0, m * n + 1, n).astype(index_dtype)), shape=(m, n))


def _values(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if dtype.startswith("int"):
        return rng.integers(-9, 10, size=shape).astype(dtype)
    v = rng.standard_normal(shape)
    if dtype.startswith("complex"):
        v = v + 1j * rng.standard_normal(shape)
    return v.astype(dtype)


def _close(got: np.ndarray, want: np.ndarray, dtype: str) -> None:
    assert got.dtype == want.dtype
    if dtype.startswith("int"):
        np.testing.assert_array_equal(got, want)
    else:
        tol = 1e-4 if dtype == "float32" else 1e-11
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1, want.shape[-1]))


@SETTINGS
@given(m=st.integers(1, 23), n=st.integers(1, 37), k=st.sampled_from([None, 1, 3, 16]),
       dtype=st.sampled_from(DTYPES), index_dtype=st.sampled_from(["int32", "int64"]),
       zeros=st.floats(0.0, 0.6), seed=st.integers(0, 2**31 - 1))
def test_full_pattern_products_equal_dense_numpy(m, n, k, dtype, index_dtype, zeros, seed):
    rng = np.random.default_rng(seed)
    D = _values(rng, (m, n), dtype)
    D[rng.random((m, n)) < zeros] = 0  # explicit zeros: still stored, still the pattern
    A = _full(D, index_dtype)
    X = _values(rng, (n,) if k is None else (n, k), dtype)
    plan = _plan({"A": A, "X": X})
    assert plan.report()["kernels"] == {"gemm_full_pattern": 1}
    assert plan.inputs["A"].pattern_free  # the kernel checks the pattern itself
    first = plan(A=A, X=X)
    _close(first, D @ X, dtype)
    np.testing.assert_array_equal(plan(A=A, X=X), first)  # the next call walks back
    # new values in the inspected arrays, and new arrays holding the same pattern
    A.data[:] = _values(rng, (m * n,), dtype)
    _close(plan(A=A, X=X), A.toarray() @ X, dtype)
    B = _full(_values(rng, (m, n), dtype), index_dtype)
    _close(plan.run({"A": B, "X": X}), B.toarray() @ X, dtype)


def test_a_vector_with_strides_and_a_wing_sized_matrix():
    rng = np.random.default_rng(3)
    D = rng.standard_normal((500, 500))
    A = _full(D)
    x = rng.standard_normal(1000)[::2]  # not contiguous
    plan = _plan({"A": A, "X": x})
    np.testing.assert_allclose(plan(A=A, X=x), D @ x, rtol=1e-10, atol=1e-10)
    X = np.asfortranarray(rng.standard_normal((500, 16)))
    np.testing.assert_allclose(_plan({"A": A, "X": X})(A=A, X=X), D @ X, rtol=1e-10,
                               atol=1e-10)


def test_mixed_dtypes_promote_as_numpy_does():
    rng = np.random.default_rng(4)
    D = rng.standard_normal((7, 5)).astype(np.float32)
    A, x = _full(D), rng.standard_normal(5)
    plan = _plan({"A": A, "X": x})
    got = plan(A=A, X=x)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, D @ x, rtol=1e-6)


@pytest.mark.parametrize("k", [None, 4])
def test_a_changed_pattern_is_refused(k):
    rng = np.random.default_rng(5)
    D = rng.standard_normal((9, 6))
    A = _full(D)
    X = rng.standard_normal(6 if k is None else (6, k))
    plan = _plan({"A": A, "X": X})
    # another pattern in new arrays: the explicit zero dropped
    D0 = D.copy()
    D0[2, 3] = 0
    with pytest.raises(th.PatternError, match="different sparsity pattern"):
        plan(A=sp.csr_array(D0), X=X)
    # the inspected arrays changed in place: each row of a group of four, the last row,
    # the index pointers; refused by the kernel's own check, never a wrong product
    for where in range(9):
        B = _full(D)
        plan = _plan({"A": B, "X": X})
        B.indices[where * 6 + 1], B.indices[where * 6 + 2] = 2, 1  # unsorted: not canonical
        with pytest.raises(th.PatternError, match=f"full pattern.*row {where} differs"):
            plan(A=B, X=X)
        B.indices[where * 6 + 1], B.indices[where * 6 + 2] = 1, 2
        np.testing.assert_allclose(plan(A=B, X=X), D @ X, rtol=1e-12)  # usable again
    B = _full(D)
    plan = _plan({"A": B, "X": X})
    B.indptr[4] = 23
    with pytest.raises(th.PatternError, match="specialize again"):
        plan(A=B, X=X)


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_kernels_report_the_first_row_that_differs(index_dtype):
    rng = np.random.default_rng(6)
    m, n = 11, 13
    D = rng.standard_normal((m, n))
    A = _full(D, index_dtype)
    x = rng.standard_normal(n)
    out = np.empty(m)
    FP.full_gemv(A.indptr, A.indices, A.data, x, out)
    np.testing.assert_allclose(out, D @ x, rtol=1e-12)
    FP.check_full_pattern(A.indptr, A.indices, (m, n))
    for row in range(m):
        bad = A.indices.copy()
        bad[row * n + n - 1] = 0
        with pytest.raises(th.PatternError, match=f"row {row} differs"):
            FP.full_gemv(A.indptr, bad, A.data, x, np.empty(m))
        with pytest.raises(th.PatternError, match=f"row {row} differs"):
            FP.check_full_pattern(A.indptr, bad, (m, n))
    for backward in (False, True):  # either walk: the same values, the same refusals
        got = np.empty(m)
        FP.full_gemv(A.indptr, A.indices, A.data, x, got, backward=backward)
        np.testing.assert_array_equal(got, out)
        for row in (0, 3, 4, m - 1):
            bad = A.indices.copy()
            bad[row * n] = 1
            with pytest.raises(th.PatternError, match=f"row {row} differs"):
                FP.full_gemv(A.indptr, bad, A.data, x, np.empty(m), backward=backward)
    with pytest.raises(th.PatternError, match="not 12 and 143 long"):
        FP.check_full_pattern(A.indptr, A.indices[:-1], (m, n))
    with pytest.raises(th.PatternError):
        FP.full_gemv(A.indptr, A.indices, A.data[:-1], x, out)  # too few values
    with pytest.raises(th.PatternError):
        FP.check_full_pattern(A.indptr[:-1], A.indices, (m, n))


@SETTINGS
@given(m=st.integers(1, 40), n=st.integers(1, 40), density=st.floats(0.5, 1.0),
       k=st.sampled_from([None, 8, 64]), dtype=st.sampled_from(["float64", "float32"]),
       seed=st.integers(0, 2**31 - 1))
def test_near_full_patterns_equal_dense_numpy(m, n, density, k, dtype, seed):
    rng = np.random.default_rng(seed)
    D = _values(rng, (m, n), dtype)
    D[rng.random((m, n)) >= density] = 0
    A = sp.csr_array(D)
    if A.nnz == 0:
        return
    X = _values(rng, (n,) if k is None else (n, k), dtype)
    plan = _plan({"A": A, "X": X})
    _close(plan(A=A, X=X), D @ X, dtype)


def _segments(plan):
    return [s for t in plan.taskgraph.tasks.values() for s in t.attrs.get("segments", ())]


def test_block_rows_of_one_column_set_share_a_panel():
    from thrifty.sparse.lower_matmul import PANEL_MAX_ENTRIES

    rng = np.random.default_rng(8)
    D = rng.standard_normal((300, 300))
    D[rng.random((300, 300)) >= 0.9] = 0
    D[:, 250:] = 0  # the same column blocks in every block row, not all columns
    A, X = sp.csr_array(D), rng.standard_normal((300, 64))
    plan = _plan({"A": A, "X": X})
    panels = [s for s in _segments(plan) if s.form == "panel"]
    assert panels and max(s.r1 - s.r0 for s in panels) > plan.inputs["A"].shape[0] // 30
    assert all((s.r1 - s.r0) * len(s.cols) <= PANEL_MAX_ENTRIES for s in panels)
    np.testing.assert_allclose(plan(A=A, X=X), D @ X, rtol=1e-10, atol=1e-10)
    # dense blocks on a staircase (32 rows each, 64 columns): the block rows of a step
    # share a panel, the steps (other column blocks) do not
    S = np.zeros((256, 256))
    for i in range(0, 256, 32):
        S[i:i + 32, i:i + 64] = rng.standard_normal((32, min(64, 256 - i)))
    B, Y = sp.csr_array(S), rng.standard_normal((256, 256))
    plan = _plan({"A": B, "X": Y})
    panels = [s for s in _segments(plan) if s.form == "panel"]
    assert panels and max(s.r1 - s.r0 for s in panels) > 8
    for s in panels:
        assert s.r0 // 32 == (s.r1 - 1) // 32
        assert set(B[s.r0:s.r1].indices.tolist()) <= set(s.cols.tolist())
    np.testing.assert_allclose(plan(A=B, X=Y), S @ Y, rtol=1e-10, atol=1e-10)


def test_a_gcn_layer_on_a_near_full_pattern_equals_dense_numpy():
    rng = np.random.default_rng(9)
    D = rng.standard_normal((200, 200))
    D[rng.random((200, 200)) >= 0.8] = 0
    A = sp.csr_array(D)
    X, W = rng.standard_normal((200, 64)), rng.standard_normal((64, 64))
    layer = th.program(lambda A, X, W: th.relu(A @ (X @ W)))
    tr = layer.traced(A=A, X=X, W=W)
    plan = specialize(tr.graph, {"A": A, "X": X, "W": W}, structure=tr.structure)
    np.testing.assert_allclose(plan(A=A, X=X, W=W), np.maximum(D @ (X @ W), 0), rtol=1e-9,
                               atol=1e-9)

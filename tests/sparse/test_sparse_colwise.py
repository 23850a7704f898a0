"""``A.T @ y`` (``einsum ij,i->j``, ``y @ A``) and column sums (``A.sum(axis=0)``) by the
column-wise kernels, and the one-frame path of SpMV plans: results against the dense
reference (values, dtype, shape) on generated matrices, malformed or changed index arrays
refused, never read out of bounds."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import thrifty as th
from thrifty.errors import PatternError
from thrifty.sparse.colwise import ColSums, RowSums, SpmvT

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def matrices(draw: st.DrawFn, canonical: bool = False, dtypes=("float32", "float64")
             ) -> tuple[sp.csr_array, str]:
    """A CSR matrix with empty rows and columns, small integer values (exact sums), int32
    or int64 indices; unless ``canonical``, unsorted and duplicate column indices."""
    n, m = draw(st.integers(0, 30)), draw(st.integers(1, 30))
    itype = draw(st.sampled_from(["int32", "int64"]))
    dtype = draw(st.sampled_from(list(dtypes)))
    lens = draw(st.lists(st.integers(0, 10), min_size=n, max_size=n))
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    cols = [np.sort(rng.choice(m, size=min(k, m), replace=False)) if canonical
            else rng.integers(0, m, size=k) for k in lens]
    indptr = np.concatenate([[0], np.cumsum([len(c) for c in cols])]).astype(itype)
    indices = (np.concatenate(cols) if cols else np.zeros(0)).astype(itype)
    data = rng.integers(-4, 5, size=len(indices)).astype(dtype)
    if dtype.startswith("complex"):
        data += 1j * rng.integers(-4, 5, size=len(indices))
    return sp.csr_array((data, indices, indptr), shape=(n, m)), dtype


def _dense(A: sp.csr_array) -> np.ndarray:
    """``A`` densely by a loop over its stored entries (duplicates summed), in float64 or
    complex128."""
    D = np.zeros(A.shape, dtype=np.result_type(A.dtype, np.float64))
    for i in range(A.shape[0]):
        for p in range(A.indptr[i], A.indptr[i + 1]):
            D[i, A.indices[p]] += A.data[p]
    return D


@SETTINGS
@given(matrices())
def test_kernels_equal_the_dense_products(case):
    A, dtype = case
    n, m = A.shape
    y = np.random.default_rng(n).integers(-3, 4, n).astype(dtype)
    got = SpmvT(dtype)(y, A)
    assert got.dtype == np.dtype(dtype) and got.shape == (m,)
    np.testing.assert_array_equal(got, _dense(A).T @ y)  # small integers: exact
    sums = ColSums("float64", (m,))(A)
    np.testing.assert_array_equal(sums, _dense(A).sum(axis=0))
    np.testing.assert_array_equal(ColSums("float64", (1, m))(A), _dense(A).sum(axis=0)[None])
    np.testing.assert_array_equal(RowSums("float64", (n,))(A), _dense(A).sum(axis=1))
    np.testing.assert_array_equal(RowSums("float64", (n, 1))(A), _dense(A).sum(axis=1)[:, None])


def _colsums(keepdims: bool) -> th.Program:
    return th.program(lambda A: A.sum(axis=0, keepdims=keepdims))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(matrices(canonical=True, dtypes=("float32", "float64", "int64", "complex128")))
def test_plans_equal_the_dense_reference(case):
    A, dtype = case
    n, m = A.shape
    if n == 0:
        return
    y = np.random.default_rng(m).integers(-3, 4, n).astype(dtype)
    D = _dense(A).astype(dtype)
    progs = {"einsum": (th.program(lambda A, y: th.einsum("ij,i->j", A, y)), D.T @ y),
             "vecmat": (th.program(lambda y, A: y @ A), y @ D)}
    for fn, want in progs.values():
        plan = fn.specialize(A=A, y=y)
        assert plan.report()["kernels"] == {"spmv_t": 1}
        assert plan.inputs["A"].pattern_free
        got = plan(A=A, y=y)
        assert type(got) is np.ndarray and got.dtype == want.dtype and got.shape == (m,)
        np.testing.assert_array_equal(got, want)
    _check_sums(A, D, dtype, axis=0)


def _rowsums(keepdims: bool) -> th.Program:
    return th.program(lambda A: A.sum(axis=1, keepdims=keepdims))


def _check_sums(A: sp.csr_array, D: np.ndarray, dtype: str, axis: int) -> None:
    """The plans of ``A.sum(axis)`` (with and without ``keepdims``) run the compiled kernel
    of that axis (float32: numpy sums pairwise, left to the einsum form) and equal the
    dense sums in values, dtype and shape."""
    program, kernel = (_colsums, "colsum_csr") if axis == 0 else (_rowsums, "rowsum_csr")
    for keep in (False, True):
        want = D.sum(axis=axis, keepdims=keep)
        plan = program(keep).specialize(A=A)
        expect = kernel if dtype != "float32" else "einsum_coo"
        assert plan.report()["kernels"] == {expect: 1}
        got = plan(A=A)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)  # small integers: exact


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(matrices(canonical=True, dtypes=("float32", "float64", "int64", "complex128")))
def test_row_sum_plans_equal_the_dense_reference(case):
    """``A.sum(axis=1)`` by ``rowsum_csr`` (float32 left to the einsum form, as the column
    sums): the values and dtype of the dense reference, and exactly the einsum form's sums
    (each row's values added in CSR order)."""
    A, dtype = case
    _check_sums(A, _dense(A).astype(dtype), dtype, axis=1)


def test_int32_and_bool_sums_are_exact_and_typed_as_numpy():
    A = sp.csr_array(np.array([[2**30, 0, 1], [2**30, 5, 0], [2**30, 0, 0]], dtype=np.int32))
    got = th.program(lambda A: A.sum(axis=0))(A=A)
    want = A.toarray().sum(axis=0)  # int64: no overflow
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    B = sp.csr_array(np.array([[True, False], [True, True]]))
    np.testing.assert_array_equal(th.program(lambda B: B.sum(axis=0))(B=B),
                                  B.toarray().sum(axis=0))
    got = th.program(lambda A: A.sum(axis=1))(A=A)
    want = A.toarray().sum(axis=1)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(th.program(lambda B: B.sum(axis=1))(B=B),
                                  B.toarray().sum(axis=1))


BAD = [-1, -2**31, 2**31 - 1, 2**40]


@SETTINGS
@given(matrices(), st.data())
def test_malformed_index_arrays_are_refused(case, data):
    A, dtype = case
    n, m = A.shape
    indptr, indices = A.indptr.copy(), A.indices.copy()
    arr = data.draw(st.sampled_from([a for a in (indptr, indices) if len(a)]))
    pos = data.draw(st.integers(0, len(arr) - 1))
    info = np.iinfo(arr.dtype)
    arr[pos] = data.draw(st.sampled_from([v for v in [*BAD, m, len(indices) + 1]
                                          if info.min <= v <= info.max]))
    p = [int(v) for v in indptr]
    ok = all(0 <= v <= len(indices) for v in p) and all(b >= a for a, b in zip(p, p[1:])) \
        and all(0 <= int(c) < m for c in indices[p[0]:p[-1]])
    B = A.copy()
    B.indptr, B.indices = indptr, indices
    y = np.ones(n, dtype=dtype)
    for call in (lambda: SpmvT(dtype)(y, B), lambda: ColSums("float64", (m,))(B),
                 lambda: RowSums("float64", (n,))(B)):
        if ok:
            call()
        else:
            with pytest.raises(PatternError, match="specialize again"):
                call()


def _square(n=300, seed=0):
    A = sp.random_array((n, n), density=0.03, format="csr", rng=seed)
    A.sort_indices()
    return A


def test_in_place_changes_give_their_own_result_or_a_pattern_error():
    A = _square()
    y = np.random.default_rng(1).standard_normal(300)
    plans = {"einsum": th.program(lambda A, y: th.einsum("ij,i->j", A, y)).specialize(A=A, y=y),
             "sum": th.program(lambda A, y: A.sum(axis=0)).specialize(A=A, y=y)}
    A.indices[:] = A.indices[::-1]  # a new pattern in the inspected arrays: read at run time
    np.testing.assert_allclose(plans["einsum"](A=A, y=y), A.toarray().T @ y, rtol=1e-12)
    np.testing.assert_allclose(plans["sum"](A=A, y=y), A.toarray().sum(axis=0), rtol=1e-12)
    A.indices[5] = 300
    for plan in plans.values():
        with pytest.raises(PatternError, match="specialize again"):
            plan(A=A, y=y)
    moved = _square(seed=2)  # another pattern in new arrays: compared, refused
    for plan in plans.values():
        with pytest.raises(PatternError, match="different sparsity pattern"):
            plan(A=moved, y=y)


# -- the one-frame path of a plan of one SpMV ----------------------------------------------
def test_spmv_plan_one_frame_path_and_its_fallbacks():
    A = _square()
    x = np.random.default_rng(3).standard_normal(300)
    prog = th.program(lambda A, x: A @ x)
    plan = prog.specialize(A=A, x=x)
    assert plan.report()["kernels"] == {"spmv_scipy": 1} and plan._spmv is not None
    want = A.toarray() @ x
    for got in (plan(A=A, x=x), plan.run({"A": A, "x": x}), prog(A=A, x=x), plan(A, x),
                plan(A=sp.csr_matrix(A), x=x), plan(A=A, x=list(x)),
                plan(A=A.copy(), x=x), plan.run({"A": A, "x": x}, scheduler="sync")):
        assert type(got) is np.ndarray and got.dtype == np.float64 and got.shape == (300,)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    with pytest.raises(th.SpecError, match="dtype"):
        plan(A=A, x=x.astype(np.float32))
    with pytest.raises(th.ShapeError):
        plan(A=A, x=x[:-1])
    with pytest.raises(th.SpecError, match="missing"):
        plan(A=A, y=x)
    A.indptr[-1] = A.nnz + 7  # beyond the index arrays: refused, nothing read there
    for call in (lambda: plan(A=A, x=x), lambda: plan.run({"A": A, "x": x}),
                 lambda: prog(A=A, x=x)):
        with pytest.raises(PatternError, match="specialize again"):
            call()

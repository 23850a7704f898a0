"""Each kernel against scipy and dense numpy, for every dtype it serves."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import scipy.sparse as sp

from thrifty.errors import PatternError
from thrifty.graph.ops import softmax_ref
from thrifty.sparse import kernels as K
from thrifty.sparse.masked import masked_rows

DTYPES = ["float64", "float32", "complex128", "int64"]


def _matrix(n: int, m: int, density: float, dtype: str, seed: int) -> sp.csr_array:
    rng = np.random.default_rng(seed)
    A = sp.random_array((n, m), density=density, format="csr", rng=rng)
    if np.dtype(dtype).kind == "c":
        A = A + 1j * A
    elif np.dtype(dtype).kind == "i":
        A.data = rng.integers(-5, 6, A.nnz).astype(float)
    return sp.csr_array(A.astype(dtype))


def _dense(n: int, m: int, dtype: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.integers(-4, 5, (n, m)) if np.dtype(dtype).kind == "i" else rng.standard_normal((n, m))
    return X.astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("r0", "r1"), [(0, 60), (10, 37), (5, 5)])
@pytest.mark.parametrize("k", [1, 7, 32, 41])  # from 32 columns on: nonzeros in pairs
def test_spmm_rows(dtype, r0, r1, k):
    A, X = _matrix(60, 50, 0.1, dtype, 0), _dense(50, k, dtype, 1)
    out = np.full((r1 - r0, k), 99, dtype=dtype)
    K.spmm_rows(A.indptr, A.indices, A.data, X, out, r0, r1)
    tol = 1e-5 if dtype == "float32" else 1e-12  # atol: sums that cancel to ~1e-5
    np.testing.assert_allclose(out, (A.toarray() @ X)[r0:r1], rtol=tol, atol=tol)


@pytest.mark.parametrize("k", [4, 8, 16, 32, 64, 128, 256])
def test_spmm_fixed_widths_equal_the_dense_product(k):
    # the generated kernels (row in registers, tiles of 64 columns above 64), on row ranges
    # that start inside the matrix, with empty and long rows; small integers: exact sums
    rng = np.random.default_rng(k)
    A = _matrix(70, 50, 0.1, "int64", k).astype("float64")
    A = sp.csr_array(sp.vstack([A, sp.csr_array(np.ones((1, 50))), sp.csr_array((2, 50))]))
    X = rng.integers(-4, 5, (50, k)).astype("float64")
    ref = A.toarray() @ X
    for r0, r1 in [(0, 73), (3, 71), (9, 9)]:
        out = np.full((r1 - r0, k), 99.0)
        K.spmm_rows(A.indptr, A.indices, A.data, X, out, r0, r1)
        np.testing.assert_array_equal(out, ref[r0:r1])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("itype", ["int32", "int64"])
def test_spmm_fixed_width_dtypes_and_layouts(dtype, itype):
    # one width, each value and index dtype, then a strided X and output: each new set of
    # argument types is compiled on its call
    A, X = _matrix(40, 30, 0.2, dtype, 7), _dense(30, 32, dtype, 8)
    ip, ix = A.indptr.astype(itype), A.indices.astype(itype)
    tol = 1e-5 if dtype == "float32" else 1e-12
    out = np.empty((40, 16), dtype=dtype)
    K.spmm_rows(ip, ix, A.data, X[:, :16].copy(), out, 0, 40)
    np.testing.assert_allclose(out, A.toarray() @ X[:, :16], rtol=tol, atol=tol)
    wide = np.zeros((40, 32), dtype=dtype)
    K.spmm_rows(ip, ix, A.data, X[:, ::2], wide[:, ::2], 0, 40)
    np.testing.assert_allclose(wide[:, ::2], A.toarray() @ X[:, ::2], rtol=tol, atol=tol)
    assert not wide[:, 1::2].any()


def test_spmm_fixed_width_compiled_from_many_threads_at_once():
    # each thread's argument types are new: versions compiled while others call the kernel
    A = _matrix(120, 90, 0.05, "float64", 11)
    errors: list[str] = []

    def run(dtype: str, itype: str) -> None:
        try:
            B = sp.csr_array(A.astype(dtype))
            X, out = _dense(90, 8, dtype, 12), np.empty((120, 8), dtype=dtype)
            for _ in range(3):
                K.spmm_rows(B.indptr.astype(itype), B.indices.astype(itype), B.data, X, out,
                            0, 120)
            np.testing.assert_allclose(out, B.toarray() @ X, rtol=1e-5, atol=1e-5)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"{dtype}/{itype}: {e!r}")

    threads = [threading.Thread(target=run, args=(d, i)) for d in DTYPES
               for i in ("int32", "int64")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@pytest.mark.parametrize("k", [16, 128])
@pytest.mark.parametrize("where", ["negative column", "column too large", "pointer back",
                                   "pointer past the end"])
def test_spmm_fixed_widths_refuse_malformed_indices(k, where):
    A = _matrix(30, 20, 0.3, "float64", 9)
    ip, ix = A.indptr.copy(), A.indices.copy()
    if where == "negative column":
        ix[ip[12] + 1] = -1
    elif where == "column too large":
        ix[ip[12]] = 20
    elif where == "pointer back":
        ip[13] = ip[12] - 1
    else:
        ip[13:] = len(ix) + 1
    out = np.empty((30, k))
    with pytest.raises(PatternError, match="row 12 "):
        K.spmm_rows(ip, ix, A.data, np.ones((20, k)), out, 0, 30)


@pytest.mark.parametrize("dtype", DTYPES)
def test_spmv_rows(dtype):
    A, x = _matrix(40, 30, 0.2, dtype, 2), _dense(30, 1, dtype, 3)[:, 0].copy()
    out = np.empty(40, dtype=dtype)
    K.spmv_rows(A.indptr, A.indices, A.data, x, out, 0, 40)
    np.testing.assert_allclose(out, A @ x, rtol=1e-5 if dtype == "float32" else 1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sddmm_rows_equals_masked_dense_product(dtype):
    S = _matrix(30, 20, 0.15, "float64", 4)
    X, Y = _dense(30, 6, dtype, 5), _dense(20, 6, dtype, 6)
    out = np.empty(S.nnz, dtype=dtype)
    K.sddmm_rows(S.indptr, S.indices, X, Y, out, 0, 30)
    full = X @ Y.T
    rows = np.repeat(np.arange(30), np.diff(S.indptr))
    np.testing.assert_allclose(out, full[rows, S.indices], rtol=1e-5 if dtype == "float32"
                               else 1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_spgemm_rows_equals_masked_scipy_product(dtype):
    A, B = _matrix(40, 30, 0.15, dtype, 7), _matrix(30, 35, 0.15, dtype, 8)
    M = _matrix(40, 35, 0.3, "float64", 9)
    out = np.empty(M.nnz, dtype=dtype)
    masked_rows(A, B, M, None, out, 0, 40)
    full = (A @ B).toarray()
    rows = np.repeat(np.arange(40), np.diff(M.indptr))
    np.testing.assert_allclose(out, full[rows, M.indices], rtol=1e-5 if dtype == "float32"
                               else 1e-12)


def test_masked_spgemm_counts_triangles():
    """Triangle counting: sum((L @ L) * L) for a 4-clique is 4."""
    L = sp.csr_array(np.tril(np.ones((4, 4)), -1))
    out = np.empty(L.nnz)
    masked_rows(L, L, L, None, out, 0, 4)
    assert out.sum() == 4


def test_masked_softmax_rows_matches_reference_with_explicit_zero_mask_values():
    rng = np.random.default_rng(10)
    S = _matrix(25, 25, 0.2, "float64", 11)
    S.data[::3] = 0.0  # stored entries whose mask value is 0 are excluded
    x = rng.standard_normal(S.nnz) * 10
    out = np.empty(S.nnz)
    K.masked_softmax_rows(S.indptr, x, S.data, out, 0, 25)
    X = np.zeros((25, 25))
    rows = np.repeat(np.arange(25), np.diff(S.indptr))
    X[rows, S.indices] = x
    ref = softmax_ref(X, S.toarray(), axis=1)
    np.testing.assert_allclose(out, ref[rows, S.indices], rtol=1e-12, atol=0)


def test_panel_gemm_equals_dense_product_of_the_panel():
    A = _matrix(8, 40, 0.5, "float64", 12)
    cols = np.unique(A.indices)
    rows = np.repeat(np.arange(8), np.diff(A.indptr))
    flat = rows * len(cols) + np.searchsorted(cols, A.indices)
    X, out = _dense(40, 5, "float64", 13), np.empty((8, 5))
    K.panel_gemm(flat, A.data, (8, len(cols)), cols, X, out)
    np.testing.assert_allclose(out, A @ X, rtol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_dot_rows_equals_masked_scipy_product(dtype):
    A, B = _matrix(40, 30, 0.3, dtype, 14), _matrix(30, 35, 0.3, dtype, 15)
    M = _matrix(40, 35, 0.05, "float64", 16)
    out = np.empty(M.nnz, dtype=dtype)
    K.masked_dot_rows(A, sp.csr_array(B.T), M, out, 0, 40)
    full = (A @ B).toarray()
    rows = np.repeat(np.arange(40), np.diff(M.indptr))
    np.testing.assert_allclose(out, full[rows, M.indices], rtol=1e-5 if dtype == "float32"
                               else 1e-12)


@pytest.mark.parametrize(("da", "db"), [("int32", "int32"), ("int64", "int64"),
                                        ("int32", "int64")])
def test_same_values_finds_any_difference(da, db):
    a = np.arange(10_000).astype(da)
    assert K.same_values(a, a.astype(db))
    for i in (0, 4095, 4096, 9_999):  # first, last of a chunk, first of the next, last
        b = a.astype(db)
        b[i] += 1
        assert not K.same_values(a, b)
    assert not K.same_values(a, a[:-1].astype(db))
    assert K.same_values(a[:0], a[:0].astype(db))
    assert K.same_values(np.zeros(3, np.uint32), np.zeros(3, np.int64))


def test_buffer_pool_reuses_only_dropped_arrays():
    pool = K.BufferPool((512, 1024), "float64", keep=2)
    a, b = pool.empty(), pool.empty()
    assert a is not b and a.shape == (512, 1024) and a.dtype == np.float64
    assert not np.shares_memory(a, b)
    assert a.ctypes.data % 64 == 0 and b.ctypes.data % 64 == 0  # streaming stores' need
    view = a[3:5]  # a view holds a's memory: a is still in use
    held = [b]
    del a, b
    c = pool.empty()
    assert not np.shares_memory(c, view) and not np.shares_memory(c, held[0])
    del view
    d = pool.empty()  # the first array, dropped with its last view
    assert not np.shares_memory(d, c) and not np.shares_memory(d, held[0])
    flat = d.reshape(-1)[10:]  # a view of a view: still holds d's memory
    del d
    e = pool.empty()
    assert not np.shares_memory(e, flat) and not np.shares_memory(e, c)
    small = K.BufferPool((4,), "float32")
    assert small.empty() is not small.empty()  # below min_bytes: never pooled


@pytest.mark.parametrize("dtype", ["float64", "float32", "int64", "int32", "complex128"])
@pytest.mark.parametrize("k", [4, 8, 16, 24, 64, 128, 256])
def test_spmm_streaming_stores_give_the_dense_product(dtype, k):
    from thrifty.sparse.outputs import aligned_empty

    A = _matrix(300, 200, 0.05, "int64", k).astype(dtype)  # small integers: exact
    X = np.random.default_rng(k).integers(-3, 4, (200, k)).astype(dtype)
    ref = A.toarray() @ X
    for r0, r1 in [(0, 300), (7, 91), (299, 300)]:
        out = aligned_empty((r1 - r0, k), dtype)
        out[...] = 77
        K.spmm_rows(A.indptr, A.indices, A.data, X, out, r0, r1, stream=True)
        np.testing.assert_array_equal(out, ref[r0:r1])
        odd = np.full((r1 - r0 + 1) * k + 1, 77, dtype)[1:1 + (r1 - r0) * k]  # unaligned
        K.spmm_rows(A.indptr, A.indices, A.data, X, odd.reshape(-1, k), r0, r1, stream=True)
        np.testing.assert_array_equal(odd.reshape(-1, k), ref[r0:r1])
    aligned = aligned_empty((300, k), dtype)
    assert K._streams(aligned, k) == (k in (8, 16, 64, 128, 256) and dtype != "complex128")


def test_buffer_pool_survives_pickling_empty():
    import pickle

    pool = K.BufferPool((600, 1000), "complex128")
    keep = pool.empty()
    twin = pickle.loads(pickle.dumps(pool))
    got = twin.empty()
    assert got is not keep and got.shape == (600, 1000) and got.dtype == np.complex128


@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128"])
def test_plan_outputs_in_recycled_buffers_are_right_and_never_shared(dtype):
    import thrifty as th

    A = _matrix(3000, 2500, 0.002, dtype, 3)
    prog = th.program(lambda A, X: A @ X)
    Xs = [_dense(2500, 256, dtype, s) for s in range(4)]
    plan = prog.specialize(A=A, X=Xs[0])
    tol = 1e-4 if dtype == "float32" else 1e-12
    kept = plan(A=A, X=Xs[0])  # held: a later run must not write into it
    first = kept.copy()
    for X in Xs[1:]:
        for _ in range(2):  # the second run may reuse the dropped output of the first
            np.testing.assert_allclose(plan(A=A, X=X), A @ X, rtol=tol, atol=tol)
    np.testing.assert_array_equal(kept, first)
    y = Xs[0][:, :1].copy()
    ping = th.program(lambda A, x: A @ x)
    Asq = _matrix(2500, 2500, 0.002, dtype, 4)
    ys = np.repeat(y, 600, axis=1)
    p2 = ping.specialize(A=Asq, x=ys)
    ref = ys
    for _ in range(3):  # y = plan(A, y): the input of a run is the output of the last
        ys = p2(A=Asq, x=ys)
        ref = Asq @ ref
        np.testing.assert_allclose(ys, ref, rtol=1e-3 if dtype == "float32" else 1e-10)


@pytest.mark.parametrize("dtype", ["float64", "float32", "complex128"])
def test_plan_streaming_its_output_equals_the_dense_product(dtype, monkeypatch):
    # k = 16 and an output of 4.5-18 MB: the plan's panels write it by streaming stores
    # into a pooled aligned buffer (complex: ordinary stores); a held output is never
    # written
    import thrifty as th
    from thrifty.sparse.outputs import STREAM_MIN_BYTES
    from thrifty.sparse.tasks import STREAM_MAX_K

    n = 70_000
    A = _matrix(n, 3_000, 0.002, "int64", 5).astype(dtype)  # small integers: exact
    Xs = [np.random.default_rng(s).integers(-3, 4, (3_000, 16)).astype(dtype)
          for s in range(3)]
    assert n * 16 * np.dtype(dtype).itemsize >= STREAM_MIN_BYTES and 16 <= STREAM_MAX_K
    streamed = []
    spmm_rows = K.spmm_rows

    def watched(indptr, indices, data, X, out, r0, r1, stream=False):
        streamed.append(stream and K._streams(out, X.shape[1]))
        spmm_rows(indptr, indices, data, X, out, r0, r1, stream)

    monkeypatch.setattr(K, "spmm_rows", watched)
    plan = th.program(lambda A, X: A @ X).specialize(A=A, X=Xs[0])
    kept = plan(A=A, X=Xs[0])
    first = kept.copy()
    np.testing.assert_array_equal(first, A.toarray() @ Xs[0])
    for X in Xs[1:]:
        for _ in range(2):
            got = plan(A=A, X=X)
            assert got.dtype == np.dtype(dtype) and got.shape == (n, 16)
            np.testing.assert_array_equal(got, A.toarray() @ X)
            assert not np.shares_memory(got, kept)
    np.testing.assert_array_equal(kept, first)
    assert streamed and all(streamed) == (dtype != "complex128") and \
        any(streamed) == (dtype != "complex128")
    # the panels are joined without a copy: the result is a view of a pooled buffer's
    # aligned bytes (a concatenated copy would own its data)
    got = plan(A=A, X=Xs[1])
    assert got.base is not None and got.base.dtype == np.uint8 and got.ctypes.data % 64 == 0

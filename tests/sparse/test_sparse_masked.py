"""Masked SpGEMM ``(A @ B) * S``: the mask-driven kernels (recorded pairs, Gustavson rows,
merged dot products), with ``S``'s values applied in the kernel, against the dense
reference (values and structure) on collection matrices and hypothesis-generated operands
(empty rows and columns, rectangular, float32 and float64).

Values are small integers, so every result is exact.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import thrifty as th
from thrifty.runtime.sparse_run import specialize
from thrifty.sparse import lower_matmul, masked
from thrifty.sparse.cost import CostModel
from thrifty.sparse.masked import (
    entry_positions,
    kept_entries,
    masked_counts,
    masked_pairs,
    masked_rows,
    masked_walk,
    walk_chunks,
)
from thrifty.testing import shared_data_dir

PANELS = CostModel(min_task_seconds=1e-7, parallel_seconds=0.0)


def _int_csr(n: int, m: int, density: float, rng: np.random.Generator, empty: float,
             dtype: str) -> sp.csr_array:
    A = sp.random_array((n, m), density=density, format="csr", rng=rng,
                        data_sampler=lambda size: rng.integers(-3, 4, size).astype(float))
    A.data[np.repeat(rng.random(n) < empty, np.diff(A.indptr))] = 0  # empty rows
    A.data[np.isin(A.indices, np.flatnonzero(rng.random(m) < empty))] = 0  # and columns
    A.eliminate_zeros()
    return sp.csr_array(A).astype(dtype)


def _plan(f, inputs, cost=None, pairs=True):
    tr = th.program(f).traced(**inputs)
    with pytest.MonkeyPatch.context() as mp:
        if not pairs:  # the row walk (or dot products) wherever pairs would be recorded
            mp.setattr(lower_matmul, "PAIRS_SHARE", -1.0)
        return specialize(tr.graph, inputs, structure=tr.structure, cost=cost)


def _check(plan, inputs, want: np.ndarray, sparse: bool = True) -> None:
    for scheduler in (None, "sync"):
        got = plan.run(inputs, scheduler=scheduler)
        assert sp.issparse(got) or not sparse  # dense above the output density threshold
        np.testing.assert_array_equal(got.toarray() if sp.issparse(got) else got, want)
        # the stored entries are the propagated pattern, and the reference is zero elsewhere
        out = plan.propagation.effective[plan.graph.outputs[0]]
        assert out.elements is not None and not np.any(want[~out.elements.toarray()])
        if sp.issparse(got):
            assert got.nnz == out.elements.nnz


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 50), k=st.integers(1, 50), m=st.integers(1, 50),
       d=st.tuples(st.floats(0, 0.4), st.floats(0, 0.4), st.floats(0, 0.4)),
       empty=st.floats(0, 0.6), mask_first=st.booleans(), tasks=st.booleans(),
       pairs=st.booleans(), dtype=st.sampled_from(["float32", "float64"]),
       seed=st.integers(0, 2**16))
def test_random_masked_products_equal_dense_reference(n, k, m, d, empty, mask_first, tasks,
                                                      pairs, dtype, seed):
    rng = np.random.default_rng(seed)
    A, B = _int_csr(n, k, d[0], rng, empty, dtype), _int_csr(k, m, d[1], rng, empty, dtype)
    S = _int_csr(n, m, d[2], rng, empty, dtype)
    inputs = {"A": A, "B": B, "S": S}
    f = (lambda A, B, S: S * (A @ B)) if mask_first else (lambda A, B, S: (A @ B) * S)
    plan = _plan(f, inputs, PANELS if tasks else None, pairs)
    want = (A.toarray() @ B.toarray()) * S.toarray()
    _check(plan, inputs, want, sparse=False)
    # stored entries: exactly the mask entries where a row of A meets a column of B
    out = plan.propagation.effective[plan.graph.outputs[0]].elements
    reach = ((A.toarray() != 0).astype(int) @ (B.toarray() != 0).astype(int)) > 0
    np.testing.assert_array_equal(out.toarray(), reach & (S.toarray() != 0))


def test_triangle_product_fuses_the_mask_product():
    rng = np.random.default_rng(0)
    G = sp.random_array((400, 400), density=0.03, format="csr", rng=rng)
    L = sp.csr_array(sp.tril(G + G.T, -1))
    L.data[:] = rng.integers(1, 4, L.nnz)
    for cost in (None, PANELS):
        for pairs in (True, False):
            plan = _plan(lambda L: (L @ L) * L, {"L": L}, cost, pairs)
            kernels = plan.report()["kernels"]
            assert kernels["fused_mul"] == 1 and "elementwise_csr" not in kernels
            kernel = "masked_spgemm_pairs" if pairs else "masked_spgemm"
            assert kernels[kernel] >= (2 if cost is PANELS else 1), kernels
            D = L.toarray()
            _check(plan, {"L": L}, (D @ D) * D)
            L2 = sp.csr_array((L.data[::-1] - 2.5, L.indices, L.indptr), shape=L.shape)
            D2 = L2.toarray()  # new values on the same pattern
            _check(plan, {"L": L2}, (D2 @ D2) * D2)


def test_grid_triangle_product_is_structurally_empty():
    # a grid graph has no triangles: no entry of L @ L lands on L, none is stored or computed
    from thrifty.front.matrices import poisson2d

    L = sp.csr_array(sp.tril(poisson2d(30), -1))
    plan = _plan(lambda L: (L @ L) * L, {"L": L})
    got = plan.run({"L": L})
    assert sp.issparse(got) and got.nnz == 0 and got.shape == L.shape
    assert plan.report()["useful_flops"] == 0
    assert sp.csr_array((L @ L).multiply(L)).count_nonzero() == 0


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 30), k=st.integers(1, 30), m=st.integers(1, 30),
       d=st.floats(0, 0.5), seed=st.integers(0, 2**16))
def test_recorded_pairs_are_the_products_terms(n, k, m, d, seed):
    rng = np.random.default_rng(seed)
    A = _int_csr(n, k, d, rng, 0.2, "float64")
    B = _int_csr(k, m, d, rng, 0.2, "float64")
    M = _int_csr(n, m, d, rng, 0.2, "float64")
    ptr, ia, ib = masked_pairs(A, B, M)
    np.testing.assert_array_equal(np.diff(ptr), masked_counts(A, B, M))
    rows = np.repeat(np.arange(n), np.diff(M.indptr))
    arow = np.repeat(np.arange(n), np.diff(A.indptr))
    brow = np.repeat(np.arange(k), np.diff(B.indptr))
    for p in range(M.nnz):  # brute force: every (a_ik, b_kj) with (i, j) the mask entry
        i, j = rows[p], M.indices[p]
        want = [(pa, pb) for pa in np.flatnonzero(arow == i)
                for pb in np.flatnonzero((brow == A.indices[pa]) & (B.indices == j))]
        assert list(zip(ia[ptr[p]:ptr[p + 1]], ib[ptr[p]:ptr[p + 1]])) == want


def test_masked_rows_scales_by_mask_values_at_given_positions():
    L = sp.csr_array(np.tril(np.arange(1.0, 26.0).reshape(5, 5), -1))
    S = sp.csr_array(np.tril(np.ones((5, 5)), 0) * 3.0)  # a superset of L's pattern
    D = L.toarray()
    # where each entry of L lies among S's stored entries
    keys = np.flatnonzero(S.toarray().ravel())
    spos = np.searchsorted(keys, np.flatnonzero(D.ravel()))
    out = np.empty(L.nnz)
    masked_rows(L, L, L, S.data, out, 0, 5, spos)
    want = (D @ D) * 3.0
    np.testing.assert_array_equal(out, want[D != 0])


@pytest.mark.parametrize("name", ["Planetoid/cora.mtx", "HB/bcsstk13.mtx",
                                  "SuiteSparse_test/arrow.mtx"])
def test_collection_triangle_products_equal_scipy_compute_then_mask(name):
    # the oracle: scipy's full product, then the mask (these are too large for dense)
    root = shared_data_dir()
    if root is None or not (root / "matrices" / name).exists():
        pytest.skip("the shared collection is not present")
    from thrifty.front.matrices import load_matrix

    A = load_matrix(root / "matrices" / name)
    L = sp.csr_array(sp.tril(A, -1))
    L.data[:] = np.arange(L.nnz) % 5 + 1.0
    want = sp.csr_array((L @ L).multiply(L))
    for scheduler, pairs in ((None, True), ("sync", True), (None, False)):
        plan = _plan(lambda L: (L @ L) * L, {"L": L}, PANELS, pairs)
        got = plan.run({"L": L}, scheduler=scheduler)
        assert sp.issparse(got)
        assert abs(got - want).max() == 0
        # stored entries: the propagated pattern, which holds every nonzero of the oracle
        out = plan.propagation.effective[plan.graph.outputs[0]].elements
        assert got.nnz == out.nnz
        assert sp.csr_array(want.astype(bool) > out.astype(bool)).nnz == 0


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sub=st.sampled_from(["ik,kj->ij", "ik,jk->ij", "ki,kj->ij", "ik,kj->ji"]),
       n=st.integers(1, 30), k=st.integers(1, 30), m=st.integers(1, 30),
       d=st.floats(0, 0.4), seed=st.integers(0, 2**16))
def test_masked_einsum_products_have_the_exact_pattern(sub, n, k, m, d, seed):
    # matmul-shaped einsums (transposed operands or output) resolve the same masked pattern
    rng = np.random.default_rng(seed)
    ta, tb, tout = sub[0] == "k", sub[4] == "k", sub.endswith("ji")
    A = _int_csr(*((k, n) if ta else (n, k)), d, rng, 0.2, "float64")
    B = _int_csr(*((m, k) if tb else (k, m)), d, rng, 0.2, "float64")
    S = _int_csr(*((m, n) if tout else (n, m)), d, rng, 0.2, "float64")
    inputs = {"A": A, "B": B, "S": S}
    plan = _plan(lambda A, B, S: th.einsum(sub, A, B) * S, inputs)
    want = np.einsum(sub, A.toarray(), B.toarray()) * S.toarray()
    _check(plan, inputs, want, sparse=False)
    reach = np.einsum(sub, (A.toarray() != 0).astype(int), (B.toarray() != 0).astype(int)) > 0
    out = plan.propagation.effective[plan.graph.outputs[0]].elements
    np.testing.assert_array_equal(out.toarray(), reach & (S.toarray() != 0))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 30), k=st.integers(1, 30), m=st.integers(1, 30),
       d=st.floats(0, 0.6), seed=st.integers(0, 2**16))
def test_pairs_recorded_in_the_counting_walk_equal_the_fill_walks(n, k, m, d, seed):
    rng = np.random.default_rng(seed)
    A = _int_csr(n, k, d, rng, 0.2, "float64")
    B = _int_csr(k, m, d, rng, 0.2, "float64")
    M = _int_csr(n, m, d, rng, 0.2, "float64")
    cnt, pairs = masked_walk(A, B, M, 10**6)
    np.testing.assert_array_equal(cnt, masked_counts(A, B, M))
    two = masked_pairs(A, B, M, cnt)  # counts given: the second (fill) walk
    assert pairs is not None
    for got, want in zip(pairs, two):
        np.testing.assert_array_equal(got, want)
    hits = int(cnt.sum())
    if hits:  # more pairs than allowed: counts only
        c2, p2 = masked_walk(A, B, M, hits - 1)
        assert p2 is None
        np.testing.assert_array_equal(c2, cnt)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 30), k=st.integers(1, 30), m=st.integers(1, 30),
       d=st.floats(0, 0.6), dist=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_prefetching_walk_equals_the_plain_walk(n, k, m, d, dist, seed):
    rng = np.random.default_rng(seed)
    A = _int_csr(n, k, d, rng, 0.2, "float64")
    B = _int_csr(k, m, d, rng, 0.2, "float64")
    M = _int_csr(n, m, d, rng, 0.2, "float64")
    cnt, pairs = masked_walk(A, B, M, 10**6)  # small operands: no prefetch
    assert masked._prefetch_distance(A, B) == 0
    real = masked._prefetch_distance
    try:
        masked._prefetch_distance = lambda A, B: dist  # the hints, up to past the end
        cnt2, pairs2 = masked_walk(A, B, M, 10**6)
    finally:
        masked._prefetch_distance = real
    np.testing.assert_array_equal(cnt, cnt2)
    assert pairs is not None and pairs2 is not None
    for got, want in zip(pairs2, pairs):
        np.testing.assert_array_equal(got, want)


def test_prefetch_only_where_the_rows_walked_lie_far_apart():
    n = 200_000
    rng = np.random.default_rng(0)
    far = sp.csr_array(sp.random_array((n, n), density=8 / n, format="csr", rng=rng))
    band = sp.csr_array(sp.diags_array([1.0, 1.0, 1.0], offsets=[-64, -1, 0], shape=(n, n)))
    assert masked._prefetch_distance(far, far) == masked.PREFETCH_DISTANCE
    assert masked._prefetch_distance(band, band) == 0
    assert masked._prefetch_distance(sp.csr_array((n, n)), far) == 0


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 20), m=st.integers(1, 20), d=st.floats(0, 0.8),
       seed=st.integers(0, 2**16))
def test_kept_entries_are_the_mask_entries_with_pairs(n, m, d, seed):
    rng = np.random.default_rng(seed)
    M = _int_csr(n, m, d, rng, 0.3, "float64")
    cnt = rng.integers(0, 3, M.nnz) * (rng.random(M.nnz) < 0.5)
    indptr, indices, ptr = kept_entries(cnt, M)
    keep = cnt > 0
    rows = np.repeat(np.arange(n), np.diff(M.indptr))
    want = sp.csr_array((np.ones(int(keep.sum())), (rows[keep], M.indices[keep])),
                        shape=M.shape)
    np.testing.assert_array_equal(indptr, want.indptr)
    np.testing.assert_array_equal(indices, want.indices)
    np.testing.assert_array_equal(ptr, np.concatenate([[0], np.cumsum(cnt[keep])]))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 20), m=st.integers(1, 20), d=st.floats(0, 0.8),
       keep=st.floats(0, 1), seed=st.integers(0, 2**16))
def test_entry_positions_equal_a_search_of_the_flat_keys(n, m, d, keep, seed):
    rng = np.random.default_rng(seed)
    S = _int_csr(n, m, d, rng, 0.3, "float64")
    R = _int_csr(n, m, d, rng, 0.3, "float64")  # P: some of S's entries, some others
    P = sp.csr_array(S.multiply(rng.random(S.shape) < keep) + R)
    P.data[:] = 1.0
    pos, found = entry_positions(P, S)
    rows = np.repeat(np.arange(n), np.diff(S.indptr))
    skeys = rows * m + S.indices
    keys = np.repeat(np.arange(n), np.diff(P.indptr)) * m + P.indices
    want = np.isin(keys, skeys)
    np.testing.assert_array_equal(found, want)
    np.testing.assert_array_equal(skeys[pos[found]], keys[found])
    assert S.nnz == 0 or ((pos >= 0) & (pos < S.nnz)).all()
    with pytest.raises(ValueError, match="same shape"):
        entry_positions(P, sp.csr_array((n + 1, m)))


def test_pairs_past_the_walks_buffers_come_from_a_second_walk():
    # a dense product: 40 pairs per entry, more than the buffers' 2 per mask entry
    D = sp.csr_array(np.ones((40, 40)))
    cnt, pairs = masked_walk(D, D, D, 10**6)
    assert pairs is not None and int(cnt.sum()) == 40**3
    for got, want in zip(pairs, masked_pairs(D, D, D, cnt)):
        np.testing.assert_array_equal(got, want)


def test_walk_in_row_chunks_over_threads_equals_one_walk():
    import numba

    rng = np.random.default_rng(3)
    n = 3000  # 40 entries a row: about 4.8e6 pairs visited, walked in chunks
    A = sp.csr_array(sp.random_array((n, n), density=40 / n, format="csr", rng=rng))
    M = sp.csr_array(sp.random_array((n, n), density=20 / n, format="csr", rng=rng))
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        cnt1, pairs1 = masked_walk(A, A, M, 10**8)
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        assert len(walk_chunks(A, A, M)) - 1 == (4 * numba.get_num_threads()
                                                   if numba.get_num_threads() > 1 else 1)
        cnt2, pairs2 = masked_walk(A, A, M, 10**8)
    finally:
        numba.set_num_threads(before)
    np.testing.assert_array_equal(cnt1, cnt2)
    assert pairs1 is not None and pairs2 is not None and int(cnt1.sum()) > 0
    for a, b in zip(pairs1, pairs2):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(np.diff(pairs1[0]), masked_counts(A, A, M))


def test_plan_uses_the_pairs_propagation_recorded():
    rng = np.random.default_rng(5)
    A = sp.csr_array(sp.random_array((300, 300), density=0.05, format="csr", rng=rng))
    L = sp.csr_array(sp.tril(A + A.T, -1))
    L.data[:] = 1.0
    plan = _plan(lambda L: (L @ L) * L, {"L": L})
    rec = [v for v in plan.propagation.pairs.values()]
    assert len(rec) == 1
    P = rec[0][2].elements
    for got, want in zip(rec[0][3], masked_pairs(L, L, P)):
        np.testing.assert_array_equal(got, want)
    assert "masked_spgemm_pairs" in plan.report()["kernels"]
    D = L.toarray()
    _check(plan, {"L": L}, (D @ D) * D)


def _power_law_csr(n: int, m: int, heavy: int, light: int, rng: np.random.Generator,
                   dtype: str) -> sp.csr_array:
    """A canonical CSR with ``heavy`` rows holding most columns (up to all of them) and
    the rest ``0..light`` entries each, on columns drawn with Zipf-like weights (a few heavy
    columns too); entries are small nonzero integers (exact sums). Empty rows included."""
    w = 1.0 / rng.permutation(np.arange(1, m + 1)) ** 1.2
    w /= w.sum()
    hv = set(rng.choice(n, min(heavy, n), replace=False).tolist())
    rows, cols = [], []
    for i in range(n):
        d = int(rng.integers(m // 2, m + 1)) if i in hv else int(rng.integers(0, light + 1))
        c = np.sort(rng.choice(m, d, replace=False)) if i in hv else \
            np.unique(rng.choice(m, d, p=w))
        rows.append(np.full(len(c), i))
        cols.append(c)
    r, c = np.concatenate(rows), np.concatenate(cols)
    vals = rng.choice(np.array([-3, -2, -1, 1, 2, 3]), len(r)).astype(dtype)
    A = sp.csr_array((vals, (r, c)), shape=(n, m))
    A.sum_duplicates()
    A.sort_indices()
    assert A.has_canonical_format and np.all(A.data != 0)
    return A


def _dense_masked(A, B, M):  # the oracle: dense product at the mask's entries, CSR order
    rows = np.repeat(np.arange(M.shape[0]), np.diff(M.indptr))
    return (A.toarray() @ B.toarray())[rows, M.indices]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 90), k=st.integers(1, 300),
       m=st.one_of(st.integers(1, 40), st.integers(2 * masked.HIT_BLOCK - 8, 700)),
       heavy=st.integers(1, 4), light=st.integers(0, 6), rows=st.data(),
       dtype=st.sampled_from(["float32", "float64", "int64", "complex128"]),
       rate=st.sampled_from([0, 16, masked.HIT_RATE_BRANCH_FREE, 2**40]),
       seed=st.integers(0, 2**16))
def test_masked_rows_on_power_law_patterns_equal_dense_reference(n, k, m, heavy, light, rows,
                                                                 dtype, rate, seed):
    # rows of B longer than HIT_BLOCK (blocks of the branch-free test), heavy and empty
    # rows in A, B and the mask, a mask with entries where A @ B is structurally zero
    # (their value is 0: the kernel writes every mask entry), any row range; the test of
    # each entry with a branch (rate 0), branch-free wherever a row hit (2**40), or mixed
    real = masked.HIT_RATE_BRANCH_FREE
    masked.HIT_RATE_BRANCH_FREE = rate
    try:
        _power_law_case(n, k, m, heavy, light, rows, dtype, seed)
    finally:
        masked.HIT_RATE_BRANCH_FREE = real


def _power_law_case(n, k, m, heavy, light, rows, dtype, seed):
    rng = np.random.default_rng(seed)
    A = _power_law_csr(n, k, heavy, light, rng, dtype)
    B = _power_law_csr(k, m, heavy, light, rng, dtype)
    U = sp.random_array((n, m), density=rng.uniform(0, 0.3), format="csr", rng=rng)
    M = sp.csr_array(_power_law_csr(n, m, heavy, light + 4, rng, dtype) + U.astype(bool)
                     .astype(dtype))  # and entries anywhere in the rows
    M.sort_indices()
    r0 = rows.draw(st.integers(0, n))
    r1 = rows.draw(st.integers(r0, n))
    p0, p1 = M.indptr[r0], M.indptr[r1]
    want = _dense_masked(A, B, M)
    out = np.full(M.nnz, 7, dtype=dtype)  # entries outside the range stay as they were
    masked_rows(A, B, M, None, out[p0:p1], r0, r1)
    np.testing.assert_array_equal(out[p0:p1], want[p0:p1])
    assert np.all(out[:p0] == 7) and np.all(out[p1:] == 7)
    # and times the mask's own values (S * (A @ B) with S stored on M's entries)
    out2 = np.empty(M.nnz, dtype=dtype)
    masked_rows(A, B, M, M.data, out2, 0, n)
    np.testing.assert_array_equal(out2, want * M.data)


def test_masked_rows_blocks_of_a_long_row_of_b():
    # a single row of B of 3 * HIT_BLOCK + 5 entries, hit at the blocks' edges only
    w = 3 * masked.HIT_BLOCK + 5
    B = sp.csr_array(np.arange(1.0, w + 1)[None, :])
    A = sp.csr_array(np.array([[2.0], [0.0], [-1.0]]))
    cols = [0, masked.HIT_BLOCK - 1, masked.HIT_BLOCK, 2 * masked.HIT_BLOCK, w - 1]
    M = sp.csr_array((np.ones(10), (np.repeat([0, 1], 5), cols * 2)), shape=(3, w))
    out = np.full(M.nnz, np.nan)
    masked_rows(A, B, M, None, out, 0, 3)
    np.testing.assert_array_equal(out, _dense_masked(A, B, M))
    assert out[5:].tolist() == [0.0] * 5  # row 1 of A is empty: structurally zero


def test_masked_rows_sums_each_entry_in_walk_order():
    # float64 sums depend on their order: the kernel adds an entry's terms in the order
    # of the row walk (k ascending), as the recorded-pairs kernel does
    rng = np.random.default_rng(1)
    A = sp.csr_array(sp.random_array((60, 80), density=0.3, format="csr", rng=rng,
                                     data_sampler=lambda size: rng.standard_normal(size)
                                     * 10.0 ** rng.integers(-8, 9, size)))
    B = sp.csr_array(sp.random_array((80, 700), density=0.5, format="csr", rng=rng))
    M = sp.csr_array(sp.random_array((60, 700), density=0.05, format="csr", rng=rng))
    out = np.empty(M.nnz)
    masked_rows(A, B, M, None, out, 0, 60)
    ptr, ia, ib = masked_pairs(A, B, M)
    want = np.array([sum((A.data[ia[t]] * B.data[ib[t]] for t in range(ptr[p], ptr[p + 1])),
                         0.0) for p in range(M.nnz)])
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("limit", [0, None])
def test_plan_on_power_law_triangle_product_equals_dense_reference(limit, monkeypatch):
    # limit 0: inspection counts no pairs and the stored entries are those of the mask in
    # blocks the product reaches (some where L @ L is structurally zero: they hold 0);
    # None: the exact pattern is inspected
    from thrifty.sparse import pattern

    if limit is not None:  # (and no exact product pattern either)
        monkeypatch.setattr(pattern, "MASKED_PRODUCT_LIMIT", limit)
        monkeypatch.setattr(pattern, "EXACT_PRODUCT_LIMIT", limit)
        monkeypatch.setattr(lower_matmul, "MASKED_PRODUCT_LIMIT", limit)
    rng = np.random.default_rng(4)
    G = _power_law_csr(700, 700, 3, 5, rng, "float64")
    L = sp.csr_array(sp.tril(G + G.T, -1))
    L.data[:] = rng.integers(1, 4, L.nnz)
    L.sort_indices()
    D = L.toarray()
    want = (D @ D) * D
    for cost in (None, PANELS):
        plan = _plan(lambda L: (L @ L) * L, {"L": L}, cost, pairs=False)
        assert "masked_spgemm" in plan.report()["kernels"]
        _check(plan, {"L": L}, want)
        got = plan.run({"L": L})
        if limit is not None:  # a superset of the exact pattern, zeros stored
            assert np.count_nonzero(want) < got.nnz <= L.nnz
            assert np.count_nonzero(got.data) == np.count_nonzero(want)
        else:
            assert got.nnz == np.count_nonzero((D != 0).astype(int) @ (D != 0) * D)


@pytest.mark.parametrize("rate", [0, masked.HIT_RATE_BRANCH_FREE, 2**40])
@pytest.mark.parametrize("mask", ["tril", "band", "blocks"])
def test_masked_rows_on_masks_of_consecutive_columns(mask, rate, monkeypatch):
    # mask rows of consecutive columns: rows of B inside the row's range are added without
    # a test, rows of B reaching past it (either side) are tested
    monkeypatch.setattr(masked, "HIT_RATE_BRANCH_FREE", rate)
    n = 300
    rng = np.random.default_rng(7)
    i, j = np.indices((n, n))
    keep = {"tril": j < i, "band": abs(i - j) <= 5, "blocks": i // 40 == j // 40}[mask]
    M = sp.csr_array(keep.astype(float))
    A = sp.csr_array(rng.integers(-2, 3, (n, n)) * (rng.random((n, n)) < 0.3))
    B = sp.csr_array(rng.integers(-2, 3, (n, n)) * (np.tril(rng.random((n, n)) < 0.6)
                     | (abs(i - j) <= 3)))
    for X in (A, B):
        X.eliminate_zeros()
    for L in (sp.csr_array(sp.tril(M, -1)), M):  # and the triangle product's own form
        out = np.empty(L.nnz)
        masked_rows(A, B, L, None, out, 0, n)
        np.testing.assert_array_equal(out, _dense_masked(A, B, L))
        out = np.empty(L.nnz)
        masked_rows(L, L, L, None, out, 0, n)
        np.testing.assert_array_equal(out, _dense_masked(L, L, L))


@pytest.mark.parametrize("keep", [1.0, 0.5, 0.01])
def test_entry_positions_in_long_rows_equal_a_search_of_the_flat_keys(keep):
    # rows of about 1500 entries: the galloping search's steps reach far along the row
    rng = np.random.default_rng(11)
    n, m = 50, 3000
    S = sp.csr_array(sp.random_array((n, m), density=0.5, format="csr", rng=rng))
    R = sp.csr_array(sp.random_array((n, m), density=0.01, format="csr", rng=rng))
    P = sp.csr_array(S.multiply(rng.random(S.shape) < keep) + R)
    P.sort_indices()
    pos, found = entry_positions(P, S)
    skeys = np.repeat(np.arange(n), np.diff(S.indptr)) * m + S.indices
    keys = np.repeat(np.arange(n), np.diff(P.indptr)) * m + P.indices
    np.testing.assert_array_equal(found, np.isin(keys, skeys))
    np.testing.assert_array_equal(pos[found], np.searchsorted(skeys, keys[found]))

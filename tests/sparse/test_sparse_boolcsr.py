"""Compiled set operations on boolean CSR patterns (:mod:`thrifty.sparse.boolcsr`) and the
block grid of an element pattern, against dense boolean arrays (brute force), on
hypothesis-generated patterns: empty rows and columns, rectangular shapes, block sides that
are powers of two and others, grids wide enough for both of the grid builder's regimes."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from thrifty.sparse.boolcsr import bitset_cost, bool_matmul, intersect_elements, within_blocks
from thrifty.sparse.pattern import Pattern


def _bool_csr(n: int, m: int, density: float, seed: int) -> sp.csr_array:
    rng = np.random.default_rng(seed)
    D = rng.random((n, m)) < density
    return sp.csr_array(D) if D.any() else sp.csr_array((n, m), dtype=bool)


def _dense(E: sp.csr_array) -> np.ndarray:
    return E.toarray().astype(bool)


def _canonical(E: sp.csr_array) -> bool:
    return all(np.all(np.diff(E.indices[E.indptr[i]:E.indptr[i + 1]]) > 0)
               for i in range(E.shape[0]))


shapes = st.tuples(st.integers(1, 60), st.integers(1, 60))


@settings(max_examples=80, deadline=None)
@given(shape=shapes, d=st.tuples(st.floats(0, 0.6), st.floats(0, 0.6)),
       seed=st.integers(0, 2**16), subset=st.booleans())
def test_intersection_is_the_dense_and(shape, d, seed, subset):
    A = _bool_csr(*shape, d[0], seed)
    B = _bool_csr(*shape, d[1], seed + 1)
    if subset:  # B inside A: B itself comes back
        B = sp.csr_array(A.multiply(B).astype(bool))
        B.sum_duplicates()
    got = intersect_elements(A, B)
    want = _dense(A) & _dense(B)
    np.testing.assert_array_equal(_dense(got), want)
    assert got.nnz == int(want.sum()) and _canonical(got)
    if subset:
        assert got is B or got is A


@settings(max_examples=80, deadline=None)
@given(shape=shapes, d=st.floats(0, 0.6), gd=st.floats(0, 1), seed=st.integers(0, 2**16),
       block=st.tuples(st.sampled_from([1, 2, 3, 4, 5, 8, 16]),
                       st.sampled_from([1, 2, 3, 4, 7, 8, 32])))
def test_entries_within_blocks_are_those_whose_block_is_stored(shape, d, gd, seed, block):
    E = _bool_csr(*shape, d, seed)
    gs = (-(-shape[0] // block[0]), -(-shape[1] // block[1]))
    G = _bool_csr(*gs, gd, seed + 7)
    keep = within_blocks(E, G, block)
    rows = np.repeat(np.arange(shape[0]), np.diff(E.indptr))
    want = _dense(G)[rows // block[0], E.indices // block[1]]
    np.testing.assert_array_equal(keep, want)


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 40), k=st.integers(1, 40), m=st.integers(1, 200),
       d=st.tuples(st.floats(0, 0.5), st.floats(0, 0.5)), seed=st.integers(0, 2**16))
def test_bitset_product_is_the_boolean_product(n, k, m, d, seed):
    A = _bool_csr(n, k, d[0], seed)
    B = _bool_csr(k, m, d[1], seed + 1)
    got = bool_matmul(A, B)
    want = (_dense(A).astype(int) @ _dense(B).astype(int)) > 0
    np.testing.assert_array_equal(_dense(got), want)
    assert got.nnz == int(want.sum()) and _canonical(got) and got.shape == (n, m)
    assert bitset_cost(A, B) >= 0


@settings(max_examples=60, deadline=None)
@given(shape=st.tuples(st.integers(1, 300), st.integers(1, 3000)), d=st.floats(0, 0.05),
       seed=st.integers(0, 2**16),
       block=st.tuples(st.sampled_from([1, 3, 8, 64]), st.sampled_from([1, 5, 8, 16])))
def test_block_grid_holds_exactly_the_blocks_with_entries(shape, d, seed, block):
    # wide, sparse grids: block rows with few entries next to the width take the sorting
    # regime, the others the flag scan
    E = _bool_csr(*shape, d, seed)
    p = Pattern.from_elements(E, block)
    rows = np.repeat(np.arange(shape[0]), np.diff(E.indptr))
    assert p.blocks is not None
    want = np.zeros(p.blocks.shape, dtype=bool)
    want[rows // block[0], E.indices // block[1]] = True
    np.testing.assert_array_equal(_dense(p.blocks), want)
    assert _canonical(p.blocks)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 80), k=st.integers(1, 80), m=st.integers(1, 80),
       d=st.tuples(st.floats(0, 0.6), st.floats(0, 0.6)), seed=st.integers(0, 2**16))
def test_block_level_product_is_the_product_of_the_grids(n, k, m, d, seed):
    # dense grids take the bit-set product, sparse ones scipy's: the same block pattern
    A = Pattern.from_elements(_bool_csr(n, k, d[0], seed), (2, 4))
    B = Pattern.from_elements(_bool_csr(k, m, d[1], seed + 1), (4, 2))
    got = A.matmul(B, exact=False)
    want = (_dense(A.blocks).astype(int) @ _dense(B.blocks).astype(int)) > 0
    if got.is_dense:  # every block reached
        assert want.all()
    else:
        assert got.block == (2, 2) and got.blocks is not None
        np.testing.assert_array_equal(_dense(got.blocks), want)

"""Patterns against dense boolean oracles: construction, set operations, products."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from thrifty.errors import PatternError
from thrifty.sparse.pattern import (
    Pattern,
    canonical_csr,
    choose_block,
    structure_fingerprint,
)


def _random(n: int, m: int, density: float, seed: int) -> sp.csr_array:
    return sp.random_array((n, m), density=density, format="csr", rng=seed)


def _dense_cover(p: Pattern) -> np.ndarray:
    """Every element the pattern allows, as a dense boolean array."""
    if p.is_dense:
        return np.ones(p.shape, dtype=bool)
    if p.elements is not None:
        return p.elements.toarray()
    br, bc = p.block
    g = p.blocks.toarray()
    return np.kron(g, np.ones((br, bc), dtype=bool))[:p.shape[0], :p.shape[1]]


shapes = st.tuples(st.integers(0, 40), st.integers(0, 40))


@settings(max_examples=40, deadline=None)
@given(shapes, st.floats(0, 0.5), st.integers(0, 2**31 - 1))
def test_from_sparse_is_exact_and_blocks_cover_it(shape, density, seed):
    A = _random(*shape, density, seed)
    p = Pattern.from_sparse(A, block=(4, 8))
    assert p.nnz == A.nnz
    assert np.array_equal(p.elements.toarray(), A.toarray() != 0)
    cover = np.kron(p.blocks.toarray(), np.ones((4, 8), dtype=bool))[:shape[0], :shape[1]]
    assert not np.any((A.toarray() != 0) & ~cover)
    # every block in the grid holds at least one element
    assert p.blocks.nnz == len({(r // 4, c // 8) for r, c in zip(*A.nonzero())})


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 30), st.integers(1, 30), st.integers(1, 30), st.floats(0, 0.4),
       st.integers(0, 2**31 - 1), st.booleans())
def test_matmul_pattern_covers_the_product(n, k, m, density, seed, exact):
    A, B = _random(n, k, density, seed), _random(k, m, density, seed + 1)
    pa, pb = Pattern.from_sparse(A), Pattern.from_sparse(B)
    if not exact:
        pa, pb = Pattern(pa.shape, pa.block, pa.blocks), Pattern(pb.shape, pb.block, pb.blocks)
    p = pa.matmul(pb)
    truth = (np.abs(A.toarray()) @ np.abs(B.toarray())) != 0
    assert p.shape == (n, m)
    assert not np.any(truth & ~_dense_cover(p))
    if exact:
        assert np.array_equal(_dense_cover(p), truth)


@settings(max_examples=40, deadline=None)
@given(shapes, st.floats(0, 0.5), st.integers(0, 2**31 - 1))
def test_union_and_intersection_are_exact_on_elements(shape, density, seed):
    A, B = _random(*shape, density, seed), _random(*shape, density, seed + 7)
    pa, pb = Pattern.from_sparse(A), Pattern.from_sparse(B)
    a, b = A.toarray() != 0, B.toarray() != 0
    assert np.array_equal(_dense_cover(pa.union(pb)), a | b)
    assert np.array_equal(_dense_cover(pa.intersect(pb)), a & b)
    assert np.array_equal(_dense_cover(pa.transpose()), a.T)


def test_block_only_intersection_keeps_known_elements_inside_blocks():
    A = sp.csr_array(np.eye(16))
    blocks_only = Pattern.from_sparse(sp.csr_array(np.ones((4, 4))), block=(4, 4))
    blocks_only = Pattern((16, 16), (4, 4), blocks_only.blocks.tocsr()[:4, :4] if False
                          else sp.csr_array(np.eye(4, dtype=bool)), None)
    p = Pattern.from_sparse(A).intersect(blocks_only)
    assert p.nnz == 16 and p.elements is not None


def test_dense_patterns_absorb_and_vanish():
    d = Pattern.dense((5, 5))
    s = Pattern.from_sparse(sp.eye_array(5, format="csr"))
    assert d.union(s).is_dense and d.intersect(s) is s and s.intersect(d) is s
    assert d.matmul(d).is_dense and d.nnz == 25 and d.density == 1.0


@pytest.mark.parametrize(("shape", "nnz", "expected"), [
    ((10**6, 10**6), 10**7, (512, 512)),
    ((100, 100), 10**4, (8, 8)),
    ((10**7, 10**7), 10, (1024, 1024)),
    ((0, 5), 0, (8, 8)),
])
def test_choose_block(shape, nnz, expected):
    assert choose_block(shape, nnz) == expected


def test_coarsen_is_conservative_and_rejects_non_multiples():
    p = Pattern.from_sparse(sp.csr_array(np.eye(16)), block=(2, 2))
    q = p.coarsen((8, 4))
    assert q.blocks.shape == (2, 4) and q.blocks.nnz == 4
    with pytest.raises(PatternError, match="multiple"):
        p.coarsen((3, 2))


def test_fingerprint_depends_on_structure_not_values():
    A = _random(30, 20, 0.1, 0)
    B = A.copy()
    B.data[:] = 5.0
    C = _random(30, 20, 0.1, 1)
    assert structure_fingerprint(A) == structure_fingerprint(B)
    assert structure_fingerprint(A) != structure_fingerprint(C)
    assert Pattern.from_sparse(A).same_as(Pattern.from_sparse(B))
    assert not Pattern.from_sparse(A).same_as(Pattern.from_sparse(C))


def test_input_spec_hashes_its_pattern_on_first_use():
    import thrifty as th
    from thrifty.runtime.sparse_run import specialize

    A = _random(30, 20, 0.1, 0)
    tr = th.program(lambda A: A * 2.0).traced(A=A)
    plan = specialize(tr.graph, {"A": A})
    spec = plan.inputs["A"]
    assert spec.fingerprint_ is None  # not hashed at inspection
    assert spec.fingerprint == structure_fingerprint(A) == spec.fingerprint_
    assert plan.fingerprint == (("A", structure_fingerprint(A), "float64"),)


def test_loose_intersection_is_a_superset_of_the_exact_one():
    E = Pattern.from_sparse(_random(64, 64, 0.1, 0), block=(8, 8))
    blocks = Pattern.from_sparse(_random(64, 64, 0.02, 1), block=(8, 8))
    blocks = Pattern(blocks.shape, blocks.block, blocks.blocks, None)  # elements unknown
    exact, loose = E.intersect(blocks), E.intersect(blocks, exact=False)
    assert exact.nnz < loose.nnz == E.nnz
    d_exact, d_loose = exact.elements.toarray(), loose.elements.toarray()
    assert not (d_exact & ~d_loose).any()


def test_explicit_zeros_are_part_of_the_pattern():
    A = sp.csr_array((np.array([0.0, 1.0]), np.array([0, 1]), np.array([0, 1, 2])),
                     shape=(2, 2))
    assert Pattern.from_sparse(A).nnz == 2


def test_canonical_csr_sums_duplicates_and_rejects_dense():
    A = sp.coo_array(([1.0, 2.0, 3.0], ([0, 0, 1], [1, 1, 0])), shape=(2, 2))
    C = canonical_csr(A)
    assert C.nnz == 2 and C[0, 1] == 3.0
    with pytest.raises(PatternError, match="scipy.sparse"):
        canonical_csr(np.eye(2))


def test_propagation_scale_block_product_of_a_huge_matrix_is_fast():
    """A 10^6 x 10^6 matrix: the pattern and its square cost follow the blocks."""
    import time

    rng = np.random.default_rng(0)
    n, nnz = 10**6, 2 * 10**6
    rows = rng.integers(0, n, nnz)
    cols = np.clip(rows + rng.integers(-2000, 2000, nnz), 0, n - 1)
    A = sp.csr_array((np.ones(nnz), (rows, cols)), shape=(n, n))
    t0 = time.perf_counter()
    p = Pattern.from_sparse(A)
    p2 = Pattern(p.shape, p.block, p.blocks).matmul(Pattern(p.shape, p.block, p.blocks))
    elapsed = time.perf_counter() - t0
    assert p2.shape == (n, n) and not p2.is_dense
    assert elapsed < 20.0, f"pattern construction and product took {elapsed:.1f} s"

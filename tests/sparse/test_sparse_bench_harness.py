"""The sparse benchmark's harness (``benchmarks/sparse_peers.py``, ``sparse_bench.py``):
conversions reused across cases, the full-result check, the rounds under a budget."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import sparse_bench as sb  # noqa: E402
import sparse_peers as peers  # noqa: E402


def _dense(r):  # a peer's result as a dense numpy array
    return peers._as_result(r, dense=True)


@pytest.mark.parametrize("shape", [(40, 40), (30, 50)])
def test_cached_conversions_give_the_fresh_result(shape):
    rng = np.random.default_rng(1)
    A = sp.random_array(shape, density=0.1, format="csr", rng=rng)
    forms = peers.PeerForms(A)
    for X in (rng.standard_normal(shape[1]), rng.standard_normal((shape[1], 3)),
              rng.standard_normal((shape[1], 7))):  # the forms reused across widths
        cached, fresh = peers.product_peers(A, X, forms), peers.product_peers(A, X)
        assert set(cached) == set(fresh) and {"scipy", "dense"} <= set(cached)
        oracle = A.toarray() @ X
        for p in fresh:
            assert np.array_equal(_dense(cached[p]()), _dense(fresh[p]())), p
            np.testing.assert_allclose(_dense(cached[p]()), oracle, rtol=1e-12, atol=1e-12)
    for name in ("mkl", "torch", "graphblas", "pydata", "dense"):
        assert getattr(forms, name) is getattr(forms, name)  # converted once, then kept
    if shape[0] == shape[1]:
        X, W = rng.standard_normal((shape[0], 4)), rng.standard_normal((4, 4))
        oracle = np.maximum(A.toarray() @ (X @ W), 0)
        cached, fresh = peers.gcn_peers(A, X, W, forms), peers.gcn_peers(A, X, W)
        assert set(cached) == set(fresh)
        for p in fresh:
            assert np.array_equal(_dense(cached[p]()), _dense(fresh[p]())), p
            np.testing.assert_allclose(_dense(cached[p]()), oracle, rtol=1e-12, atol=1e-12)


def test_results_match_is_allclose_on_every_element():
    rng = np.random.default_rng(2)
    ref = rng.standard_normal((60, 9))
    cases = [ref.copy(), ref * (1 + 1e-11), ref + 1e-10]
    for i in range(5):  # one element off, anywhere
        bad = ref.copy()
        bad.flat[rng.integers(bad.size)] += 10.0 ** -(i + 4)
        cases.append(bad)
    nan = ref.copy()
    nan[3, 4] = np.nan
    inf = ref.copy()
    inf[0, 0] = np.inf
    cases += [nan, inf]
    for r in cases:
        assert peers.results_match(r, ref) == np.allclose(r, ref, rtol=1e-9, atol=1e-9)
    assert peers.results_match(inf, inf)  # equal infinities are close, as in allclose
    assert not peers.results_match(ref[:, :8], ref)  # shapes differ


def test_results_match_compares_sparse_results_on_the_union_of_patterns():
    rng = np.random.default_rng(3)
    A = sp.random_array((30, 20), density=0.2, format="csr", rng=rng)
    D = A.toarray()
    i, j = np.argwhere(D == 0)[0]
    coo = sp.coo_array(A)
    extra = sp.csr_array((np.append(coo.data, 0.0), (np.append(coo.row, i),
                                                     np.append(coo.col, j))), shape=A.shape)
    assert extra.nnz == A.nnz + 1  # an explicit zero: the same matrix
    moved = sp.csr_array(np.roll(D, 1, axis=1))  # another pattern
    tiny = sp.csr_array(D + np.where(D == 0, 1e-12, 0) * (rng.random(D.shape) < 0.1))
    unsorted = sp.csr_array((A.data[::-1].copy(), A.indices.copy(), A.indptr.copy()),
                            shape=A.shape)  # values moved to other positions
    assert peers.results_match(extra, A) and peers.results_match(tiny, A)
    assert not peers.results_match(moved, A) and not peers.results_match(unsorted, A)
    for r in (A.copy(), sp.coo_array(A), extra, moved, tiny, unsorted, D, 2 * D):
        expect = np.allclose(_dense(r), D, rtol=1e-9, atol=1e-9)
        assert peers.results_match(r, A) == expect
        assert peers.results_match(A, r) == expect
    import graphblas as gb

    assert peers.results_match(gb.io.from_scipy_sparse(sp.csr_matrix(A)), A)
    assert not peers.results_match(gb.io.from_scipy_sparse(sp.csr_matrix(moved)), A)


def test_rounds_cut_the_slowest_first_and_never_below_three():
    t = {"fast": 0.01, "mid": 0.1, "slow": 1.0, "slower": 3.0}
    assert sb._rounds(t, 9, 1e9) == dict.fromkeys(t, 9)  # everything fits
    for budget in (0.5, 2.0, 8.0, 20.0, 40.0):
        n = sb._rounds(t, 9, budget)
        assert all(3 <= n[k] <= 9 for k in t)
        assert n["fast"] >= n["mid"] >= n["slow"] >= n["slower"]
        floor = sum(3 * s for s in t.values())  # past the budget by the floor at most
        assert sum(n[k] * t[k] for k in t) <= budget + floor + 1e-9
    assert sb._rounds(t, 9, 8.0) == {"fast": 9, "mid": 9, "slow": 3, "slower": 3}
    assert sb._rounds(t, 9, 20.0) == {"fast": 9, "mid": 9, "slow": 9, "slower": 3}
    assert sb._rounds(t, 2, 0.1) == dict.fromkeys(t, 2)  # fewer than 3 asked: all of them


def test_interleaved_times_times_every_function_its_rounds():
    calls = {"a": 0, "b": 0}

    def a():
        calls["a"] += 1
        sum(range(20000))

    def b():
        calls["b"] += 1
        sum(range(200000))

    rounds: dict[str, int] = {}
    t = sb.interleaved_times({"a": a, "b": b}, 9, min_sample=1e-9, budget=0.0,
                             rounds_out=rounds)
    assert set(t) == {"a", "b"} and all(v > 0 for v in t.values())
    assert rounds == {"a": 3, "b": 3}  # no budget: the minimum for everyone
    assert calls == {"a": 1 + 3, "b": 1 + 3}  # one warm-up call each, then its rounds

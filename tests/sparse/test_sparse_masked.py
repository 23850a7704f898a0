"""Masked SpGEMM ``(A @ B) * S``: the mask-driven kernel, with ``S``'s values applied in the
kernel, against the dense reference (values and structure) on collection matrices and
hypothesis-generated operands (empty rows and columns, rectangular, float32 and float64).

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
from thrifty.sparse.cost import CostModel
from thrifty.sparse.masked import masked_rows
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


def _plan(f, inputs, cost=None):
    tr = th.program(f).traced(**inputs)
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
       dtype=st.sampled_from(["float32", "float64"]), seed=st.integers(0, 2**16))
def test_random_masked_products_equal_dense_reference(n, k, m, d, empty, mask_first, tasks,
                                                      dtype, seed):
    rng = np.random.default_rng(seed)
    A, B = _int_csr(n, k, d[0], rng, empty, dtype), _int_csr(k, m, d[1], rng, empty, dtype)
    S = _int_csr(n, m, d[2], rng, empty, dtype)
    inputs = {"A": A, "B": B, "S": S}
    f = (lambda A, B, S: S * (A @ B)) if mask_first else (lambda A, B, S: (A @ B) * S)
    plan = _plan(f, inputs, PANELS if tasks else None)
    _check(plan, inputs, (A.toarray() @ B.toarray()) * S.toarray(), sparse=False)


def test_triangle_product_fuses_the_mask_product():
    rng = np.random.default_rng(0)
    G = sp.random_array((400, 400), density=0.03, format="csr", rng=rng)
    L = sp.csr_array(sp.tril(G + G.T, -1))
    L.data[:] = rng.integers(1, 4, L.nnz)
    for cost in (None, PANELS):
        plan = _plan(lambda L: (L @ L) * L, {"L": L}, cost)
        kernels = plan.report()["kernels"]
        assert kernels["fused_mul"] == 1 and "elementwise_csr" not in kernels
        assert kernels["masked_spgemm"] >= (2 if cost is PANELS else 1)
        D = L.toarray()
        _check(plan, {"L": L}, (D @ D) * D)


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
    plan = _plan(lambda L: (L @ L) * L, {"L": L}, PANELS)
    want = sp.csr_array((L @ L).multiply(L))
    for scheduler in (None, "sync"):
        got = plan.run({"L": L}, scheduler=scheduler)
        assert sp.issparse(got)
        assert abs(got - want).max() == 0
        # stored entries: the propagated pattern, which holds every nonzero of the oracle
        out = plan.propagation.effective[plan.graph.outputs[0]].elements
        assert got.nnz == out.nnz
        assert sp.csr_array(want.astype(bool) > out.astype(bool)).nnz == 0

"""``A.T`` feeding products: the transpose's pattern is computed once, at inspection, and
each run only gathers values; results equal the dense reference."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import thrifty as th
from thrifty.sparse.transpose import transpose_pattern


def _int_csr(n: int, m: int, density: float, rng: np.random.Generator) -> sp.csr_array:
    A = sp.random_array((n, m), density=density, format="csr", rng=rng,
                        data_sampler=lambda size: rng.integers(-3, 4, size).astype(float))
    A.eliminate_zeros()
    return sp.csr_array(A)


def _transpose_tasks(plan):
    return [t for t in plan.taskgraph.tasks.values() if t.kernel == "transpose_csr"]


def test_a_transpose_task_reuses_the_inspected_pattern():
    rng = np.random.default_rng(0)
    A = _int_csr(300, 200, 0.05, rng)
    X = rng.integers(-2, 3, (300, 6)).astype(float)
    plan = th.program(lambda A, X: A.T @ X).specialize(A=A, X=X)
    (task,) = _transpose_tasks(plan)
    outs = [task.fn(A), task.fn(sp.csr_array((A.data * 2, A.indices, A.indptr),
                                             shape=A.shape))]
    for k, T in enumerate(outs):
        # the index arrays are the plan's own (no transposition, no sort in the run)
        assert np.shares_memory(T.indices, task.attrs["pattern"].indices)
        assert np.shares_memory(T.indptr, task.attrs["pattern"].indptr)
        np.testing.assert_array_equal(T.toarray(), (A.T.toarray()) * (k + 1))
    for _ in range(2):
        np.testing.assert_array_equal(plan(A=A, X=X), A.toarray().T @ X)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 40), m=st.integers(1, 40), d=st.floats(0, 0.5),
       seed=st.integers(0, 2**16))
def test_transpose_pattern_and_products_equal_dense(n, m, d, seed):
    rng = np.random.default_rng(seed)
    A = _int_csr(n, m, d, rng)
    P, perm = transpose_pattern(A)
    T = sp.csr_array(A.T)
    T.sort_indices()
    np.testing.assert_array_equal(P.indptr, T.indptr)
    np.testing.assert_array_equal(P.indices, T.indices)
    np.testing.assert_array_equal(A.data[perm], T.data)
    X = rng.integers(-2, 3, (n, 3)).astype(float)
    D = A.toarray()
    for f, want in [(lambda A, X: A.T @ X, D.T @ X),
                    (lambda A, X: (A.T @ A) * (A.T @ A), (D.T @ D) ** 2),
                    (lambda A, X: th.relu(A.T @ (A @ A.T)), np.maximum(D.T @ D @ D.T, 0))]:
        got = th.program(f).specialize(A=A, X=X)(A=A, X=X)
        np.testing.assert_array_equal(got.toarray() if sp.issparse(got) else got, want)

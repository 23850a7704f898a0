"""The per-call path of a plan: in-process runs, cheap input checks, the kernel chosen."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import thrifty as th
from thrifty.front.matrices import poisson2d
from thrifty.runtime.sparse_run import specialize
from thrifty.sparse.cost import CostModel
from thrifty.testing import assert_eq

spmv = th.program(lambda A, x: A @ x)
spmm = th.program(lambda A, X: A @ X)
sddmm = th.program(lambda X, Y, S: (X @ Y.T) * S)


def _small(seed: int = 0) -> sp.csr_array:
    return sp.random_array((2000, 2000), density=0.005, format="csr", rng=seed)


def _plan(prog, inputs, cost=None):
    tr = prog.traced(**inputs)
    return specialize(tr.graph, inputs, structure=tr.structure, cost=cost)


SPLIT = CostModel(min_task_seconds=1e-6, parallel_seconds=0.0)  # row panels even when small


@pytest.mark.parametrize("cost", [None, SPLIT], ids=["one-task", "panels"])
@pytest.mark.parametrize(("prog", "dense_shape"), [(spmv, (2000,)), (spmm, (2000, 64))],
                         ids=["spmv", "spmm"])
def test_fast_path_equals_dense_numpy(prog, dense_shape, cost):
    rng = np.random.default_rng(1)
    A = _small()
    name = "x" if len(dense_shape) == 1 else "X"
    plan = _plan(prog, {"A": A, name: rng.standard_normal(dense_shape)}, cost)
    for _ in range(3):  # the very arrays inspected, new values in place
        A.data[:] = rng.standard_normal(A.nnz)
        d = rng.standard_normal(dense_shape)
        assert_eq(plan(A=A, **{name: d}), A.toarray() @ d, rtol=1e-10, atol=1e-12)
    B = sp.csr_array((rng.standard_normal(A.nnz), A.indices.copy(), A.indptr.copy()),
                     shape=A.shape)  # the same pattern in other arrays
    for value in (B, sp.csr_matrix(B)):
        d = rng.standard_normal(dense_shape)
        got = plan.run({"A": value, name: d})
        assert type(got) is np.ndarray and got.dtype == np.float64
        assert_eq(got, B.toarray() @ d, rtol=1e-10, atol=1e-12)


def test_the_kernel_chosen_is_reported():
    rng = np.random.default_rng(2)
    A, x = _small(), rng.standard_normal(2000)
    one = _plan(spmv, {"A": A, "x": x})
    assert one.report()["kernels"] == {"spmv_scipy": 1}
    panels = _plan(spmv, {"A": A, "x": x}, SPLIT)
    kernels = panels.report()["kernels"]
    assert set(kernels) == {"spmv"} and kernels["spmv"] >= 2
    for plan in (one, panels):
        counted = {t.kernel for t in plan.taskgraph.tasks.values()} & {"spmv", "spmv_scipy"}
        assert counted == set(plan.report()["kernels"])
        assert_eq(plan(A=A, x=x), A.toarray() @ x, rtol=1e-10, atol=1e-12)
    mm = _plan(spmm, {"A": A, "X": rng.standard_normal((2000, 8))})
    assert mm.report()["kernels"] == {"spmm_csr": 1}


def test_a_new_pattern_is_detected_on_the_fast_path():
    rng = np.random.default_rng(3)
    A, x = _small(), rng.standard_normal(2000)
    plan = _plan(spmv, {"A": A, "x": x})
    assert plan.inputs["A"].pattern_free
    plan(A=A, x=x)
    # same nnz and row counts, one entry moved to another column
    moved = A.copy()
    row = int(np.flatnonzero(np.diff(A.indptr))[0])
    taken = set(A.indices[A.indptr[row]:A.indptr[row + 1]].tolist())
    moved.indices[A.indptr[row + 1] - 1] = max(set(range(2000)) - taken)
    moved.sort_indices()
    assert moved.nnz == A.nnz and np.array_equal(moved.indptr, A.indptr)
    with pytest.raises(th.PatternError, match="different sparsity pattern"):
        plan(A=moved, x=x)
    flipped = sp.csr_array(A.toarray()[::-1].copy())  # same nnz, rows in another order
    with pytest.raises(th.PatternError, match="different sparsity pattern"):
        plan(A=flipped, x=x)
    with pytest.raises(th.PatternError, match="different sparsity pattern"):
        plan(A=A + sp.eye_array(2000, format="csr"), x=x)
    assert_eq(plan(A=A, x=x), A.toarray() @ x, rtol=1e-10, atol=1e-12)  # still usable


def test_in_place_changes_of_the_inspected_arrays_never_give_a_wrong_result():
    rng = np.random.default_rng(4)
    # a one-kernel plan reads the index arrays at run time: right for what they hold now
    A, x = _small(), rng.standard_normal(2000)
    plan = _plan(spmv, {"A": A, "x": x})
    A.indices[:] = A.indices[::-1]  # a new pattern in the very same arrays
    assert_eq(plan(A=A, x=x), A.toarray() @ x, rtol=1e-10, atol=1e-12)
    # a plan that derived work from the pattern (SDDMM's output pattern) must notice
    S = _small(5)
    X, Y = rng.standard_normal((2000, 4)), rng.standard_normal((2000, 4))
    plan = _plan(sddmm, {"X": X, "Y": Y, "S": S})
    assert not plan.inputs["S"].pattern_free
    original = S.copy()
    S.indices[:] = (S.indices + 1) % 2000
    with pytest.raises(th.PatternError, match="different sparsity pattern"):
        plan(X=X, Y=Y, S=S)
    # and the plan kept its own copy of the inspected pattern
    got = plan(X=X, Y=Y, S=original)
    assert_eq(got, (X @ Y.T) * original.toarray(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("scheduler", [None, "sync", "threads"])
def test_in_process_levels_agree_with_dask(scheduler):
    A = poisson2d(60)
    X = np.random.default_rng(6).standard_normal((A.shape[0], 16))
    plan = _plan(spmm, {"A": A, "X": X}, SPLIT)
    assert sum(1 for t in plan.taskgraph.tasks.values() if t.kernel == "spmm_csr") >= 2
    expected = plan.run({"A": A, "X": X}, scheduler="sync")
    assert_eq(plan.run({"A": A, "X": X}, scheduler=scheduler), expected)
    assert_eq(expected, A.toarray() @ X, rtol=1e-10, atol=1e-12)


def test_bad_inputs_are_rejected_before_any_task_runs():
    A = poisson2d(60)
    plan = _plan(spmv, {"A": A, "x": np.ones(A.shape[0])}, SPLIT)
    with pytest.raises(th.ShapeError):
        plan(A=A, x=np.ones(7))
    with pytest.raises(th.SpecError, match="dtype"):
        plan(A=sp.csr_array(A, dtype=np.float32), x=np.ones(A.shape[0]))
    with pytest.raises(th.SpecError, match="unknown"):
        plan(A=A, x=np.ones(A.shape[0]), y=1)


def test_a_failing_task_in_a_parallel_level_raises(monkeypatch):
    from thrifty.sparse.tasks import SpmvPanel

    A = poisson2d(60)
    on_pool = CostModel(min_task_seconds=1e-6, parallel_seconds=0.0, idle_check=False)
    plan = _plan(spmv, {"A": A, "x": np.ones(A.shape[0])}, on_pool)
    original = SpmvPanel.__call__

    def flaky(self, out, A, x):
        if self.r0 > 0:
            raise RuntimeError("panel failed")
        return original(self, out, A, x)

    monkeypatch.setattr(SpmvPanel, "__call__", flaky)
    with pytest.raises(RuntimeError, match="panel failed"):
        plan(A=A, x=np.ones(A.shape[0]))


def test_program_call_reuses_the_last_plan_in_any_keyword_order_and_respecializes():
    import thrifty as th

    rng = np.random.default_rng(7)
    A = sp.random_array((60, 50), density=0.1, format="csr", rng=rng)
    x = rng.standard_normal(50)
    prog = th.program(lambda A, x: A @ x)
    np.testing.assert_allclose(prog(A=A, x=x), A.toarray() @ x, rtol=1e-12)
    first = prog._last_plan
    np.testing.assert_allclose(prog(x=x, A=A), A.toarray() @ x, rtol=1e-12)
    np.testing.assert_allclose(prog(A, x), A.toarray() @ x, rtol=1e-12)
    assert prog._last_plan is first and len(prog._plans) == 1
    B = sp.random_array((60, 50), density=0.2, format="csr", rng=rng)  # a new pattern
    np.testing.assert_allclose(prog(A=B, x=x), B.toarray() @ x, rtol=1e-12)
    assert prog._last_plan is not first and len(prog._plans) == 2
    with pytest.raises(th.SpecError, match="unexpected keyword argument .y.; its inputs"):
        prog(A=A, x=x, y=x)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("k", [None, 5])
def test_a_full_pattern_is_multiplied_as_the_dense_matrix_it_is(dtype, k):
    rng = np.random.default_rng(11)
    D = rng.standard_normal((30, 20)).astype(dtype)
    D[3, 4] = 0.0  # an explicit zero stays in the pattern
    A = sp.csr_array((D.ravel(), np.tile(np.arange(20), 30), np.arange(0, 601, 20)),
                     shape=(30, 20))
    X = rng.standard_normal(20 if k is None else (20, k)).astype(dtype)
    plan = specialize(th.program(lambda A, X: A @ X).trace(A=A, X=X), {"A": A, "X": X})
    assert plan.report()["kernels"] == {"gemm_full_pattern": 1}
    out = plan(A=A, X=X)
    assert out.dtype == dtype
    np.testing.assert_allclose(out, D @ X, rtol=1e-5 if dtype == "float32" else 1e-12)
    A2 = A.copy()
    A2.data = A2.data * 2
    np.testing.assert_allclose(plan(A=A2, X=X), 2 * (D @ X), rtol=1e-5 if dtype == "float32"
                               else 1e-12)
    B = sp.csr_array(A.toarray())  # the explicit zero dropped: another pattern
    with pytest.raises(th.PatternError):
        plan(A=B, X=X)

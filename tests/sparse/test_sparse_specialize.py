"""The inspector/executor API on generated inputs: oracles, schedulers, reuse, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import thrifty as th
from thrifty.front.matrices import poisson2d, rmat
from thrifty.runtime.reference import evaluate
from thrifty.runtime.sparse_run import specialize
from thrifty.sparse.propagate import propagate
from thrifty.testing import assert_eq

rng0 = np.random.default_rng(0)

gcn = th.program(lambda A, X, W: th.relu(A @ (X @ W)))
sddmm = th.program(lambda X, Y, S: (X @ Y.T) * S)
masked = th.program(lambda L: (L @ L) * L)
attention = th.program(lambda Q, K, V, S: th.softmax(Q @ K.T, mask=S) @ V)
spmv = th.program(lambda A, x: A @ x)


def _reference(prog, inputs):
    return evaluate(prog.trace(**inputs), inputs)[0]


def _cases():
    A = poisson2d(40)  # 1600 x 1600
    n = A.shape[0]
    G = rmat(10, 8, seed=1)
    L = sp.csr_array(sp.tril(G + G.T, -1))
    rng = np.random.default_rng(1)
    return {
        "gcn": (gcn, {"A": A, "X": rng.standard_normal((n, 16)),
                      "W": rng.standard_normal((16, 8))}),
        "sddmm": (sddmm, {"X": rng.standard_normal((n, 8)), "Y": rng.standard_normal((n, 8)),
                          "S": A}),
        "masked-spgemm": (masked, {"L": L}),
        "attention": (attention, {"Q": rng.standard_normal((n, 8)),
                                  "K": rng.standard_normal((n, 8)),
                                  "V": rng.standard_normal((n, 4)), "S": A}),
        "spmv": (spmv, {"A": A, "x": rng.standard_normal(n)}),
    }


CASES = _cases()


@pytest.mark.parametrize("scheduler", ["sync", "threads", None])
@pytest.mark.parametrize("case", list(CASES))
def test_plan_equals_dense_reference_under_every_scheduler(case, scheduler):
    prog, inputs = CASES[case]
    plan = prog.specialize(**inputs)
    assert_eq(plan.run(inputs, scheduler=scheduler), _reference(prog, inputs), rtol=1e-10,
              atol=1e-13)


@pytest.mark.parametrize(("case", "kernel"), [
    ("gcn", "spmm_csr"), ("sddmm", "sddmm"), ("masked-spgemm", "masked_spgemm_pairs"),
    ("attention", "masked_softmax"), ("attention", "sddmm"), ("spmv", "spmv_scipy")])
def test_kernel_detection(case, kernel):
    prog, inputs = CASES[case]
    rep = prog.specialize(**inputs).report()
    assert rep["kernels"].get(kernel, 0) >= 1, rep["kernels"]
    assert rep["useful_flops"] <= rep["executed_flops"] < rep["dense_flops"]
    assert rep["inspect_seconds"] > 0 and rep["tasks"] >= 1


def test_sddmm_computes_only_the_needed_entries():
    prog, inputs = CASES["sddmm"]
    g = prog.trace(**inputs)
    facts = propagate(g, inputs)
    mm = next(n.id for n in g if n.op == "matmul")
    assert facts.forward[mm].is_dense
    assert facts.effective[mm].nnz == inputs["S"].nnz
    rep = prog.specialize(**inputs).report()
    assert rep["executed_flops"] == 2 * 8 * inputs["S"].nnz + inputs["S"].nnz


def test_masked_softmax_needs_scores_only_on_the_mask():
    prog, inputs = CASES["attention"]
    g = prog.trace(**inputs)
    facts = propagate(g, inputs)
    scores = next(n.id for n in g if n.op == "matmul")
    assert facts.effective[scores].nnz == inputs["S"].nnz


@pytest.mark.parametrize(("fn", "dense"), [
    (lambda A: th.exp(A), True), (lambda A: th.relu(A), False), (lambda A: A + 1.0, True),
    (lambda A: A * 3.0, False), (lambda A: th.sigmoid(A), True), (lambda A: th.tanh(A), False),
    (lambda A: A > 0, False), (lambda A: A >= 0, True), (lambda A: A / 2.0, False),
    (lambda A: th.sum(A, axis=1, keepdims=True) * A, False),
])
def test_forward_rules_of_elementwise_ops(fn, dense):
    A = sp.random_array((30, 30), density=0.1, format="csr", rng=2)
    g = th.program(fn).trace(A=A)
    facts = propagate(g, {"A": A})
    out = facts.forward[g.outputs[0]]
    assert out.is_dense == dense
    got = th.program(fn)(A=A)
    assert_eq(got, evaluate(g, {"A": A})[0])


def test_plan_reuses_on_new_values_and_rejects_a_new_pattern():
    prog, inputs = CASES["gcn"]
    plan = prog.specialize(**inputs)
    A2 = inputs["A"].copy()
    A2.data = np.random.default_rng(3).standard_normal(A2.nnz)
    new = {**inputs, "A": A2}
    assert_eq(plan(**new), _reference(prog, new), rtol=1e-10, atol=1e-13)
    A3 = poisson2d(40) + sp.eye_array(1600, k=7, format="csr")
    with pytest.raises(th.PatternError, match="different sparsity pattern"):
        plan(**{**inputs, "A": A3})
    with pytest.raises(th.PatternError, match="dense"):
        plan(**{**inputs, "A": inputs["A"].toarray()})


def test_program_call_specializes_once_per_pattern():
    prog = th.program(lambda A, X: A @ X)
    X = np.ones((50, 3))
    A = sp.random_array((50, 50), density=0.1, format="csr", rng=4)
    B = sp.random_array((50, 50), density=0.1, format="csr", rng=5)
    for M in (A, A * 2.0, B, A):
        assert_eq(prog(A=M, X=X), M @ X)
    keys = [k for k in prog._plans if k != "last"]
    assert len(keys) == 2


def test_inf_and_nan_are_structural_like_scipy():
    """Implicit zeros stay zero: 0 * inf gives 0 here (and in scipy), nan in dense numpy."""
    A = sp.csr_array(np.array([[1.0, 0.0], [0.0, np.inf]]))
    X = np.array([[np.inf, 1.0], [np.nan, 2.0]])
    got = spmv.specialize(A=A, x=X[:, 0])(A=A, x=X[:, 0])
    np.testing.assert_array_equal(got, A @ X[:, 0])
    dense = A.toarray() @ X[:, 0]
    assert np.isnan(dense[0]) and got[0] == np.inf


def test_explicit_zeros_are_kept_in_the_pattern():
    S = sp.csr_array((np.array([0.0, 2.0, 0.0]), np.array([0, 1, 1]),
                      np.array([0, 2, 3] + [3] * 18)), shape=(20, 20))
    X, Y = np.ones((20, 3)), np.ones((20, 3))
    got = sddmm(X=X, Y=Y, S=S)
    assert sp.issparse(got) and got.nnz == 3
    assert_eq(got, (X @ Y.T) * S.toarray())
    assert S.nnz == 3  # the input was not modified


@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (0, 0)])
def test_empty_and_zero_row_matrices(shape):
    A = sp.csr_array(shape)
    X = np.ones((shape[1], 3))
    got = th.program(lambda A, X: th.relu(A @ X))(A=A, X=X)
    assert got.shape == (shape[0], 3) and not np.any(got)


@pytest.mark.parametrize("dtype", ["int64", "float32", "complex128", "bool"])
def test_other_dtypes_match_the_reference(dtype):
    rng = np.random.default_rng(6)
    A = sp.random_array((40, 30), density=0.2, format="csr", rng=rng)
    A.data = rng.integers(1, 4, A.nnz).astype(float)
    A = sp.csr_array(A.astype(dtype))
    X = rng.integers(0, 3, (30, 4)).astype(dtype)
    prog = th.program(lambda A, X: A @ X)
    got = prog(A=A, X=X)
    expected = _reference(prog, {"A": A, "X": X})
    assert got.dtype == expected.dtype
    assert_eq(got, expected, rtol=1e-5 if dtype == "float32" else 1e-12)


def test_shapes_that_do_not_fit_name_the_op():
    A = sp.random_array((10, 8), density=0.3, format="csr", rng=7)
    with pytest.raises(th.ShapeError, match="matmul.*(10, 8).*(10, 4)"):
        th.program(lambda A, X: A @ X).specialize(A=A, X=np.ones((10, 4)))


def test_plan_rejects_wrong_shapes_dtypes_and_names():
    prog, inputs = CASES["spmv"]
    plan = prog.specialize(**inputs)
    with pytest.raises(th.ShapeError, match="shape"):
        plan(A=inputs["A"], x=np.ones(3))
    with pytest.raises(th.SpecError, match="dtype"):
        plan(A=inputs["A"], x=inputs["x"].astype(np.float32))
    with pytest.raises(th.SpecError, match="missing"):
        plan(A=inputs["A"])
    with pytest.raises(th.SpecError, match="scheduler"):
        plan.run(inputs, scheduler="gpu")


def test_taskgraph_is_valid_and_groups_work():
    A = poisson2d(300)  # 90000 rows: large enough to split into parallel panels
    X = np.ones((A.shape[0], 32))
    plan = th.program(lambda A, X: A @ X).specialize(A=A, X=X)
    tg = plan.taskgraph
    panels = [t for t in tg.tasks.values() if t.kernel in ("spmm_csr", "spmm_panel")]
    assert 2 <= len(panels) <= plan.cost.tasks_per_thread * plan.cost.threads
    assert all(t.fn is not None for t in tg.tasks.values())
    assert_eq(plan(A=A, X=X), A @ X)


def test_dense_block_rows_use_gathered_panels():
    """A matrix with one dense block of rows: the cost model picks gemm on a panel there."""
    n = 2048
    A = sp.lil_array((n, n))
    A[:64, :512] = np.random.default_rng(8).standard_normal((64, 512))
    A = sp.csr_array(A + sp.eye_array(n))
    X = np.random.default_rng(9).standard_normal((n, 64))
    plan = th.program(lambda A, X: A @ X).specialize(A=A, X=X)
    assert plan.report()["kernels"].get("spmm_panel", 0) + \
        sum(1 for t in plan.taskgraph.tasks.values()
            if t.kernel == "spmm_csr" and any(s.form == "panel" for s in t.fn.segs)) >= 1
    assert_eq(plan(A=A, X=X), A @ X, rtol=1e-10, atol=1e-12)


def test_specialize_function_directly_and_multiple_outputs():
    prog = th.program(lambda A, X: (A @ X, th.relu(A)))
    A = sp.random_array((20, 20), density=0.2, format="csr", rng=10)
    X = np.ones((20, 2))
    plan = specialize(prog.trace(A=A, X=X), {"A": A, "X": X}, structure=tuple)
    y, r = plan(A=A, X=X)
    assert_eq(y, A @ X)
    assert sp.issparse(r)
    assert_eq(r, np.maximum(A.toarray(), 0))


@pytest.mark.parametrize(("pairs", "kernel"), [(True, "masked_spgemm_pairs"),
                                               (False, "masked_spgemm_dot")])
def test_a_sparse_mask_on_a_dense_product_picks_pairs_or_the_dot_form(pairs, kernel,
                                                                       monkeypatch):
    from thrifty.sparse import lower_matmul

    if not pairs:  # no pairs recorded: dot products, which visit fewer pairs than rows
        monkeypatch.setattr(lower_matmul, "PAIRS_SHARE", -1.0)
    rng = np.random.default_rng(11)
    A = sp.random_array((300, 300), density=0.3, format="csr", rng=rng)
    M = sp.random_array((300, 300), density=0.002, format="csr", rng=rng)
    prog = th.program(lambda A, M: (A @ A) * M)
    plan = prog.specialize(A=A, M=M)
    assert plan.report()["kernels"].get(kernel) == 1
    got = plan(A=A, M=M)
    assert sp.issparse(got)
    assert_eq(got, _reference(prog, {"A": A, "M": M}), rtol=1e-10, atol=1e-13)

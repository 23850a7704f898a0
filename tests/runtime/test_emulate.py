"""Whole programs in emulated precision: the unit path, sparse chunk skipping, bounds."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import thrifty as th
from thrifty.errors import SpecError
from thrifty.numerics import round as fround
from thrifty.numerics import unit
from thrifty.runtime.emulate import emulate, unit_spmm

UNITS = [("v100", "fp16", "fp32"), ("a100", "bf16", "fp32"), ("h100", "bf16", "fp32"),
         ("ada", "e4m3", "fp32"), ("a100", "tf32", "fp32"), ("cdna3", "bf16", "fp32")]


@pytest.mark.parametrize("name,fin,fout", UNITS, ids=[f"{u[0]}-{u[1]}" for u in UNITS])
def test_sparse_chunk_skipping_is_bit_exact(name, fin, fout):
    u = unit(name, input=fin, output=fout)
    rng = np.random.default_rng(1)
    A = sp.random_array((12, 70), density=0.08, format="csr", rng=rng)
    A.data = fround(rng.standard_normal(A.nnz), fin, saturation="finite")
    A.data[A.indptr[3]:A.indptr[4]] = 0  # an empty row
    A.eliminate_zeros()
    B = fround(rng.standard_normal((70, 5)), fin, saturation="finite")
    dense = u.matmul(A.toarray(), B)
    np.testing.assert_array_equal(unit_spmm(u, A, B), dense)


def test_gcn_in_bf16_on_h100_is_within_its_bound():
    gcn = th.program(lambda A, X, W: th.relu(A @ (X @ W)))
    A = th.rmat(7, edge_factor=4, seed=3, symmetric=True)
    rng = np.random.default_rng(0)
    X, W = rng.standard_normal((128, 16)), rng.standard_normal((16, 8)) / 4
    g = gcn.trace(A=A, X=X, W=W)
    r = emulate(g, {"A": A, "X": X, "W": W}, unit("h100", input="bf16", output="fp32"))
    assert r.within_bounds()
    assert 0 < r.observed[0] <= r.bounds[0] < np.inf
    np.testing.assert_allclose(r.outputs[0], r.reference[0], rtol=0.05, atol=r.bounds[0])


def test_dense_program_matches_direct_unit_calls():
    g = th.program(lambda A, B: A @ B).trace(A=((6, 40), "float64"), B=((40, 3), "float64"))
    rng = np.random.default_rng(2)
    A, B = rng.standard_normal((6, 40)), rng.standard_normal((40, 3))
    u = unit("a100", input="bf16", output="fp32")
    r = emulate(g, {"A": A, "B": B}, u)
    want = u.matmul(fround(A, "bf16"), fround(B, "bf16"))
    np.testing.assert_array_equal(r.outputs[0], want)


def test_batched_matmul_is_refused_clearly():
    g = th.program(lambda A, B: A @ B).trace(A=((2, 3, 4), "float64"), B=((4, 2), "float64"))
    with pytest.raises(SpecError, match="2-D operands only"):
        emulate(g, {"A": np.ones((2, 3, 4)), "B": np.ones((4, 2))},
                unit("a100", input="bf16", output="fp32"))


SPECS = {
    "gcn2": (lambda A, X, W: th.relu(A @ (th.relu(A @ (X @ W)) @ W.T)), True),
    "residual": (lambda A, X, W: (A @ X) * 0.5 + X - th.abs(A @ (X @ W) @ W.T), True),
    "dense chain": (lambda A, X, W: -(X.T @ (X @ W)), False),
}


@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize("unit_name,fin", [("h100", "bf16"), ("v100", "fp16"),
                                           ("ada", "e4m3")])
@pytest.mark.parametrize("seed", [0, 1])
def test_certified_bound_holds_and_is_tighter(name, unit_name, fin, seed):
    fn, sparse_in = SPECS[name]
    rng = np.random.default_rng(seed)
    n, f = 60, 8
    A = sp.random_array((n, n), density=0.08, format="csr", rng=rng)
    A.data = rng.standard_normal(A.nnz)
    X = rng.standard_normal((n, f)) * (100 if seed else 1)
    W = rng.standard_normal((f, f)) / 3
    inputs = {"A": A if sparse_in else A.toarray(), "X": X, "W": W}
    g = th.program(fn).trace(**inputs)
    r = emulate(g, inputs, unit(unit_name, input=fin, output="fp32"))
    assert r.observed[0] <= r.certified[0] <= r.bounds[0]
    assert r.certified[0] < np.inf


def test_ops_without_a_rule_give_an_infinite_certified_bound():
    g = th.program(lambda A, X: th.exp(A @ X)).trace(A=((4, 8), "float64"), X=((8, 2), "float64"))
    rng = np.random.default_rng(0)
    r = emulate(g, {"A": rng.random((4, 8)), "X": rng.random((8, 2))},
                unit("a100", input="bf16", output="fp32"))
    assert r.certified[0] == np.inf


# -- the specialized plan's own kernels on the unit ------------------------------------------
def _block_graph(n_blocks: int = 4, bs: int = 128, seed: int = 0) -> sp.csr_array:
    """Dense-ish diagonal blocks (the engine gathers them into panels) plus a sparse graph."""
    rng = np.random.default_rng(seed)
    B = sp.block_diag([sp.random_array((bs, bs), density=0.9, rng=rng)
                       for _ in range(n_blocks)], format="csr")
    return sp.csr_array(B + th.rmat(int(np.log2(n_blocks * bs)), edge_factor=2, seed=1,
                                    symmetric=True))


@pytest.fixture(scope="module")
def gcn_plan():
    gcn = th.program(lambda A, X, W: th.relu(A @ (X @ W)))
    A = _block_graph()
    rng = np.random.default_rng(3)
    X, W = rng.standard_normal((A.shape[0], 64)), rng.standard_normal((64, 64)) / 8
    inputs = {"A": A, "X": X, "W": W}
    return gcn.specialize(**inputs), inputs


@pytest.mark.parametrize("name,fin", [("v100", "fp16"), ("a100", "bf16")])
def test_plan_panels_aligned_to_the_unit_give_the_same_bits(gcn_plan, name, fin):
    # the blocks are 8 columns wide; with fma 4 or 8 a gathered panel's chunks are the
    # original chunks minus all-zero ones, which the unit skips exactly
    plan, inputs = gcn_plan
    u = unit(name, input=fin, output="fp32")
    assert 8 % u.model.fma == 0
    assert plan.propagation.forward[plan.graph.inputs[0]].block[1] % u.model.fma == 0
    r = emulate(plan.graph, inputs, u, plan=plan)
    assert r.kernels.get("panel_gemm", 0) > 0 and r.kernels.get("spmm_csr", 0) > 0
    assert r.kernels["gemm"] == 1
    np.testing.assert_array_equal(r.outputs[0], emulate(plan.graph, inputs, u).outputs[0])
    assert r.within_bounds()


def test_plan_panels_not_aligned_differ_only_on_panel_rows_and_stay_within_bound(gcn_plan):
    plan, inputs = gcn_plan
    u = unit("h100", input="bf16", output="fp32")  # fma 16: panels re-chunk the terms
    r = emulate(plan.graph, inputs, u, plan=plan)
    r0 = emulate(plan.graph, inputs, u)
    assert r.within_bounds() and r0.within_bounds()
    panel_rows = np.zeros(inputs["A"].shape[0], dtype=bool)
    for t in plan.taskgraph.tasks.values():
        for s in getattr(t.fn, "segs", ()):
            if s.form == "panel":
                panel_rows[s.r0:s.r1] = True
    assert panel_rows.any()
    diff = np.any(r.outputs[0] != r0.outputs[0], axis=1)
    assert diff.any() and not (diff & ~panel_rows).any()
    # each panel row is a unit gemm over the gathered columns, checked directly
    seg = next(s for t in plan.taskgraph.tasks.values() for s in getattr(t.fn, "segs", ())
               if s.form == "panel")
    A = fround(inputs["A"].toarray(), "bf16", saturation="finite")
    H = fround(_xw_on_unit(u, inputs), "bf16", saturation="finite")
    want = u.matmul(A[seg.r0:seg.r1][:, seg.cols], H[seg.cols])
    np.testing.assert_array_equal(r.outputs[0][seg.r0:seg.r1], np.maximum(want, 0))


def _xw_on_unit(u, inputs):
    X = fround(inputs["X"], "bf16", saturation="finite")
    W = fround(inputs["W"], "bf16", saturation="finite")
    return fround(u.matmul(X, W), "fp32", saturation="finite")


def test_plan_sddmm_masked_spgemm_and_spmv_run_on_the_unit():
    u = unit("h100", input="bf16", output="fp32")
    rng = np.random.default_rng(5)
    S = th.rmat(8, edge_factor=4, seed=2, symmetric=True)
    n = S.shape[0]
    X, Y = rng.standard_normal((n, 40)), rng.standard_normal((n, 40))
    cases = [
        (th.program(lambda S, X, Y: (X @ Y.T) * S), {"S": S, "X": X, "Y": Y}, "sddmm"),
        (th.program(lambda L: (L @ L) * L), {"L": sp.csr_array(sp.tril(S, -1))},
         "masked_spgemm"),
        (th.program(lambda A, x: A @ x), {"A": S, "x": X[:, 0]}, "spmv"),
    ]
    for prog, inputs, kernel in cases:
        plan = prog.specialize(**inputs)
        r = emulate(plan.graph, inputs, u, plan=plan)
        assert r.kernels == {kernel: 1}
        assert r.within_bounds() and r.certified[0] < np.inf
        # dense rows have no all-zero chunk, a CSR row's are skipped exactly: same bits
        np.testing.assert_array_equal(r.outputs[0], emulate(plan.graph, inputs, u).outputs[0])


def test_plan_of_other_patterns_or_graph_is_refused(gcn_plan):
    plan, inputs = gcn_plan
    u = unit("h100", input="bf16", output="fp32")
    other = dict(inputs, A=sp.csr_array(sp.eye_array(inputs["A"].shape[0])))
    with pytest.raises(SpecError, match="patterns the plan was specialized for"):
        emulate(plan.graph, other, u, plan=plan)
    g = th.program(lambda A, X, W: A @ (X @ W)).trace(**inputs)
    with pytest.raises(SpecError, match="another graph"):
        emulate(g, inputs, u, plan=plan)

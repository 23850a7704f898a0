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

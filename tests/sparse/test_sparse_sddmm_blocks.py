"""SDDMM on block patterns: dense tiles by BLAS, the rest by dot products, against the
dense reference (values and structure)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import thrifty as th
from thrifty.runtime.sparse_run import specialize
from thrifty.sparse.cost import CostModel
from thrifty.sparse.sddmm import BlockSddmm, plan_blocks

PANELS = CostModel(min_task_seconds=1e-7, parallel_seconds=0.0)
SDDMM = th.program(lambda X, Y, S: (X @ Y.T) * S)


def _block_pattern(n: int, m: int, bs: int, per_row: int, scatter: float,
                   rng: np.random.Generator) -> sp.csr_array:
    D = np.zeros((n, m))
    for i in range(0, n, bs):
        for j in rng.choice(max(1, -(-m // bs)), min(per_row, -(-m // bs)), replace=False):
            D[i:i + bs, j * bs:(j + 1) * bs] = 1
    D[rng.random((n, m)) < scatter] = 1
    D[rng.random(n) < 0.2] = 0  # empty rows
    S = sp.csr_array(D * rng.integers(1, 4, (n, m)))
    return S


def _run(S: sp.csr_array, d: int, dtype: str, cost, rng) -> None:
    X = rng.integers(-2, 3, (S.shape[0], d)).astype(dtype)
    Y = rng.integers(-2, 3, (S.shape[1], d)).astype(dtype)
    S = S.astype(dtype)
    tr = SDDMM.traced(X=X, Y=Y, S=S)
    plan = specialize(tr.graph, {"X": X, "Y": Y, "S": S}, cost=cost)
    want = (X @ Y.T) * S.toarray()
    for scheduler in (None, "sync"):
        got = plan.run({"X": X, "Y": Y, "S": S}, scheduler=scheduler)
        dense = got.toarray() if sp.issparse(got) else got
        np.testing.assert_array_equal(dense, want)
        if sp.issparse(got):  # structure: S's pattern
            np.testing.assert_array_equal(got.indptr, S.indptr)
            np.testing.assert_array_equal(got.indices, S.indices)
    return plan


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("cost", [None, PANELS], ids=["default", "panels"])
def test_block_pattern_runs_tiles_and_equals_dense(dtype, cost):
    rng = np.random.default_rng(0)
    S = _block_pattern(1000, 900, 32, 3, 0.001, rng)  # edges: not multiples of the tile
    plan = _run(S, 48, dtype, cost, rng)
    assert plan.report()["kernels"].get("sddmm_blocks", 0) >= 1


def test_scattered_pattern_keeps_dot_products():
    rng = np.random.default_rng(1)
    S = sp.csr_array(sp.random_array((2000, 2000), density=0.002, rng=rng, format="csr"))
    assert plan_blocks(S, 64, CostModel()) is None
    plan = _run(S, 16, "float64", None, rng)
    assert "sddmm_blocks" not in plan.report()["kernels"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 150), m=st.integers(1, 150), bs=st.sampled_from([8, 16, 24, 40]),
       per_row=st.integers(1, 4), scatter=st.floats(0, 0.05), d=st.integers(1, 70),
       dtype=st.sampled_from(["float32", "float64"]), seed=st.integers(0, 2**16))
def test_random_block_patterns_equal_dense(n, m, bs, per_row, scatter, d, dtype, seed):
    rng = np.random.default_rng(seed)
    _run(_block_pattern(n, m, bs, per_row, scatter, rng), d, dtype, PANELS, rng)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_tile_kernel_never_reads_the_output_it_writes(dtype):
    """The output buffer is uninitialised (pooled or ``np.empty``): filled with NaN and Inf
    beforehand, the tiles and the dot products still give the exact product."""
    rng = np.random.default_rng(3)
    S = _block_pattern(200, 180, 32, 2, 0.01, rng)
    bp = plan_blocks(S, 16, CostModel())
    assert bp is not None and len(bp.rest_pos) > 0  # both paths run
    X = rng.integers(-2, 3, (200, 16)).astype(dtype)
    Y = rng.integers(-2, 3, (180, 16)).astype(dtype)
    out = np.full(S.nnz, np.nan, dtype=dtype)
    out[::2] = np.inf
    got = BlockSddmm(0, 200, bp, dtype)(out, X, Y.T)
    rows = np.repeat(np.arange(200), np.diff(S.indptr))
    np.testing.assert_array_equal(got, (X @ Y.T)[rows, S.indices])

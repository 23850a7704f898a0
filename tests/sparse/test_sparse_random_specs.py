"""Hypothesis-generated specs: chains of matmul, add, sub, mul, where, relu, einsum and
transposes over random sparse and dense inputs, against the dense reference.

Inputs hold small integers (in float64), so every result is exact and must match the
reference exactly, structure included.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import thrifty as th
from thrifty.runtime.reference import evaluate
from thrifty.testing import to_dense

OPS = ["matmul", "add", "sub", "mul", "where", "relu", "einsum", "transpose"]


def _apply(op: str, a, b, c):
    if op == "matmul":
        return a @ b
    if op == "add":
        return a + b
    if op == "sub":
        return a - b
    if op == "mul":
        return a * b
    if op == "where":
        return th.where(a, b, c)
    if op == "relu":
        return th.relu(a)
    if op == "einsum":
        return th.einsum("ij,kj->ik", a, b)
    return a.T


spec_steps = st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 99), st.integers(0, 99),
                                st.integers(0, 99)), min_size=1, max_size=6)


def _program(steps):
    def spec(S1, S2, D):
        pool = [S1, S2, D]
        for op, i, j, k in steps:
            n = len(pool)
            pool.append(_apply(op, pool[i % n], pool[j % n], pool[k % n]))
        return pool[-1]

    return th.program(spec)


def _sparse(n: int, density: float, rng: np.random.Generator) -> sp.csr_array:
    A = sp.random_array((n, n), density=density, format="csr", rng=rng)
    A.data = rng.integers(-3, 4, A.nnz).astype(np.float64)  # explicit zeros included
    return A


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 40), st.floats(0.0, 0.3), st.floats(0.0, 0.3), spec_steps,
       st.integers(0, 2**32 - 1))
def test_random_spec_matches_dense_reference(n, d1, d2, steps, seed):
    rng = np.random.default_rng(seed)
    inputs = {"S1": _sparse(n, d1, rng), "S2": _sparse(n, d2, rng),
              "D": rng.integers(-2, 3, (n, n)).astype(np.float64)}
    prog = _program(steps)
    expected = evaluate(prog.trace(**inputs), inputs)[0]
    plan = prog.specialize(**inputs)
    for scheduler in (None, "sync"):
        got = plan.run(inputs, scheduler=scheduler)
        assert got.shape == expected.shape
        np.testing.assert_array_equal(to_dense(got), expected)
        # where the propagated pattern says zero, the reference is zero too
        out = plan.propagation.effective[prog.trace(**inputs).outputs[0]]
        if not out.is_dense and out.elements is not None:
            assert not np.any(expected[~out.elements.toarray()])

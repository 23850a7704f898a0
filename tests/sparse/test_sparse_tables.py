"""The sparse engine's tables: every op has a lowering and both sparsity rules, every task
names a registered kernel whose callable is what the registry builds from its attrs."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import thrifty as th
from thrifty import runtime
from thrifty.front.matrices import poisson2d
from thrifty.graph.ops import OPS
from thrifty.sparse import registry
from thrifty.sparse.lower import LOWERINGS
from thrifty.sparse.propagate import BACKWARD_RULES, FORWARD_RULES
from thrifty.sparse.specialize import specialize


def test_every_op_has_a_lowering_and_both_sparsity_rules():
    assert set(OPS) <= set(LOWERINGS), set(OPS) - set(LOWERINGS)
    assert set(OPS) <= set(FORWARD_RULES), set(OPS) - set(FORWARD_RULES)
    assert set(OPS) <= set(BACKWARD_RULES), set(OPS) - set(BACKWARD_RULES)
    for op, entry in LOWERINGS.items():
        assert entry.dense_reason is None or len(entry.dense_reason) > 20, op


def _programs():
    A = poisson2d(30)
    n = A.shape[0]
    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((n, 8)), rng.standard_normal((n, 8))
    L = sp.csr_array(sp.tril(A, -1))
    full = sp.csr_array(np.ones((n // 10, n // 10)))
    return [
        (lambda A, X, W: th.relu(A @ (X @ W)), {"A": A, "X": X, "W": rng.standard_normal((8, 4))}),
        (lambda A, x: A @ x, {"A": A, "x": rng.standard_normal(n)}),
        (lambda X, Y, S: (X @ Y.T) * S, {"X": X, "Y": Y, "S": A}),
        (lambda L: (L @ L) * L, {"L": L}),
        (lambda L: L @ L, {"L": L}),
        (lambda Q, K, V, S: th.softmax(Q @ K.T, mask=S) @ V, {"Q": X, "K": Y, "V": X, "S": A}),
        (lambda A, B: th.exp(A * 2.0) + A - B.sum(axis=0, keepdims=True), {"A": A, "B": A}),
        (lambda F, X: F @ X, {"F": full, "X": rng.standard_normal((n // 10, 3))}),
        (lambda A, X: th.einsum("ij,kj->ik", A, X).T, {"A": A, "X": X.T.copy()}),
        (lambda A, X: A @ X,  # a dtype without compiled kernels: the dense matmul
         {"A": sp.csr_array(A, dtype=np.int16), "X": np.round(X).astype(np.int16)}),
    ]


@pytest.mark.parametrize("k", range(10))
def test_every_task_names_a_registered_kernel_built_from_its_attrs(k):
    fn, inputs = _programs()[k]
    prog = th.program(fn)
    tr = prog.traced(**inputs)
    plan = specialize(tr.graph, inputs, structure=tr.structure)
    for t in plan.taskgraph.tasks.values():
        assert t.kernel in registry.KERNELS, t.kernel
        spec = registry.KERNELS[t.kernel]
        assert set(spec.params) <= set(t.attrs), (t.kernel, set(t.attrs))
        assert isinstance(t.attrs["node"], int)
        rebuilt = registry.build(t.kernel, t.attrs)
        assert type(rebuilt) is type(t.fn) or rebuilt == t.fn, t.kernel
    # and the plan the registry built computes the spec
    got = runtime.specialize(tr.graph, inputs, structure=tr.structure).run(inputs, "sync")
    want = runtime.evaluate(tr.graph, inputs)[0]
    got = got.toarray() if sp.issparse(got) else got
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_unknown_kernels_and_missing_attrs_are_refused():
    with pytest.raises(th.SpecError, match="unknown kernel 'spmv2'; registered"):
        registry.build("spmv2", {})
    with pytest.raises(th.SpecError, match="needs attrs"):
        registry.build("spmv", {"dtype": "float64"})


def test_input_buffer_names_the_buffers_a_memory_plan_feeds():
    A = poisson2d(10)
    x = np.ones(A.shape[0])
    plan = th.program(lambda A, x: A @ x).specialize(A=A, x=x)
    feed = plan.feed({"A": A, "x": x})
    for name in ("A", "x"):
        buf = plan.input_buffer(name)
        assert buf in plan.taskgraph.inputs and buf in feed
    assert feed[plan.input_buffer("x")] is x
    with pytest.raises(th.SpecError, match="no input 'y'; the plan's inputs are"):
        plan.input_buffer("y")


def test_the_engines_plan_is_data_and_says_how_to_run_it():
    A = poisson2d(10)
    x = np.ones(A.shape[0])
    g = th.program(lambda A, x: A @ x).trace(A=A, x=x)
    data = specialize(g, {"A": A, "x": x})
    with pytest.raises(th.SpecError, match="thrifty.runtime.specialize"):
        data(A=A, x=x)
    runnable = runtime.RunnablePlan.of(data)
    np.testing.assert_allclose(runnable(A=A, x=x), A @ x, rtol=1e-12)
    assert runnable.taskgraph is data.taskgraph

"""Tracing: trace -> run equals direct numpy on random programs; error messages; caching."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import thrifty as th
from thrifty.errors import GraphError, ShapeError, SpecError
from thrifty.graph.ir import Graph, Node, TensorType
from thrifty.graph.verify import verify


def test_gcn_readme_example():
    @th.program
    def gcn(A, X, W):
        return th.relu(A @ (X @ W))

    rng = np.random.default_rng(1)
    A = sp.random(30, 30, density=0.1, format="csr", random_state=1)
    X, W = rng.standard_normal((30, 8)), rng.standard_normal((8, 4))
    Y = gcn(A=A, X=X, W=W)
    np.testing.assert_allclose(Y, np.maximum(A.toarray() @ (X @ W), 0), rtol=1e-12)
    g = gcn.trace(A=A, X=X, W=W)
    assert [n.op for n in g] == ["input", "input", "input", "matmul", "matmul", "relu"]
    assert g.input_names == ("A", "X", "W")
    g2 = gcn.trace(A=((30, 30), "float64"), X=((30, 8), "float64"), W=((8, 4), "float64"))
    assert g2 is g  # cached per input types
    verify(g)


def test_shape_error_names_op_shapes_and_user_line():
    @th.program
    def bad(A, X):
        return A @ X  # the line to be named

    with pytest.raises(ShapeError) as e:
        bad.trace(A=((3, 4), "float64"), X=((5, 2), "float64"))
    msg = str(e.value)
    assert "matmul" in msg and "(3, 4)" in msg and "(5, 2)" in msg
    assert "test_trace.py" in msg and "in bad" in msg


def test_multiple_outputs_keep_structure():
    f = th.program(lambda x: (x + 1, x * 2))
    a, b = f(np.ones(3))
    np.testing.assert_array_equal(a, 2)
    np.testing.assert_array_equal(b, 2)
    f2 = th.program(lambda x: [x.sum()])
    assert isinstance(f2(np.ones(3)), list)


def test_numpy_array_on_the_left_defers_to_tensor():
    C = np.arange(6.0).reshape(2, 3)
    f = th.program(lambda x: C @ x + C.sum())
    x = np.ones((3, 2))
    np.testing.assert_array_equal(f(x), C @ x + C.sum())


def test_functions_work_eagerly_on_arrays():
    x = np.array([-1.0, 2.0])
    np.testing.assert_array_equal(th.relu(x), [0.0, 2.0])
    np.testing.assert_allclose(th.softmax(x), np.exp(x) / np.exp(x).sum())


def test_bad_arguments():
    f = th.program(lambda a, b: a + b)
    with pytest.raises(SpecError, match="missing a required argument.*inputs are"):
        f(np.ones(2))
    with pytest.raises(SpecError, match="is not a tensor"):
        f.trace(a="hello", b=np.ones(2))
    with pytest.raises(SpecError, match="not supported"):
        th.program(lambda *xs: xs[0])
    with pytest.raises(SpecError, match="no truth value"):
        th.program(lambda a: a if a else a).trace(a=np.ones(2))


def test_reference_checks_input_types():
    from thrifty.runtime.reference import evaluate

    g = th.program(lambda a: a + 1).trace(a=((2,), "float64"))
    with pytest.raises(ShapeError, match="input 'a' has shape"):
        evaluate(g, {"a": np.ones(3)})
    with pytest.raises(SpecError, match="missing input"):
        evaluate(g, {})
    with pytest.raises(SpecError, match="dtype float32"):
        evaluate(g, {"a": np.ones(2, np.float32)})


def test_graph_rejects_out_of_order_nodes_and_verifier_checks_types():
    t = TensorType((2,), "float64")
    with pytest.raises(GraphError, match="not defined before"):
        Graph([Node(0, "neg", (1,), {}, t), Node(1, "input", (), {"name": "x"}, t, "x")], (0,))
    g = Graph([Node(0, "input", (), {"name": "x"}, t, "x"),
               Node(1, "sum", (0,), {"axis": (0,), "keepdims": False}, t)], (1,))
    with pytest.raises(GraphError, match="differs from the inferred type"):
        verify(g)


# -- random programs: trace -> reference equals the same code run on numpy arrays -----------
UNARY = [("relu", th.relu, lambda x: np.maximum(x, 0)), ("tanh", th.tanh, np.tanh),
         ("neg", lambda x: -x, np.negative), ("abs", th.abs, np.abs),
         ("exp", lambda x: th.exp(x * 0.1), lambda x: np.exp(x * 0.1))]


@st.composite
def programs(draw):
    """A random chain of ops over square n x n operands, as (steps, n, number of inputs)."""
    n = draw(st.integers(1, 6))
    n_in = draw(st.integers(1, 3))
    steps = draw(st.lists(st.tuples(st.sampled_from(["matmul", "add", "mul", "where", "unary",
                                                     "einsum", "T", "sum"]),
                                    st.integers(0, 10), st.integers(0, 10),
                                    st.integers(0, len(UNARY) - 1)), min_size=1, max_size=8))
    return steps, n, n_in


def apply_steps(steps, xs, mod):
    vals = list(xs)
    for op, i, j, u in steps:
        a, b = vals[i % len(vals)], vals[j % len(vals)]
        if op == "matmul":
            r = a @ b
        elif op == "add":
            r = a + b
        elif op == "mul":
            r = a * b
        elif op == "where":
            r = mod.where(a > 0, a, b)
        elif op == "unary":
            r = UNARY[u][1](a) if mod is th else UNARY[u][2](a)
        elif op == "einsum":
            r = mod.einsum("ij,kj->ik", a, b)
        elif op == "T":
            r = a.T
        else:
            r = mod.sum(a, axis=1, keepdims=True) + b
        vals.append(r)
    return vals[-1]


@settings(max_examples=60, deadline=None)
@given(programs(), st.integers(0, 2**31 - 1))
def test_random_programs_match_numpy(prog, seed):
    steps, n, n_in = prog
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal((n, n)) for _ in range(n_in)]
    names = [f"x{i}" for i in range(n_in)]
    f = th.program(eval(f"lambda {', '.join(names)}: run(({', '.join(names)},))",
                        {"run": lambda t: apply_steps(steps, t, th)}))
    got = f(*xs)
    want = apply_steps(steps, xs, np)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
    verify(f.trace(*xs))

"""Matmul chains with a sparse operand: the association the cost model prices lower, the
fused ``(A @ X) @ W`` row-panel kernel, and results equal to the dense reference.

Values are small integers (exact in float32 and float64), so every result must equal the
reference exactly, whichever association ran.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import thrifty as th
from thrifty.runtime.sparse_run import specialize
from thrifty.sparse.cost import CostModel

PANELS = CostModel(min_task_seconds=1e-7, parallel_seconds=0.0)  # row tasks on threads


def _int_csr(n: int, m: int, density: float, rng: np.random.Generator,
             empty_rows: float = 0.0, dtype: str = "float64") -> sp.csr_array:
    A = sp.random_array((n, m), density=density, format="csr", rng=rng,
                        data_sampler=lambda size: rng.integers(-3, 4, size).astype(float))
    if empty_rows:
        keep = np.repeat(rng.random(n) >= empty_rows, np.diff(A.indptr))
        A.data[~keep] = 0
    A.eliminate_zeros()
    return sp.csr_array(A).astype(dtype)


def _ints(shape: tuple[int, ...], rng: np.random.Generator, dtype: str) -> np.ndarray:
    return rng.integers(-3, 4, shape).astype(dtype)


GCN = th.program(lambda A, X, W: th.relu(A @ (X @ W)))
GCN_LEFT = th.program(lambda A, X, W: th.relu((A @ X) @ W))
CHAIN = th.program(lambda A, X, W: A @ (X @ W))
CHAIN_LEFT = th.program(lambda A, X, W: (A @ X) @ W)
GCN2 = th.program(lambda A, X, W, W2: th.relu(A @ (th.relu(A @ (X @ W)) @ W2)))


def _plan(prog, inputs, cost=None):
    tr = prog.traced(**inputs)
    return specialize(tr.graph, inputs, structure=tr.structure, cost=cost)


@pytest.mark.parametrize("prog", [CHAIN, CHAIN_LEFT], ids=["right", "left"])
@pytest.mark.parametrize("f_in,f_out", [(256, 4), (4, 256), (64, 64), (3, 2)])
def test_the_association_run_is_the_one_the_model_prices_lower(prog, f_in, f_out):
    rng = np.random.default_rng(f_in * 1000 + f_out)
    A = _int_csr(600, 500, 0.02, rng)
    inputs = {"A": A, "X": _ints((500, f_in), rng, "float64"),
              "W": _ints((f_in, f_out), rng, "float64")}
    plan = _plan(prog, inputs)
    left, right = CostModel().chain_seconds(A.nnz, 600, 500, f_in, f_out)
    kernels = plan.report()["kernels"]
    if left <= right:
        assert "spmm_chain" in kernels and "gemm" not in kernels
    else:
        assert "spmm_chain" not in kernels and kernels["gemm"] == 1
    # the model follows the widths: the SpMM on the narrow side
    if f_in >= 16 * f_out:
        assert left > right
    if f_out >= 16 * f_in:
        assert left < right
    np.testing.assert_array_equal(plan(**inputs), A.toarray() @ (inputs["X"] @ inputs["W"]))


def test_chains_off_lowers_each_product_as_written():
    rng = np.random.default_rng(1)
    A = _int_csr(300, 300, 0.03, rng)
    inputs = {"A": A, "X": _ints((300, 8), rng, "float64"), "W": _ints((8, 64), rng,
                                                                         "float64")}
    on, off = _plan(GCN, inputs), _plan(GCN, inputs, CostModel(chains=False))
    assert "spmm_chain" in on.report()["kernels"]
    assert "spmm_chain" not in off.report()["kernels"]
    np.testing.assert_array_equal(on(**inputs), off(**inputs))


@pytest.mark.parametrize("cost", [None, PANELS], ids=["default", "panels"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("prog", [GCN, GCN_LEFT], ids=["right", "left"])
def test_fused_gcn_layer_equals_dense_reference(prog, dtype, cost):
    rng = np.random.default_rng(7)
    # dense diagonal blocks (gathered panels) beside a sparse scatter, 30% empty rows
    B = sp.block_diag([np.ones((64, 64))] * 4, format="csr")
    A = sp.csr_array((B + _int_csr(256, 256, 0.02, rng, 0.3)).astype(dtype))
    inputs = {"A": A, "X": _ints((256, 48), rng, dtype), "W": _ints((48, 48), rng, dtype)}
    plan = _plan(prog, inputs, cost)
    assert plan.report()["kernels"].get("spmm_chain", 0) >= 1
    want = np.maximum(A.toarray() @ inputs["X"] @ inputs["W"], 0)
    for _ in range(2):  # the second run may write into the first run's output
        got = plan(**inputs)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, want)


def test_two_layer_gcn_fuses_both_layers():
    rng = np.random.default_rng(3)
    A = _int_csr(700, 700, 0.01, rng, 0.2)
    inputs = {"A": A, "X": _ints((700, 32), rng, "float64"),
              "W": _ints((32, 32), rng, "float64"), "W2": _ints((32, 32), rng, "float64")}
    plan = _plan(GCN2, inputs, PANELS)
    assert plan.report()["kernels"]["fused_relu"] == 2
    assert "gemm" not in plan.report()["kernels"]
    D = A.toarray()
    want = np.maximum(D @ (np.maximum(D @ (inputs["X"] @ inputs["W"]), 0) @ inputs["W2"]), 0)
    np.testing.assert_array_equal(plan(**inputs), want)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 60), m=st.integers(1, 60), f_in=st.integers(1, 40),
       f_out=st.integers(1, 40), density=st.floats(0.0, 0.5), empty=st.floats(0.0, 0.9),
       left=st.booleans(), post=st.sampled_from([None, "relu", "tanh"]),
       dtype=st.sampled_from(["float32", "float64"]), seed=st.integers(0, 2**16))
def test_random_chains_equal_dense_reference(n, m, f_in, f_out, density, empty, left, post,
                                            dtype, seed):
    rng = np.random.default_rng(seed)
    A = _int_csr(n, m, density, rng, empty, dtype)
    X, W = _ints((m, f_in), rng, dtype), _ints((f_in, f_out), rng, dtype)

    def spec(A, X, W):
        y = (A @ X) @ W if left else A @ (X @ W)
        return y if post is None else getattr(th, post)(y)

    plan = _plan(th.program(spec), {"A": A, "X": X, "W": W}, PANELS)
    want = A.toarray() @ X @ W
    if post is not None:
        want = getattr(np, {"relu": "maximum", "tanh": "tanh"}[post])(
            *((want, 0) if post == "relu" else (want,)))
    got = plan(A=A, X=X, W=W)
    assert got.dtype == dtype and got.shape == (n, f_out)
    if post == "tanh":
        np.testing.assert_allclose(got, want, rtol=2e-6 if dtype == "float32" else 1e-14)
    else:
        np.testing.assert_array_equal(got, want)


def test_as_written_lowers_each_product_as_the_spec_wrote_it():
    from thrifty.sparse.fused import as_written

    rng = np.random.default_rng(4)
    A = _int_csr(200, 200, 0.05, rng)
    inputs = {"A": A, "X": _ints((200, 8), rng, "float64"), "W": _ints((8, 32), rng,
                                                                         "float64")}
    plan = _plan(GCN, inputs)
    assert any(t.attrs.get("chain") for t in plan.taskgraph.tasks.values())
    plain = as_written(plan, inputs)
    assert not any(t.attrs.get("chain") for t in plain.taskgraph.tasks.values())
    assert plain.report()["kernels"]["gemm"] == 1
    assert as_written(plain, inputs) is plain


def _relu(v):
    return np.maximum(v, 0)


@pytest.mark.parametrize("cost", [None, PANELS], ids=["default", "panels"])
@pytest.mark.parametrize("widths", [(32, 32, 32), (64, 64, 8), (16, 64, 4), (64, 8, 64),
                                    (5, 3, 2), (8, 48, 48)])
def test_two_layer_gcn_association_across_layers(widths, cost):
    """The next layer's ``X @ W2`` runs in the first layer's panels exactly when the cost
    model prices ``A @ (H @ W2)`` with ``H`` made in cache below ``(A @ H) @ W2``; the
    result equals the dense reference either way."""
    f0, f1, f2 = widths
    rng = np.random.default_rng(f0 * 10_000 + f1 * 100 + f2)
    A = _int_csr(500, 500, 0.02, rng, 0.2)
    inputs = {"A": A, "X": _ints((500, f0), rng, "float64"),
              "W": _ints((f0, f1), rng, "float64"), "W2": _ints((f1, f2), rng, "float64")}
    plan = _plan(GCN2, inputs, cost)
    cm = cost or CostModel()
    l1, r1 = cm.chain_seconds(A.nnz, 500, 500, f0, f1)  # the first layer: fused if l1 <= r1
    pays = cm.across_pays(A.nnz, 500, 500, f1, f2, panelled=l1 <= r1)
    left, right = cm.chain_seconds(A.nnz, 500, 500, f1, f2, x_in_cache=True)
    kernels = plan.report()["kernels"]
    across = [t for t in plan.taskgraph.tasks.values() if t.attrs.get("after")]
    if pays:
        assert kernels["fused_matmul"] == 1 and across
        # the second layer is a plain SpMM of the first layer's output
        assert all(t.kernel in ("spmm_csr", "spmm_panel") for t in plan.taskgraph.tasks.values()
                   if t.attrs.get("node") == max(t2.attrs["node"] for t2 in
                                                 plan.taskgraph.tasks.values())
                   and t.kernel not in ("alloc", "assemble"))
    else:
        assert "fused_matmul" not in kernels and not across
    if f2 * 4 <= f1:  # the next layer's SpMM on the narrow side
        assert right < left
    D = A.toarray()
    want = _relu(D @ (_relu(D @ (inputs["X"] @ inputs["W"])) @ inputs["W2"]))
    for _ in range(2):
        np.testing.assert_array_equal(plan(**inputs), want)


def test_equal_widths_run_the_next_layers_gemm_in_cache():
    """At equal widths the fused ``(A @ H) @ W2`` pays its calls per panel, so the second
    layer's gemm runs in the first layer's panels (``CostModel.panel_call``)."""
    cm = CostModel()
    left, right = cm.chain_seconds(10**6, 10**5, 10**5, 64, 64, x_in_cache=True)
    assert right < left
    left0, right0 = CostModel(panel_call=0.0).chain_seconds(10**6, 10**5, 10**5, 64, 64,
                                                            x_in_cache=True)
    assert left0 == pytest.approx(right0)


def test_gemm_after_a_fused_layer_that_is_no_chain_runs_in_its_panels():
    """``relu(A @ X @ W) @ W2`` (an output, no sparse operand after it) with the layer a
    fused chain: the gemm by ``W2`` runs on each panel in cache; the layer's own output
    is never written."""
    rng = np.random.default_rng(11)
    A = _int_csr(300, 300, 0.05, rng, 0.3)
    left, right = PANELS.chain_seconds(A.nnz, 300, 300, 16, 24)
    assert left <= right  # the layer is a fused chain
    inputs = {"A": A, "X": _ints((300, 16), rng, "float64"),
              "W": _ints((16, 24), rng, "float64"), "W2": _ints((24, 5), rng, "float64")}
    prog = th.program(lambda A, X, W, W2: th.relu((A @ X) @ W) @ W2)
    plan = _plan(prog, inputs, PANELS)
    assert plan.report()["kernels"]["fused_matmul"] == 1
    w2 = plan.input_buffer("W2")
    readers = [t for t in plan.taskgraph.tasks.values() if w2 in t.reads]
    assert readers and all(t.kernel == "spmm_chain" and t.attrs["after"] for t in readers)
    want = _relu(A.toarray() @ inputs["X"] @ inputs["W"]) @ inputs["W2"]
    got = plan(**inputs)
    assert got.shape == (300, 5)
    np.testing.assert_array_equal(got, want)


def test_a_layer_output_read_twice_is_written():
    """``H`` read by ``H @ W2`` and by the result: no gemm fused into ``H``'s panels."""
    rng = np.random.default_rng(12)
    A = _int_csr(200, 200, 0.05, rng)
    inputs = {"A": A, "X": _ints((200, 8), rng, "float64"),
              "W": _ints((8, 8), rng, "float64"), "W2": _ints((8, 2), rng, "float64")}

    def spec(A, X, W, W2):
        H = th.relu(A @ (X @ W))
        return A @ (H @ W2), H

    prog = th.program(spec)
    plan = _plan(prog, inputs)
    assert "fused_matmul" not in plan.report()["kernels"]
    D = A.toarray()
    H = _relu(D @ inputs["X"] @ inputs["W"])
    got = plan(**inputs)
    np.testing.assert_array_equal(got[0], D @ (H @ inputs["W2"]))
    np.testing.assert_array_equal(got[1], H)


def test_as_written_undoes_the_fusion_across_layers():
    from thrifty.sparse.fused import as_written

    rng = np.random.default_rng(13)
    A = _int_csr(300, 300, 0.05, rng)
    inputs = {"A": A, "X": _ints((300, 64), rng, "float64"),
              "W": _ints((64, 64), rng, "float64"), "W2": _ints((64, 8), rng, "float64")}
    plan = _plan(GCN2, inputs)
    assert plan.report()["kernels"]["fused_matmul"] == 1
    plain = as_written(plan, inputs)
    assert "fused_matmul" not in plain.report()["kernels"]
    assert plain.report()["kernels"]["gemm"] == 2
    from thrifty.runtime.sparse_run import RunnablePlan

    np.testing.assert_array_equal(RunnablePlan.of(plain)(**inputs), plan(**inputs))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 50), widths=st.tuples(*[st.integers(1, 40)] * 4),
       density=st.floats(0.0, 0.5), empty=st.floats(0.0, 0.9), layers=st.integers(2, 3),
       left=st.booleans(), post=st.sampled_from(["relu", "tanh"]),
       dtype=st.sampled_from(["float32", "float64"]), panels=st.booleans(),
       seed=st.integers(0, 2**16))
@example(n=49, widths=(1, 1, 1, 1), density=0.2993803768472087, empty=0.0, layers=2,
         left=False, post="tanh", dtype="float32", panels=False, seed=0)  # float32 rounding
def test_random_deep_gcns_equal_dense_reference(n, widths, density, empty, layers, left,
                                                post, dtype, panels, seed):
    """GCNs of 2-3 layers with random widths and patterns, each layer written either way:
    equal to the dense reference (values, shape, dtype), whichever association and fusion
    across layers the cost model chose."""
    rng = np.random.default_rng(seed)
    A = _int_csr(n, n, density, rng, empty, dtype)
    X = _ints((n, widths[0]), rng, dtype)
    Ws = [_ints((widths[i], widths[i + 1]), rng, dtype) for i in range(layers)]
    act = getattr(th, post)

    def spec(A, X, *Ws):
        H = X
        for W in Ws:
            H = act((A @ H) @ W if left else A @ (H @ W))
        return H

    names = [f"W{i}" for i in range(layers)]
    if layers == 2:
        prog = th.program(lambda A, X, W0, W1: spec(A, X, W0, W1))
    else:
        prog = th.program(lambda A, X, W0, W1, W2: spec(A, X, W0, W1, W2))
    inputs = {"A": A, "X": X, **dict(zip(names, Ws))}
    plan = _plan(prog, inputs, PANELS if panels else None)
    got = plan(**inputs)
    assert got.dtype == dtype and got.shape == (n, widths[layers])
    D = A.toarray()
    if post == "relu":  # small integers: exact in any order of the sums
        want = X
        for W in Ws:
            want = np.maximum(D @ want @ W, 0)
        np.testing.assert_array_equal(got, want)
        return
    # tanh: against float64 from the same inputs, within a forward error bound per entry
    # (each layer's sums in any order and association: gamma * |D| @ |H| @ |W|, plus the
    # previous layer's error carried through; tanh is 1-Lipschitz)
    Dd = D.astype(np.float64)
    ref, err = X.astype(np.float64), np.zeros(X.shape)
    gamma = 2 * (n + max(widths) + 2) * float(np.finfo(dtype).eps)
    for W in Ws:
        Wd = W.astype(np.float64)
        err = np.abs(Dd) @ err @ np.abs(Wd) + gamma * (np.abs(Dd) @ np.abs(ref) @ np.abs(Wd)) \
            + float(np.finfo(dtype).eps)  # the rounding of tanh's own result
        ref = np.tanh(Dd @ ref @ Wd)
    assert np.all(np.abs(got.astype(np.float64) - ref) <= err)

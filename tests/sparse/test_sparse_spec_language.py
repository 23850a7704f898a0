"""The whole spec language on sparse operands: general einsums, ``sum``/``max`` over any
axis, softmax along either axis with and without a mask, ``where``, elementwise ops
broadcasting sparse against dense, transposes feeding products.

Every result is checked against the dense reference (:func:`thrifty.runtime.reference.
evaluate`) in values and in structure (a CSR result's shape; the reference is zero
wherever the propagated pattern says zero), and every plan is checked to run the op on the
stored entries (no ``dense`` kernel, which would densify the operand). On every matrix
of shared/data/matrices: against the dense reference where the matrix fits densely in
32 MB, against independent scipy/numpy oracles otherwise.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import thrifty as th
from thrifty.runtime.reference import evaluate
from thrifty.testing import require_shared_data, shared_matrix_index, to_dense


def _sparse(shape, density, rng, dtype="float64", empty_row=True):
    A = sp.random_array(shape, density=density, format="csr", rng=rng)
    A.data = rng.integers(-4, 4, A.nnz).astype(dtype)  # negative values, explicit zeros
    A = sp.csr_array(A, dtype=dtype)
    if empty_row and shape[0] > 1:  # an empty row and an empty column
        A = sp.csr_array(A.multiply(np.arange(shape[0])[:, None] != 1))
        if shape[1] > 1:
            A = sp.csr_array(A.multiply(np.arange(shape[1])[None, :] != shape[1] - 1))
    A.sort_indices()
    return sp.csr_array(A, dtype=dtype)


def assert_no_sparse_value_densified(plan, inputs) -> None:
    """Run the plan's tasks in order: no ``dense`` task (the op's reference on densified
    operands) is handed a sparse value."""
    vals = plan.feed(inputs)
    tasks = plan.taskgraph.tasks
    for tid in plan.taskgraph.order:
        t = tasks[tid]
        args = [vals[r] for r in t.reads]
        if t.kernel == "dense":
            assert not any(sp.issparse(a) for a in args), (t.id, t.attrs["op"])
        vals[t.writes[0]] = t.fn(*args)


def check(fn, inputs, rtol=1e-12, no_dense_kernel=True):
    """``fn`` specialized to ``inputs`` equals the dense reference, values and structure."""
    prog = th.program(fn)
    graph = prog.trace(**inputs)
    expected = evaluate(graph, inputs)
    plan = prog.specialize(**inputs)
    if no_dense_kernel:
        assert "dense" not in plan.report()["kernels"], plan.report()["kernels"]
    assert_no_sparse_value_densified(plan, inputs)
    for scheduler in (None, "sync"):
        got = plan.run(inputs, scheduler=scheduler)
        got = list(got) if isinstance(got, tuple | list) else [got]
        assert len(got) == len(expected)
        for g, e, o in zip(got, expected, graph.outputs):
            assert g.shape == e.shape
            assert np.dtype(g.dtype) == e.dtype, (g.dtype, e.dtype)
            scale = float(np.max(np.abs(e), initial=0.0)) if e.size else 0.0
            np.testing.assert_allclose(to_dense(g), e, rtol=rtol, atol=rtol * scale,
                                       equal_nan=True)
            pat = plan.propagation.effective[o]
            if sp.issparse(g):
                assert pat.elements is not None
            if not pat.is_dense and pat.elements is not None:
                assert not np.any(e[~pat.elements.toarray()])
    return plan


# -- one case per form -------------------------------------------------------------------
CASES = {
    "ij,j->i": (lambda A, x: th.einsum("ij,j->i", A, x), "Ax"),
    "ij,i->j": (lambda A, y: th.einsum("ij,i->j", A, y), "Ay"),
    "ij,ij->i": (lambda A, B: th.einsum("ij,ij->i", A, B), "AB"),
    "ij,ij->ij": (lambda A, B: th.einsum("ij,ij->ij", A, B), "AB"),
    "ij,ij->": (lambda A, D: th.einsum("ij,ij->", A, D), "AD"),
    "ii->": (lambda Q: th.einsum("ii->", Q), "Q"),
    "ii->i": (lambda Q: th.einsum("ii->i", Q), "Q"),
    "ij->ji": (lambda A: th.einsum("ij->ji", A), "A"),
    "ij,kl->ijkl": (lambda A, Q: th.einsum("ij,kl->ijkl", A, Q), "AQ"),
    "ij,kl->ik": (lambda A, Q: th.einsum("ij,kl->ik", A, Q), "AQ"),
    "batched ij,bjk->bik": (lambda A, X3: th.einsum("ij,bjk->bik", A, X3), "AX"),
    "batched bi,ij->bj": (lambda Y2, A: th.einsum("bi,ij->bj", Y2, A), "YA"),
    "ij,jk,k->i": (lambda A, Q, z: th.einsum("ij,jk,k->i", A, Q, z), "AQz"),
    "ij,i,j->": (lambda A, y, x: th.einsum("ij,i,j->", A, y, x), "Ayx"),
    "sum axis 0": (lambda A: A.sum(axis=0), "A"),
    "sum axis 1 keepdims": (lambda A: A.sum(axis=1, keepdims=True), "A"),
    "sum all": (lambda A: A.sum(), "A"),
    "max axis 0": (lambda A: A.max(axis=0), "A"),
    "max axis -1": (lambda A: A.max(axis=-1), "A"),
    "max all keepdims": (lambda A: A.max(axis=(0, 1), keepdims=True), "A"),
    "softmax axis 0": (lambda A: th.softmax(A, axis=0), "A"),
    "softmax axis 1": (lambda A: th.softmax(A, axis=1), "A"),
    "softmax axis 0 sparse mask": (lambda D, B: th.softmax(D, mask=B, axis=0), "DB"),
    "softmax axis 1 sparse mask, sparse x": (lambda A, B: th.softmax(A, mask=B, axis=1), "AB"),
    "softmax axis 0 dense mask": (lambda A, M: th.softmax(A, mask=M, axis=0), "AM"),
    "softmax needed on part of the mask": (
        lambda D, A, B: th.softmax(D, mask=A, axis=0) * B, "DAB"),
    "where sparse": (lambda A, B: th.where(A, B, A), "AB"),
    "where dense result": (lambda A, B, D: th.where(A, B, D), "ABD"),
    "add dense": (lambda A, D: A + D, "AD"),
    "mul row vector": (lambda A, x: A * x, "Ax"),
    "sub column vector": (lambda A, c: A - c, "Ac"),
    "exp": (lambda A: th.exp(A), "A"),
    "div by scalar": (lambda A: A / 3.0, "A"),
    "transpose into matvec": (lambda A, y: A.T @ y, "Ay"),
    "transpose into einsum": (lambda A, B: th.einsum("ij,jk->ik", A.T, B), "AB"),
    "identity transpose": (lambda A: th.transpose(A, (0, 1)), "A"),
}


def _inputs(letters, dtype, rng, m=9, n=7):
    pool = {
        "A": lambda: _sparse((m, n), 0.3, rng, dtype),
        "B": lambda: _sparse((m, n), 0.4, rng, dtype, empty_row=False),
        "Q": lambda: _sparse((n, n), 0.4, rng, dtype),
        "D": lambda: rng.integers(-3, 4, (m, n)).astype(dtype),
        "M": lambda: (rng.random((m, n)) < 0.6).astype(dtype),
        "x": lambda: rng.standard_normal(n).astype(dtype),
        "y": lambda: rng.standard_normal(m).astype(dtype),
        "z": lambda: rng.standard_normal(n).astype(dtype),
        "c": lambda: rng.standard_normal((m, 1)).astype(dtype),
        "X": lambda: rng.standard_normal((3, n, 4)).astype(dtype),
        "Y": lambda: rng.standard_normal((2, m)).astype(dtype),
    }
    names = {"A": "A", "B": "B", "Q": "Q", "D": "D", "M": "M", "x": "x", "y": "y", "z": "z",
             "c": "c", "X": "X3", "Y": "Y2"}
    return {names[c]: pool[c]() for c in letters}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", list(CASES))
def test_form_runs_on_stored_entries_and_matches_reference(case, dtype):
    fn, letters = CASES[case]
    rng = np.random.default_rng(abs(hash(case)) % 2**32)
    check(fn, _inputs(letters, dtype, rng), rtol=1e-12 if dtype == "float64" else 2e-6)


DTYPE_CASES = {
    "ij,ij->i": lambda A, B, x: th.einsum("ij,ij->i", A, B),
    "ij,j->i": lambda A, B, x: th.einsum("ij,j->i", A, x),
    "ij,ij->ij": lambda A, B, x: th.einsum("ij,ij->ij", A, B),
    "ij,kl->": lambda A, B, x: th.einsum("ij,kl->", A, B),
    "sum axis 0": lambda A, B, x: A.sum(axis=0),
    "max axis 1": lambda A, B, x: A.max(axis=1),
    "where": lambda A, B, x: th.where(A, B, x),
}


@pytest.mark.parametrize("dtype", ["bool", "int32", "int64", "complex128"])
@pytest.mark.parametrize("case", list(DTYPE_CASES))
def test_other_dtypes_match_the_reference_exactly(case, dtype):
    rng = np.random.default_rng(7)
    inputs = {"A": _sparse((6, 5), 0.4, rng, dtype), "B": _sparse((6, 5), 0.5, rng, dtype),
              "x": rng.integers(-3, 4, 5).astype(dtype)}
    check(DTYPE_CASES[case], inputs, rtol=0.0)


def test_every_op_is_lowered_sparse_and_names_its_remaining_dense_cases():
    from thrifty.graph.ops import OPS
    from thrifty.sparse.lower import LOWERINGS

    for op in OPS:
        entry = LOWERINGS[op]
        assert entry.dense_reason is None, op  # no op is a dense fallback any more
        if op not in ("input", "const"):
            assert entry.dense_cases and "dense" in entry.dense_cases, op


def test_max_counts_structural_zeros():
    A = sp.csr_array(np.array([[-1.0, 0, -2], [0, 0, 0], [-3.0, -4.0, -5.0], [2.0, 0, -1]]))
    prog = th.program(lambda A: (A.max(axis=1), A.max(axis=0), A.max()))
    r1, r0, r = prog.specialize(A=A)(A=A)
    # row 0 has an implicit zero, row 1 is empty, row 2 is fully stored and negative
    np.testing.assert_array_equal(r1, [0.0, 0.0, -3.0, 2.0])
    np.testing.assert_array_equal(r0, [2.0, 0.0, 0.0])
    assert float(r) == 2.0
    full = sp.csr_array(-np.ones((2, 2)))
    assert float(th.program(lambda A: A.max()).specialize(A=full)(A=full)) == -1.0


def test_an_operand_too_big_to_densify_runs_on_its_stored_entries():
    n = 400_000  # densely 1.28 TB in float64
    rng = np.random.default_rng(0)
    A = sp.random_array((n, n), density=3e-9, format="csr", rng=rng)
    A = sp.csr_array(A + sp.eye_array(n, format="csr") * 0.5)
    B = sp.random_array((n, n), density=3e-9, format="csr", rng=rng)
    x = rng.standard_normal(n)
    row = rng.standard_normal((1, n))
    prog = th.program(lambda A, B, x, row: (
        th.einsum("ij,j->i", A, x), th.einsum("ij,ij->i", A, B), th.einsum("ii->", A),
        th.einsum("ij->ji", A) * 2.0, A.sum(axis=0), A.max(axis=1), A.max(axis=0),
        th.softmax(B, mask=A, axis=0), th.where(A, A, B), A * row, A.T @ x))
    plan = prog.specialize(A=A, B=B, x=x, row=row)
    rep = plan.report()
    assert "dense" not in rep["kernels"], rep["kernels"]
    assert rep["executed_flops"] < 100 * (A.nnz + B.nnz + n)
    out = plan(A=A, B=B, x=x, row=row)
    np.testing.assert_allclose(out[0], A @ x, rtol=1e-12)
    np.testing.assert_allclose(out[1], A.multiply(B).sum(axis=1), rtol=1e-12, atol=1e-300)
    assert float(out[2]) == pytest.approx(A.diagonal().sum(), rel=1e-12)
    assert abs(out[3] - 2.0 * A.T).max() == 0
    np.testing.assert_allclose(out[4], A.sum(axis=0), rtol=1e-12)
    np.testing.assert_array_equal(out[5], A.max(axis=1).toarray())  # scipy counts zeros too
    np.testing.assert_array_equal(out[6], A.max(axis=0).toarray())
    on_a = sp.csr_array((np.ones(A.nnz), A.indices, A.indptr), shape=A.shape)
    assert abs(out[8] - (A + B - B.multiply(on_a))).max() == 0
    # the masked softmax: on A's pattern, each column of A sums to 1
    sm = sp.csr_array(out[7])
    assert sm.nnz <= A.nnz and abs(sm - sm.multiply(on_a)).max() == 0
    col_sums = np.asarray(sm.sum(axis=0)).ravel()
    has = np.bincount(A.indices, minlength=n) > 0
    np.testing.assert_allclose(col_sums[has], 1.0, rtol=1e-12)
    assert not np.any(col_sums[~has])
    assert abs(out[9] - A.multiply(row)).max() == 0
    np.testing.assert_allclose(out[10], A.T @ x, rtol=1e-12)


# -- hypothesis: random specs mixing ops, axes, shapes and dtypes ------------------------
def _unary_step(kind: str, axis: int, a, b, d):
    """One op of the generated spec (a, b sparse-ish of one shape, d dense of it)."""
    if kind == "einsum_rows":
        return th.einsum("ij,ij->i", a, b)
    if kind == "einsum_t":
        return th.einsum("ij->ji", a)
    if kind == "einsum_outer":
        return th.einsum("ij,kl->ik", a, b)
    if kind == "sum":
        return a.sum(axis=axis, keepdims=True) * b
    if kind == "max":
        return a.max(axis=axis, keepdims=True) + b
    if kind == "softmax":
        return th.softmax(a, axis=axis)
    if kind == "softmax_mask":
        return th.softmax(d, mask=a, axis=axis)
    if kind == "where":
        return th.where(a, b, d)
    if kind == "mul_bcast":
        return a * d.sum(axis=axis, keepdims=True)
    return th.relu(a - d) if kind == "relu_sub" else a * b


KINDS = ["einsum_rows", "einsum_t", "einsum_outer", "sum", "max", "softmax", "softmax_mask",
         "where", "mul_bcast", "relu_sub", "mul"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 9), st.integers(1, 9), st.floats(0.0, 0.5), st.floats(0.0, 0.5),
       st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 1)), min_size=1, max_size=3),
       st.sampled_from(["float64", "float32"]), st.integers(0, 2**32 - 1))
def test_random_specs_match_the_dense_reference(m, n, d1, d2, steps, dtype, seed):
    rng = np.random.default_rng(seed)
    inputs = {"S1": _sparse((m, n), d1, rng, dtype), "S2": _sparse((m, n), d2, rng, dtype,
                                                                   empty_row=False),
              "D": rng.integers(-3, 4, (m, n)).astype(dtype)}

    def spec(S1, S2, D):
        outs = []
        for kind, axis in steps:
            r = _unary_step(kind, axis, S1, S2, D)
            outs.append(r)
            if r.shape == (m, n) and r.dtype == S1.dtype:  # feed the next op
                S1, S2 = r, S1
        return tuple(outs)

    check(spec, inputs, rtol=1e-12 if dtype == "float64" else 2e-5, no_dense_kernel=False)


# -- every matrix of shared/data/matrices ------------------------------------------------
def _matrix_files() -> list[str]:
    return [row["file"] for row in shared_matrix_index()] or ["<absent>"]


DENSE_LIMIT = 4 * 10**6


def _second(S: sp.csr_array, rng: np.random.Generator) -> sp.csr_array:
    """Half of ``S``'s entries and as many others, with nonzero values of both signs."""
    C = S.tocoo()
    keep = rng.random(C.nnz) < 0.5
    m, n = S.shape
    k = max(1, S.nnz // 2)
    rows = np.concatenate([C.row[keep], rng.integers(0, m, k)])
    cols = np.concatenate([C.col[keep], rng.integers(0, n, k)])
    vals = rng.choice([-2.0, -1.0, 1.0, 3.0], len(rows))
    T = sp.csr_array((vals, (rows, cols)), shape=S.shape)
    T.sum_duplicates()
    T.data[T.data == 0] = 1.0
    T.sort_indices()
    return T


def _program(square: bool, small: bool):
    def spec(S, S2, x, y, row):
        outs = [th.einsum("ij,j->i", S, x), th.einsum("ij,i->j", S, y),
                th.einsum("ij,ij->i", S, S2), th.einsum("ij->ji", S),
                S.sum(axis=0), S.sum(axis=1), S.max(axis=0), S.max(axis=1),
                th.softmax(S2, mask=S, axis=0), th.softmax(S2, mask=S, axis=1),
                th.where(S2, S, S * 3.0), S * row]
        if square:
            outs += [th.einsum("ii->", S), th.einsum("ii->i", S)]
        if small:
            outs += [th.softmax(S, axis=0), th.where(S, S2, 1.0), S + S2 * 2.0 - 1.0]
        return tuple(outs)

    return spec


def _values_at(X: sp.csr_array, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``X[rows[k], cols[k]]`` (0 where not stored), by a dictionary of X's entries."""
    C = X.tocoo()
    table = dict(zip(zip(C.row.tolist(), C.col.tolist()), C.data.tolist()))
    return np.array([table.get(k, 0.0) for k in zip(rows.tolist(), cols.tolist())])


def _seg_softmax_oracle(X: sp.csr_array, M: sp.csr_array) -> sp.csr_array:
    """Row-wise softmax of ``X`` over ``M``'s stored nonzeros."""
    M = sp.csr_array(M)
    M.eliminate_zeros()
    M.sort_indices()
    rows = np.repeat(np.arange(M.shape[0]), np.diff(M.indptr))
    v = _values_at(X, rows, M.indices)
    mx = np.full(M.shape[0], -np.inf)
    np.maximum.at(mx, rows, v)
    e = np.exp(v - mx[rows])
    tot = np.bincount(rows, weights=e, minlength=M.shape[0])
    return sp.csr_array((e / tot[rows], M.indices, M.indptr), shape=M.shape)


def _oracles(S, S2, x, y, row, square):
    on2 = sp.csr_array((np.ones(S2.nnz), S2.indices, S2.indptr), shape=S.shape)
    want = [S @ x, S.T @ y, np.asarray(S.multiply(S2).sum(axis=1)).ravel(), S.T,
            np.asarray(S.sum(axis=0)).ravel(), np.asarray(S.sum(axis=1)).ravel(),
            S.max(axis=0).toarray(), S.max(axis=1).toarray(),
            _seg_softmax_oracle(sp.csr_array(S2.T), sp.csr_array(S.T)).T,
            _seg_softmax_oracle(S2, S), S.multiply(on2) + 3.0 * (S - S.multiply(on2)),
            S.multiply(row)]
    if square:
        want += [S.diagonal().sum(), S.diagonal()]
    return want


def _close(got, want) -> None:
    if sp.issparse(want):
        W = sp.csr_array(want)
        err = abs(sp.csr_array(got) - W)
        scale = float(abs(W).max()) if W.nnz else 0.0
        assert (float(err.max()) if err.nnz else 0.0) <= 1e-10 * max(scale, 1e-300)
        return
    want = np.asarray(want, dtype=np.float64).reshape(np.shape(got))
    scale = float(np.max(np.abs(want), initial=0.0))
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12 * scale)


@pytest.mark.needs_data
@pytest.mark.parametrize("file", _matrix_files())
def test_general_ops_on_collection_matrix(file):
    if file == "<absent>":
        require_shared_data("matrices", "INDEX.tsv")
    from thrifty.front.matrices import load_matrix

    A = load_matrix(require_shared_data("matrices", file))
    S = sp.csr_array(A.real if np.iscomplexobj(A.data) else A, dtype=np.float64)
    S.sort_indices()
    rng = np.random.default_rng(0)
    m, n = S.shape
    inputs = {"S": S, "S2": _second(S, rng), "x": rng.standard_normal(n),
              "y": rng.standard_normal(m), "row": rng.standard_normal((1, n))}
    square, small = m == n, m * n <= DENSE_LIMIT
    spec = _program(square, small)
    if small:
        check(spec, inputs, rtol=1e-10, no_dense_kernel=False)
        return
    plan = th.program(spec).specialize(**inputs)
    assert "dense" not in plan.report()["kernels"], plan.report()["kernels"]
    got = plan(**inputs)
    for g, w in zip(got, _oracles(**inputs, square=square)):
        _close(g, w)

"""numpy functions inside programs, and the inputs programs accept (torch, malformed)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import thrifty as th
from thrifty.errors import PatternError, SpecError
from thrifty.front.numpy_api import FUNCTIONS, UFUNCS

rng = np.random.default_rng(7)
A = sp.random_array((7, 7), density=0.3, format="csr", random_state=3)
X = rng.standard_normal((7, 4))
Y = rng.standard_normal((7, 4))


@pytest.mark.parametrize("fn", [
    lambda a, x, y: np.tanh(x), lambda a, x, y: np.exp(x), lambda a, x, y: np.log(np.abs(x)),
    lambda a, x, y: np.sqrt(np.absolute(x)), lambda a, x, y: np.maximum(x, 0),
    lambda a, x, y: np.maximum(0.0, x), lambda a, x, y: np.negative(x) + np.positive(y),
    lambda a, x, y: np.add(x, y) * np.subtract(x, 2) / np.divide(y, 3),
    lambda a, x, y: np.multiply(x, y), lambda a, x, y: np.matmul(a, x),
    lambda a, x, y: np.einsum("ij,jk->ik", a, x), lambda a, x, y: np.sum(x, axis=0),
    lambda a, x, y: np.sum(x, axis=1, keepdims=True), lambda a, x, y: np.max(x, axis=1),
    lambda a, x, y: np.amax(y), lambda a, x, y: np.transpose(x),
    lambda a, x, y: np.transpose(x, (1, 0)), lambda a, x, y: np.where(x > y, x, y),
    lambda a, x, y: np.where(np.less_equal(x, 0), 0.0, y), lambda a, x, y: np.dot(a, x),
    lambda a, x, y: np.greater_equal(x, y) * np.equal(x, x) * np.not_equal(x, y),
    lambda a, x, y: np.greater(x, 0) + np.less(y, 0),
    lambda a, x, y: np.asarray(2.0) * np.tanh(np.matmul(a, x)) + x.shape[0] + np.ndim(x),
])
def test_numpy_functions_trace_to_the_spec_language_and_agree_with_numpy(fn):
    prog = th.program(lambda A, X, Y: fn(A, X, Y))
    got = prog(A=A, X=X, Y=Y)
    want = fn(A.toarray(), X, Y)
    got = got.toarray() if sp.issparse(got) else np.asarray(got)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    ops = {n.op for n in prog.trace(A=A, X=X, Y=Y)}
    assert ops <= {"input", "const", *UFUNCS.values(), "relu", "einsum", "sum", "max",
                   "where", "transpose"}


@pytest.mark.parametrize(("fn", "message"), [
    (lambda x: np.sin(x), "np.sin is not in the spec language"),
    (lambda x: np.maximum(x, 1.0), "np.maximum is not in the spec language"),
    (lambda x: np.add.reduce(x), "np.add.reduce is not"),
    (lambda x: np.exp(x, out=None, dtype=np.float32), "keyword"),
    (lambda x: np.sum(x, dtype=np.float32), "only axis= and keepdims="),
    (lambda x: np.where(x > 0), "np.where\\(cond\\)"),
    (lambda x: np.reshape(x, (2, -1)), "np.reshape is not in the spec language"),
    (lambda x: x.reshape(2, -1), "reshape is not in the spec language"),
    (lambda x: x[0], "indexing and slicing"),
    (lambda x: x[:, 1:], "indexing and slicing"),
    (lambda x: np.concatenate([x, x]), "np.concatenate"),
    (lambda x: np.stack([x, x]), "np.stack"),
    (lambda x: np.asarray(x), "no values yet"),
    (lambda x: [r for r in x], "indexing and slicing"),
    (lambda x: np.linalg.norm(x), "not in the spec language"),
])
def test_what_the_language_lacks_is_a_spec_error_naming_the_supported_functions(fn, message):
    prog = th.program(lambda X: fn(X))
    with pytest.raises(SpecError, match=message) as info:
        prog(X=X)
    if not any(m in message for m in ("keyword", "only axis", "no values", "where")):
        assert "np.tanh" in str(info.value) and "np.einsum" in str(info.value)


def test_every_listed_function_is_a_numpy_function():
    assert all(callable(getattr(np, name)) for name in (*UFUNCS, *FUNCTIONS))


def test_torch_tensors_are_converted_detached_and_on_the_cpu():
    torch = pytest.importorskip("torch")
    prog = th.program(lambda A, X: np.tanh(A @ X))
    want = np.tanh(A.toarray() @ X)
    for t in (torch.tensor(X), torch.tensor(X, requires_grad=True), torch.tensor(X).T.T):
        np.testing.assert_allclose(prog(A=A, X=t), want, rtol=1e-12)
    dense = th.program(lambda X: X * 2.0)
    got = dense(X=torch.tensor(X, dtype=torch.bfloat16))
    assert got.dtype.name == "bfloat16"
    np.testing.assert_array_equal(got.astype(np.float32),
                                  torch.tensor(X, dtype=torch.bfloat16).float().numpy() * 2)
    with pytest.raises(SpecError, match="layout"):
        prog(A=A, X=torch.tensor(X).to_sparse())


def _csr(indptr, indices, data, shape=(3, 3)):
    M = sp.csr_array((3, 3))
    M.indptr, M.indices = np.asarray(indptr, np.int32), np.asarray(indices, np.int32)
    M.data = data if isinstance(data, np.ndarray) else np.asarray(data, float)
    M._shape = shape
    return M


@pytest.mark.parametrize(("A_", "message"), [
    (_csr([0, 1, 2, 3], [0, 1, 2], np.array([1, 1, 1], dtype=object)), "dtype object"),
    (_csr([0, 1, 2, 3], [0, 1, 99], [1, 1, 1]), "index 99 is outside 0..2"),
    (_csr([0, 1, 2, 3], [0, -1, 2], [1, 1, 1]), "index -1 is outside"),
    (_csr([0, 1, 2, 9], [0, 1, 2], [1, 1, 1]), "indptr ends at 9"),
    (_csr([1, 1, 2, 3], [0, 1, 2], [1, 1, 1]), "starts at 1"),
    (_csr([0, 2, 1, 3], [0, 1, 2], [1, 1, 1]), "decreases at row 1"),
    (_csr([0, 1, 3], [0, 1, 2], [1, 1, 1]), "needs 4"),
])
def test_malformed_sparse_inputs_are_pattern_or_spec_errors(A_, message):
    prog = th.program(lambda A, X: A @ X)
    with pytest.raises((PatternError, SpecError), match=message):
        prog(A=A_, X=np.ones((3, 2)))


def test_object_and_string_arrays_are_refused():
    prog = th.program(lambda X: X + 1)
    for bad in (np.array([[1, 2]], dtype=object), np.array([["a"]])):
        with pytest.raises(SpecError, match="programs take numbers"):
            prog(X=bad)

"""Every kernel of the engine on every matrix of shared/data/matrices, against an oracle.

The oracle is the dense numpy reference of the same spec
(:func:`thrifty.runtime.reference.evaluate`) where the matrix fits densely in 80 MB, and an
independent scipy/numpy pipeline otherwise.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import thrifty as th
from thrifty.runtime.reference import evaluate
from thrifty.testing import assert_eq, require_shared_data, shared_matrix_index, to_dense

DENSE_LIMIT = 10**7
MASKED_WORK_LIMIT = 5 * 10**7


def assert_close(got, expected) -> None:
    """Relative 1e-10 per element, plus 1e-12 of the largest magnitude for entries that
    cancel to nearly zero (summation order differs between BLAS, scipy and our kernels)."""
    if sp.issparse(got) and sp.issparse(expected):
        # compare without densifying (some collection matrices are 10^4 x 10^4 and larger)
        assert got.shape == expected.shape
        E = abs(sp.csr_array(expected))
        scale = float(E.max()) if E.nnz else 0.0
        excess = abs(sp.csr_array(got) - sp.csr_array(expected)) - 1e-10 * E
        worst = float(excess.max()) if excess.nnz else 0.0
        assert worst <= 1e-12 * scale, f"max excess error {worst} (scale {scale})"
        return
    scale = float(np.max(np.abs(to_dense(expected)), initial=0.0))
    assert_eq(got, expected, rtol=1e-10, atol=1e-12 * scale)


def _matrix_files() -> list[str]:
    return [row["file"] for row in shared_matrix_index()] or ["<absent>"]


@functools.cache
def _load(file: str) -> sp.csr_array:
    from thrifty.front.matrices import load_matrix

    path: Path = require_shared_data("matrices", file)
    return load_matrix(path)


def _rows(A: sp.csr_array) -> np.ndarray:
    return np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))


def _oracle_sddmm(X, Y, S):
    vals = np.einsum("ij,ij->i", X[_rows(S)], Y[S.indices])
    return sp.csr_array((vals * S.data, S.indices, S.indptr), shape=S.shape)


def _oracle_attention(Q, K, V, S):
    rows = _rows(S)
    scores = np.einsum("ij,ij->i", Q[rows], K[S.indices])
    keep = S.data != 0
    s = np.where(keep, scores, -np.inf)
    starts = S.indptr[:-1]
    nonempty = np.diff(S.indptr) > 0
    mx = np.full(S.shape[0], -np.inf)
    mx[nonempty] = np.maximum.reduceat(s, starts[nonempty]) if len(s) else []
    mx = np.where(np.isfinite(mx), mx, 0)
    e = np.where(keep, np.exp(scores - mx[rows]), 0)
    tot = np.zeros(S.shape[0])
    tot[nonempty] = np.add.reduceat(e, starts[nonempty]) if len(e) else []
    w = np.divide(e, tot[rows], out=np.zeros_like(e), where=tot[rows] > 0)
    return sp.csr_array((w, S.indices, S.indptr), shape=S.shape) @ V


PROGRAMS = {
    "spmv": (th.program(lambda A, x: A @ x), False),
    "spmm": (th.program(lambda A, X: A @ X), False),
    "sddmm": (th.program(lambda X, Y, S: (X @ Y.T) * S), False),
    "masked-spgemm": (th.program(lambda A: (A @ A) * A), True),
    "gcn": (th.program(lambda A, X, W: th.relu(A @ (X @ W))), True),
    "attention": (th.program(lambda Q, K, V, S: th.softmax(Q @ K.T, mask=S) @ V), True),
}


def _inputs(kernel: str, A: sp.csr_array, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    n, m = A.shape
    real = np.float64
    if kernel == "spmv":
        return {"A": A, "x": rng.standard_normal(m).astype(A.dtype)}
    if kernel == "spmm":
        return {"A": A, "X": rng.standard_normal((m, 8)).astype(A.dtype)}
    if kernel == "sddmm":
        return {"X": rng.standard_normal((n, 8)).astype(A.dtype),
                "Y": rng.standard_normal((m, 8)).astype(A.dtype), "S": A}
    if kernel == "masked-spgemm":
        return {"A": A}
    if kernel == "gcn":
        return {"A": A, "X": rng.standard_normal((n, 8)).astype(A.dtype),
                "W": rng.standard_normal((8, 4)).astype(A.dtype)}
    S = sp.csr_array(A.real if np.iscomplexobj(A.data) else A).astype(real)
    return {"Q": rng.standard_normal((n, 8)), "K": rng.standard_normal((n, 8)),
            "V": rng.standard_normal((n, 4)), "S": S}


def _oracle(kernel: str, inp: dict):
    if kernel == "spmv":
        return inp["A"] @ inp["x"]
    if kernel == "spmm":
        return inp["A"] @ inp["X"]
    if kernel == "sddmm":
        return _oracle_sddmm(inp["X"], inp["Y"], inp["S"])
    if kernel == "masked-spgemm":
        return (inp["A"] @ inp["A"]).multiply(inp["A"])
    if kernel == "gcn":
        return np.maximum(inp["A"] @ (inp["X"] @ inp["W"]), 0)
    return _oracle_attention(inp["Q"], inp["K"], inp["V"], inp["S"])


@pytest.mark.needs_data
@pytest.mark.parametrize("kernel", list(PROGRAMS))
@pytest.mark.parametrize("file", _matrix_files())
def test_kernel_on_collection_matrix(file, kernel):
    if file == "<absent>":
        require_shared_data("matrices", "INDEX.tsv")
    A = _load(file)
    prog, square = PROGRAMS[kernel]
    if square and A.shape[0] != A.shape[1]:
        # the spec itself does not type-check for a rectangular A: that is a ShapeError
        with pytest.raises(th.ShapeError):
            prog.specialize(**_inputs(kernel, A))
        return
    if kernel == "masked-spgemm":
        work = int(np.dot(np.bincount(A.indices, minlength=A.shape[1]), np.diff(A.indptr)))
        if work > MASKED_WORK_LIMIT:
            pytest.skip(f"A @ A has {work:.2e} multiply-adds (> {MASKED_WORK_LIMIT:.0e}): "
                        "too long for this test's time budget (the masked SpGEMM kernel is "
                        "checked on every other collection matrix)")
    inp = _inputs(kernel, A)
    got = prog(**inp)
    if A.shape[0] * A.shape[1] <= DENSE_LIMIT:
        expected = evaluate(prog.trace(**inp), inp)[0]
    else:
        expected = _oracle(kernel, inp)
    assert_close(got, expected)
    if kernel in ("sddmm", "masked-spgemm"):
        sparse = A.nnz < 0.25 * A.shape[0] * A.shape[1]
        assert sp.issparse(got) == sparse, "a sparse output pattern gives a CSR result"

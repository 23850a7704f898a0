"""Column-wise kernels over CSR arrays: ``A.T @ x`` (the einsum ``ij,i->j``) and the
column sums of ``A`` (``A.sum(axis=0)``, the einsum ``ij->j``), with no transpose built;
and beside them the row sums (``A.sum(axis=1)``, ``ij->i``: each row's stored values in
order, one pass over the values and row pointers, no index read).

Both walk the stored entries in CSR order once and scatter into the output by column index
(the CSC matrix-vector product of scipy's ``csc_matvec`` run on ``A.T``, whose CSC arrays
are ``A``'s CSR arrays): the same additions in the same order as ``A.T @ x`` by scipy. As
in :func:`thrifty.sparse.kernels.spmv_rows`, each row's index pointers and each column
index are checked in the kernel's own pass before anything is read or written there, so
index arrays changed in place after inspection give a
:class:`~thrifty.errors.PatternError`, never an out-of-bounds access; and since the
kernels read the index arrays at run time, a plan of one such op holds nothing derived from
the pattern (its input is ``pattern_free``).

Example
-------
>>> import numpy as np, scipy.sparse as sp
>>> A = sp.csr_array(np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 4.0]]))
>>> SpmvT("float64")(np.array([1.0, 10.0]), A).tolist()
[1.0, 30.0, 42.0]
>>> ColSums("float64", (3,))(A).tolist()
[1.0, 3.0, 6.0]
>>> RowSums("float64", (2,))(A).tolist()
[3.0, 7.0]
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import scipy.sparse as sp

from thrifty.sparse import kernels as K

__all__ = ["ColSums", "RowSums", "SpmvT", "colsum_dtype_ok", "spmv_t_dtype_ok"]

_jit = numba.njit(nogil=True, cache=True, fastmath=False)


@_jit
def _spmv_t(indptr, indices, data, x, out):  # pragma: no cover - compiled
    # out[:] = A.T @ x: row i's entries scattered into out by column, times x[i]; returns
    # -1, or the first row whose pointers or columns are out of range (nothing read there)
    n = np.uint64(indptr.shape[0] - 1)
    m = np.uint64(out.shape[0])
    n_ind = np.uint64(min(indices.shape[0], data.shape[0]))
    out[:] = 0
    if indptr.shape[0] == 0 or np.uint64(x.shape[0]) < n:
        return np.int64(0)
    one = np.uint64(1)
    lo = np.uint64(indptr[0])
    if lo > n_ind:
        return np.int64(0)
    for i in range(np.uint64(0), n):
        hi = np.uint64(indptr[i + one])
        if hi < lo or hi > n_ind:
            return np.int64(i)
        xi = x[i]
        for q in range(lo, hi):
            c = np.uint64(indices[q])
            if c >= m:
                return np.int64(i)
            out[c] += data[q] * xi
        lo = hi
    return np.int64(-1)


@_jit
def _colsums(indptr, indices, data, out):  # pragma: no cover - compiled
    # out[:] = the column sums of A (stored entries, CSR order); returns as _spmv_t
    n = np.uint64(indptr.shape[0] - 1)
    m = np.uint64(out.shape[0])
    n_ind = np.uint64(min(indices.shape[0], data.shape[0]))
    out[:] = 0
    if indptr.shape[0] == 0:
        return np.int64(0)
    lo = np.uint64(indptr[0])
    hi = np.uint64(indptr[n])
    if lo > hi or hi > n_ind:
        return np.int64(0)
    # the pointers need only be within the arrays: the entries lo..hi are summed in order
    # whatever the rows (a pointer out of order is still refused, as the other kernels do)
    one = np.uint64(1)
    for i in range(np.uint64(0), n):
        if np.uint64(indptr[i + one]) < np.uint64(indptr[i]):
            return np.int64(i)
    for q in range(lo, hi):
        c = np.uint64(indices[q])
        if c >= m:
            return np.int64(0)
        out[c] += data[q]
    return np.int64(-1)


@_jit
def _rowsums(indptr, indices, data, m, out):  # pragma: no cover - compiled
    # out[i] = the stored values of row i added in order (what np.bincount of the rows'
    # entries in CSR order gives), each entry's column checked below m; returns -1, or the
    # first row whose pointers or columns are out of range (nothing summed there)
    n = out.shape[0]
    n_val = np.uint64(min(indices.shape[0], data.shape[0]))
    mm = np.uint64(m)
    if indptr.shape[0] <= n:
        return np.int64(0)
    lo = np.uint64(indptr[0])
    if lo > n_val:
        return np.int64(0)
    if n == 0:
        return np.int64(-1)
    out[0] = 0
    zero = out[0]  # a zero of the output's dtype
    one = np.uint64(1)
    for i in range(n):
        hi = np.uint64(indptr[i + one])
        if hi < lo or hi > n_val:
            return np.int64(i)
        s = zero
        for q in range(lo, hi):
            if np.uint64(indices[q]) >= mm:
                return np.int64(i)
            s += data[q]
        out[i] = s
        lo = hi
    return np.int64(-1)


#: Output dtypes the column sums are compiled for: those whose sequential sum is what the
#: reference computes (float32 sums are pairwise in numpy: left to the einsum form).
_COLSUM_DTYPES = frozenset({"float64", "complex128", "int64"})
#: Value dtypes of ``A.T @ x`` (operands and output of one dtype, as scipy's kernel).
_SPMV_T_DTYPES = frozenset({"float32", "float64", "complex64", "complex128", "int64"})


def spmv_t_dtype_ok(a: str, x: str, out: str) -> bool:
    """Whether :class:`SpmvT` computes ``A.T @ x`` for these dtypes (all one, compiled)."""
    return a == x == out and out in _SPMV_T_DTYPES


def colsum_dtype_ok(a: str, out: str) -> bool:
    """Whether :class:`ColSums` sums columns of values of dtype ``a`` into ``out``."""
    return out in _COLSUM_DTYPES and np.can_cast(a, out, "safe") and a != "bool"


def _csr_arrays(A: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if not (sp.issparse(A) and A.format == "csr"):
        A = sp.csr_array(A)
    return A.indptr, A.indices, A.data


class SpmvT:
    """``A.T @ x`` for a CSR ``A`` (the ``spmv_t`` kernel): reads ``(x, A)``."""

    def __init__(self, dtype: str) -> None:
        self.dtype = dtype

    def __call__(self, x: Any, A: Any) -> np.ndarray:
        x = np.asarray(x)
        n, m = A.shape
        if x.shape != (n,):
            raise ValueError(f"x has shape {x.shape}; A.T @ x needs ({n},)")
        indptr, indices, data = _csr_arrays(A)
        out = np.empty(m, dtype=self.dtype)
        K.raise_bad_row(_spmv_t(indptr, indices, data, x, out), m)
        return out


class ColSums:
    """The column sums of a CSR ``A`` (the ``colsum_csr`` kernel): ``A.sum(axis=0)``, laid
    out in ``shape`` (``(m,)``, or ``(1, m)`` with ``keepdims``)."""

    def __init__(self, dtype: str, shape: tuple[int, ...]) -> None:
        self.dtype, self.shape = dtype, tuple(shape)

    def __call__(self, A: Any) -> np.ndarray:
        indptr, indices, data = _csr_arrays(A)
        out = np.empty(A.shape[1], dtype=self.dtype)
        K.raise_bad_row(_colsums(indptr, indices, data, out), A.shape[1])
        return out.reshape(self.shape)


class RowSums:
    """The row sums of a CSR ``A`` (the ``rowsum_csr`` kernel): ``A.sum(axis=1)``, laid out
    in ``shape`` (``(n,)``, or ``(n, 1)`` with ``keepdims``); each row's values added in
    order (each column index checked, as the other kernels check theirs)."""

    def __init__(self, dtype: str, shape: tuple[int, ...]) -> None:
        self.dtype, self.shape = dtype, tuple(shape)

    def __call__(self, A: Any) -> np.ndarray:
        indptr, indices, data = _csr_arrays(A)
        out = np.empty(A.shape[0], dtype=self.dtype)
        K.raise_bad_row(_rowsums(indptr, indices, data.astype(self.dtype, copy=False),
                                 A.shape[1], out), A.shape[1])
        return out.reshape(self.shape)

"""A CSR operand holding every entry of its shape (a dense matrix stored as sparse): the
compiled check that its index arrays still hold that pattern, and ``A @ x`` with the check
in the product's own pass. :class:`thrifty.sparse.tasks.FullPattern` calls them.

Example
-------
>>> import numpy as np
>>> out = np.empty(2)
>>> full_gemv(np.array([0, 2, 4]), np.array([0, 1, 0, 1]), np.array([1., 2., 3., 4.]),
...           np.array([1., 1.]), out); out.tolist()
[3.0, 7.0]
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from thrifty.errors import PatternError

__all__ = ["check_full_pattern", "full_gemv", "full_row"]

_jit = numba.njit(nogil=True, cache=True, fastmath=False)

# A CSR operand holding every entry of its m x n shape is the dense matrix: its values, in
# canonical order, are the matrix row by row. A plan lowers its products to BLAS-shaped
# work on that view, and what it must still check at run time is that the index arrays
# passed hold that pattern: indptr = (0, n, 2n, ...) and each row's indices 0 .. n-1 in
# order. Compared with those numbers (``ref``: 0 .. n-1 in the indices' dtype, a row that
# stays in L1), not with a stored copy of the inspected arrays: a stored copy doubles the
# bytes read (1 MB more for 250,000 int32 indices), and on a 500 x 500 matrix comparing
# with it took longer than the product itself. Each row is read as a slice (contiguous
# loads: an index i * n + j may be negative to numba, which then makes the loads gathers,
# 2x slower here), and compared with ``ref`` in the indices' own width (from a counter,
# each index is widened to 64 bits first: 2x slower on rows in cache).

@_jit
def _full_pattern_row(indptr, indices, ref):  # pragma: no cover - compiled
    # -1 when (indptr, indices) is the full pattern of an (len(indptr) - 1) x len(ref)
    # matrix, else the first row that is not (0 for an index array of the wrong length):
    # row by row, an OR of the XORs of the row's indices with ref
    m, n = indptr.shape[0] - 1, ref.shape[0]
    if n < 1 or m < 0 or indices.shape[0] != m * n or indptr[0] != 0:
        return 0
    for i in range(m):
        if indptr[i + 1] != (i + 1) * n:
            return i
        ix = indices[i * n:(i + 1) * n]
        diff = ix[0] ^ ix[0]
        for j in range(n):
            diff |= ix[j] ^ ref[j]
        if diff != 0:
            return i
    return -1


_jit_dot = numba.njit(nogil=True, cache=True, fastmath={"reassoc", "contract"})


@_jit_dot
def _gemv4(indptr, indices, ref, data, x, out, i, zero):  # pragma: no cover - compiled
    # rows i .. i+3 of _full_gemv: -1, or the first of them that is not the full pattern's
    n = x.shape[0]
    for r in range(i + 1, i + 5):
        if indptr[r] != r * n:
            return r - 1
    p = i * n
    i0, i1 = indices[p:p + n], indices[p + n:p + 2 * n]
    i2, i3 = indices[p + 2 * n:p + 3 * n], indices[p + 3 * n:p + 4 * n]
    d0, d1 = data[p:p + n], data[p + n:p + 2 * n]
    d2, d3 = data[p + 2 * n:p + 3 * n], data[p + 3 * n:p + 4 * n]
    diff = i0[0] ^ i0[0]
    s0, s1, s2, s3 = zero, zero, zero, zero
    for j in range(n):
        rj, xj = ref[j], x[j]
        diff |= (i0[j] ^ rj) | (i1[j] ^ rj) | (i2[j] ^ rj) | (i3[j] ^ rj)
        s0 += d0[j] * xj
        s1 += d1[j] * xj
        s2 += d2[j] * xj
        s3 += d3[j] * xj
    if diff != 0:  # which of the four rows
        for r in range(i, i + 4):
            ix = indices[r * n:(r + 1) * n]
            for j in range(n):
                if ix[j] != ref[j]:
                    return r
    out[i], out[i + 1], out[i + 2], out[i + 3] = s0, s1, s2, s3
    return -1


@_jit_dot
def _gemv1(indptr, indices, ref, data, x, out, i, zero):  # pragma: no cover - compiled
    # row i of _full_gemv: -1, or i where it is not the full pattern's
    n = x.shape[0]
    if indptr[i + 1] != (i + 1) * n:
        return i
    ix, row = indices[i * n:(i + 1) * n], data[i * n:(i + 1) * n]
    diff = ix[0] ^ ix[0]
    s = zero
    for j in range(n):
        diff |= ix[j] ^ ref[j]
        s += row[j] * x[j]
    if diff != 0:
        return i
    out[i] = s
    return -1


@_jit_dot
def _full_gemv(indptr, indices, ref, data, x, out, backward):  # pragma: no cover - compiled
    # out = A @ x for a CSR A that holds every entry of its len(out) x len(x) shape: each
    # row's pointer and indices checked (as _full_pattern_row) in the same pass as its dot
    # product with x, so that the 12 bytes per entry are read once. Four rows at a time
    # (_gemv4), each x[j] and ref[j] loaded once for the four (one row at a time: 1.3-1.5x
    # the time on rows in cache here), the last m % 4 rows one at a time. A dot product
    # may be reassociated (vector accumulators), as BLAS's gemv reassociates it;
    # fastmath's other flags stay off (infinities and NaNs keep their meaning).
    # ``backward``: the same groups of rows, last first (every row's value is the same
    # either way). Returns -1, or a row that is not the full pattern's (0 for arrays of
    # the wrong lengths).
    m, n = out.shape[0], x.shape[0]
    if n < 1 or indptr.shape[0] != m + 1 or indices.shape[0] != m * n or \
            data.shape[0] < m * n or ref.shape[0] != n or indptr[0] != 0:
        return 0
    zero = np.zeros(1, out.dtype)[0]
    groups = m // 4
    if backward:
        for i in range(m - 1, 4 * groups - 1, -1):
            bad = _gemv1(indptr, indices, ref, data, x, out, i, zero)
            if bad >= 0:
                return bad
        for g in range(groups - 1, -1, -1):
            bad = _gemv4(indptr, indices, ref, data, x, out, 4 * g, zero)
            if bad >= 0:
                return bad
        return -1
    for g in range(groups):
        bad = _gemv4(indptr, indices, ref, data, x, out, 4 * g, zero)
        if bad >= 0:
            return bad
    for i in range(4 * groups, m):
        bad = _gemv1(indptr, indices, ref, data, x, out, i, zero)
        if bad >= 0:
            return bad
    return -1


def _raise_not_full(row: int, shape: tuple[int, int]) -> None:
    """Raise :class:`~thrifty.errors.PatternError` for ``row >= 0``, the first row of a CSR
    operand whose index arrays are not the full pattern of ``shape`` (``-1``: none)."""
    if row >= 0:
        m, n = shape
        raise PatternError(f"the sparse operand's index arrays no longer hold the full "
                           f"pattern of its {m} x {n} shape that the plan was specialized "
                           f"for (every entry, row by row; row {row} differs, or the arrays "
                           f"are not {m + 1} and {m * n} long): they were changed after the "
                           "plan inspected them; specialize again for the new pattern")


def full_row(n: int, dtype: Any) -> np.ndarray:
    """``0 .. n-1`` in an index dtype: every row's column indices in a full pattern."""
    return np.arange(n, dtype=dtype)


def check_full_pattern(indptr: np.ndarray, indices: np.ndarray, shape: tuple[int, int],
                       ref: np.ndarray | None = None) -> None:
    """Raise :class:`~thrifty.errors.PatternError` unless ``(indptr, indices)`` is the full
    pattern of ``shape``: every entry, row by row (one compiled pass over the indices,
    compared with ``0 .. n-1``, no stored copy). ``ref``: :func:`full_row` of ``n`` in
    the indices' dtype, when the caller keeps one.

    Example
    -------
    >>> check_full_pattern(np.array([0, 2, 4]), np.array([0, 1, 0, 1]), (2, 2))
    >>> try:
    ...     check_full_pattern(np.array([0, 2, 4]), np.array([0, 1, 1, 0]), (2, 2))
    ... except PatternError as e:
    ...     print(str(e)[:60])
    the sparse operand's index arrays no longer hold the full pa
    """
    if indptr.dtype.kind != "i" or indices.dtype.kind != "i" or \
            indptr.shape != (shape[0] + 1,) or shape[1] < 1:
        _raise_not_full(0, shape)
    if ref is None or ref.dtype != indices.dtype or ref.shape != (shape[1],):
        ref = full_row(shape[1], indices.dtype)
    _raise_not_full(int(_full_pattern_row(indptr, indices, ref)), shape)


def full_gemv(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, x: np.ndarray,
              out: np.ndarray, ref: np.ndarray | None = None, backward: bool = False) -> None:
    """``out[:] = A @ x`` for a CSR ``A`` (its three arrays) holding every entry of its
    ``len(out) x len(x)`` shape, its pattern checked in the product's own pass (a
    :class:`~thrifty.errors.PatternError` where the arrays are not that pattern). ``data``,
    ``x`` and ``out`` of one dtype; ``ref`` as for :func:`check_full_pattern`;
    ``backward``: the rows walked last to first (each row's value is the same).

    Example
    -------
    >>> out = np.empty(2)
    >>> full_gemv(np.array([0, 2, 4]), np.array([0, 1, 0, 1]), np.array([1., 2., 3., 4.]),
    ...           np.array([1., 1.]), out); out.tolist()
    [3.0, 7.0]
    """
    shape = (out.shape[0], x.shape[0])
    if indptr.dtype.kind != "i" or indices.dtype.kind != "i" or shape[1] < 1:
        _raise_not_full(0, shape)
    if ref is None or ref.dtype != indices.dtype or ref.shape != (shape[1],):
        ref = full_row(shape[1], indices.dtype)
    _raise_not_full(int(_full_gemv(indptr, indices, ref, data, x, out, backward)), shape)

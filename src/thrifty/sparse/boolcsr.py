"""Compiled set operations on boolean CSR patterns (canonical: sorted, no duplicates).

What propagation does to exact patterns at inspection, each in one pass over the index
arrays and without scipy's value arithmetic (no copies of values, no duplicate summing, no
zero elimination):

* :func:`intersect_elements`: the entries two patterns share (a merge per row);
* :func:`within_blocks`: which entries of an element pattern fall into the stored blocks
  of a block grid (one marker row per block row, instead of a binary search per entry);
* :func:`bool_matmul`: the boolean product of two block grids by bit sets (each row of
  the product is the OR of the bit rows of the second grid that the first grid's row
  selects), when that is cheaper than Gustavson's walk over the pairs.

Example
-------
>>> import numpy as np, scipy.sparse as sp
>>> A = sp.csr_array(np.array([[1, 1, 0], [0, 1, 1]], dtype=bool))
>>> B = sp.csr_array(np.array([[1, 0, 0], [0, 1, 0]], dtype=bool))
>>> intersect_elements(A, B).toarray().astype(int).tolist()
[[1, 0, 0], [0, 1, 0]]
>>> within_blocks(A, sp.csr_array(np.array([[1, 0]], dtype=bool)), (2, 2)).tolist()
[True, True, True, False]
>>> bool_matmul(A, sp.csr_array(np.eye(3, dtype=bool))).toarray().astype(int).tolist()
[[1, 1, 0], [0, 1, 1]]
"""

from __future__ import annotations

import numba
import numpy as np
import scipy.sparse as sp
from numba.cpython.unsafe.numbers import trailing_zeros

__all__ = ["bitset_cost", "bool_matmul", "intersect_elements", "within_blocks"]

_jit = numba.njit(nogil=True, cache=True)


@_jit
def _intersect(aptr, aidx, bptr, bidx, optr, oidx):  # pragma: no cover - compiled
    k = 0
    for i in range(aptr.shape[0] - 1):
        p, pe, q, qe = aptr[i], aptr[i + 1], bptr[i], bptr[i + 1]
        while p < pe and q < qe:
            a, b = aidx[p], bidx[q]
            if a == b:
                oidx[k] = a
                k += 1
                p += 1
                q += 1
            elif a < b:
                p += 1
            else:
                q += 1
        optr[i + 1] = k
    return k


@_jit
def _within(indptr, indices, gptr, gidx, br, bc, n_bcols, keep):  # pragma: no cover
    mark = np.full(n_bcols, -1, dtype=np.int64)
    n = indptr.shape[0] - 1
    shift = -1  # a power-of-two block width divides by a shift
    if bc & (bc - 1) == 0:
        shift = 0
        while (1 << shift) < bc:
            shift += 1
    all_in = True
    for bi in range(gptr.shape[0] - 1):
        for t in range(gptr[bi], gptr[bi + 1]):
            mark[gidx[t]] = bi
        for i in range(bi * br, min((bi + 1) * br, n)):
            for p in range(indptr[i], indptr[i + 1]):
                j = indices[p] >> shift if shift >= 0 else indices[p] // bc
                ok = mark[j] == bi
                keep[p] = ok
                if not ok:
                    all_in = False
    return all_in


@_jit
def _bitset_matmul(aptr, aidx, bptr, bidx, n_cols):  # pragma: no cover - compiled
    words = (n_cols + 63) // 64
    nb = bptr.shape[0] - 1
    bits = np.zeros((nb, words), dtype=np.uint64)
    one = np.uint64(1)
    for k in range(nb):
        for t in range(bptr[k], bptr[k + 1]):
            c = bidx[t]
            bits[k, c >> 6] |= one << np.uint64(c & 63)
    n = aptr.shape[0] - 1
    optr = np.zeros(n + 1, dtype=np.int64)
    cap = max(16, aidx.shape[0])
    oidx = np.empty(cap, dtype=np.int64)
    row = np.zeros(words, dtype=np.uint64)
    o = 0
    for i in range(n):
        row[:] = 0
        for t in range(aptr[i], aptr[i + 1]):
            k = aidx[t]
            for w in range(words):
                row[w] |= bits[k, w]
        for w in range(words):
            v = row[w]
            while v:
                b = trailing_zeros(v)
                if o == oidx.shape[0]:
                    grown = np.empty(2 * oidx.shape[0], dtype=np.int64)
                    grown[:o] = oidx[:o]
                    oidx = grown
                oidx[o] = w * 64 + b
                o += 1
                v &= v - one  # the lowest set bit cleared
        optr[i + 1] = o
    return optr, oidx[:o]


def intersect_elements(A: sp.csr_array, B: sp.csr_array) -> sp.csr_array:
    """The boolean CSR pattern of the entries stored in both ``A`` and ``B`` (canonical,
    same shape); ``A`` itself when every entry of ``A`` is in ``B``, else ``B`` itself when
    every entry of ``B`` is in ``A``."""
    idx = np.result_type(A.indices.dtype, B.indices.dtype)
    if A.shape != B.shape:
        raise ValueError(f"patterns of shapes {A.shape} and {B.shape}")
    optr = np.zeros(A.shape[0] + 1, dtype=np.int64)
    oidx = np.empty(min(A.nnz, B.nnz), dtype=idx)
    k = _intersect(A.indptr, A.indices, B.indptr, B.indices, optr, oidx) if \
        len(oidx) else 0
    if k == A.nnz:
        return A
    if k == B.nnz:
        return B
    itype = np.int32 if max(A.shape) < 2**31 and k < 2**31 else np.int64
    return sp.csr_array((np.ones(k, dtype=bool), oidx[:k].astype(itype, copy=False),
                         optr.astype(itype)), shape=A.shape)


def within_blocks(E: sp.csr_array, grid: sp.csr_array, block: tuple[int, int]) -> np.ndarray:
    """Whether each stored entry of ``E`` (CSR order) lies in a stored block of ``grid``,
    a boolean CSR matrix over blocks of shape ``block``."""
    keep = np.empty(E.nnz, dtype=bool)
    if E.nnz:
        _within(E.indptr, E.indices, grid.indptr, grid.indices, block[0], block[1],
                grid.shape[1], keep)
    return keep


def bitset_cost(A: sp.csr_array, B: sp.csr_array) -> int:
    """Word operations of :func:`bool_matmul` by bit sets (to compare with the pairs of
    Gustavson's walk)."""
    words = (B.shape[1] + 63) // 64
    return int((A.nnz + A.shape[0] + B.shape[0]) * words)


def bool_matmul(A: sp.csr_array, B: sp.csr_array) -> sp.csr_array:
    """The boolean product of two boolean CSR patterns, by bit sets over ``B``'s columns
    (canonical result; use where :func:`bitset_cost` is below the product's pairs)."""
    optr, oidx = _bitset_matmul(A.indptr, A.indices, B.indptr, B.indices, B.shape[1])
    return sp.csr_array((np.ones(len(oidx), dtype=bool), oidx, optr),
                        shape=(A.shape[0], B.shape[1]))

"""The compiled SpMV kernels behind :func:`thrifty.sparse.kernels.spmv_rows` and a plan's
SpMV tasks: ``out[:] = A @ x`` for the rows of a CSR matrix, the pattern checked in the
product's own pass over the indices (index pointers within the arrays, each column below
``len(x)`` before ``x`` is read there), returning -1 or the first row that fails.

Two kernels, chosen by :func:`spmv_kernel` from the size of ``x``: the narrow one (two
accumulators per row) and, for an ``x`` beyond a core's L2, the wide one, which sums long
rows of scattered columns by vector gathers.

Example
-------
>>> import numpy as np, scipy.sparse as sp
>>> A = sp.random_array((30, 20), density=0.3, format="csr", rng=0)
>>> x = np.arange(20.0); out = np.empty(30)
>>> int(spmv_kernel(20, 8)(A.indptr, A.indices, A.data, x, out))
-1
>>> bool(np.allclose(out, A @ x))
True
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

__all__ = ["spmv_kernel", "SPMV_GATHER_MIN_ROW", "SPMV_GATHER_X_BYTES",
           "SPMV_GATHER_SPAN_BYTES"]

_jit = numba.njit(nogil=True, cache=True, fastmath=False)


#: SpMV rows of at least this many stored entries, on an ``x`` of more than
#: :data:`SPMV_GATHER_X_BYTES`, whose columns span at least :data:`SPMV_GATHER_SPAN_BYTES`
#: of ``x``, are summed by vector gathers (:func:`spmv_kernel`).
SPMV_GATHER_MIN_ROW = 8
SPMV_GATHER_X_BYTES = 1 << 20
SPMV_GATHER_SPAN_BYTES = 1 << 16


@numba.njit(nogil=True, cache=True, fastmath={"reassoc", "contract"})
def _spmv_row_gather(indices, data, x, lo, hi, zero):  # pragma: no cover - compiled
    # one row's sum with its additions reassociable: LLVM vectorises it into vector gathers
    # of x (the row's columns were checked by the caller)
    s = zero
    for q in range(lo, hi):
        s += data[q] * x[np.uint64(indices[q])]
    return s


@_jit
def _spmv_narrow(indptr, indices, data, x, out):  # pragma: no cover - compiled
    # out[:] = A @ x for the rows of indptr (len(out) of them: pass a slice of the pointers
    # for a row panel), the pattern checked inside the product's own pass over the indices:
    # per row, its pointers non-decreasing within the index and value arrays; per stored
    # entry, its column below len(x) (read as unsigned, so a negative one is huge) before x
    # is read there. Two accumulators per row (even and odd entries, added at the end of the
    # row) halve the chain of dependent additions: one thread's CPU time 0.9-1.5x scipy's
    # csr_matvec here, where a separate check pass plus csr_matvec took 0.8-0.95x (a row
    # range given as arguments, with its offsets in the loop, cost 5-10 %).
    # returns -1, or the first row whose indices are out of range (nothing read there)
    n = out.shape[0]
    m = np.uint64(x.shape[0])
    n_ind = np.uint64(min(indices.shape[0], data.shape[0]))
    if indptr.shape[0] <= n:
        return 0
    lo = np.uint64(indptr[0])
    if n == 0:  # no rows: the one pointer still within the arrays
        return -1 if lo <= n_ind else 0
    out[0] = 0
    zero = out[0]  # a zero of the output's dtype
    one = np.uint64(1)
    for i in range(n):
        hi = np.uint64(indptr[i + 1])
        if hi < lo or hi > n_ind:
            return i
        s0 = zero
        s1 = zero
        q = lo
        while q + one < hi:
            c0, c1 = np.uint64(indices[q]), np.uint64(indices[q + one])
            if c0 >= m or c1 >= m:
                return i
            s0 += data[q] * x[c0]
            s1 += data[q + one] * x[c1]
            q += np.uint64(2)
        if q < hi:
            c0 = np.uint64(indices[q])
            if c0 >= m:
                return i
            s0 += data[q] * x[c0]
        out[i] = s0 + s1
        lo = hi
    return -1


@_jit
def _spmv_wide(indptr, indices, data, x, out):  # pragma: no cover - compiled
    # _spmv_narrow for an x larger than a core's L2 (1 MiB here): x's scattered reads then
    # wait on L3. A row of at least SPMV_GATHER_MIN_ROW entries is checked in one pass
    # first (its largest and smallest column) and, when its columns span
    # SPMV_GATHER_SPAN_BYTES of x or more, summed with its additions reassociable
    # (_spmv_row_gather), which LLVM turns into vector gathers that keep several of those
    # reads in flight: random-200000-16 1.40-1.50x scipy's csr_matvec in one thread's CPU
    # time, the narrow kernel 1.05-1.10x (same runs, load 10-11). Rows of nearby columns,
    # and every x that fits in L2, ran 0.45-0.95x as fast that way (bcsstk13, rmat-14,
    # poisson2d-300), so they keep the narrow kernel's loop.
    n = out.shape[0]
    m = np.uint64(x.shape[0])
    n_ind = np.uint64(min(indices.shape[0], data.shape[0]))
    if indptr.shape[0] <= n:
        return 0
    lo = np.uint64(indptr[0])
    if n == 0:  # no rows: the one pointer still within the arrays
        return -1 if lo <= n_ind else 0
    out[0] = 0
    zero = out[0]  # a zero of the output's dtype
    one = np.uint64(1)
    wide_row = np.uint64(SPMV_GATHER_MIN_ROW)
    wide_span = np.uint64(SPMV_GATHER_SPAN_BYTES // x.itemsize)
    for i in range(n):
        hi = np.uint64(indptr[i + 1])
        if hi < lo or hi > n_ind:
            return i
        if hi - lo >= wide_row:
            c_max, c_min = np.uint64(0), np.uint64(2**63)
            for q in range(lo, hi):
                c = np.uint64(indices[q])
                c_max = c if c > c_max else c_max
                c_min = c if c < c_min else c_min
            if c_max >= m:
                return i
            if c_max - c_min >= wide_span:
                out[i] = _spmv_row_gather(indices, data, x, lo, hi, zero)
                lo = hi
                continue
        s0 = zero
        s1 = zero
        q = lo
        while q + one < hi:
            c0, c1 = np.uint64(indices[q]), np.uint64(indices[q + one])
            if c0 >= m or c1 >= m:
                return i
            s0 += data[q] * x[c0]
            s1 += data[q + one] * x[c1]
            q += np.uint64(2)
        if q < hi:
            c0 = np.uint64(indices[q])
            if c0 >= m:
                return i
            s0 += data[q] * x[c0]
        out[i] = s0 + s1
        lo = hi
    return -1


def spmv_kernel(n_cols: int, itemsize: int) -> Any:
    """The compiled SpMV kernel for a dense vector ``x`` of ``n_cols`` entries of
    ``itemsize`` bytes: ``kernel(indptr, indices, data, x, out)`` computes
    ``out[:] = A @ x`` for the ``len(out)`` rows of ``indptr`` (a slice
    ``indptr[r0:r1 + 1]`` for a panel), checking the pattern in its own pass, and returns
    -1, or the first row (counted from the slice) whose indices are out of range (then pass
    it to :func:`thrifty.sparse.kernels.raise_bad_row`). Call it with no Python frame
    around it (a plan's per-call path binds it once per vector shape).

    The narrow kernel, or the wide one when ``x`` takes more than
    :data:`SPMV_GATHER_X_BYTES` (its long, scattered rows summed by vector gathers; the
    comment of ``_spmv_wide`` gives the measurements). Two functions, chosen here: one numba
    function holding both loops ran the narrow one 5-20 % slower on small instances.

    >>> spmv_kernel(10, 8) is spmv_kernel(5, 8) is not spmv_kernel(10**6, 8)
    True
    """
    if n_cols * itemsize > SPMV_GATHER_X_BYTES:
        return _spmv_wide
    return _spmv_narrow

"""The kernel library of the sparse engine: the standard kernels a specialized plan calls.

Every kernel works on a contiguous range of rows ``[r0, r1)`` so that the specializer can
split one op into row-panel tasks that run in parallel (numba kernels are compiled with
``nogil=True``; BLAS and scipy release the GIL). The kernels follow the classic forms:

* CSR SpMV/SpMM, row-parallel (Saad, *Iterative Methods for Sparse Linear Systems*, 2003);
* SDDMM, the sampled dense-dense product computed only on a sparse pattern
  (Nisa et al., "Sampled Dense Matrix Multiplication for High-Performance Machine
  Learning", HiPC 2018);
* masked SpGEMM by Gustavson's row-wise algorithm with the mask as the accumulator's
  admission set (Aznaveh et al., "Parallel GraphBLAS with OpenMP", CSC 2020);
* gemm on gathered dense panels: the nonzero column blocks of a block row gathered into one
  dense panel and multiplied by BLAS (the blocked form of Vuduc's OSKI, 2005).

Measured on the 2-core development machine (see ``benchmarks/sparse_kernels.py``): the
numba CSR SpMM with k = 64 split over 2 row panels ran faster than scipy's
single-threaded ``csr @ dense``, so it is the CSR kernel kept; scipy remains the reference.

Example
-------
>>> import numpy as np, scipy.sparse as sp
>>> A = sp.random_array((50, 40), density=0.1, format="csr", rng=0)
>>> X = np.ones((40, 3)); out = np.empty((50, 3))
>>> spmm_rows(A.indptr, A.indices, A.data, X, out, 0, 50)
>>> bool(np.allclose(out, A @ X))
True
"""

from __future__ import annotations

import threading
from typing import Any

import numba
import numpy as np
import scipy.sparse as sp
from numba.core import config as _config
from numba.core.compiler_lock import global_compiler_lock

from thrifty.errors import PatternError
from thrifty.sparse.outputs import (
    POOL_MIN_BYTES,
    STREAM_DTYPES,
    BufferPool,
    is_aligned,
    store_fence,
    stream_store8,
)
from thrifty.sparse.spmv_kernels import (  # noqa: F401 - re-exported
    SPMV_GATHER_MIN_ROW,
    SPMV_GATHER_SPAN_BYTES,
    SPMV_GATHER_X_BYTES,
    spmv_kernel,
)

__all__ = [
    "spmm_rows", "spmv_rows", "sddmm_rows", "masked_dot_rows",
    "masked_softmax_rows",
    "panel_gemm", "csr_from_parts", "same_values", "BufferPool", "check_indices",
    "indices_ok", "POOL_MIN_BYTES", "spmv_checked", "spmv_kernel", "raise_bad_row",
]

_jit = numba.njit(nogil=True, cache=True, fastmath=False)


@_jit
def _bad_row(indptr, indices, n_cols, i):  # pragma: no cover - compiled
    # whether row i's index pointers or column indices lie outside the arrays: one
    # comparison per stored entry (unsigned, so a negative index is out of range too), in
    # the kernel's own pass, so that an index array changed after inspection is an error
    # and never an out-of-bounds read
    p, hi = indptr[i], indptr[i + 1]
    if p < 0 or hi < p or hi > indices.shape[0]:
        return True
    for q in range(p, hi):
        if np.uint64(indices[q]) >= np.uint64(n_cols):
            return True
    return False


@_jit
def _spmm(indptr, indices, data, X, out, r0, r1):  # pragma: no cover - compiled
    # from 32 columns on, two nonzeros per pass over the output row: half the loads and
    # stores of the row (it stays in L1, but those were the loop's bottleneck: 10-40% less
    # CPU time on k = 64 and 256 here; below 32 columns no gain was measured)
    # returns -1, or the first row whose indices are out of range (nothing read there)
    k = X.shape[1]
    n_cols = X.shape[0]
    if r1 < r0 or indptr.shape[0] <= r1 or r0 < 0 or data.shape[0] < indices.shape[0]:
        return max(r0, 0)
    if r1 == r0:  # no rows: the one pointer still within the arrays
        return -1 if np.uint64(indptr[r0]) <= np.uint64(indices.shape[0]) else r0
    for i in range(r0, r1):
        if _bad_row(indptr, indices, n_cols, i):
            return i
        o = out[i - r0]
        for c in range(k):
            o[c] = 0
        p, hi = indptr[i], indptr[i + 1]
        if k >= 32:
            while p + 1 < hi:
                a0, a1 = data[p], data[p + 1]
                x0, x1 = X[indices[p]], X[indices[p + 1]]
                for c in range(k):
                    o[c] += a0 * x0[c] + a1 * x1[c]
                p += 2
        while p < hi:
            a = data[p]
            x = X[indices[p]]
            for c in range(k):
                o[c] += a * x[c]
            p += 1
    return -1


# SpMM kernels for common widths, generated with the width a compile-time constant and the
# output row held in local variables (registers) while a row's nonzeros are summed into it:
# the kernel above keeps it in memory, and since numba cannot tell that ``out`` and ``X`` do
# not overlap, every nonzero loads and stores the whole row again (a store-to-load chain
# that was the loop's bottleneck at k <= 64). Above 64 columns the row is done in tiles of
# 64 (eight 512-bit registers of float64), each tile walking the row's nonzeros again. The
# sum is in CSR order, as scipy's kernel sums (no pairs, no reassociation). The column
# check is inline: one predictable branch per nonzero, before its row of X is read; the
# nonzeros are walked with unsigned positions and the checked column read as unsigned, so
# that no load pays numba's negative-index wraparound (9-12% less CPU time at k = 16 on
# the stencils, one thread).
# LLVM's SLP vectorizer packs the row's variables into vector registers; numba runs it
# only when ``NUMBA_SLP_VECTORIZE`` is set, so these kernels are compiled with it set (see
# :func:`_compile_vectorised`). One thread against scipy's ``csr_matvecs`` (2-core AMD
# EPYC, float64, five matrices of the benchmark, one loaded run): k = 16 1.5-5.5x (the
# in-memory kernel with nonzeros in pairs that this replaces: 0.66-1.28x); at k = 64 and
# 256, where X and the output stream from memory, 0.9-3.6x against 0.4-3.6x, within
# the run's noise. Compiled on first use of a width (numba cannot cache generated code).
# The streaming form writes each finished row (tile) by non-temporal stores of 8 values
# (thrifty.sparse.outputs): for an output that does not stay in cache, no read of each
# line before it is written (see spmm_rows).
_FIXED_WIDTHS = frozenset({4, 8, 16, 32, 64, 128, 256})
_TILE = 64


def _fixed_source(k: int, stream: bool = False) -> str:
    """The source of the SpMM kernel for ``k`` columns (see above); ``stream``: the row
    written by :func:`~thrifty.sparse.outputs.stream_store8` (``k`` a multiple of 8)."""
    t = min(k, _TILE)
    ind = " " * (12 if k > t else 8)
    head = """def spmm_fixed(indptr, indices, data, X, out, r0, r1):
    n_cols = np.uint64(X.shape[0])
    n_ind = indices.shape[0]
    if r1 < r0 or indptr.shape[0] <= r1 or r0 < 0 or data.shape[0] < n_ind:
        return max(r0, 0)
    if r1 == r0:  # no rows: the one pointer still within the arrays
        return -1 if np.uint64(indptr[r0]) <= np.uint64(n_ind) else r0
    zero = np.zeros(1, out.dtype)[0]
    for i in range(r0, r1):
        p0, hi = indptr[i], indptr[i + 1]
        if p0 < 0 or hi < p0 or hi > n_ind:
            return i
        o = out[i - r0]
""" + (f"        for b in range(0, {k}, {t}):\n" if k > t else "        b = 0\n")
    acc = [f"{ind}s{c} = zero" for c in range(t)]
    loop = [f"{ind}for p in range(np.uint64(p0), np.uint64(hi)):", f"{ind}    j = indices[p]",
            f"{ind}    if np.uint64(j) >= n_cols:", f"{ind}        return i",
            f"{ind}    a = data[p]", f"{ind}    x = X[np.uint64(j)]"]
    loop += [f"{ind}    s{c} += a * x[b + {c}]" for c in range(t)]
    if stream:
        store = [f"{ind}stream_store8(o, b + {c}, " + ", ".join(f"s{c + q}" for q in range(8))
                 + ")" for c in range(0, t, 8)]
        end = "    store_fence()\n    return -1\n"
    else:
        store = [f"{ind}o[b + {c}] = s{c}" for c in range(t)]
        end = "    return -1\n"
    return head + "\n".join(acc + loop + store) + "\n" + end


_FIXED: dict[tuple[int, bool], Any] = {}
_NUMBA_CONFIG: Any = _config  # its settings are read at import from the environment
_FIXED_LOCK = threading.Lock()


def _spmm_kernel(k: int, stream: bool = False) -> Any:
    """The SpMM kernel for ``k`` columns: a fixed-width one for common widths, writing by
    streaming stores if ``stream`` (then ``k`` must be a multiple of 8)."""
    if k not in _FIXED_WIDTHS:
        return _spmm
    fn = _FIXED.get((k, stream))
    if fn is None:
        with _FIXED_LOCK:
            fn = _FIXED.get((k, stream))
            if fn is None:
                ns: dict[str, Any] = {"np": np, "stream_store8": stream_store8,
                                      "store_fence": store_fence}
                exec(compile(_fixed_source(k, stream), f"<thrifty spmm k={k}>", "exec"), ns)
                disp = numba.njit(nogil=True, fastmath=False)(ns["spmm_fixed"])
                fn = _FIXED[k, stream] = lambda *args: _call_vectorised(disp, *args)
    return fn


def _streams(out: np.ndarray, k: int) -> bool:
    """Whether the streaming SpMM kernel may write ``out``: a fixed width that is a
    multiple of 8, a dtype it stores, C-contiguous rows starting on a 64-byte boundary
    (8 values of 4 bytes need 32: every row of a multiple of 8 of them is aligned)."""
    return k in _FIXED_WIDTHS and k % 8 == 0 and out.dtype.name in STREAM_DTYPES and \
        out.flags.c_contiguous and is_aligned(out)


def _compile_vectorised(fn: Any, args: tuple[Any, ...]) -> None:
    """Compile ``fn`` for the types of ``args`` with numba's SLP vectorizer on, then turn
    compilation at call time off (a call with new types then raises ``TypeError`` and
    comes back here). The setting is numba's global one, changed and restored under
    numba's compiler lock, so no other compilation sees it; it changes which vector
    instructions are used, never the order of the arithmetic (``fastmath`` stays off)."""
    with global_compiler_lock:
        fn.disable_compile(False)
        old = _NUMBA_CONFIG.SLP_VECTORIZE
        _NUMBA_CONFIG.SLP_VECTORIZE = 1
        try:
            fn.compile(tuple(fn.typeof_pyval(a) for a in args))
        finally:
            _NUMBA_CONFIG.SLP_VECTORIZE = old
            if fn.overloads:  # (numba refuses to turn compilation off with no version)
                fn.disable_compile(True)


def _call_vectorised(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` for a kernel compiled by :func:`_compile_vectorised`."""
    if fn.overloads:
        try:
            return fn(*args)
        except (TypeError, RuntimeError):
            # no version for these argument types yet: TypeError, or numba's "compilation
            # disabled" when the call came while another thread was compiling a version
            pass
    _compile_vectorised(fn, args)
    return fn(*args)


@_jit
def _same(a, b):  # pragma: no cover - compiled
    # chunks of an OR of differences, with an exit after a differing chunk; unsigned loop
    # indices spare the negative-index check, so that LLVM vectorises the loop
    n = a.shape[0]
    c0 = 0
    while c0 < n:
        c1 = min(n, c0 + 4096)
        diff = 0
        for i in range(np.uint64(c0), np.uint64(c1)):
            diff |= a[i] ^ b[i]
        if diff != 0:
            return False
        c0 = c1
    return True


@_jit
def _cols_below(indices, lo, hi, n_cols):  # pragma: no cover - compiled
    # whether indices[lo:hi] all lie in 0..n_cols-1: the largest index read as unsigned of
    # its own width (a negative one is then huge), a max over a slice with a signed loop
    # counter, which LLVM vectorises (a compare-OR loop, a signed max, or unsigned loop
    # bounds were not vectorised: 2-8x slower here)
    if hi <= lo:
        return True
    v = indices[lo:hi]
    if indices.itemsize == 4:
        m32 = np.uint32(0)
        for t in range(v.shape[0]):
            u = np.uint32(v[t])
            m32 = u if u > m32 else m32
        return np.uint64(m32) < np.uint64(min(np.uint64(n_cols), np.uint64(2**31)))
    m64 = np.uint64(0)
    for t in range(v.shape[0]):
        w = np.uint64(v[t])
        m64 = w if w > m64 else m64
    return m64 < np.uint64(n_cols)


@_jit
def _indptr_ok(indptr, n_ind, r0, r1):  # pragma: no cover - compiled
    # rows r0..r1-1's pointers non-decreasing from >= 0 to <= n_ind: the largest step read
    # as unsigned (a decrease is then huge), vectorised like _cols_below
    p = indptr[r0:r1 + 1]
    step = np.uint64(0)
    for t in range(p.shape[0] - 1):
        d = np.uint64(p[t + 1]) - np.uint64(p[t])
        step = d if d > step else step
    lo, hi = np.uint64(indptr[r0]), np.uint64(indptr[r1])
    return step <= n_ind and lo <= hi and hi <= n_ind


@_jit
def _indices_in_range(indptr, indices, n_cols, r0, r1):  # pragma: no cover - compiled
    # rows r0..r1's index pointers non-decreasing within the index array, and their column
    # indices in 0..n_cols-1 (a pass at memory speed over 4 or 8 bytes per stored entry)
    if r1 <= r0 or r0 < 0 or indptr.shape[0] <= r1:
        return r1 == r0 and 0 <= r0 < indptr.shape[0] and \
            np.uint64(indptr[r0]) <= np.uint64(indices.shape[0])
    if not _indptr_ok(indptr, np.uint64(indices.shape[0]), r0, r1):
        return False
    return _cols_below(indices, np.uint64(indptr[r0]), np.uint64(indptr[r1]), n_cols)


@_jit
def _sddmm(indptr, indices, X, Yt, out, r0, r1):  # pragma: no cover - compiled
    d = X.shape[1]
    base = indptr[r0]
    for i in range(r0, r1):
        xi = X[i]
        for p in range(indptr[i], indptr[i + 1]):
            yj = Yt[indices[p]]
            out[p - base] = 0
            s = out[p - base]
            for c in range(d):
                s += xi[c] * yj[c]
            out[p - base] = s


@_jit
def _masked_dot(aip, aix, adata, btp, btx, btdata, mip, mix, out, r0, r1):
    # pragma: no cover - compiled
    base = mip[r0]
    for i in range(r0, r1):
        a0, a1 = aip[i], aip[i + 1]
        for p in range(mip[i], mip[i + 1]):
            j = mix[p]
            pa, pb, b1 = a0, btp[j], btp[j + 1]
            out[p - base] = 0
            s = out[p - base]
            while pa < a1 and pb < b1:
                ka, kb = aix[pa], btx[pb]
                if ka == kb:
                    s += adata[pa] * btdata[pb]
                    pa += 1
                    pb += 1
                elif ka < kb:
                    pa += 1
                else:
                    pb += 1
            out[p - base] = s


@_jit
def _masked_softmax(indptr, values, maskvals, out, r0, r1):  # pragma: no cover - compiled
    base = indptr[r0]
    for i in range(r0, r1):
        m = -np.inf
        for p in range(indptr[i], indptr[i + 1]):
            if maskvals[p] != 0 and values[p] > m:
                m = values[p]
        s = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            if maskvals[p] != 0:
                e = np.exp(values[p] - m)
                out[p - base] = e
                s += e
            else:
                out[p - base] = 0.0
        if s > 0:
            for p in range(indptr[i], indptr[i + 1]):
                out[p - base] /= s


def spmm_rows(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, X: np.ndarray,
              out: np.ndarray, r0: int, r1: int, stream: bool = False) -> None:
    """``out[:] = A[r0:r1] @ X`` for a CSR matrix ``A`` and a dense 2-D ``X``.

    ``out`` has ``r1 - r0`` rows. Raises :class:`~thrifty.errors.PatternError` when a row's
    index pointers or column indices lie outside the arrays (checked in the same pass).
    ``stream``: write ``out`` by non-temporal stores where its width, dtype and alignment
    allow (:mod:`thrifty.sparse.outputs`), for an output too large to stay in cache that
    nothing reads right after: the same values, no read of ``out`` before it is written.
    Example: see the module docstring.
    """
    k = X.shape[1]
    if out.shape[1] != k or out.shape[0] < r1 - r0:
        raise ValueError(f"out has shape {out.shape}; rows {r0}..{r1 - 1} of A @ X need "
                         f"({r1 - r0}, {k})")
    if r0 == r1:  # no rows: the kernel reads nothing, but a bad pointer is still refused
        check_indices(indptr, indices, X.shape[0], r0, r1)
        return
    kern = _spmm_kernel(k, True) if stream and _streams(out, k) else _spmm_kernel(k)
    _raise_bad_row(kern(indptr, indices, data, X, out, r0, r1), X.shape[0])


def spmv_rows(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, x: np.ndarray,
              out: np.ndarray, r0: int, r1: int) -> None:
    """``out[:] = A[r0:r1] @ x`` for a CSR matrix ``A`` and a dense vector ``x``.

    Example
    -------
    >>> A = sp.eye_array(3, format="csr"); out = np.empty(3)
    >>> spmv_rows(A.indptr, A.indices, A.data, np.arange(3.0), out, 0, 3); out.tolist()
    [0.0, 1.0, 2.0]

    ``out`` has at least ``r1 - r0`` entries. Raises :class:`~thrifty.errors.PatternError`
    when a row's index pointers or column indices lie outside the arrays (checked in the
    product's own pass: nothing is read out of bounds).
    """
    if out.shape[0] < r1 - r0:
        raise ValueError(f"out has {out.shape[0]} entries; rows {r0}..{r1 - 1} of A @ x "
                         f"need {r1 - r0}")
    if not 0 <= r0 <= r1 < indptr.shape[0]:
        _raise_bad_row(max(r0, 0), x.shape[0])
    row = spmv_kernel(x.shape[0], x.itemsize)(indptr[r0:r1 + 1], indices, data, x, out[:r1 - r0])
    _raise_bad_row(row + r0 if row >= 0 else -1, x.shape[0])


def spmv_checked(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, x: np.ndarray,
                 out: np.ndarray) -> int:
    """``spmv_kernel(len(x), x.itemsize)(indptr, indices, data, x, out)``: the compiled kernel of
    :func:`spmv_rows` for the ``len(out)`` rows of ``indptr``; returns -1, or the first row
    (counted from the slice) whose indices are out of range (then pass it to
    :func:`raise_bad_row`)."""
    return int(spmv_kernel(x.shape[0], x.itemsize)(indptr, indices, data, x, out))


def check_indices(indptr: np.ndarray, indices: np.ndarray, n_cols: int, r0: int,
                  r1: int) -> None:
    """Raise :class:`~thrifty.errors.PatternError` unless rows ``[r0, r1)`` of a CSR
    matrix have index pointers within its index array and column indices in
    ``0..n_cols-1``: what a kernel without its own checks (scipy's ``csr_matvec``) needs
    before it reads a matrix whose index arrays may have changed since inspection."""
    if not _indices_in_range(indptr, indices, n_cols, r0, r1):
        raise PatternError(f"rows {r0}..{r1 - 1} of the sparse operand have index pointers "
                           f"or column indices outside 0..{n_cols - 1} (or beyond its index "
                           "array): its index arrays were changed after the plan inspected "
                           "them, or are malformed; specialize again for the new pattern")


#: ``indices_ok(indptr, indices, n_cols, r0, r1)``: :func:`check_indices` as a bool, with no
#: Python frame around the compiled check (the per-call path of scipy's kernel).
indices_ok = _indices_in_range


def _raise_bad_row(row: int, n_cols: int) -> None:
    """Raise :class:`~thrifty.errors.PatternError` for ``row >= 0``, the row a checked
    kernel found out of range (``-1``: none)."""
    if row >= 0:
        raise PatternError(f"row {row} of the sparse operand has index pointers or column "
                           f"indices outside 0..{n_cols - 1} (or beyond its index array): "
                           "its index arrays were changed after the plan inspected them, "
                           "or are malformed; specialize again for the new pattern")


raise_bad_row = _raise_bad_row


def sddmm_rows(indptr: np.ndarray, indices: np.ndarray, X: np.ndarray, Yt: np.ndarray,
               out: np.ndarray, r0: int, r1: int) -> None:
    """Values of ``X @ Yt.T`` at the pattern's entries of rows ``[r0, r1)``, in CSR order.

    ``out`` has ``indptr[r1] - indptr[r0]`` entries.

    Example
    -------
    >>> S = sp.csr_array(np.eye(2)); out = np.empty(2)
    >>> sddmm_rows(S.indptr, S.indices, np.ones((2, 3)), np.ones((2, 3)), out, 0, 2)
    >>> out.tolist()
    [3.0, 3.0]
    """
    _sddmm(indptr, indices, X, Yt, out, r0, r1)


def masked_dot_rows(A: sp.csr_array, Bt: sp.csr_array, M: sp.csr_array, out: np.ndarray,
                    r0: int, r1: int) -> None:
    """Values of ``A @ Bt.T`` at the entries of mask ``M`` in rows ``[r0, r1)``, each as a
    sorted merge of a row of ``A`` and a row of ``Bt`` (the dot-product form of masked
    SpGEMM, cheaper than Gustavson's when the mask is sparser than the product).

    Example
    -------
    >>> L = sp.csr_array(np.tril(np.ones((3, 3)), -1)); out = np.empty(L.nnz)
    >>> masked_dot_rows(L, sp.csr_array(L.T), L, out, 0, 3); out.tolist()
    [0.0, 1.0, 0.0]
    """
    _masked_dot(A.indptr, A.indices, A.data, Bt.indptr, Bt.indices, Bt.data,
                M.indptr, M.indices, out, r0, r1)


def masked_softmax_rows(indptr: np.ndarray, values: np.ndarray, maskvals: np.ndarray,
                        out: np.ndarray, r0: int, r1: int) -> None:
    """Row-wise softmax over the entries whose mask value is nonzero; others give 0.

    ``values`` and ``maskvals`` are aligned with the pattern ``indptr`` (full length);
    ``out`` receives the entries of rows ``[r0, r1)``. A row with no entries gives 0.

    Example
    -------
    >>> out = np.empty(3)
    >>> masked_softmax_rows(np.array([0, 3]), np.zeros(3), np.array([1., 1., 0.]), out, 0, 1)
    >>> out.tolist()
    [0.5, 0.5, 0.0]
    """
    _masked_softmax(indptr, values, maskvals, out, r0, r1)


def panel_gemm(flat_pos: np.ndarray, data: np.ndarray, panel_shape: tuple[int, int],
               cols: np.ndarray, X: np.ndarray, out: np.ndarray) -> None:
    """``out[:] = P @ X[cols]`` where the dense panel ``P`` is scattered from CSR ``data``.

    ``flat_pos[p]`` is the flat position in ``P`` of the stored entry ``p`` of the panel's
    rows (computed once by the inspector), so a run only scatters values and calls BLAS.
    ``cols`` are sorted and distinct; where they are every row of ``X``, ``X`` is read as
    it is.

    Example
    -------
    >>> out = np.empty((1, 1))
    >>> panel_gemm(np.array([0, 1]), np.array([2., 3.]), (1, 2), np.array([0, 2]),
    ...            np.array([[1.], [5.], [1.]]), out); out.tolist()
    [[5.0]]
    """
    P = np.zeros(panel_shape, dtype=np.result_type(data, X))
    P.ravel()[flat_pos] = data
    # every column of A (cols: sorted, distinct, in range): X itself, no gathered copy
    np.matmul(P, X if len(cols) == X.shape[0] else X[cols], out=out)


def same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two 1-D integer arrays hold the same values (any integer dtypes).

    The pattern check of a plan's run: O(n) like ``np.array_equal`` but with no temporary
    array, vectorised, and stopping at the first differing chunk.

    Example
    -------
    >>> same_values(np.arange(5, dtype=np.int32), np.arange(5)), same_values(np.ones(2, int),
    ...                                                                      np.zeros(2, int))
    (True, False)
    """
    if a.shape != b.shape:
        return False
    if a.dtype == b.dtype and a.strides == b.strides and a.ctypes.data == b.ctypes.data:
        return True  # the same memory, read alike (views of one array, say)
    if a.dtype.kind != "i" or b.dtype.kind != "i" or a.ndim != 1:
        return bool(np.array_equal(a, b))
    return bool(_same(a, b))


def csr_from_parts(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray,
                   shape: tuple[int, int]) -> sp.csr_array:
    """A canonical CSR array around existing arrays (no copy, no re-check).

    Example
    -------
    >>> csr_from_parts(np.ones(1), np.array([1], np.int32), np.array([0, 1, 1], np.int32),
    ...                (2, 2)).toarray().tolist()
    [[0.0, 1.0], [0.0, 0.0]]
    """
    A = sp.csr_array((data, indices, indptr), shape=shape, copy=False)
    A.has_sorted_indices = True
    A.has_canonical_format = True
    return A

"""The callables of a sparse plan's tasks, one class per kernel form.

Each is built from a task's ``kernel`` name and ``attrs`` by
:mod:`thrifty.sparse.registry`; they are module-level classes so that distributed workers
can unpickle them. Row-panel kernels write rows ``[r0, r1)`` of an output allocated by an
``alloc`` task and return their view of it; ``assemble`` tasks join the panels.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from thrifty.errors import PatternError
from thrifty.graph.ops import get_op
from thrifty.sparse import full_pattern as FP
from thrifty.sparse import kernels as K
from thrifty.sparse.masked import entry_positions
from thrifty.sparse.outputs import STREAM_MIN_BYTES

#: Value dtypes the compiled kernels are built for.
NUMBA_DTYPES = frozenset({"float32", "float64", "complex64", "complex128", "int32", "int64"})


def _dense(v: Any) -> np.ndarray:
    return np.asarray(v.toarray()) if sp.issparse(v) else np.asarray(v)


def _contig(x: np.ndarray, dtype: str) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=dtype)


def assemble_dense(*parts: np.ndarray) -> np.ndarray:
    """The panels' rows as one array: their common base when they tile it, a view of it
    when they tile a run of a pooled buffer (:func:`~thrifty.sparse.outputs.aligned_empty`:
    the base is its raw bytes), else a copy."""
    base = parts[0].base
    if base is not None and all(p.base is base for p in parts):
        start = ptr = parts[0].__array_interface__["data"][0]
        ok = True
        for p in parts:
            if p.__array_interface__["data"][0] != ptr or not p.flags.c_contiguous:
                ok = False
                break
            ptr += p.nbytes
        rows = sum(p.shape[0] for p in parts)
        if ok and base.dtype == parts[0].dtype and rows == base.shape[0]:
            return base
        if ok and base.dtype == np.uint8 and base.ndim == 1:
            off = start - base.__array_interface__["data"][0]
            return np.ndarray((rows, *parts[0].shape[1:]), dtype=parts[0].dtype,
                              buffer=base, offset=off)
    return np.concatenate(parts, axis=0)


#: The widest ``X`` whose product a plan writes by streaming stores: faster at k = 16
#: (one thread, minimum wall time, on the stencils); at k = 64 slower on the stencils and
#: faster on the random instances, within loaded runs' noise (see the README).
STREAM_MAX_K = 32


@dataclass(frozen=True, slots=True)
class Seg:
    r0: int
    r1: int
    form: str  # "csr" or "panel"
    cols: np.ndarray | None = None
    flat_pos: np.ndarray | None = None


class SpmmPanel:
    """Rows ``[r0, r1)`` of ``A @ X`` by segments, written into the shared output: by
    streaming stores when ``X`` has at most :data:`STREAM_MAX_K` columns, the output is at
    least :data:`~thrifty.sparse.outputs.STREAM_MIN_BYTES` and no post-op reads the panel
    right after (its rows would then come back from memory instead of the cache)."""

    def __init__(self, r0: int, r1: int, segs: Sequence[Seg], dtype: str,
                 post: Callable[[np.ndarray], np.ndarray] | None) -> None:
        self.r0, self.r1, self.segs, self.dtype, self.post = r0, r1, tuple(segs), dtype, post

    def __call__(self, out: np.ndarray, A: sp.csr_array, X: np.ndarray) -> np.ndarray:
        X = _contig(X, self.dtype)
        data = A.data if A.data.dtype == self.dtype else A.data.astype(self.dtype)
        stream = self.post is None and X.shape[1] <= STREAM_MAX_K and \
            out.nbytes >= STREAM_MIN_BYTES
        for s in self.segs:
            o = out[s.r0:s.r1]
            if s.form == "csr":
                K.spmm_rows(A.indptr, A.indices, data, X, o, s.r0, s.r1, stream)
            else:
                p0, p1 = A.indptr[s.r0], A.indptr[s.r1]
                K.panel_gemm(s.flat_pos, data[p0:p1], (s.r1 - s.r0, len(s.cols)),  # type: ignore[arg-type]
                             s.cols, X, o)  # type: ignore[arg-type]
        view = out[self.r0:self.r1]
        if self.post is not None:
            _post_in_place(self.post, view)
        return view

    @classmethod
    def merge(cls, panels: Sequence[Any]) -> Callable[..., tuple[np.ndarray, ...]] | None:
        """One call doing the work of ``panels`` (contiguous, in row order, of one dtype
        and post-op) in the calling thread: their segments in order, the post-op on all
        rows; it returns each panel's view, the values each panel writes. ``None`` where
        they do not fit (see :class:`~thrifty.runtime.taskrun.CompiledGraph`)."""
        if not _contiguous(cls, panels) or \
                any(p.dtype != panels[0].dtype or not _same_post(p.post, panels[0].post)
                    for p in panels):
            return None
        whole = cls(panels[0].r0, panels[-1].r1, [s for p in panels for s in p.segs],
                    panels[0].dtype, panels[0].post)
        return _Merged(whole, tuple((p.r0, p.r1) for p in panels))


def _contiguous(cls: type, panels: Sequence[Any]) -> bool:
    """Whether ``panels`` are all of class ``cls`` and tile one run of rows in order."""
    return bool(panels) and all(type(p) is cls for p in panels) and \
        all(a.r1 == b.r0 for a, b in zip(panels, panels[1:]))


def _same_post(p: Any, q: Any) -> bool:
    return p is q or (type(p) is type(q) is Unary and p.op == q.op and p.attrs == q.attrs)


class _Merged:
    """A row-panel task over the rows of several (``whole``), returning the views of the
    panels ``rows``, as they would have: what :meth:`SpmmPanel.merge` and
    :meth:`SpmvPanel.merge` return."""

    def __init__(self, whole: Any, rows: tuple[tuple[int, int], ...]) -> None:
        self.whole, self.rows = whole, rows

    def __call__(self, out: np.ndarray, *args: Any) -> tuple[np.ndarray, ...]:
        self.whole(out, *args)
        return tuple(out[r0:r1] for r0, r1 in self.rows)


def _post_in_place(post: Callable[[np.ndarray], np.ndarray], view: np.ndarray) -> None:
    """``view[...] = post(view)``; a relu in place (no temporary the size of the panel)."""
    if isinstance(post, Unary) and post.op == "relu" and view.dtype.kind in "fi":
        np.maximum(view, view.dtype.type(0), out=view)  # as the reference: NaN stays NaN
    else:
        view[...] = post(view)


def _kernel_ok(A: Any, x: np.ndarray, dt: np.dtype) -> bool:  # type: ignore[type-arg]
    """Whether the compiled SpMV applies to these arrays: one value dtype of the compiled
    ones (the output's), integer index arrays, and a vector as long as ``A`` is wide."""
    return A.data.dtype == dt and x.dtype == dt and x.ndim == 1 and \
        x.shape[0] == A.shape[1] and dt.name in NUMBA_DTYPES and \
        A.indptr.dtype.kind == A.indices.dtype.kind == "i"


def _readable(A: Any) -> None:
    """Raise :class:`~thrifty.errors.PatternError` unless scipy may read CSR ``A``: as many
    values as indices, index pointers and column indices in range."""
    if sp.issparse(A) and A.format == "csr":
        if A.data.shape[0] < A.indices.shape[0]:
            raise PatternError(f"the sparse operand has {A.data.shape[0]} values for "
                               f"{A.indices.shape[0]} column indices: its arrays were "
                               "changed after the plan inspected them, or are malformed; "
                               "specialize again for the new pattern")
        K.check_indices(A.indptr, A.indices, A.shape[1], 0, A.shape[0])


def _scipy_rows(A: Any, x: Any, r0: int, r1: int) -> np.ndarray:
    """Rows ``[r0, r1)`` of ``A @ x`` by scipy, for dtypes the compiled kernel lacks."""
    _readable(A)
    p0, p1 = A.indptr[r0], A.indptr[r1]
    sub = sp.csr_array((A.data[p0:p1], A.indices[p0:p1], A.indptr[r0:r1 + 1] - p0),
                       shape=(r1 - r0, A.shape[1]), copy=False)
    return np.asarray(sub @ x)


_spmv_kernel = K.spmv_kernel


class SpmvPanel:
    """Rows ``[r0, r1)`` of ``A @ x``, written into the shared output: the compiled kernel
    on the whole matrix's arrays (no copy; it releases the GIL), which checks the panel's
    index pointers and column indices in its own pass over them; scipy on a sliced panel
    for other dtypes."""

    def __init__(self, r0: int, r1: int, dtype: str) -> None:
        self.r0, self.r1, self.dtype = r0, r1, dtype
        self.np_dtype = np.dtype(dtype)

    def __call__(self, out: np.ndarray, A: sp.csr_array, x: np.ndarray) -> np.ndarray:
        r0, r1 = self.r0, self.r1
        x = np.asarray(x)
        o = out[r0:r1]
        if _kernel_ok(A, x, self.np_dtype):
            row = _spmv_kernel(x.shape[0], x.itemsize)(A.indptr[r0:r1 + 1], A.indices, A.data, x, o)
            if row >= 0:
                K.raise_bad_row(r0 + row, A.shape[1])
            return o
        o[...] = _scipy_rows(A, x, r0, r1)
        return o

    @classmethod
    def merge(cls, panels: Sequence[Any]) -> Callable[..., tuple[np.ndarray, ...]] | None:
        """As :meth:`SpmmPanel.merge`: one kernel call over the rows of ``panels``."""
        if not _contiguous(cls, panels) or any(p.dtype != panels[0].dtype for p in panels):
            return None
        return _Merged(cls(panels[0].r0, panels[-1].r1, panels[0].dtype),
                       tuple((p.r0, p.r1) for p in panels))


class SpmvWhole:
    """``A @ x`` in one call of the compiled kernel (the ``spmv_scipy`` kernel, named when
    it called scipy's ``csr_matvec``): what the cost model picks when splitting rows would
    not pay.

    Per call: the value dtypes compared, an output (of 4 MB and more from a
    :class:`~thrifty.sparse.kernels.BufferPool`: no fresh pages), the compiled kernel,
    which checks the index pointers and column indices in its own pass over them (so
    index arrays changed after inspection give a PatternError, never an out-of-bounds
    read; no separate pass) and is as fast as ``csr_matvec`` on one thread here."""

    def __init__(self, dtype: str) -> None:
        self.dtype = dtype
        self.np_dtype = np.dtype(dtype)  # compared on every call: a dtype, not its name
        self.pool: K.BufferPool | None = None
        self.pool_rows = -(-K.POOL_MIN_BYTES // self.np_dtype.itemsize)
        self.compiled = dtype in NUMBA_DTYPES

    def empty(self, n: int) -> np.ndarray:
        """An output of ``n`` entries (uninitialised)."""
        if n < self.pool_rows:
            return np.empty(n, dtype=self.np_dtype)
        pool = self.pool
        if pool is None or pool.shape != (n,):
            pool = self.pool = K.BufferPool((n,), self.np_dtype)
        return pool.empty()

    def __call__(self, A: sp.csr_array, x: np.ndarray) -> np.ndarray:
        dt = self.np_dtype
        if type(x) is not np.ndarray:
            x = np.asarray(x)
        n, m = A.shape
        data = A.data
        if self.compiled and data.dtype == dt and x.dtype == dt and x.ndim == 1 and \
                x.shape[0] == m and A.indptr.dtype.kind == A.indices.dtype.kind == "i":
            out = self.empty(n)
            row = _spmv_kernel(x.shape[0], x.itemsize)(A.indptr, A.indices, data, x, out)
            if row >= 0:
                K.raise_bad_row(row, m)
            return out
        return _scipy_rows(A, x, 0, n).astype(dt, copy=False)

    def __reduce__(self) -> tuple[Any, ...]:  # a task sent to a worker: no pool
        return (SpmvWhole, (self.dtype,))


def spmv_fast_path(spec_a: Any, spec_x: Any, whole: SpmvWhole
                   ) -> Callable[[Any, Any], np.ndarray | None] | None:
    """The per-call path of a plan that is one :class:`SpmvWhole` task on inputs checked by
    ``spec_a`` (CSR) and ``spec_x`` (dense vector): a function ``(A, x) -> A @ x`` in one
    Python frame, or ``None`` from it where its cheap tests fail (then the plan's general
    path checks the inputs and names what is wrong).

    The tests: ``A`` is a ``csr_array`` holding the very index arrays inspected (identity,
    by weak reference; the spec must be ``pattern_free``: the kernel reads the index arrays
    at run time, so any values they hold now give their own product), of the plan's shape
    and value dtype; ``x`` an ndarray of the plan's shape and dtype. The kernel checks the
    index pointers and column indices in its own pass (an in-place change that puts them
    out of range is a PatternError, never an out-of-bounds read). Returns ``None`` (no fast
    path) when the specs or the task do not fit.
    """
    if not (spec_a.sparse and not spec_x.sparse and spec_a.pattern_free and
            spec_a.seen is not None and whole.compiled and len(spec_x.shape) == 1 and
            spec_a.dtype == spec_x.dtype == whole.dtype):
        return None
    ref_ip, ref_ix = spec_a.seen
    dt, shape_a, shape_x = whole.np_dtype, tuple(spec_a.shape), tuple(spec_x.shape)
    n, m = shape_a
    # the kernel for x's length and dtype, both fixed by the spec: chosen once here
    kernel = _spmv_kernel(shape_x[0], dt.itemsize)
    empty, csr, ndarray = np.empty, sp.csr_array, np.ndarray
    pooled = n >= whole.pool_rows

    def spmv(A: Any, x: Any) -> np.ndarray | None:
        if type(A) is csr and type(x) is ndarray:
            ip, ix, d = A.indptr, A.indices, A.data
            if ip is ref_ip() and ix is ref_ix() and d.dtype is dt and x.dtype is dt and \
                    x.shape == shape_x and A.shape == shape_a:
                out = whole.empty(n) if pooled else empty(n, dt)
                row = kernel(ip, ix, d, x, out)
                if row < 0:
                    return out
                K.raise_bad_row(row, m)
        return None

    return spmv


class FullPattern:
    """``A @ X`` for a CSR ``A`` whose pattern holds every entry: its data array, in
    canonical (row-major) order, is the dense matrix.

    Every call checks that the index arrays passed still hold that pattern (compared with
    the numbers ``0, n, 2n, ...`` and ``0 .. n-1``, not with a stored copy; a
    :class:`~thrifty.errors.PatternError` otherwise), so the plan need not compare them
    with the inspected ones (the spec is ``pattern_free``). ``A @ x`` for a vector: one
    compiled pass that checks each row and takes its dot product
    (:func:`~thrifty.sparse.full_pattern.full_gemv`), its rows walked first to last and last to
    first on alternate calls: a matrix somewhat larger than a core's L2 cache then starts
    each call on the rows the previous call read last, still in cache (500 x 500 float64
    with int32 indices, 2.9 MB against 2 MB of L2 here: 0.66x the time of walking it in
    one direction every call; each row's value is the same either way); ``A @ X`` for a
    matrix, other dtypes or mixed ones: the check, then BLAS on the values viewed as the
    dense matrix (no copy)."""

    def __init__(self, shape: tuple[int, int], dtype: str) -> None:
        self.shape, self.dtype = (int(shape[0]), int(shape[1])), dtype
        self.np_dtype = np.dtype(dtype)
        self.compiled = dtype in NUMBA_DTYPES
        self.ref = FP.full_row(self.shape[1], np.int32)  # the indices' dtype, reset on use
        self.backward = False  # the direction of the next call's walk over the rows

    def __call__(self, A: sp.csr_array, X: np.ndarray) -> np.ndarray:
        if type(X) is not np.ndarray:
            X = np.asarray(X)
        shape, dt = self.shape, self.np_dtype
        data, indices = A.data, A.indices
        ref = self.ref
        if ref.dtype != indices.dtype and indices.dtype.kind == "i":
            ref = self.ref = FP.full_row(shape[1], indices.dtype)
        if X.ndim == 1 and self.compiled and data.dtype == dt and X.dtype == dt and \
                X.shape[0] == shape[1]:
            out = np.empty(shape[0], dtype=dt)
            backward = self.backward
            self.backward = not backward  # (calls from two threads: either order is right)
            FP.full_gemv(A.indptr, indices, data, X, out, ref, backward)
            return out
        FP.check_full_pattern(A.indptr, indices, shape, ref)
        D = data[:shape[0] * shape[1]].reshape(shape)
        return np.asarray(np.matmul(D, X)).astype(dt, copy=False)


class SddmmPanel:
    def __init__(self, r0: int, r1: int, P: sp.csr_array, dtype: str) -> None:
        self.r0, self.r1, self.P, self.dtype = r0, r1, P, dtype

    def __call__(self, out: np.ndarray, X: np.ndarray, B: np.ndarray) -> np.ndarray:
        P = self.P
        p0, p1 = P.indptr[self.r0], P.indptr[self.r1]
        K.sddmm_rows(P.indptr, P.indices, _contig(X, self.dtype), _contig(B.T, self.dtype),
                     out[p0:p1], self.r0, self.r1)
        return out[p0:p1]


class MaskedDotPanel:
    def __init__(self, r0: int, r1: int, P: sp.csr_array, dtype: str) -> None:
        self.r0, self.r1, self.P, self.dtype = r0, r1, P, dtype

    def __call__(self, out: np.ndarray, A: sp.csr_array, Bt: sp.csr_array) -> np.ndarray:
        P = self.P
        p0, p1 = P.indptr[self.r0], P.indptr[self.r1]
        A = A if A.dtype == self.dtype else A.astype(self.dtype)
        Bt = Bt if Bt.dtype == self.dtype else Bt.astype(self.dtype)
        K.masked_dot_rows(A, Bt, P, out[p0:p1], self.r0, self.r1)
        return out[p0:p1]


class SoftmaxPanel:
    def __init__(self, r0: int, r1: int, P: sp.csr_array, gx: Gather, gm: Gather) -> None:
        self.r0, self.r1, self.P, self.gx, self.gm = r0, r1, P, gx, gm

    def __call__(self, out: np.ndarray, x: Any, mask: Any) -> np.ndarray:
        P = self.P
        p0, p1 = P.indptr[self.r0], P.indptr[self.r1]
        K.masked_softmax_rows(P.indptr, self.gx(x).astype(out.dtype, copy=False),
                              self.gm(mask), out[p0:p1], self.r0, self.r1)
        return out[p0:p1]


class CsrAssemble:
    def __init__(self, P: sp.csr_array) -> None:
        self.P = P

    def __call__(self, *parts: np.ndarray) -> sp.csr_array:
        data = assemble_dense(*parts) if parts[0].ndim == 1 and len(parts) > 1 else parts[0]
        if len(data) != self.P.nnz:
            data = np.concatenate(parts)
        return K.csr_from_parts(data, self.P.indices, self.P.indptr, self.P.shape)


class Gather:
    """An operand's values at the entries of pattern ``P`` (1-D, CSR order)."""

    def __init__(self, kind: str, P: sp.csr_array, shape: tuple[int, ...],
                 struct: sp.csr_array | None) -> None:
        self.kind = kind
        rows = np.repeat(np.arange(P.shape[0], dtype=np.int64), np.diff(P.indptr))
        cols = P.indices.astype(np.int64)
        self.pos: np.ndarray | None = None
        self.found: np.ndarray | None = None
        if kind == "scalar":
            pass
        elif kind == "dense":
            if tuple(shape) == tuple(P.shape):
                self.pos = rows * P.shape[1] + cols
            else:
                self.kind = "broadcast"
                self.rows, self.cols, self.shape = rows, cols, P.shape
        else:
            assert struct is not None
            if struct.nnz == P.nnz and np.array_equal(struct.indptr, P.indptr) and \
                    np.array_equal(struct.indices, P.indices):
                self.kind = "same"
            elif struct.shape == P.shape:  # a search per entry of P, in S's row
                self.pos, self.found = entry_positions(P, struct)
                self.kind = "csr"
            else:
                srows = np.repeat(np.arange(struct.shape[0], dtype=np.int64),
                                  np.diff(struct.indptr))
                skeys = srows * P.shape[1] + struct.indices
                keys = rows * P.shape[1] + cols
                pos = np.searchsorted(skeys, keys)
                posc = np.minimum(pos, max(len(skeys) - 1, 0))
                self.found = (pos < len(skeys)) & (skeys[posc] == keys) if len(skeys) else \
                    np.zeros(len(keys), dtype=bool)
                self.pos = posc
                self.kind = "csr"

    def __call__(self, v: Any) -> np.ndarray:
        if self.kind == "scalar":
            return np.asarray(v)
        if self.kind == "dense":
            return np.asarray(v).reshape(-1)[self.pos]
        if self.kind == "broadcast":
            return np.broadcast_to(np.asarray(v), self.shape)[self.rows, self.cols]
        if self.kind == "same":
            return v.data
        found, pos = self.found, self.pos
        assert found is not None and pos is not None  # kind == "csr" sets both
        d = v.data
        if len(d) == 0:
            return np.zeros(len(found), dtype=d.dtype)
        return np.where(found, d[pos], np.zeros((), dtype=d.dtype))


class ElementwiseCsr:
    def __init__(self, op: str, attrs: Mapping[str, Any], gathers: Sequence[Gather],
                 P: sp.csr_array, dtype: str) -> None:
        self.op, self.attrs, self.gathers, self.P, self.dtype = op, dict(attrs), gathers, P, dtype

    def __call__(self, *vals: Any) -> sp.csr_array:
        args = [g(v) for g, v in zip(self.gathers, vals)]
        with np.errstate(all="ignore"):
            data = np.asarray(get_op(self.op).reference(*args, **self.attrs))
        data = np.broadcast_to(data, (self.P.nnz,)).astype(self.dtype, copy=True)
        return K.csr_from_parts(data, self.P.indices, self.P.indptr, self.P.shape)


class DenseRef:
    def __init__(self, op: str, attrs: Mapping[str, Any], dtype: str) -> None:
        self.op, self.attrs, self.dtype = op, dict(attrs), dtype

    def __call__(self, *vals: Any) -> np.ndarray:
        with np.errstate(all="ignore"):
            out = np.asarray(get_op(self.op).reference(*[_dense(v) for v in vals],
                                                       **self.attrs))
        return out.astype(self.dtype, copy=False)


class Transpose:
    def __call__(self, x: Any) -> Any:
        if sp.issparse(x):
            T = sp.csr_array(x.T)
            T.sort_indices()
            return T
        return np.asarray(x).T


class Alloc:
    """The shared output of row-panel tasks: an array of an earlier run that the caller has
    dropped, else a new one (:class:`~thrifty.sparse.kernels.BufferPool`).

    Pooled from 128 KiB (glibc's threshold for giving an allocation its own mapping): on
    the 2-core development machine a plan's 1 MB intermediates, freshly mapped each run,
    cost page faults that doubled the time of the kernel writing them (two-layer GCN on a
    4,096-node graph: SpMM k = 32 0.64 ms against 0.25 ms with a reused output, the plan's
    CPU time 2.2 against 1.2 ms)."""

    def __init__(self, shape: tuple[int, ...], dtype: str) -> None:
        self.shape, self.dtype = shape, dtype
        self.pool = K.BufferPool(shape, dtype, min_bytes=1 << 17)

    def __call__(self) -> np.ndarray:
        return self.pool.empty()


class Spgemm:
    def __init__(self, dtype: str, sparse_out: bool) -> None:
        self.dtype, self.sparse_out = dtype, sparse_out

    def __call__(self, A: Any, B: Any) -> Any:
        C = A @ B
        if sp.issparse(C):
            C = sp.csr_array(C).astype(self.dtype, copy=False)
            if self.sparse_out:
                C.sort_indices()
                return C
            return C.toarray()
        return np.asarray(C).astype(self.dtype, copy=False)


class DenseMatmul:
    def __init__(self, dtype: str) -> None:
        self.dtype = dtype

    def __call__(self, A: Any, B: Any) -> np.ndarray:
        if sp.issparse(A) or sp.issparse(B):
            out = A @ B
            out = out.toarray() if sp.issparse(out) else out
        else:
            out = np.matmul(A, B)
        return np.asarray(out).astype(self.dtype, copy=False)



class Unary:
    def __init__(self, op: str, attrs: Mapping[str, Any]) -> None:
        self.op, self.attrs = op, dict(attrs)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(get_op(self.op).reference(x, **self.attrs))


"""Specialization: a dense spec and its inputs' patterns become a TaskGraph of kernel calls.

The inspector/executor split of Saltz et al. ("Run-time parallelization and scheduling of
loops", IEEE TC 1991), as sparse tensor compilers use it today (Taco's assemble/compute
split; Kjolstad et al., OOPSLA 2017): :func:`specialize` *inspects* the inputs once
(patterns, :mod:`~thrifty.sparse.propagate`, lowering), and the returned :class:`SparsePlan`
*executes* on any inputs with the same patterns.

Lowering picks, per op and from its propagated patterns, one standard kernel
(:mod:`thrifty.sparse.kernels`):

======================  ===============================================================
op and patterns         kernel
======================  ===============================================================
csr @ dense matrix      ``spmm``: per block row, CSR SpMM or gemm on a gathered dense
                        panel, whichever the :class:`~thrifty.sparse.cost.CostModel` finds
                        cheaper (``spmm_csr`` / ``spmm_panel``)
csr @ dense, every      ``gemm_full_pattern``: the CSR values viewed as the dense matrix
entry stored            (no copy), BLAS
csr @ dense vector      ``spmv``: scipy's CSR kernel on row panels read in place, or
                        ``spmv_scipy``: one call of it when splitting would not pay
dense @ dense, needed   ``sddmm`` (only the needed entries)
only on a sparse set
csr @ csr, needed on    ``masked_spgemm`` (Gustavson with the mask as admission set)
a sparse set
csr @ csr               ``spgemm`` (scipy)
dense @ dense           ``gemm`` (BLAS through numpy)
masked softmax          ``masked_softmax`` over the mask's pattern
elementwise, sparse     ``elementwise_csr``: numpy on the values of the output pattern
anything else           ``dense``: the op's numpy reference on densified operands
======================  ===============================================================

Row-panel kernels are split into as many tasks as the cost model finds worth the
scheduler's overhead (one task carries at least ``min_task_seconds`` of estimated work);
the panels write into one output buffer when they share memory (sync and threaded
schedulers) and are concatenated otherwise (a distributed cluster). A run with no scheduler
named executes small plans in process (a compiled loop over the tasks, independent row
panels on a pooled thread: a few microseconds per call) and hands large ones to Dask's
threaded scheduler (``CostModel.dask_seconds``).

Example
-------
>>> import numpy as np, scipy.sparse as sp, thrifty as th
>>> gcn = th.program(lambda A, X, W: th.relu(A @ (X @ W)))
>>> A = sp.random_array((200, 200), density=0.02, format="csr", rng=0)
>>> X, W = np.ones((200, 8)), np.ones((8, 4))
>>> plan = gcn.specialize(A=A, X=X, W=W)
>>> sorted(plan.report()["kernels"])
['fused_relu', 'gemm', 'spmm_csr']
>>> bool(np.allclose(plan(A=A, X=X, W=W), np.maximum(A @ (X @ W), 0)))
True
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import scipy.sparse as sp

from thrifty.errors import PatternError, ShapeError, SpecError
from thrifty.graph.ir import Graph, Node
from thrifty.graph.ops import get_op
from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
from thrifty.sparse import kernels as K
from thrifty.sparse.cost import CostModel
from thrifty.sparse.pattern import Pattern, canonical_csr, structure_fingerprint
from thrifty.sparse.propagate import Propagation, einsum_as_matmul, propagate

__all__ = ["specialize", "SparsePlan", "InputSpec", "execute_taskgraph"]

#: Above this many visited pairs, a masked product's flops are not counted exactly.
EXACT_COUNT_LIMIT = 10**6
_NUMBA_DTYPES = {"float32", "float64", "complex64", "complex128", "int32", "int64"}


# -- inputs ----------------------------------------------------------------------------------
_CSR_TYPES = (sp.csr_array, sp.csr_matrix)


@dataclass(frozen=True, slots=True)
class InputSpec:
    """What a plan expects of one input: type, form, and for sparse inputs the pattern.

    ``indptr`` and ``indices`` are the plan's own copies of the inspected pattern (a caller
    who changes its index arrays in place cannot change them). Every run compares the
    index arrays it is given with them (O(nnz), vectorised, no temporaries; about 3 µs per
    2*10^4 entries here, 10-20% of an SpMV over the same arrays), except when
    ``pattern_free`` is set and the very arrays inspected (``seen``, weak references) are
    passed again: then every task that reads this input reads its index arrays at run time
    and the plan holds nothing derived from its pattern, so the result is right for
    whatever those arrays hold, even after an in-place change (a new pattern in new arrays
    is still compared, and rejected).
    """

    name: str
    node: int
    shape: tuple[int, ...]
    dtype: str
    sparse: bool
    fingerprint: str
    indptr: np.ndarray | None = field(default=None, repr=False)
    indices: np.ndarray | None = field(default=None, repr=False)
    pattern_free: bool = False
    seen: tuple[Any, Any] | None = field(default=None, repr=False, compare=False)
    np_dtype: np.dtype = field(init=False, repr=False, compare=False)  # type: ignore[type-arg]

    def __post_init__(self) -> None:
        object.__setattr__(self, "np_dtype", np.dtype(self.dtype))  # compared on every run

    def check(self, value: Any) -> Any:
        """The value in the plan's run-time form; raises on a type or pattern mismatch."""
        tv = type(value)
        if tv is np.ndarray and not self.sparse:  # the common dense case, cheaply
            if value.shape != self.shape or value.dtype != self.np_dtype:
                self._mismatch(value)
            return value
        if tv in _CSR_TYPES and self.sparse:
            if value.shape != self.shape or value.data.dtype != self.np_dtype:
                self._mismatch(value)
            ip, ix = value.indptr, value.indices
            seen = self.seen
            if (self.pattern_free and seen is not None and ip is seen[0]() and
                    ix is seen[1]()) \
                    or (len(ix) == len(self.indices)  # type: ignore[arg-type]
                        and K.same_values(ip, self.indptr)  # type: ignore[arg-type]
                        and K.same_values(ix, self.indices)):  # type: ignore[arg-type]
                # the inspected pattern: canonical (sorted, no duplicates) like it
                return value if tv is sp.csr_array else sp.csr_array(value)
        self._mismatch(value)
        return self._check_general(value)

    def _mismatch(self, value: Any) -> None:
        """Raise for a value of another shape or dtype."""
        shape = tuple(value.shape) if hasattr(value, "shape") else np.shape(value)
        if shape != self.shape:
            raise ShapeError(f"input {self.name!r} has shape {shape}, but the plan was "
                             f"specialized for shape {self.shape}")
        dtype = value.dtype if hasattr(value, "dtype") else np.asarray(value).dtype
        if dtype != self.dtype:  # numpy compares a dtype with its name without building one
            raise SpecError(f"input {self.name!r} has dtype {np.dtype(dtype).name}, but the "
                            f"plan was specialized for dtype {self.dtype}; cast the input or "
                            "specialize again")

    def _check_general(self, value: Any) -> Any:
        """Other types and forms (shape and dtype already checked)."""
        if not self.sparse:
            if sp.issparse(value):
                raise PatternError(f"input {self.name!r} is sparse, but the plan was "
                                   "specialized for a dense array; specialize again")
            return np.asarray(value)
        if not sp.issparse(value):
            raise PatternError(f"input {self.name!r} is a dense {type(value).__name__}, but "
                               "the plan was specialized for a scipy.sparse matrix; pass one "
                               "or specialize again")
        indptr, indices = self.indptr, self.indices
        assert indptr is not None and indices is not None  # set for every sparse input
        C = canonical_csr(value, self.name)
        if not (len(C.indices) == len(indices) and K.same_values(C.indptr, indptr)
                and K.same_values(C.indices, indices)):
            raise PatternError(
                f"input {self.name!r} has a different sparsity pattern ({C.nnz} stored "
                f"entries, fingerprint {structure_fingerprint(C)}) from the one the plan was "
                f"specialized for ({len(indices)} entries, fingerprint "
                f"{self.fingerprint}); specialize again (calling the program does so)")
        return C


def _input_spec(node: Node, value: Any) -> InputSpec:
    name = node.name or ""
    if sp.issparse(value) and node.type.ndim == 2:
        C = canonical_csr(value, name)
        seen = None
        if value.format == "csr" and K.same_values(value.indptr, C.indptr) and \
                K.same_values(value.indices, C.indices):
            # the caller's arrays (canonical already), without keeping them alive
            seen = (weakref.ref(value.indptr), weakref.ref(value.indices))
        return InputSpec(name, node.id, node.type.shape, node.type.dtype, True,
                         structure_fingerprint(C), C.indptr.copy(), C.indices.copy(),
                         False, seen)
    return InputSpec(name, node.id, node.type.shape, node.type.dtype, False,
                     f"dense{node.type.shape}")


# -- run-time helpers (module level so that distributed workers can unpickle them) ------------
def _dense(v: Any) -> np.ndarray:
    return np.asarray(v.toarray()) if sp.issparse(v) else np.asarray(v)


def _contig(x: np.ndarray, dtype: str) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=dtype)


def _assemble_dense(*parts: np.ndarray) -> np.ndarray:
    """The panels' rows as one array: their common base when they tile it, else a copy."""
    base = parts[0].base
    if base is not None and all(p.base is base for p in parts) and \
            sum(p.shape[0] for p in parts) == base.shape[0]:
        ptr = base.__array_interface__["data"][0]
        ok = True
        for p in parts:
            if p.__array_interface__["data"][0] != ptr:
                ok = False
                break
            ptr += p.nbytes
        if ok:
            return base
    return np.concatenate(parts, axis=0)


def _split_rows(cum: np.ndarray, n_tasks: int) -> list[tuple[int, int]]:
    """Split rows ``[0, len(cum) - 1)`` into ``n_tasks`` ranges of equal cumulative cost."""
    n = len(cum) - 1
    if n_tasks <= 1 or n <= 1:
        return [(0, n)]
    targets = np.linspace(0, cum[-1], n_tasks + 1)[1:-1]
    cuts = np.unique(np.concatenate([[0], np.searchsorted(cum, targets), [n]]))
    return [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:]) if b > a] or [(0, n)]


@dataclass(frozen=True, slots=True)
class _Seg:
    r0: int
    r1: int
    form: str  # "csr" or "panel"
    cols: np.ndarray | None = None
    flat_pos: np.ndarray | None = None


class _SpmmPanel:
    """Rows ``[r0, r1)`` of ``A @ X`` by segments, written into the shared output."""

    def __init__(self, r0: int, r1: int, segs: Sequence[_Seg], dtype: str,
                 post: Callable[[np.ndarray], np.ndarray] | None) -> None:
        self.r0, self.r1, self.segs, self.dtype, self.post = r0, r1, tuple(segs), dtype, post

    def __call__(self, out: np.ndarray, A: sp.csr_array, X: np.ndarray) -> np.ndarray:
        X = _contig(X, self.dtype)
        data = A.data if A.data.dtype == self.dtype else A.data.astype(self.dtype)
        for s in self.segs:
            o = out[s.r0:s.r1]
            if s.form == "csr":
                K.spmm_rows(A.indptr, A.indices, data, X, o, s.r0, s.r1)
            else:
                p0, p1 = A.indptr[s.r0], A.indptr[s.r1]
                K.panel_gemm(s.flat_pos, data[p0:p1], (s.r1 - s.r0, len(s.cols)),  # type: ignore[arg-type]
                             s.cols, X, o)  # type: ignore[arg-type]
        view = out[self.r0:self.r1]
        if self.post is not None:
            view[...] = self.post(view)
        return view


try:  # scipy's own CSR kernels, called without scipy's Python-level dispatch
    from scipy.sparse import _sparsetools as _st
except ImportError:  # pragma: no cover - a scipy without the module: scipy's public API
    _st = None


def _matvec_ok(A: Any, x: np.ndarray, dtype: str) -> bool:
    """Whether scipy's ``csr_matvec`` applies to these arrays: one value dtype (the
    output's) and one index dtype (it makes contiguous copies of strided inputs itself)."""
    return _st is not None and A.data.dtype == dtype and x.dtype == dtype and \
        A.indptr.dtype == A.indices.dtype and x.ndim == 1


class _SpmvPanel:
    """Rows ``[r0, r1)`` of ``A @ x``, written into the shared output: scipy's CSR kernel on
    views of the whole matrix's arrays (no copy; it releases the GIL), else the compiled
    kernel, else scipy on a sliced panel."""

    def __init__(self, r0: int, r1: int, dtype: str) -> None:
        self.r0, self.r1, self.dtype = r0, r1, dtype

    def __call__(self, out: np.ndarray, A: sp.csr_array, x: np.ndarray) -> np.ndarray:
        r0, r1 = self.r0, self.r1
        x = np.asarray(x)
        o = out[r0:r1]
        if _matvec_ok(A, x, self.dtype):
            o.fill(0)  # csr_matvec accumulates into its output
            _st.csr_matvec(r1 - r0, A.shape[1], A.indptr[r0:r1 + 1], A.indices, A.data, x, o)
            return o
        if self.dtype in _NUMBA_DTYPES and A.data.dtype == self.dtype == x.dtype:
            K.spmv_rows(A.indptr, A.indices, A.data, x, o, r0, r1)
            return o
        p0, p1 = A.indptr[r0], A.indptr[r1]
        sub = sp.csr_array((A.data[p0:p1], A.indices[p0:p1], A.indptr[r0:r1 + 1] - p0),
                           shape=(r1 - r0, A.shape[1]), copy=False)
        o[...] = sub @ x
        return o


class _SpmvWhole:
    """``A @ x`` in one call of scipy's CSR kernel (the ``spmv_scipy`` kernel): what the cost
    model picks when splitting rows would not pay."""

    def __init__(self, dtype: str) -> None:
        self.dtype = dtype
        self.np_dtype = np.dtype(dtype)  # compared on every call: a dtype, not its name

    def __call__(self, A: sp.csr_array, x: np.ndarray) -> np.ndarray:
        dt = self.np_dtype
        if type(x) is np.ndarray and x.dtype == dt and A.data.dtype == dt and x.ndim == 1 \
                and A.indptr.dtype == A.indices.dtype and _st is not None:
            n, m = A.shape
            out = np.zeros(n, dtype=dt)
            _st.csr_matvec(n, m, A.indptr, A.indices, A.data, x, out)
            return out
        x = np.asarray(x)
        if _matvec_ok(A, x, self.dtype):
            out = np.zeros(A.shape[0], dtype=self.dtype)
            _st.csr_matvec(A.shape[0], A.shape[1], A.indptr, A.indices, A.data, x, out)
            return out
        return np.asarray(A @ x).astype(self.dtype, copy=False)


class _FullPattern:
    """``A @ X`` for a CSR ``A`` whose pattern holds every entry: its data array, in
    canonical (row-major) order, viewed as the dense matrix and multiplied by BLAS."""

    def __init__(self, shape: tuple[int, int], dtype: str) -> None:
        self.shape, self.dtype = shape, dtype

    def __call__(self, A: sp.csr_array, X: np.ndarray) -> np.ndarray:
        D = A.data.reshape(self.shape)
        return np.asarray(np.matmul(D, np.asarray(X))).astype(self.dtype, copy=False)


class _SddmmPanel:
    def __init__(self, r0: int, r1: int, P: sp.csr_array, dtype: str) -> None:
        self.r0, self.r1, self.P, self.dtype = r0, r1, P, dtype

    def __call__(self, out: np.ndarray, X: np.ndarray, B: np.ndarray) -> np.ndarray:
        P = self.P
        p0, p1 = P.indptr[self.r0], P.indptr[self.r1]
        K.sddmm_rows(P.indptr, P.indices, _contig(X, self.dtype), _contig(B.T, self.dtype),
                     out[p0:p1], self.r0, self.r1)
        return out[p0:p1]


class _MaskedSpgemmPanel:
    def __init__(self, r0: int, r1: int, P: sp.csr_array, dtype: str) -> None:
        self.r0, self.r1, self.P, self.dtype = r0, r1, P, dtype

    def __call__(self, out: np.ndarray, A: sp.csr_array, B: sp.csr_array) -> np.ndarray:
        P = self.P
        p0, p1 = P.indptr[self.r0], P.indptr[self.r1]
        A = A if A.dtype == self.dtype else A.astype(self.dtype)
        B = B if B.dtype == self.dtype else B.astype(self.dtype)
        K.masked_spgemm_rows(A, B, P, out[p0:p1], self.r0, self.r1)
        return out[p0:p1]


class _MaskedDotPanel:
    def __init__(self, r0: int, r1: int, P: sp.csr_array, dtype: str) -> None:
        self.r0, self.r1, self.P, self.dtype = r0, r1, P, dtype

    def __call__(self, out: np.ndarray, A: sp.csr_array, Bt: sp.csr_array) -> np.ndarray:
        P = self.P
        p0, p1 = P.indptr[self.r0], P.indptr[self.r1]
        A = A if A.dtype == self.dtype else A.astype(self.dtype)
        Bt = Bt if Bt.dtype == self.dtype else Bt.astype(self.dtype)
        K.masked_dot_rows(A, Bt, P, out[p0:p1], self.r0, self.r1)
        return out[p0:p1]


class _SoftmaxPanel:
    def __init__(self, r0: int, r1: int, P: sp.csr_array, gx: _Gather, gm: _Gather) -> None:
        self.r0, self.r1, self.P, self.gx, self.gm = r0, r1, P, gx, gm

    def __call__(self, out: np.ndarray, x: Any, mask: Any) -> np.ndarray:
        P = self.P
        p0, p1 = P.indptr[self.r0], P.indptr[self.r1]
        K.masked_softmax_rows(P.indptr, self.gx(x).astype(out.dtype, copy=False),
                              self.gm(mask), out[p0:p1], self.r0, self.r1)
        return out[p0:p1]


class _CsrAssemble:
    def __init__(self, P: sp.csr_array) -> None:
        self.P = P

    def __call__(self, *parts: np.ndarray) -> sp.csr_array:
        data = _assemble_dense(*parts) if parts[0].ndim == 1 and len(parts) > 1 else parts[0]
        if len(data) != self.P.nnz:
            data = np.concatenate(parts)
        return K.csr_from_parts(data, self.P.indices, self.P.indptr, self.P.shape)


class _Gather:
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


class _ElementwiseCsr:
    def __init__(self, op: str, attrs: Mapping[str, Any], gathers: Sequence[_Gather],
                 P: sp.csr_array, dtype: str) -> None:
        self.op, self.attrs, self.gathers, self.P, self.dtype = op, dict(attrs), gathers, P, dtype

    def __call__(self, *vals: Any) -> sp.csr_array:
        args = [g(v) for g, v in zip(self.gathers, vals)]
        with np.errstate(all="ignore"):
            data = np.asarray(get_op(self.op).reference(*args, **self.attrs))
        data = np.broadcast_to(data, (self.P.nnz,)).astype(self.dtype, copy=True)
        return K.csr_from_parts(data, self.P.indices, self.P.indptr, self.P.shape)


class _DenseRef:
    def __init__(self, op: str, attrs: Mapping[str, Any], dtype: str) -> None:
        self.op, self.attrs, self.dtype = op, dict(attrs), dtype

    def __call__(self, *vals: Any) -> np.ndarray:
        with np.errstate(all="ignore"):
            out = np.asarray(get_op(self.op).reference(*[_dense(v) for v in vals],
                                                       **self.attrs))
        return out.astype(self.dtype, copy=False)


class _Transpose:
    def __call__(self, x: Any) -> Any:
        if sp.issparse(x):
            T = sp.csr_array(x.T)
            T.sort_indices()
            return T
        return np.asarray(x).T


class _Const:
    def __init__(self, value: np.ndarray) -> None:
        self.value = value

    def __call__(self) -> np.ndarray:
        return self.value


class _Alloc:
    def __init__(self, shape: tuple[int, ...], dtype: str) -> None:
        self.shape, self.dtype = shape, dtype
        self.pool = K.BufferPool(shape, dtype)

    def __call__(self) -> np.ndarray:
        return self.pool.empty()


class _Spgemm:
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


class _DenseMatmul:
    def __init__(self, dtype: str) -> None:
        self.dtype = dtype

    def __call__(self, A: Any, B: Any) -> np.ndarray:
        if sp.issparse(A) or sp.issparse(B):
            out = A @ B
            out = out.toarray() if sp.issparse(out) else out
        else:
            out = np.matmul(A, B)
        return np.asarray(out).astype(self.dtype, copy=False)


# -- the builder -----------------------------------------------------------------------------
@dataclass(slots=True)
class _Value:
    """Where a node's value lives at run time and in which form."""

    buffer: str
    kind: str  # "dense" or "csr"
    struct: sp.csr_array | None = None  # exact structure of a csr value


class _Builder:
    def __init__(self, graph: Graph, prop: Propagation, cost: CostModel) -> None:
        self.graph, self.prop, self.cost = graph, prop, cost
        self.tasks: list[Task] = []
        self.buffers: list[Buffer] = []
        self.values: dict[int, _Value] = {}
        self.kernels: Counter[str] = Counter()
        self.useful = 0
        self.executed = 0
        self.consts: dict[str, Any] = {}
        self.post: dict[int, Callable[[np.ndarray], np.ndarray]] = {}
        self.fused: set[int] = set()
        self.fuse_into: dict[int, int] = {}

    def buffer(self, bid: str, size: int, producer: str | None) -> str:
        self.buffers.append(Buffer(bid, int(size), producer))
        return bid

    def task(self, tid: str, fn: Callable[..., Any], reads: Sequence[str], size: int,
             kernel: str, seconds: float, node: int, count: bool = True) -> str:
        self.tasks.append(Task(tid, tuple(reads), (tid,), max(seconds, 0.0), 0, fn, kernel,
                               {"node": node}))
        self.buffer(tid, size, tid)
        if count:
            self.kernels[kernel] += 1
        return tid


def _nbytes(shape: tuple[int, ...], dtype: str, nnz: int | None = None) -> int:
    item = np.dtype(dtype).itemsize
    if nnz is not None:
        return int(nnz * (item + 4) + 4 * (shape[0] + 1))
    return int(np.prod(shape, dtype=np.int64)) * item


def _exact(p: Pattern) -> sp.csr_array | None:
    return p.elements if not p.is_dense else None


def _sparse_out(b: _Builder, nid: int) -> sp.csr_array | None:
    """The exact output pattern when the node should produce CSR, else ``None``."""
    p = b.prop.effective[nid]
    if p.is_dense or p.elements is None or p.ndim != 2:
        return None
    return p.elements if p.density < b.cost.sparse_output_density else None


def _ref_task(b: _Builder, node: Node) -> _Value:
    reads = [b.values[i].buffer for i in node.inputs]
    flops = get_op(node.op).flops([b.graph[i].type for i in node.inputs], node.type,
                                  node.attrs)
    b.executed += flops
    b.useful += flops
    tid = b.task(f"v{node.id}", _DenseRef(node.op, node.attrs, node.type.dtype), reads,
                 node.type.nbytes, "dense", b.cost.elementwise_seconds(node.type.size), node.id)
    return _Value(tid, "dense")


def _panelled(b: _Builder, node: Node, name: str, out_shape: tuple[int, ...], dtype: str,
              ranges: list[tuple[int, int]], make: Callable[[int, int], Callable[..., Any]],
              reads: Sequence[str], seconds: float, kernel_of: Callable[[int, int], str],
              P: sp.csr_array | None) -> _Value:
    """Tasks for a row-panel kernel: one allocation, one task per range, one assembly."""
    nid = node.id
    alloc = b.task(f"alloc{nid}", _Alloc(out_shape, dtype), [], _nbytes(out_shape, dtype),
                   "alloc", 0.0, nid, count=False)
    total_rows = max(1, (P.shape[0] if P is not None else out_shape[0]))
    parts = []
    for k, (r0, r1) in enumerate(ranges):
        frac = (r1 - r0) / total_rows
        parts.append(b.task(f"{name}{nid}.{k}", make(r0, r1), [alloc, *reads],
                            int(_nbytes(out_shape, dtype) * frac), kernel_of(r0, r1),
                            seconds * frac, nid))
    if P is not None:
        return _Value(b.task(f"v{nid}", _CsrAssemble(P), parts,
                             _nbytes(P.shape, dtype, P.nnz), "assemble", 0.0, nid, False),
                      "csr", P)
    if len(parts) == 1:
        return _Value(b.task(f"v{nid}", _assemble_dense, parts, _nbytes(out_shape, dtype),
                             "assemble", 0.0, nid, False), "dense")
    return _Value(b.task(f"v{nid}", _assemble_dense, parts, _nbytes(out_shape, dtype),
                         "assemble", 0.0, nid, False), "dense")


def _spmm_segments(b: _Builder, A: sp.csr_array, pat: Pattern, k: int,
                   r0: int, r1: int) -> list[_Seg]:
    """Per block row of ``[r0, r1)``: CSR, or a gathered dense panel where it is cheaper."""
    cm = b.cost
    n_cols = A.shape[1]
    if pat.is_dense or pat.blocks is None:
        return [_Seg(r0, r1, "csr")]
    br, bc = pat.block  # type: ignore[misc]
    grid = pat.blocks
    segs: list[_Seg] = []
    for I0 in range(r0 // br, -(-r1 // br)):
        a, z = max(r0, I0 * br), min(r1, (I0 + 1) * br)
        nnz = int(A.indptr[z] - A.indptr[a])
        cblocks = grid.indices[grid.indptr[I0]:grid.indptr[I0 + 1]]
        width = min(n_cols, len(cblocks) * bc)
        form = "csr"
        if nnz and width and nnz / ((z - a) * width) >= cm.panel_density_threshold and \
                cm.panel_seconds(z - a, width, nnz, k) < cm.spmm_seconds(nnz, k):
            form = "panel"
        if form == "csr":
            if segs and segs[-1].form == "csr" and segs[-1].r1 == a:
                segs[-1] = _Seg(segs[-1].r0, z, "csr")
            else:
                segs.append(_Seg(a, z, "csr"))
            continue
        cols = (cblocks[:, None].astype(np.int64) * bc + np.arange(bc)[None, :]).ravel()
        cols = cols[cols < n_cols]
        p0, p1 = A.indptr[a], A.indptr[z]
        rows = np.repeat(np.arange(z - a, dtype=np.int64), np.diff(A.indptr[a:z + 1]))
        cidx = A.indices[p0:p1].astype(np.int64)
        rank = np.searchsorted(cblocks, cidx // bc)
        flat = rows * len(cols) + rank * bc + cidx % bc
        segs.append(_Seg(a, z, "panel", cols, flat))
    return segs


def _lower_matmul(b: _Builder, node: Node, a_id: int, b_id: int,
                  flags: tuple[bool, bool, bool]) -> _Value:
    graph, cm = b.graph, b.cost
    dtype = node.type.dtype
    va, vb = b.values[a_id], b.values[b_id]
    pa, pb = b.prop.effective[a_id], b.prop.effective[b_id]
    ta, tb, tout = flags
    if ta or tb or tout or dtype not in _NUMBA_DTYPES:
        return _generic_matmul(b, node, va, vb, pa, pb, flags)
    shape_a, shape_b = graph[a_id].type.shape, graph[b_id].type.shape
    if len(shape_a) != 2 or len(shape_b) not in (1, 2):
        return _generic_matmul(b, node, va, vb, pa, pb, flags)
    P = _sparse_out(b, node.id)
    need = b.prop.need[node.id]
    if P is not None and len(shape_b) == 2 and va.kind == "csr" and vb.kind == "csr":
        # a product with a known sparse output pattern is a masked SpGEMM over it
        need = need if need is not None else b.prop.forward[node.id]
    if P is not None and need is not None and len(shape_b) == 2:
        if va.kind == "dense" and vb.kind == "dense":
            d = shape_a[1]
            cum = P.indptr.astype(np.float64)
            secs = 2.0 * P.nnz * d / cm.csr_flops
            ranges = _split_rows(cum, cm.n_tasks(secs))
            b.useful += 2 * P.nnz * d
            b.executed += 2 * P.nnz * d
            return _panelled(b, node, "sddmm", (P.nnz,), dtype, ranges,
                             lambda r0, r1: _SddmmPanel(r0, r1, P, dtype),
                             [va.buffer, vb.buffer], secs, lambda r0, r1: "sddmm", P)
        if va.kind == "csr" and vb.kind == "csr":
            Sa, Sb = va.struct, vb.struct
            assert Sa is not None and Sb is not None
            brow = np.diff(Sb.indptr).astype(np.float64)
            row_work = np.zeros(P.shape[0]) if Sa.nnz == 0 else np.add.reduceat(
                np.concatenate([brow[Sa.indices], [0.0]]),
                np.minimum(Sa.indptr[:-1], Sa.nnz)) * (np.diff(Sa.indptr) > 0)
            cum = np.concatenate([[0.0], np.cumsum(row_work + np.diff(P.indptr))])
            # the dot-product form merges a row of A with a column of B per mask entry
            bcol = np.bincount(Sb.indices, minlength=Sb.shape[1]).astype(np.float64)
            arow = np.diff(Sa.indptr).astype(np.float64)
            prow = np.repeat(np.arange(P.shape[0]), np.diff(P.indptr))
            dot_entry = arow[prow] + bcol[P.indices]
            dot_cum = np.concatenate([[0.0], np.cumsum(dot_entry)])[P.indptr]
            if float(dot_cum[-1]) + 4.0 * Sb.nnz < 0.7 * float(cum[-1]):
                visits = int(dot_cum[-1])
                hits = _masked_hits(Sa, Sb, P) if visits <= EXACT_COUNT_LIMIT else visits
                b.useful += 2 * hits
                b.executed += 2 * hits
                secs = 2.0 * float(dot_cum[-1]) / cm.csr_flops
                ranges = _split_rows(dot_cum, cm.n_tasks(secs))
                bt = b.task(f"bt{node.id}", _Transpose(), [vb.buffer],
                            _nbytes(Sb.shape, dtype, Sb.nnz), "transpose", 0.0, node.id, False)
                return _panelled(b, node, "mdot", (P.nnz,), dtype, ranges,
                                 lambda r0, r1: _MaskedDotPanel(r0, r1, P, dtype),
                                 [va.buffer, bt], secs, lambda r0, r1: "masked_spgemm_dot", P)
            secs = 2.0 * float(cum[-1]) / cm.csr_flops
            ranges = _split_rows(cum, cm.n_tasks(secs))
            # multiply-adds landing on the mask: counted exactly when cheap, else bounded
            # by the pairs the kernel visits
            visits = int(cum[-1])
            hits = _masked_hits(Sa, Sb, P) if visits <= EXACT_COUNT_LIMIT else visits
            b.useful += 2 * hits
            b.executed += 2 * hits
            return _panelled(b, node, "mspgemm", (P.nnz,), dtype, ranges,
                             lambda r0, r1: _MaskedSpgemmPanel(r0, r1, P, dtype),
                             [va.buffer, vb.buffer], secs, lambda r0, r1: "masked_spgemm", P)
    if va.kind == "csr" and vb.kind == "dense":
        A = va.struct
        assert A is not None
        if A.nnz and A.nnz == A.shape[0] * A.shape[1]:
            # a full pattern: its canonical CSR values, row by row, are the dense matrix
            flops = 2 * A.nnz * (shape_b[1] if len(shape_b) == 2 else 1)
            b.useful += flops
            b.executed += flops
            return _Value(b.task(f"v{node.id}", _FullPattern(A.shape, dtype),
                                 [va.buffer, vb.buffer], node.type.nbytes, "gemm_full_pattern",
                                 flops / cm.gemm_flops, node.id), "dense")
        if len(shape_b) == 1:
            secs = cm.spmm_seconds(A.nnz, 1)
            ranges = _split_rows(A.indptr.astype(np.float64), cm.n_tasks(secs))
            b.useful += 2 * A.nnz
            b.executed += 2 * A.nnz
            if len(ranges) == 1:
                return _Value(b.task(f"v{node.id}", _SpmvWhole(dtype), [va.buffer, vb.buffer],
                                     node.type.nbytes, "spmv_scipy", secs, node.id), "dense")
            return _panelled(b, node, "spmv", node.type.shape, dtype, ranges,
                             lambda r0, r1: _SpmvPanel(r0, r1, dtype),
                             [va.buffer, vb.buffer], secs, lambda r0, r1: "spmv", None)
        k = shape_b[1]
        post = b.post.get(node.id)
        if post is not None:
            b.fused.add(node.id)
        segs = _spmm_segments(b, A, b.prop.forward[a_id], k, 0, A.shape[0])
        seg_secs = []
        for s in segs:
            nnz = int(A.indptr[s.r1] - A.indptr[s.r0])
            if s.form == "csr":
                seg_secs.append(cm.spmm_seconds(nnz, k))
                b.executed += 2 * nnz * k
            else:
                seg_secs.append(cm.panel_seconds(s.r1 - s.r0, len(s.cols), nnz, k))  # type: ignore[arg-type]
                b.executed += 2 * (s.r1 - s.r0) * len(s.cols) * k  # type: ignore[arg-type]
        b.useful += 2 * A.nnz * k
        secs = float(sum(seg_secs))
        n_tasks = cm.n_tasks(secs)
        groups = _group_segments(segs, seg_secs, n_tasks)
        ranges = [(g[0].r0, g[-1].r1) for g in groups]
        by_range = {(g[0].r0, g[-1].r1): g for g in groups}

        def kernel_of(r0: int, r1: int) -> str:
            forms = {s.form for s in by_range[(r0, r1)]}
            return "spmm_panel" if forms == {"panel"} else "spmm_csr"

        if not ranges:
            ranges = [(0, 0)]
            by_range[(0, 0)] = [_Seg(0, 0, "csr")]
        return _panelled(b, node, "spmm", node.type.shape, dtype, ranges,
                         lambda r0, r1: _SpmmPanel(r0, r1, by_range[(r0, r1)], dtype, post),
                         [va.buffer, vb.buffer], secs, kernel_of, None)
    if va.kind == "csr" and vb.kind == "csr":
        flops = 2 * _masked_hits(va.struct, vb.struct, None)  # type: ignore[arg-type]
        b.useful += flops
        b.executed += flops
        return _Value(b.task(f"v{node.id}", _Spgemm(dtype, False), [va.buffer, vb.buffer],
                             _nbytes(node.type.shape, dtype), "spgemm",
                             flops / cm.csr_flops, node.id), "dense")
    return _generic_matmul(b, node, va, vb, pa, pb, flags)


def _masked_hits(A: sp.csr_array, B: sp.csr_array, M: sp.csr_array | None) -> int:
    """Multiply-adds of ``A @ B`` (those landing on ``M`` when given), without forming it."""
    if A.nnz == 0 or B.nnz == 0:
        return 0
    if M is None:
        cc = np.bincount(A.indices, minlength=A.shape[1]).astype(np.int64)
        return int(np.dot(cc, np.diff(B.indptr).astype(np.int64)))
    a = K.csr_from_parts(np.ones(A.nnz), A.indices, A.indptr, A.shape)
    b = K.csr_from_parts(np.ones(B.nnz), B.indices, B.indptr, B.shape)
    out = np.empty(M.nnz)
    K.masked_spgemm_rows(a, b, M, out, 0, M.shape[0])
    return int(out.sum())


def _group_segments(segs: list[_Seg], secs: list[float], n_tasks: int) -> list[list[_Seg]]:
    """Split segments into ``n_tasks`` contiguous groups of about equal time (CSR segments
    are cut at rows in proportion to their time)."""
    total = sum(secs)
    if n_tasks <= 1 or total <= 0:
        return [segs] if segs else []
    target = total / n_tasks
    groups: list[list[_Seg]] = [[]]
    acc = 0.0
    for s, t in zip(segs, secs):
        while s.form == "csr" and acc + t > target * 1.05 and len(groups) < n_tasks \
                and s.r1 - s.r0 > 1:
            frac = (target - acc) / t
            cut = s.r0 + max(1, int(round((s.r1 - s.r0) * frac)))
            if cut >= s.r1:
                break
            groups[-1].append(_Seg(s.r0, cut, "csr"))
            groups.append([])
            t *= (s.r1 - cut) / (s.r1 - s.r0)
            s = _Seg(cut, s.r1, "csr")
            acc = 0.0
        groups[-1].append(s)
        acc += t
        if acc >= target and len(groups) < n_tasks:
            groups.append([])
            acc = 0.0
    return [g for g in groups if g]


def _generic_matmul(b: _Builder, node: Node, va: _Value, vb: _Value, pa: Pattern,
                    pb: Pattern, flags: tuple[bool, bool, bool]) -> _Value:
    """Matmul-shaped einsums, mixed forms and unusual dtypes: scipy/numpy on whole values."""
    if node.op == "einsum":
        return _ref_task(b, node)
    reads = [va.buffer, vb.buffer]
    flops = get_op("matmul").flops([b.graph[i].type for i in node.inputs], node.type, {})
    kernel = "gemm" if va.kind == vb.kind == "dense" else "spmm_scipy"
    if node.type.dtype not in _NUMBA_DTYPES:
        kernel = "dense"
    b.useful += flops if kernel != "spmm_scipy" else 2 * min(pa.nnz, pb.nnz) * \
        max(1, node.type.size // max(1, min(node.type.shape)))
    b.executed += flops
    return _Value(b.task(f"v{node.id}", _DenseMatmul(node.type.dtype), reads,
                         node.type.nbytes, kernel, flops / b.cost.gemm_flops, node.id),
                  "dense")


def _lower_softmax(b: _Builder, node: Node) -> _Value | None:
    P = _sparse_out(b, node.id)
    x_id, m_id = node.inputs
    if P is None or node.type.dtype not in ("float32", "float64"):
        return None
    vx, vm = b.values[x_id], b.values[m_id]
    gx = _Gather(vx.kind, P, b.graph[x_id].type.shape, vx.struct)
    gm = _Gather(vm.kind, P, b.graph[m_id].type.shape, vm.struct)
    secs = 20.0 * P.nnz / b.cost.csr_flops
    ranges = _split_rows(P.indptr.astype(np.float64), b.cost.n_tasks(secs))
    b.useful += 5 * P.nnz
    b.executed += 5 * P.nnz
    return _panelled(b, node, "softmax", (P.nnz,), node.type.dtype, ranges,
                     lambda r0, r1: _SoftmaxPanel(r0, r1, P, gx, gm),
                     [vx.buffer, vm.buffer], secs, lambda r0, r1: "masked_softmax", P)


def _lower_elementwise(b: _Builder, node: Node) -> _Value:
    vals = [b.values[i] for i in node.inputs]
    P = _sparse_out(b, node.id)
    if P is not None and any(v.kind == "csr" for v in vals):
        gathers = []
        for i, v in zip(node.inputs, vals):
            shape = b.graph[i].type.shape
            kind = "scalar" if len(shape) == 0 else v.kind
            if kind == "dense" and len(shape) != 2:
                kind = "broadcast_dense"
            gathers.append(_Gather("dense" if kind == "broadcast_dense" else kind, P, shape,
                                   v.struct))
        b.useful += P.nnz
        b.executed += P.nnz
        return _Value(b.task(f"v{node.id}",
                             _ElementwiseCsr(node.op, node.attrs, gathers, P, node.type.dtype),
                             [v.buffer for v in vals], _nbytes(P.shape, node.type.dtype, P.nnz),
                             "elementwise_csr", b.cost.elementwise_seconds(P.nnz), node.id),
                      "csr", P)
    return _ref_task(b, node)


def _lower_node(b: _Builder, node: Node) -> _Value:
    op = node.op
    if op == "matmul":
        return _lower_matmul(b, node, node.inputs[0], node.inputs[1], (False, False, False))
    if op == "einsum" and len(node.inputs) == 2:
        form = einsum_as_matmul(node.attrs["subscripts"])
        if form is not None:
            return _lower_einsum(b, node, form)
        return _ref_task(b, node)
    if op == "transpose" and tuple(node.attrs["axes"]) == (1, 0):
        v = b.values[node.inputs[0]]
        struct = None if v.struct is None else sp.csr_array(v.struct.T)
        if struct is not None:
            struct.sort_indices()
        return _Value(b.task(f"v{node.id}", _Transpose(), [v.buffer], node.type.nbytes,
                             "transpose", 0.0, node.id, False), v.kind, struct)
    if op == "softmax" and len(node.inputs) == 2 and node.attrs["axis"] in (1, -1) \
            and node.type.ndim == 2:
        out = _lower_softmax(b, node)
        if out is not None:
            return out
        return _ref_task(b, node)
    if get_op(op).kind == "elementwise":
        return _lower_elementwise(b, node)
    return _ref_task(b, node)


def _lower_einsum(b: _Builder, node: Node, form: tuple[bool, bool, bool]) -> _Value:
    """A matmul-shaped einsum: transposes around a matmul."""
    a_id, b_id = node.inputs
    ta, tb, tout = form
    vals = []
    for i, t in ((a_id, ta), (b_id, tb)):
        v = b.values[i]
        if t:
            struct = None if v.struct is None else sp.csr_array(v.struct.T)
            if struct is not None:
                struct.sort_indices()
            v = _Value(b.task(f"t{node.id}.{i}", _Transpose(), [v.buffer],
                              b.graph[i].type.nbytes, "transpose", 0.0, node.id, False),
                       v.kind, struct)
        vals.append(v)
    # patterns of the transposed operands follow the values' structure
    flops = get_op("einsum").flops([b.graph[i].type for i in node.inputs], node.type,
                                   node.attrs)
    b.useful += flops
    b.executed += flops
    kernel = "gemm" if all(v.kind == "dense" for v in vals) else "spmm_scipy"
    out = _Value(b.task(f"m{node.id}", _DenseMatmul(node.type.dtype),
                        [v.buffer for v in vals], node.type.nbytes, kernel,
                        flops / b.cost.gemm_flops, node.id), "dense")
    if tout:
        out = _Value(b.task(f"v{node.id}", _Transpose(), [out.buffer], node.type.nbytes,
                            "transpose", 0.0, node.id, False), "dense")
    return out


class _Unary:
    def __init__(self, op: str, attrs: Mapping[str, Any]) -> None:
        self.op, self.attrs = op, dict(attrs)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(get_op(self.op).reference(x, **self.attrs))


def _fusable_posts(graph: Graph) -> dict[int, int]:
    """``{matmul id: unary id}`` for a unary elementwise op that alone reads a matmul result
    of its own dtype (it can run on each row panel as the panel is computed)."""
    out = {}
    for n in graph:
        if len(n.inputs) != 1 or get_op(n.op).kind != "elementwise":
            continue
        (m,) = n.inputs
        mn = graph[m]
        if mn.op == "matmul" and graph.users(m) == (n.id,) and m not in graph.outputs \
                and mn.type == n.type:
            out[m] = n.id
    return out


# -- the plan --------------------------------------------------------------------------------
class SparsePlan:
    """A spec specialized to its inputs' patterns: run it on new values of those patterns.

    Call it like the program (``plan(A=A2, X=X2)``) or with :meth:`run` to choose the
    scheduler. :meth:`report` summarises what was chosen.
    """

    def __init__(self, graph: Graph, structure: type | None, prop: Propagation,
                 taskgraph: TaskGraph, inputs: Mapping[str, InputSpec],
                 outputs: Sequence[_Value], consts: Mapping[str, Any],
                 kernels: Mapping[str, int], useful: int, executed: int,
                 inspect_seconds: float, cost: CostModel) -> None:
        self.graph = graph
        self.structure = structure
        self.propagation = prop
        self.taskgraph = taskgraph
        self.inputs = dict(inputs)
        self._outputs = list(outputs)
        self._consts = dict(consts)
        self.kernels = dict(kernels)
        self.useful_flops = int(useful)
        self.executed_flops = int(executed)
        self.inspect_seconds = float(inspect_seconds)
        self.cost = cost
        self.fingerprint = tuple((n, s.fingerprint, s.dtype) for n, s in self.inputs.items())
        self.parallel = any(len(taskgraph.successors(t)) > 1 for t in taskgraph.order) or \
            sum(1 for t in taskgraph.order if not taskgraph.predecessors(t)) > 1
        # the per-call path, prepared once: input names and buffers, the compiled program,
        # each output's dtype
        self._names = tuple(self.inputs)
        self._specs = tuple(self.inputs.values())
        self._feed_keys = tuple(f"in:{n}" for n in self._names) + tuple(self._consts)
        self._const_values = tuple(self._consts.values())
        self._program = _Program(taskgraph, self._feed_keys, self.output_buffers(),
                                 cost.threads, cost.parallel_seconds)
        self._out_dtypes = tuple(np.dtype(graph[o].type.dtype) for o in graph.outputs)
        self._use_dask = self.parallel and taskgraph.total_time() >= cost.dask_seconds

    def matches(self, values: Mapping[str, Any]) -> bool:
        """Whether ``values`` fit this plan (types, forms and sparsity patterns)."""
        try:
            self.check_inputs(values)
        except (PatternError, ShapeError, SpecError):
            return False
        return True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if args:
            names = list(self.inputs)
            kwargs = {**dict(zip(names, args)), **kwargs}
        return self.run(kwargs)

    def run(self, inputs: Mapping[str, Any], scheduler: Any = None) -> Any:
        """Execute on ``inputs``.

        Parameters
        ----------
        inputs:
            Values by input name, with the patterns the plan was specialized for.
        scheduler:
            ``"sync"`` (dask's synchronous scheduler, the reference), ``"threads"`` (dask's
            threaded scheduler with ``cost.threads`` workers), a
            ``dask.distributed.Client``, ``"inline"`` (the tasks in order in this thread), or
            ``None``: Dask's threaded scheduler when the plan has tasks that can run at once
            and its estimated time is at least ``cost.dask_seconds`` (where Dask's
            100-200 µs per task is amortised), else the tasks in this process with the
            independent row panels of a level on ``cost.threads`` threads when they carry at
            least ``cost.parallel_seconds`` of work (a small plan's call then costs a few
            microseconds more than its kernels).

        Returns
        -------
        The outputs as numpy arrays, or scipy CSR arrays where the propagated output pattern
        is sparse, in the structure the spec returned them.
        """
        return self.run_checked(self.check_inputs(inputs), scheduler)

    def check_inputs(self, inputs: Mapping[str, Any]) -> list[Any]:
        """The inputs in the plan's run-time forms, in the plan's order; raises
        :class:`SpecError` (missing or unknown names, dtype), :class:`ShapeError` or
        :class:`PatternError` when they do not fit the plan."""
        values = None
        if len(inputs) == len(self._names):
            try:
                values = [inputs[n] for n in self._names]
            except KeyError:
                pass
        if values is None:
            missing = [n for n in self._names if n not in inputs]
            if missing:
                raise SpecError(f"missing input(s) {missing}; the plan's inputs are "
                                f"{list(self.inputs)}")
            unknown = [n for n in inputs if n not in self.inputs]
            raise SpecError(f"unknown input(s) {unknown}; the plan's inputs are "
                            f"{list(self.inputs)}")
        return [s.check(v) for s, v in zip(self._specs, values)]

    def run_checked(self, checked: Sequence[Any], scheduler: Any = None) -> Any:
        """:meth:`run` on inputs already returned by :meth:`check_inputs`."""
        if scheduler is None and self._use_dask:
            scheduler = "threads"
        if scheduler is None or scheduler == "inline":
            vals = self._program([*checked, *self._const_values], parallel=scheduler is None)
        else:
            vals = execute_taskgraph(self.taskgraph, self._feed(checked), self.output_buffers(),
                                     scheduler,
                                     self.cost.threads)
        outs = []
        for val, dt in zip(vals, self._out_dtypes):
            if type(val) is np.ndarray:
                if val.dtype != dt:
                    val = val.astype(dt)
            elif sp.issparse(val):
                if not isinstance(val, sp.csr_array):
                    val = sp.csr_array(val)
                if val.dtype != dt:
                    val = val.astype(dt)
            else:
                val = np.asarray(val)
                if val.dtype != dt:
                    val = val.astype(dt)
            outs.append(val)
        if self.structure is None:
            return outs[0]
        return self.structure(outs)

    def feed(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """The values of :attr:`taskgraph`'s input buffers for these inputs (checked against
        the plan's patterns), constants included: what a memory plan of the task graph
        runs on (:func:`thrifty.runtime.execute`)."""
        return self._feed(self.check_inputs(inputs))

    def _feed(self, checked: Sequence[Any]) -> dict[str, Any]:
        return dict(zip(self._feed_keys, [*checked, *self._const_values]))

    def output_buffers(self) -> list[str]:
        """The buffers of :attr:`taskgraph` that hold the outputs, in order."""
        return [v.buffer for v in self._outputs]

    def report(self) -> dict[str, Any]:
        """Tasks, kernels ``{name: count}``, useful and executed flops, inspection time."""
        dense = sum(get_op(n.op).flops([self.graph[i].type for i in n.inputs], n.type,
                                       n.attrs) for n in self.graph if n.op not in
                    ("input", "const"))
        return {
            "tasks": len(self.taskgraph),
            "kernels": dict(sorted(self.kernels.items())),
            "useful_flops": self.useful_flops,
            "executed_flops": self.executed_flops,
            "dense_flops": int(dense),
            "inspect_seconds": self.inspect_seconds,
            "estimated_seconds": self.taskgraph.total_time(),
            "propagation_rounds": self.propagation.rounds,
            "outputs": ["csr" if v.kind == "csr" else "dense" for v in self._outputs],
        }

    def __repr__(self) -> str:
        return (f"SparsePlan(inputs={list(self.inputs)}, tasks={len(self.taskgraph)}, "
                f"kernels={self.kernels})")


_POOLS: dict[int, Any] = {}
_POOLS_LOCK = threading.Lock()


def _pool(workers: int) -> Any:
    """A process-wide pool of ``workers`` threads, created on first use."""
    pool = _POOLS.get(workers)
    if pool is None:
        with _POOLS_LOCK:
            pool = _POOLS.get(workers)
            if pool is None:
                from concurrent.futures import ThreadPoolExecutor

                pool = _POOLS[workers] = ThreadPoolExecutor(workers,
                                                            thread_name_prefix="thrifty")
    return pool


class _Program:
    """A TaskGraph compiled for an in-process run: slots instead of buffer names, and levels
    of tasks that do not depend on each other.

    The per-call cost is a few microseconds plus the tasks (Dask's schedulers spend about
    100-200 µs per task, which is the whole run of a small SpMV). A level of several tasks
    whose estimated time is at least ``parallel_seconds`` runs on ``threads`` threads (a
    process-wide pool plus the calling thread, all taking tasks from one queue); the kernels
    release the GIL (numba ``nogil``, BLAS, scipy).
    """

    def __init__(self, tg: TaskGraph, inputs: Sequence[str], keys: Sequence[str],
                 threads: int, parallel_seconds: float) -> None:
        slot: dict[Hashable, int] = {b: i for i, b in enumerate(inputs)}
        level: dict[Hashable, int] = {}
        by_level: list[list[Hashable]] = []
        for tid in tg.order:
            lv = 1 + max((level[p] for p in tg.predecessors(tid)), default=-1)
            level[tid] = lv
            while len(by_level) <= lv:
                by_level.append([])
            by_level[lv].append(tid)
        last_use: dict[Hashable, int] = {}
        for lv, tids in enumerate(by_level):
            for tid in tids:
                for r in tg.tasks[tid].reads:
                    last_use[r] = lv
        keep = set(keys) | set(inputs)
        self.levels: list[tuple[tuple[tuple[Callable[..., Any], tuple[int, ...], int], ...],
                                bool, tuple[int, ...]]] = []
        self.single: tuple[Callable[..., Any], tuple[int, ...]] | None
        for lv, tids in enumerate(by_level):
            steps = []
            for tid in tids:
                t = tg.tasks[tid]
                assert t.fn is not None and len(t.writes) == 1
                slot[t.writes[0]] = len(slot)
                steps.append((t.fn, tuple(slot[r] for r in t.reads), slot[t.writes[0]]))
            par = threads > 1 and len(steps) > 1 and \
                sum(tg.tasks[t].time for t in tids) >= parallel_seconds
            free = tuple(slot[b] for b, u in last_use.items()
                         if u == lv and b not in keep)
            self.levels.append((tuple(steps), par, free))
        self.n_slots = len(slot)
        self.keys = tuple(slot[k] for k in keys)
        self.threads = threads
        # one task computing the one output from the feed: called directly
        self.single = None
        if len(self.levels) == 1 and len(self.levels[0][0]) == 1 and \
                self.keys == (self.levels[0][0][0][2],):
            fn, reads, _ = self.levels[0][0][0]
            self.single = (fn, reads)

    def __call__(self, feed: Sequence[Any], parallel: bool = True) -> list[Any]:
        if self.single is not None:
            fn, reads = self.single
            return [fn(*[feed[r] for r in reads])]
        env: list[Any] = [None] * self.n_slots
        env[:len(feed)] = feed
        for steps, par, free in self.levels:
            if par and parallel:
                self._parallel(steps, env)
            else:
                for fn, reads, out in steps:
                    env[out] = fn(*[env[r] for r in reads])
            for f in free:
                env[f] = None
        return [env[k] for k in self.keys]

    def _parallel(self, steps: Sequence[tuple[Callable[..., Any], tuple[int, ...], int]],
                  env: list[Any]) -> None:
        queue = iter(steps)  # a C iterator: next() is atomic under the GIL

        def work() -> None:
            for fn, reads, out in queue:
                env[out] = fn(*[env[r] for r in reads])

        if threading.current_thread().name.startswith("thrifty"):
            work()  # a plan run from inside a pooled task: no waiting on the pool itself
            return
        pool = _pool(self.threads - 1)
        futures = [pool.submit(work) for _ in range(min(self.threads, len(steps)) - 1)]
        try:
            work()
        finally:
            for f in futures:
                f.result()


def execute_taskgraph(tg: TaskGraph, feed: Mapping[str, Any], keys: Sequence[str],
                      scheduler: Any = "sync", threads: int = 2) -> list[Any]:
    """Run a TaskGraph whose tasks carry ``fn``; ``feed`` gives its input buffers.

    ``scheduler`` is ``"inline"`` (a loop in task order), ``"sync"``, ``"threads"`` or a
    ``dask.distributed.Client``.
    """
    if scheduler == "inline":
        env: dict[Hashable, Any] = dict(feed.items())
        remaining = {b: len(r) for b, r in tg.readers.items()}
        keep = set(keys)
        for tid in tg.order:
            t = tg.tasks[tid]
            env[t.writes[0]] = t.fn(*[env[r] for r in t.reads])  # type: ignore[misc]
            for r in t.reads:
                remaining[r] -= 1
                if remaining[r] == 0 and r not in keep:
                    env.pop(r, None)
        return [env[k] for k in keys]
    dsk: dict[Hashable, Any] = dict(feed.items())
    for t in tg.tasks.values():
        dsk[t.writes[0]] = (t.fn, *t.reads)
    if scheduler == "sync":
        import dask

        return list(dask.get(dsk, list(keys)))
    if scheduler == "threads":
        from dask.threaded import get

        return list(get(dsk, list(keys), num_workers=threads))
    if hasattr(scheduler, "get") and hasattr(scheduler, "submit"):
        # fresh key names per run: a cluster may still be forgetting the previous run's keys
        import uuid

        tag = uuid.uuid4().hex[:12]
        name = {k: f"{k}@{tag}" for k in dsk}
        fresh: dict[str, Any] = {name[k]: v for k, v in feed.items()}
        for t in tg.tasks.values():
            fresh[name[t.writes[0]]] = (t.fn, *(name[r] for r in t.reads))
        return list(scheduler.get(fresh, [name[k] for k in keys], sync=True))
    raise SpecError(f"unknown scheduler {scheduler!r}; valid: 'sync', 'threads', 'inline', "
                    "None, or a dask.distributed.Client")


def _pattern_free_inputs(graph: Graph, tasks: Sequence[Task],
                         specs: Mapping[str, InputSpec]) -> list[str]:
    """Sparse inputs whose pattern the plan does not depend on: the spec is one matmul and
    every task reading the input is a CSR kernel that reads the index arrays at run time
    (row ranges only balance the work), so a run is right for any pattern of that shape."""
    ops = [n for n in graph if n.op not in ("input", "const")]
    if len(ops) != 1 or ops[0].op != "matmul" or ops[0].id not in graph.outputs:
        return []
    free = []
    for name, s in specs.items():
        readers = [t for t in tasks if f"in:{name}" in t.reads]
        if s.sparse and readers and all(
                isinstance(t.fn, (_SpmvPanel, _SpmvWhole, _DenseMatmul)) or
                (isinstance(t.fn, _SpmmPanel) and t.fn.post is None and
                 all(seg.form == "csr" for seg in t.fn.segs)) for t in readers):
            free.append(name)
    return free


def specialize(graph: Graph, inputs: Mapping[str, Any], structure: type | None = None,
               cost: CostModel | None = None) -> SparsePlan:
    """Inspect ``inputs`` and lower ``graph`` to a :class:`SparsePlan`.

    Parameters
    ----------
    graph:
        A traced dense spec.
    inputs:
        Values (or, for dense inputs, anything with the traced shape) by input name; scipy
        sparse values are specialized to their patterns.
    structure:
        ``tuple``/``list`` when the spec returned several tensors, else ``None``.
    cost:
        The machine model; :class:`CostModel` defaults.
    """
    t0 = time.perf_counter()
    cost = cost or CostModel()
    missing = [n for n in graph.input_names if n not in inputs]
    if missing:
        raise SpecError(f"missing input(s) {missing}; the graph's inputs are "
                        f"{list(graph.input_names)}")
    specs: dict[str, InputSpec] = {}
    for i in graph.inputs:
        node = graph[i]
        spec = _input_spec(node, inputs[node.name or ""])
        specs[spec.name] = spec
        v = inputs[spec.name]
        vshape = tuple(v.shape) if hasattr(v, "shape") else np.shape(v)
        if vshape != node.type.shape:
            raise ShapeError(f"input {spec.name!r} has shape {vshape}, but the graph was "
                             f"traced for shape {node.type.shape}")
    # the inspected patterns on the plan's own index arrays (the caller's may change later)
    canon = {}
    for n, s in specs.items():
        if s.sparse:
            assert s.indptr is not None and s.indices is not None
            C = canonical_csr(inputs[n], n)
            canon[n] = K.csr_from_parts(C.data, s.indices, s.indptr, C.shape)  # type: ignore[arg-type]
    prop = propagate(graph, canon)
    b = _Builder(graph, prop, cost)
    for m, u in _fusable_posts(graph).items():
        b.post[m] = _Unary(graph[u].op, graph[u].attrs)
        b.fuse_into[u] = m
    for node in graph:
        if node.op == "input":
            s = specs[node.name or ""]
            nnz = len(s.indices) if s.sparse and s.indices is not None else None
            bid = b.buffer(f"in:{s.name}", _nbytes(s.shape, s.dtype, nnz), None)
            struct = prop.forward[node.id].elements if s.sparse else None
            b.values[node.id] = _Value(bid, "csr" if s.sparse else "dense", struct)
        elif node.op == "const":
            bid = b.buffer(f"c{node.id}", node.type.nbytes, None)
            b.consts[bid] = np.asarray(node.attrs["value"])
            b.values[node.id] = _Value(bid, "dense")
        elif b.fuse_into.get(node.id) in b.fused:
            b.values[node.id] = b.values[b.fuse_into[node.id]]
            b.kernels[f"fused_{node.op}"] += 1
        else:
            b.values[node.id] = _lower_node(b, node)
    outs = [b.values[o] for o in graph.outputs]
    results = [v.buffer for v in outs]
    for n in _pattern_free_inputs(graph, b.tasks, specs):
        specs[n] = replace(specs[n], pattern_free=True)
    tg = TaskGraph(b.tasks, b.buffers, results=results, name=f"sparse plan of {len(graph)} nodes")
    return SparsePlan(graph, structure, prop, tg, specs, outs, b.consts, b.kernels, b.useful,
                      b.executed, time.perf_counter() - t0, cost)

"""Dense outputs of the sparse kernels: recycled, cache-line aligned buffers, and the
streaming (non-temporal) stores that write them without reading them first.

A kernel that writes a large output with ordinary stores first reads every cache line it
writes (write-allocate) and leaves the output in the cache, evicting the operands it still
reads. Non-temporal stores of whole aligned vectors go to memory through write-combining
buffers: no read, and one pass over the output's bytes instead of two. For CSR SpMM with
16 columns on a 5-point stencil (90,000 rows, 448,800 nonzeros) the output is 40% of the
bytes the product must move, and write-allocate reads as many again (1.4x the bytes in
all). numba has no
such store; :func:`stream_store8` is an LLVM store with ``!nontemporal`` metadata, of 8
values at an address aligned to their size (64 bytes for float64): the caller guarantees
the alignment (:func:`aligned_empty`, :class:`BufferPool`). :func:`store_fence` orders
such stores before the kernel returns (``sfence`` on x86).
"""

from __future__ import annotations

import platform
import sys
import threading
from typing import Any

import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

__all__ = ["BufferPool", "POOL_MIN_BYTES", "ALIGN", "aligned_empty", "is_aligned",
           "stream_store8", "store_fence", "prefetch", "STREAM_DTYPES", "STREAM_MIN_BYTES"]

#: Outputs of at least this many bytes are recycled (:class:`BufferPool`): below it malloc
#: reuses freed memory anyway.
POOL_MIN_BYTES = 1 << 22

#: Outputs of at least this many bytes are written by streaming stores where a kernel has
#: them (a smaller one may still be in cache when the next kernel reads it).
STREAM_MIN_BYTES = 1 << 22

#: The alignment of :func:`aligned_empty` and of pooled buffers: a cache line, and the size
#: of the widest vector store (8 float64 in a 512-bit register).
ALIGN = 64

#: Value dtypes that :func:`stream_store8` writes (LLVM vectors of scalars; no complex).
STREAM_DTYPES = frozenset({"float32", "float64", "int32", "int64"})

_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


def aligned_empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on an :data:`ALIGN`-byte
    boundary (numpy's own large arrays start 16 bytes past a page boundary here). It is a
    view of a larger byte array, its ``base``, which every view of it holds.

    Example
    -------
    >>> a = aligned_empty((3, 5), "float64"); a.shape, a.ctypes.data % ALIGN
    ((3, 5), 0)
    """
    dt = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    raw = np.empty(nbytes + ALIGN, dtype=np.uint8)
    off = -raw.ctypes.data % ALIGN
    return raw[off:off + nbytes].view(dt).reshape(shape)


def is_aligned(a: np.ndarray) -> bool:
    """Whether ``a``'s data starts on an :data:`ALIGN`-byte boundary."""
    return a.ctypes.data % ALIGN == 0


def _refs_when_unheld() -> tuple[int, int]:
    """``sys.getrefcount`` of a list element held by nothing else, and of its ``base``
    held by nothing but the element, seen from the loop in :meth:`BufferPool.empty`."""
    held = [aligned_empty((1,), "float64")]
    for b in held:
        return sys.getrefcount(b), sys.getrefcount(b.base)
    return 0, 0  # pragma: no cover - the list is not empty


class BufferPool:
    """Output arrays of one shape and dtype, handed out again once every holder has dropped
    them.

    A large array that numpy frees is unmapped; the next one is mapped afresh, and the
    kernel that writes it first pays a page fault and the zeroing of each page (on the
    2-core development machine, writing a fresh 134 MB array took 3.5x as long as writing
    a warm one, and that difference was a third of an SpMM's time). A plan that runs again
    writes into an output of its previous run when the caller no longer holds it (nor any
    view of it: every view holds the buffer's base), so the pages stay mapped. The pool
    keeps at most ``keep`` arrays (2: ``y = plan(A=A, x=y)`` alternates between two), only
    of ``min_bytes`` or more (smaller ones are reused by malloc anyway); it holds them
    between runs, so a plan keeps up to ``keep`` outputs' memory. Pooled arrays are
    :func:`aligned_empty` (streaming stores need whole aligned vectors).

    Example
    -------
    >>> pool = BufferPool((1024, 1024), "float64")
    >>> a = pool.empty(); b = pool.empty(); a is b
    False
    >>> a_id = id(a); del a
    >>> id(pool.empty()) == a_id
    True
    """

    _UNHELD, _UNHELD_BASE = _refs_when_unheld()

    def __init__(self, shape: tuple[int, ...], dtype: Any, keep: int = 2,
                 min_bytes: int = POOL_MIN_BYTES) -> None:
        self.shape, self.dtype, self.keep, self.min_bytes = shape, np.dtype(dtype), keep, \
            min_bytes
        self._bufs: list[np.ndarray] = []
        self._lock = threading.Lock()
        self._pooled = keep > 0 and \
            int(np.prod(shape, dtype=np.int64)) * self.dtype.itemsize >= min_bytes

    def empty(self) -> np.ndarray:
        """An uninitialised array: a dropped one of this pool's, else a new one."""
        if not self._pooled:
            return np.empty(self.shape, dtype=self.dtype)
        with self._lock:
            for b in self._bufs:
                # held neither itself nor through a view (a view's base is b's base)
                if sys.getrefcount(b) == self._UNHELD and \
                        sys.getrefcount(b.base) == self._UNHELD_BASE:
                    return b
            b = aligned_empty(self.shape, self.dtype)
            if len(self._bufs) < self.keep:
                self._bufs.append(b)
            return b

    def __reduce__(self) -> tuple[Any, ...]:  # a task sent to a worker: the pool, empty
        return (BufferPool, (self.shape, self.dtype, self.keep, self.min_bytes))


def _item_pointer(context: Any, builder: Any, signature: Any, args: Any) -> Any:
    """The address of ``arr[idx]`` for an intrinsic whose first two arguments are ``arr``
    (a 1-D array) and ``idx`` (no wraparound, no bounds check: the caller's guarantee)."""
    arrty = signature.args[0]
    ary = context.make_array(arrty)(context, builder, args[0])
    i = context.cast(builder, args[1], signature.args[1], types.intp)
    return cgutils.get_item_pointer(context, builder, arrty, ary, [i], wraparound=False,
                                    boundscheck=False)


def _nontemporal(builder: Any) -> Any:
    return builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)])


@intrinsic
def stream_store8(typingctx: Any, arr: Any, idx: Any, v0: Any, v1: Any, v2: Any, v3: Any,
                  v4: Any, v5: Any, v6: Any, v7: Any) -> Any:
    """``arr[idx:idx + 8] = v0, ..., v7`` by one non-temporal vector store; ``arr`` is a
    C-contiguous 1-D array of a :data:`STREAM_DTYPES` dtype and ``&arr[idx]`` is aligned
    to 8 items (the caller's guarantee: an unaligned address faults)."""
    if not isinstance(arr, types.Array) or arr.ndim != 1 or arr.layout != "C" or \
            str(arr.dtype) not in STREAM_DTYPES:
        return None
    sig = types.void(arr, idx, v0, v1, v2, v3, v4, v5, v6, v7)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        arrty = signature.args[0]
        ptr = _item_pointer(context, builder, signature, args)
        vt = ir.VectorType(context.get_value_type(arrty.dtype), 8)
        vec = ir.Constant(vt, ir.Undefined)
        for q in range(8):
            v = context.cast(builder, args[2 + q], signature.args[2 + q], arrty.dtype)
            vec = builder.insert_element(vec, v, ir.Constant(ir.IntType(32), q))
        st = builder.store(vec, builder.bitcast(ptr, vt.as_pointer()),
                           align=8 * arrty.dtype.bitwidth // 8)
        st.set_metadata("nontemporal", _nontemporal(builder))
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def prefetch(typingctx: Any, arr: Any, idx: Any) -> Any:
    """A hint to bring ``arr[idx]`` into cache (read, kept: ``llvm.prefetch``); no effect
    on results (LLVM: a prefetch never changes the program's behaviour, and does not fault
    on an address outside ``arr``)."""
    if not isinstance(arr, types.Array) or arr.ndim != 1 or \
            not isinstance(idx, types.Integer):
        return None
    sig = types.void(arr, idx)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        ptr = _item_pointer(context, builder, signature, args)
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [ptr.type, i32, i32, i32]),
            "llvm.prefetch.p0")
        builder.call(fn, [ptr, i32(0), i32(3), i32(1)])  # read, high locality, data
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def store_fence(typingctx: Any) -> Any:
    """Order the non-temporal stores before it before every later store (``sfence``)."""
    sig = types.void()

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        if _X86:
            fn = cgutils.get_or_insert_function(builder.module,
                                                ir.FunctionType(ir.VoidType(), []),
                                                "llvm.x86.sse.sfence")
            builder.call(fn, [])
        else:  # pragma: no cover - other architectures
            builder.fence("seq_cst")
        return context.get_dummy_value()

    return sig, codegen

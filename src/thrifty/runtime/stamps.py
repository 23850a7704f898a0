"""Stamps of input values: what identifies an input a cluster already holds.

A stamp is the value's type and shape and, per array (a sparse matrix's ``data``,
``indices`` and ``indptr``), its identity, shape and dtype and the CRC-32 of each chunk of
its bytes (:data:`CHUNK` bytes a chunk). An input changed in place, anywhere, gives another
stamp, so it is sent again. The chunks of the arrays of one value are checksummed on
:data:`THREADS` threads (``zlib.crc32`` releases the GIL over a large buffer); a value of
fewer than two chunks is checksummed on the caller's thread.

Example
-------
>>> import numpy as np
>>> x = np.arange(10.0)
>>> s = stamp(x); s == stamp(x)
True
>>> x[3] = -1.0; s == stamp(x)
False
>>> chunk_crcs(memoryview(b"abc"), 2)
(2659403885, 112844655)
"""

from __future__ import annotations

import atexit
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = ["CHUNK", "THREADS", "chunk_crcs", "stamp"]

#: Bytes checksummed per task: large enough that a task's overhead is small against its
#: CRC, small enough that two threads share a value of tens of MB evenly.
CHUNK = 8 << 20
#: Threads checksumming the chunks of one value.
THREADS = 2

_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(THREADS, thread_name_prefix="thrifty-stamp")
            atexit.register(_pool.shutdown, wait=False)
        return _pool


def _bytes(a: np.ndarray) -> memoryview:
    """``a``'s bytes, flat (a copy only when ``a`` is not C-contiguous)."""
    flat = np.ascontiguousarray(a).reshape(-1)  # 1-D: empty shapes cast too
    return flat.data.cast("B")


def chunk_crcs(buf: memoryview, chunk: int = CHUNK) -> tuple[int, ...]:
    """The CRC-32 of each ``chunk`` bytes of ``buf`` in order (one for an empty buffer),
    computed on the caller's thread."""
    if chunk < 1:
        raise ValueError(f"chunk must be a positive number of bytes, got {chunk}")
    if len(buf) <= chunk:
        return (zlib.crc32(buf),)
    return tuple(zlib.crc32(buf[i:i + chunk]) for i in range(0, len(buf), chunk))


def _crcs(bufs: list[memoryview]) -> list[tuple[int, ...]]:
    """:func:`chunk_crcs` of each buffer, the chunks of them all spread over the threads."""
    pieces = [(k, i) for k, b in enumerate(bufs) for i in range(0, max(len(b), 1), CHUNK)]
    if len(pieces) < 2:
        return [chunk_crcs(b) for b in bufs]
    crcs = _executor().map(lambda p: zlib.crc32(bufs[p[0]][p[1]:p[1] + CHUNK]), pieces)
    out: list[list[int]] = [[] for _ in bufs]
    for (k, _), c in zip(pieces, crcs):
        out[k].append(c)
    return [tuple(c) for c in out]


def stamp(value: Any) -> tuple[Any, ...]:
    """What identifies an input: see the module's description."""
    arrays: tuple[Any, ...]
    if sp.issparse(value):
        arrays = (value.data, value.indices, value.indptr)
    else:
        arrays = (np.asarray(value),)
    parts: list[Any] = [type(value), getattr(value, "shape", None)]
    crcs = _crcs([_bytes(a) for a in arrays])
    for a, c in zip(arrays, crcs):
        parts += [id(a), a.shape, a.dtype.str, c]
    return tuple(parts)

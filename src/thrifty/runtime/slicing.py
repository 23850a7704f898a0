"""Row pieces of a sparse matrix for the workers of a cluster, and the rows of a dense
operand each worker's pieces read.

A worker that computes rows ``[r0, r1)`` of ``A @ X`` needs those rows of ``A`` and, of
``X``, only the rows its column indices touch (a band around the diagonal for a stencil;
nearly all of ``X`` for a random matrix). :func:`columns` finds that set once per worker,
when the pieces are sent: a range ``[lo, hi)`` (sent as a view of ``X``, no copy) or, when
the touched rows fill less than :data:`GATHER_BELOW` of their range, the sorted list of
rows (gathered). The worker's pieces are sent with their column indices renumbered to
positions in that slice, and a panel's gathered dense segments (their ``cols``) likewise
(:func:`rebase`), so a panel's kernel runs unchanged on the piece and the slice.

Example
-------
>>> import numpy as np, scipy.sparse as sp
>>> A = sp.csr_array(np.array([[0., 1, 0, 0, 0], [0, 0, 2, 0, 0], [0, 0, 0, 0, 3]]))
>>> cols, pieces = columns(A, [(0, 2)], [])
>>> (cols.lo, cols.hi, cols.take)               # rows 0-1 read columns 1 and 2 only
(1, 3, None)
>>> X = np.arange(10.).reshape(5, 2)
>>> bool(np.array_equal(pieces[0] @ cols.of(X), A[[0, 1]] @ X))
True
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from thrifty.sparse.fused import ChainPanel
from thrifty.sparse.tasks import SpmmPanel, SpmvPanel

__all__ = ["GATHER_BELOW", "Cols", "by_worker", "columns", "place", "rebase", "rows_of",
           "seg_columns", "split", "take_rows"]

#: A worker's operand rows are gathered (a copy per call) when they fill less than this
#: share of the range they span; else the range is sent (a view, no copy).
GATHER_BELOW = 0.75


@dataclasses.dataclass(frozen=True, eq=False)
class Cols:
    """The rows of a dense operand (of ``n`` rows) that one worker's pieces read: the range
    ``[lo, hi)``, or the sorted rows ``take`` when given."""

    n: int
    lo: int
    hi: int
    take: np.ndarray | None = None

    @property
    def width(self) -> int:
        """How many rows of the operand the worker holds."""
        return self.hi - self.lo if self.take is None else int(self.take.shape[0])

    @property
    def whole(self) -> bool:
        """Whether the slice is the whole operand (pieces keep their column indices)."""
        return self.take is None and self.lo == 0 and self.hi == self.n

    def of(self, X: Any) -> np.ndarray:
        """The worker's rows of ``X`` (a view for a range, a gathered copy otherwise)."""
        X = np.asarray(X)
        if self.whole:
            return X
        return X[self.lo:self.hi] if self.take is None else np.take(X, self.take, axis=0)


def take_rows(X: Any, cols: Cols) -> np.ndarray:
    """``cols.of(X)`` as a task on a worker (an operand computed on the cluster)."""
    return cols.of(X)


def rows_of(A: Any, r0: int, r1: int) -> sp.csr_array:
    """Rows ``[r0, r1)`` of the CSR matrix ``A`` (views of its values and indices)."""
    p0, p1 = int(A.indptr[r0]), int(A.indptr[r1])
    return sp.csr_array((A.data[p0:p1], A.indices[p0:p1], A.indptr[r0:r1 + 1] - p0),
                        shape=(r1 - r0, A.shape[1]), copy=False)


def columns(A: Any, ranges: Sequence[tuple[int, int]], seg_cols: Sequence[np.ndarray]
            ) -> tuple[Cols, list[sp.csr_array]]:
    """The operand rows read by the row pieces ``ranges`` of CSR ``A`` (their column
    indices, and ``seg_cols``: the columns of their gathered dense segments), and the
    pieces with their column indices renumbered to positions in that slice."""
    n = int(A.shape[1])
    hit = np.zeros(n, dtype=bool)
    for r0, r1 in ranges:
        hit[A.indices[int(A.indptr[r0]):int(A.indptr[r1])]] = True
    for c in seg_cols:
        hit[c] = True
    rows = np.flatnonzero(hit)
    if rows.shape[0] == 0:
        cols = Cols(n, 0, 0)
    elif rows.shape[0] < GATHER_BELOW * (rows[-1] + 1 - rows[0]):
        cols = Cols(n, 0, 0, rows)
    else:
        cols = Cols(n, int(rows[0]), int(rows[-1]) + 1)
    pieces = [rows_of(A, r0, r1) for r0, r1 in ranges]
    if cols.whole:
        return cols, pieces
    renumber = _renumbering(cols, A.indices.dtype)
    out = []
    for P in pieces:
        out.append(sp.csr_array((P.data, renumber(P.indices), P.indptr),
                                shape=(P.shape[0], cols.width), copy=False))
    return cols, out


def _renumbering(cols: Cols, dtype: Any) -> Any:
    """The map from an operand row (that ``cols`` holds) to its position in the slice."""
    if cols.take is None:
        lo = cols.lo
        return lambda c: (np.asarray(c) - lo).astype(dtype, copy=False)
    pos = np.zeros(cols.n, dtype=dtype)
    pos[cols.take] = np.arange(cols.take.shape[0], dtype=dtype)
    return lambda c: pos[np.asarray(c)]


def rebase(fn: Any, cols: Cols | None = None) -> Any:
    """The row-panel callable ``fn`` (SpMV, SpMM or fused chain panel) writing its rows from
    row 0 of an output of its own rows, reading its rows from row 0 of its piece, and (with
    ``cols``) the operand's rows in ``cols``; ``None`` for a callable it cannot move."""
    if type(fn) is SpmvPanel:
        return SpmvPanel(0, fn.r1 - fn.r0, fn.dtype)
    if type(fn) not in (SpmmPanel, ChainPanel):
        return None
    renumber = None if cols is None or cols.whole else _renumbering(cols, np.int64)
    segs = []
    for s in fn.segs:
        seg = dataclasses.replace(s, r0=s.r0 - fn.r0, r1=s.r1 - fn.r0)
        if renumber is not None and s.cols is not None:
            seg = dataclasses.replace(seg, cols=renumber(s.cols))
        segs.append(seg)
    moved = copy.copy(fn)
    moved.r0, moved.r1, moved.segs = 0, fn.r1 - fn.r0, tuple(segs)
    return moved


def seg_columns(fn: Any) -> list[np.ndarray]:
    """The operand rows the gathered dense segments of a panel callable read."""
    return [s.cols for s in getattr(fn, "segs", ()) if s.cols is not None]


def split(indptr: np.ndarray | None, n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous row ranges of ``n`` rows, balanced by nonzeros when the
    pattern's ``indptr`` is known (else by rows)."""
    parts = max(1, min(parts, n))
    if indptr is None or indptr[-1] == 0:
        cuts = np.linspace(0, n, parts + 1).astype(int)
    else:
        goal = np.linspace(0, indptr[-1], parts + 1)
        cuts = np.searchsorted(indptr, goal).clip(0, n)
        cuts[0], cuts[-1] = 0, n
    cuts = np.unique(cuts)
    return [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:])]


def place(A: Any, ranges: Sequence[tuple[int, int]], workers: Sequence[str]
          ) -> dict[tuple[int, int], str]:
    """A worker for each row range: contiguous blocks of ranges, balanced by nonzeros."""
    ranges = sorted(set(ranges))
    nnz = np.array([A.indptr[r1] - A.indptr[r0] for r0, r1 in ranges], dtype=float)
    total = max(float(nnz.sum()), 1.0)
    mid = (np.cumsum(nnz) - nnz / 2) / total
    return {r: workers[min(int(m * len(workers)), len(workers) - 1)]
            for r, m in zip(ranges, mid)}


def by_worker(where: dict[tuple[int, int], str]) -> dict[str, list[tuple[int, int]]]:
    """The row ranges of each worker, in order."""
    out: dict[str, list[tuple[int, int]]] = {}
    for r, w in sorted(where.items()):
        out.setdefault(w, []).append(r)
    return out


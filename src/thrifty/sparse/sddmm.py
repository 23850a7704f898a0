"""SDDMM on block patterns: ``(X @ Y.T)`` at the entries of ``S``, dense blocks by BLAS.

A pattern made of dense blocks (block-sparse attention, the diagonal blocks of a
partitioned graph) is split at inspection into square tiles: a tile dense enough that one
gemm of its rows of ``X`` by its columns of ``Y`` costs less than the entry-wise dot
products (by the cost model) is computed by BLAS and its needed entries scattered into the
output; the remaining entries run as dot products (the blocked SDDMM of Nisa et al.,
HiPC 2018, with the tile choice of OSKI's register blocking, Vuduc 2005).

Example
-------
>>> import numpy as np, scipy.sparse as sp
>>> from thrifty.sparse.cost import CostModel
>>> S = sp.csr_array(sp.block_diag([np.ones((32, 32))] * 4))
>>> plan = plan_blocks(S, 16, CostModel())
>>> plan is not None and plan.n_blocks
4
>>> X, Y = np.ones((128, 16)), np.ones((128, 16))
>>> out = np.empty(S.nnz)
>>> bool(np.all(BlockSddmm(0, 128, plan, "float64")(out, X, Y.T) == 16.0))
True
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp

from thrifty.sparse.cost import CostModel

__all__ = ["BlockPlan", "BlockSddmm", "plan_blocks"]

#: Tile sides tried at inspection.
TILES = (16, 32, 64)


@numba.njit(nogil=True, cache=True)
def _dots(rows, cols, pos, X, Yt, out):  # pragma: no cover - compiled
    d = X.shape[1]
    for e in range(rows.shape[0]):
        xi, yj = X[rows[e]], Yt[cols[e]]
        s = out[pos[e]] * 0
        for c in range(d):
            s += xi[c] * yj[c]
        out[pos[e]] = s


@dataclass(frozen=True, slots=True)
class BlockPlan:
    """The tiles of a pattern ``P`` computed by gemm and its other entries.

    ``tile``: the side; ``starts[b] = (row, col)`` of tile ``b``, its entries
    ``local[ptr[b]:ptr[b+1]]`` (flat positions in the tile's gemm result) going to output
    positions ``pos[ptr[b]:ptr[b+1]]``; ``rest_rows/rest_cols/rest_pos``: the other entries.
    """

    P: sp.csr_array
    tile: int
    starts: np.ndarray
    ptr: np.ndarray
    local: np.ndarray
    pos: np.ndarray
    rest_rows: np.ndarray
    rest_cols: np.ndarray
    rest_pos: np.ndarray

    @property
    def n_blocks(self) -> int:
        return int(len(self.starts))

    def seconds(self, cm: CostModel, d: int) -> float:
        t = self.tile
        return self.n_blocks * (cm.blas_call + cm.gemm_seconds(t, d, t)) + \
            2.0 * len(self.rest_pos) * d / cm.csr_flops


def _tiles(P: sp.csr_array, t: int, cm: CostModel, d: int) -> BlockPlan:
    n, m = P.shape
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(P.indptr))
    cols = P.indices.astype(np.int64)
    nct = -(-m // t)
    key = (rows // t) * nct + cols // t
    ukeys, counts = np.unique(key, return_counts=True)
    # a tile pays when its gemm costs less than its entries' dot products
    gemm = cm.blas_call + cm.gemm_seconds(t, d, t)
    dense_keys = ukeys[2.0 * counts * d / cm.csr_flops > gemm]
    in_tile = np.isin(key, dense_keys)
    e = np.flatnonzero(in_tile)
    order = e[np.argsort(key[e], kind="stable")]
    k_sorted = key[order]
    bounds = np.flatnonzero(np.diff(k_sorted)) + 1
    ptr = np.concatenate([[0], bounds, [len(order)]]).astype(np.int64) if len(order) else \
        np.zeros(1, dtype=np.int64)
    first = k_sorted[ptr[:-1]] if len(order) else np.zeros(0, dtype=np.int64)
    starts = np.stack([(first // nct) * t, (first % nct) * t], axis=1) if len(first) else \
        np.zeros((0, 2), dtype=np.int64)
    width = np.minimum(t, m - starts[:, 1]) if len(first) else np.zeros(0, dtype=np.int64)
    tile_of = np.repeat(np.arange(len(first)), np.diff(ptr))
    local = (rows[order] - starts[tile_of, 0]) * width[tile_of] + \
        (cols[order] - starts[tile_of, 1])
    rest = np.flatnonzero(~in_tile)
    return BlockPlan(P, t, starts, ptr, local, order, rows[rest], cols[rest], rest)


def plan_blocks(P: sp.csr_array, d: int, cm: CostModel) -> BlockPlan | None:
    """The cheapest tiling of ``P`` for an SDDMM of inner dimension ``d`` (tiles of
    :data:`TILES`), or ``None`` when no tile pays."""
    if P.nnz == 0:
        return None
    best = None
    plain = 2.0 * P.nnz * d / cm.csr_flops
    for t in TILES:
        bp = _tiles(P, t, cm, d)
        if bp.n_blocks and bp.seconds(cm, d) < 0.8 * plain and \
                (best is None or bp.seconds(cm, d) < best.seconds(cm, d)):
            best = bp
    return best


class BlockSddmm:
    """Rows ``[r0, r1)`` of an SDDMM by tiles (``r0``, ``r1`` multiples of the tile side or
    the ends): the tiles that start in those rows by BLAS, the other entries by dot
    products; written into the shared output of ``P.nnz`` values."""

    def __init__(self, r0: int, r1: int, bp: BlockPlan, dtype: str) -> None:
        self.r0, self.r1, self.dtype = r0, r1, dtype
        self.bp = bp
        sel = (bp.starts[:, 0] >= r0) & (bp.starts[:, 0] < r1)
        self.blocks = np.flatnonzero(sel)
        keep = (bp.rest_rows >= r0) & (bp.rest_rows < r1)
        self.rest = (bp.rest_rows[keep], bp.rest_cols[keep], bp.rest_pos[keep])

    def __call__(self, out: np.ndarray, X: np.ndarray, B: np.ndarray) -> np.ndarray:
        bp, t = self.bp, self.bp.tile
        X = np.ascontiguousarray(X, dtype=self.dtype)
        Yt = np.ascontiguousarray(np.asarray(B).T, dtype=self.dtype)
        for b in self.blocks:
            i, j = bp.starts[b]
            G = X[i:i + t] @ Yt[j:j + t].T
            s, e = bp.ptr[b], bp.ptr[b + 1]
            out[bp.pos[s:e]] = G.ravel()[bp.local[s:e]]
        _dots(*self.rest, X, Yt, out)
        P = bp.P
        return out[P.indptr[self.r0]:P.indptr[self.r1]]

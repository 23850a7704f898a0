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
from scipy.sparse import _sparsetools as _st  # scipy's CSR kernels, without its dispatch

from thrifty.sparse.cost import CostModel

__all__ = ["BlockPlan", "BlockSddmm", "plan_blocks"]

#: Tile sides tried at inspection.
TILES = (16, 32, 64)


@numba.njit(nogil=True, cache=True)
def _dots(rows, cols, pos, X, Yt, out):  # pragma: no cover - compiled
    d = X.shape[1]
    zero = np.zeros(1, dtype=out.dtype)[0]  # not out[...] * 0: out is uninitialised
    for e in range(rows.shape[0]):
        xi, yj = X[rows[e]], Yt[cols[e]]
        s = zero
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


def _tile_counts(rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int],
                 t: int) -> sp.csr_array:
    """Entries per ``t x t`` tile (a CSR grid; scipy's COO -> CSR sums them)."""
    G = sp.csr_array((np.ones(len(rows), dtype=np.int64), (rows // t, cols // t)),
                     shape=(-(-shape[0] // t), -(-shape[1] // t)))
    G.sum_duplicates()
    return G


def _tiles(P: sp.csr_array, rows: np.ndarray, t: int, G: sp.csr_array,
           dense: np.ndarray) -> BlockPlan:
    """The plan of tiles ``dense`` (a mask over ``G``'s stored tiles) of side ``t``."""
    m = P.shape[1]
    cols = P.indices.astype(np.int64)
    flag = np.zeros(len(rows), dtype=np.int8)
    idx = G.indptr.dtype
    _st.csr_sample_values(G.shape[0], G.shape[1], G.indptr, G.indices,
                          dense.astype(np.int8), len(rows), (rows // t).astype(idx),
                          (cols // t).astype(idx), flag)
    in_tile = flag.astype(bool)
    nct = G.shape[1]
    key = (rows // t) * nct + cols // t
    e = np.flatnonzero(in_tile)
    order = e[np.argsort(key[e], kind="stable")]
    k_sorted = key[order]
    bounds = np.flatnonzero(np.diff(k_sorted)) + 1
    ptr = np.concatenate([[0], bounds, [len(order)]]).astype(np.int64)
    first = k_sorted[ptr[:-1]]
    starts = np.stack([(first // nct) * t, (first % nct) * t], axis=1)
    width = np.minimum(t, m - starts[:, 1])
    tile_of = np.repeat(np.arange(len(first)), np.diff(ptr))
    local = (rows[order] - starts[tile_of, 0]) * width[tile_of] + \
        (cols[order] - starts[tile_of, 1])
    rest = np.flatnonzero(~in_tile)
    return BlockPlan(P, t, starts, ptr, local, order, rows[rest], cols[rest], rest)


def plan_blocks(P: sp.csr_array, d: int, cm: CostModel) -> BlockPlan | None:
    """The cheapest tiling of ``P`` for an SDDMM of inner dimension ``d`` (tiles of
    :data:`TILES`, a tile by gemm where that costs less than its entries' dot products),
    or ``None`` when none pays."""
    if P.nnz == 0:
        return None
    rows = np.repeat(np.arange(P.shape[0], dtype=np.int64), np.diff(P.indptr))
    cols = P.indices.astype(np.int64)
    dot = 2.0 * d / cm.csr_flops
    best, best_secs = None, 0.8 * P.nnz * dot
    for t in TILES:
        G = _tile_counts(rows, cols, P.shape, t)
        dense = G.data * dot > cm.blas_call + cm.gemm_seconds(t, d, t)
        secs = int(dense.sum()) * (cm.blas_call + cm.gemm_seconds(t, d, t)) + \
            (P.nnz - int(G.data[dense].sum())) * dot
        if dense.any() and secs < best_secs:
            best, best_secs = (t, G, dense), secs
    return None if best is None else _tiles(P, rows, *best)


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

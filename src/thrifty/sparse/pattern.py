"""Two-level sparsity patterns: which blocks may hold nonzeros, and the exact elements.

A :class:`Pattern` describes where a tensor may be nonzero. For a 2-D tensor it keeps

* a **block grid**: a boolean CSR matrix over blocks of shape ``block = (br, bc)``; the
  block shape is chosen per tensor from its structure (:func:`choose_block`: about one
  grid cell per stored element, so the grid never costs more than the data) and adapted
  to the op that uses it (:meth:`Pattern.coarsen` to a common inner blocking for matmul);
* where it is known exactly (inputs, and results of elementwise ops and of products that
  are cheap to resolve), the **element pattern** inside the blocks, a boolean CSR matrix.

Propagation works on blocks, so its cost follows the number of nonzero blocks, never the
dense size; element patterns ride along where they are cheap and are what SDDMM and masked
SpGEMM run over. Everything else (vectors, scalars, 3-D tensors) is dense.

Implicit zeros are structural, as in scipy: an element outside the pattern is zero even
where the dense reference would compute ``0 * inf = nan``. Explicitly stored zeros belong to
the pattern. The design follows the two-level block/element sparsity of Taco's
format abstraction (Chou et al., "Format Abstraction for Sparse Tensor Algebra
Compilers", OOPSLA 2018) and the block-sparse propagation of Ahrens et al.
("Looplets", CGO 2023) in its simplest form.

Example
-------
>>> import scipy.sparse as sp
>>> p = Pattern.from_sparse(sp.eye_array(100, format="csr"))
>>> p.shape, p.is_dense, p.nnz
((100, 100), False, 100)
>>> p.matmul(p).nnz_blocks == p.nnz_blocks
True
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp

from thrifty.errors import PatternError
from thrifty.sparse.boolcsr import bitset_cost, bool_matmul, intersect_elements, within_blocks

__all__ = ["Pattern", "choose_block", "canonical_csr", "index_fingerprint",
           "structure_fingerprint"]

#: Largest block side; a power of two.
MAX_BLOCK = 1024
#: Smallest block side; a power of two.
MIN_BLOCK = 8
#: Above this many elementary flops, a product's exact element pattern is not resolved.
EXACT_PRODUCT_LIMIT = 20_000_000
#: Above this many pairs visited, a masked product's exact element pattern is not resolved
#: (one boolean pass of the mask-driven kernel: about what one call of it costs).
MASKED_PRODUCT_LIMIT = 200_000_000


def _pow2_at_least(x: float) -> int:
    return 1 << max(0, int(np.ceil(np.log2(max(x, 1.0)))))


def choose_block(shape: tuple[int, int], nnz: int) -> tuple[int, int]:
    """The block shape for a matrix: powers of two with about one grid cell per nonzero.

    Example
    -------
    >>> choose_block((10**6, 10**6), 10**7)
    (512, 512)
    """
    n, m = shape
    side = np.sqrt(max(n, 1) * max(m, 1) / max(nnz, 1))
    b = int(min(MAX_BLOCK, max(MIN_BLOCK, _pow2_at_least(side))))
    return (b, b)


def canonical_csr(A: object, name: str = "input") -> sp.csr_array:
    """A scipy sparse input as a canonical ``csr_array`` (sorted, no duplicates).

    Raises :class:`PatternError` for objects that are not scipy sparse 2-D matrices.

    Example
    -------
    >>> canonical_csr(sp.coo_array(([1.0, 2.0], ([0, 0], [1, 1])), shape=(1, 2))).toarray()
    array([[0., 3.]])
    """
    if not sp.issparse(A):
        raise PatternError(f"{name}: expected a scipy.sparse matrix, got {type(A).__name__}")
    if A.ndim != 2:  # type: ignore[attr-defined]
        raise PatternError(f"{name}: sparse inputs must be 2-D, got shape {A.shape}")  # type: ignore[attr-defined]
    C = sp.csr_array(A)
    if not C.has_canonical_format:
        C = C.copy()
        C.sum_duplicates()
    return C


def structure_fingerprint(A: sp.csr_array) -> str:
    """A hash of shape, indptr and indices: equal patterns have equal fingerprints.

    Example
    -------
    >>> a = sp.csr_array(np.eye(3)); b = a * 2.0
    >>> structure_fingerprint(a) == structure_fingerprint(b)
    True
    """
    return index_fingerprint(A.shape, A.indptr, A.indices)


def index_fingerprint(shape: tuple[int, ...], indptr: np.ndarray, indices: np.ndarray) -> str:
    """:func:`structure_fingerprint` of the CSR pattern ``(shape, indptr, indices)``."""
    # SHA-1 (hardware-accelerated on x86-64: 3x blake2b's speed here, measured) as a
    # structure hash, not for security
    h = hashlib.sha1(usedforsecurity=False)
    h.update(np.asarray(shape, dtype=np.int64).tobytes())
    # indices hashed as 32-bit integers whenever they fit, whatever their dtype (the same
    # pattern hashes alike; half the bytes of 64-bit, and no copy of int32 arrays)
    idx = np.int32 if len(indices) < 2**31 and max(shape) < 2**31 else np.int64
    h.update(np.ascontiguousarray(indptr, dtype=idx).data)
    h.update(np.ascontiguousarray(indices, dtype=idx).data)
    return h.hexdigest()[:32]


def _bool_csr(rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int]) -> sp.csr_array:
    if len(rows) == 0:
        return sp.csr_array(shape, dtype=bool)
    # scipy's COO -> CSR (a counting sort by row, then a sort within each row): 15x faster
    # than np.unique of the flat keys on 10^6 entries, measured
    M = sp.csr_array((np.ones(len(rows), dtype=bool), (rows, cols)), shape=shape)
    M.sum_duplicates()
    return M


@numba.njit(cache=True, nogil=True)
def _grid_rows(indptr, indices, br, bc, n_brows, n_bcols):  # pragma: no cover - compiled
    # per block row, the distinct column blocks: O(nnz). Each entry marks its column block
    # in a flag row; a block row with many entries next to the grid's width is read off
    # by a scan of the flags (sorted for free), one with few collects and sorts the
    # blocks it met. A power-of-two block width divides by a shift. (10x faster than a
    # marker per block and a sort per block row on random-200000-16, measured.)
    shift = -1
    if bc & (bc - 1) == 0:
        shift = 0
        while (1 << shift) < bc:
            shift += 1
    mark = np.zeros(n_bcols, dtype=np.bool_)
    gptr = np.zeros(n_brows + 1, dtype=np.int64)
    gidx = np.empty(min(indices.shape[0], n_brows * n_bcols), dtype=np.int64)
    n = indptr.shape[0] - 1
    k = 0
    for bi in range(n_brows):
        r0, r1 = bi * br, min((bi + 1) * br, n)
        q0, q1 = indptr[r0], indptr[r1]
        if shift >= 0:
            for p in range(q0, q1):
                mark[indices[p] >> shift] = True
        else:
            for p in range(q0, q1):
                mark[indices[p] // bc] = True
        start = k
        if 8 * (q1 - q0) >= n_bcols:
            for j in range(n_bcols):
                if mark[j]:
                    gidx[k] = j
                    k += 1
                    mark[j] = False
        else:  # few entries: the marked blocks, collected in a second pass, then sorted
            for p in range(q0, q1):
                j = indices[p] // bc
                if mark[j]:
                    gidx[k] = j
                    k += 1
                    mark[j] = False
            gidx[start:k].sort()
        gptr[bi + 1] = k
    return gptr, gidx[:k]


def _block_grid(E: sp.csr_array, block: tuple[int, int],
                grid_shape: tuple[int, int]) -> sp.csr_array:
    """The boolean block grid of a canonical CSR pattern, in one pass over its indices
    (10x faster than sorting the entries' block keys on 10^6 entries)."""
    gptr, gidx = _grid_rows(E.indptr, E.indices, block[0], block[1], grid_shape[0],
                            grid_shape[1])
    return sp.csr_array((np.ones(len(gidx), dtype=bool), gidx, gptr), shape=grid_shape)


def _bool(M: sp.sparray) -> sp.csr_array:
    """The nonzero structure of a freshly computed matrix (never mutates ``M``)."""
    C = sp.csr_array(M, copy=True)
    C.sum_duplicates()
    C.eliminate_zeros()
    return sp.csr_array((np.ones(C.nnz, dtype=bool), C.indices, C.indptr), shape=C.shape)


def _grid_shape(shape: tuple[int, int], block: tuple[int, int]) -> tuple[int, int]:
    return (-(-shape[0] // block[0]), -(-shape[1] // block[1]))


@dataclass(frozen=True, slots=True, eq=False)
class Pattern:
    """Where a tensor may be nonzero.

    Attributes
    ----------
    shape:
        The tensor's shape.
    block:
        ``(br, bc)``, the block shape of ``blocks``; ``None`` for a dense pattern.
    blocks:
        Boolean CSR matrix over the block grid, ``None`` when every element may be nonzero.
    elements:
        The exact element pattern (boolean CSR), when known; ``None`` otherwise.
    """

    shape: tuple[int, ...]
    block: tuple[int, int] | None = None
    blocks: sp.csr_array | None = None
    elements: sp.csr_array | None = None

    # -- construction ----------------------------------------------------------------------
    @staticmethod
    def dense(shape: tuple[int, ...]) -> Pattern:
        """Every element may be nonzero."""
        return Pattern(tuple(shape))

    @staticmethod
    def from_sparse(A: object, block: tuple[int, int] | None = None) -> Pattern:
        """The exact pattern of a scipy sparse matrix, in O(nnz) (plus one sort of blocks).

        Example
        -------
        >>> Pattern.from_sparse(sp.csr_array(np.eye(4)), block=(2, 2)).nnz_blocks
        2
        """
        C = canonical_csr(A)
        E = sp.csr_array((np.ones(C.nnz, dtype=bool), C.indices, C.indptr), shape=C.shape)
        return Pattern.from_elements(E, block)

    @staticmethod
    def from_elements(E: sp.csr_array, block: tuple[int, int] | None = None) -> Pattern:
        """The pattern with exact elements ``E`` (boolean CSR, canonical)."""
        shape = (int(E.shape[0]), int(E.shape[1]))
        block = block or choose_block(shape, E.nnz)
        grid = _block_grid(E, block, _grid_shape(shape, block))
        return Pattern(shape, block, grid, E)

    @staticmethod
    def from_blocks(shape: tuple[int, int], block: tuple[int, int],
                    blocks: sp.csr_array) -> Pattern:
        """A block-level pattern (elements unknown); a full grid becomes dense."""
        blocks = _bool(blocks)
        if blocks.nnz == blocks.shape[0] * blocks.shape[1] and blocks.nnz > 0:
            return Pattern.dense(shape)
        return Pattern(tuple(shape), block, blocks, None)

    # -- queries ---------------------------------------------------------------------------
    @property
    def is_dense(self) -> bool:
        return self.blocks is None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nnz_blocks(self) -> int:
        """Number of blocks that may hold nonzeros (every block for a dense pattern)."""
        if self.blocks is None:
            return 1 if self.size else 0
        return int(self.blocks.nnz)

    @property
    def nnz(self) -> int:
        """An upper bound on the number of nonzeros (exact when ``elements`` is known)."""
        if self.blocks is None:
            return self.size
        if self.elements is not None:
            return int(self.elements.nnz)
        br, bc = self.block  # type: ignore[misc]
        return min(self.size, self.nnz_blocks * br * bc)

    @property
    def density(self) -> float:
        """``nnz / size`` (1.0 for an empty tensor with a dense pattern)."""
        return self.nnz / self.size if self.size else (0.0 if self.blocks is not None else 1.0)

    def row_counts(self) -> np.ndarray | None:
        """Nonzeros per row of the exact element pattern, or ``None`` when not known."""
        if self.elements is None:
            return None
        return np.diff(self.elements.indptr)

    def same_as(self, other: Pattern) -> bool:
        """Equal shapes and, where both are known, equal element or block structure."""
        if self.shape != other.shape or self.is_dense != other.is_dense:
            return False
        if self.is_dense:
            return True
        if self.elements is not None and other.elements is not None:
            a, b = self.elements, other.elements
            return (a.nnz == b.nnz and np.array_equal(a.indptr, b.indptr)
                    and np.array_equal(a.indices, b.indices))
        blocks, other_blocks = self.blocks, other.blocks
        assert blocks is not None and other_blocks is not None  # neither is dense
        return (self.elements is None) == (other.elements is None) and \
            self.block == other.block and (blocks != other_blocks).nnz == 0

    def fingerprint(self) -> str:
        """A hash of the structure (shape only for dense patterns)."""
        if self.is_dense:
            return f"dense{self.shape}"
        if self.elements is not None:
            return structure_fingerprint(self.elements)
        return f"blocks{self.block}:" + structure_fingerprint(self.blocks)  # type: ignore[arg-type]

    # -- block-level transformations -------------------------------------------------------
    def coarsen(self, block: tuple[int, int]) -> Pattern:
        """The same pattern over a coarser block grid (each side a multiple of the old one).

        Example
        -------
        >>> p = Pattern.from_sparse(sp.csr_array(np.eye(8)), block=(2, 2))
        >>> p.coarsen((4, 4)).nnz_blocks
        2
        """
        if self.blocks is None or self.block == block:
            return self
        br, bc = self.block  # type: ignore[misc]
        if block[0] % br or block[1] % bc:
            raise PatternError(f"cannot coarsen blocks {self.block} to {block}: "
                               "each new side must be a multiple of the old one")
        G = self.blocks.tocoo()
        grid = _bool_csr(G.row // (block[0] // br), G.col // (block[1] // bc),
                         _grid_shape(self.shape, block))  # type: ignore[arg-type]
        return Pattern(self.shape, block, grid, self.elements)

    def _grid(self, block: tuple[int, int]) -> sp.csr_array:
        """The block grid at ``block`` (a full grid for a dense pattern)."""
        gs = _grid_shape(self.shape, block)  # type: ignore[arg-type]
        if self.blocks is None:
            return sp.csr_array(np.ones(gs, dtype=bool))
        return self.coarsen(block).blocks  # type: ignore[return-value]

    def transpose(self) -> Pattern:
        """The pattern of the transpose."""
        if self.blocks is None:
            return Pattern.dense(self.shape[::-1])
        E = None if self.elements is None else _bool(self.elements.T)
        return Pattern(self.shape[::-1], self.block[::-1], _bool(self.blocks.T), E)  # type: ignore[index]

    def _common(self, other: Pattern) -> tuple[int, int]:
        a, b = self.block, other.block
        return (max(a[0], b[0]), max(a[1], b[1]))  # type: ignore[index]

    def union(self, other: Pattern) -> Pattern:
        """Where either may be nonzero (add, sub)."""
        if self.shape != other.shape:
            raise PatternError(f"union of patterns of shapes {self.shape} and {other.shape}")
        if self.is_dense or other.is_dense:
            return Pattern.dense(self.shape)
        if self.elements is not None and other.elements is not None:
            return Pattern.from_elements(_bool(self.elements + other.elements),
                                         self._common(other))
        blk = self._common(other)
        return Pattern.from_blocks(self.shape, blk,  # type: ignore[arg-type]
                                   self.coarsen(blk).blocks + other.coarsen(blk).blocks)  # type: ignore[operator]

    def intersect(self, other: Pattern, exact: bool = True) -> Pattern:
        """Where both may be nonzero (multiply, masks). Without ``exact``, known elements
        met with a block-level pattern are kept whole (a superset, for a pass whose
        products are resolved at block level anyway: the next pass refines it)."""
        if self.shape != other.shape:
            raise PatternError(
                f"intersection of patterns of shapes {self.shape} and {other.shape}")
        if other.is_dense:
            return self
        if self.is_dense:
            return other
        if self.elements is not None and other.elements is not None:
            blk = self._common(other)
            E = intersect_elements(self.elements, other.elements)
            for p in (self, other):  # one inside the other: that one, grid and all
                if E is p.elements and p.block == blk:
                    return p
            return Pattern.from_elements(E, blk)
        if self.elements is not None or other.elements is not None:
            known = self if self.elements is not None else other
            rest = other if known is self else self
            if not exact:
                return known
            # keep the known elements that fall into the other's blocks
            K = known.elements
            assert K is not None
            keep = within_blocks(K, rest.blocks, rest.block)  # type: ignore[arg-type]
            if keep.all():
                return known
            rows = np.repeat(np.arange(K.shape[0], dtype=np.int64), np.diff(K.indptr))
            # a subset of a canonical CSR in its own order is canonical: no sort needed
            counts = np.bincount(rows[keep], minlength=K.shape[0])
            indptr = np.concatenate([[0], np.cumsum(counts)]).astype(K.indptr.dtype)
            E2 = sp.csr_array((np.ones(int(keep.sum()), dtype=bool), K.indices[keep], indptr),
                              shape=K.shape)
            return Pattern.from_elements(E2, self._common(other))
        blk = self._common(other)
        return Pattern.from_blocks(self.shape, blk,  # type: ignore[arg-type]
                                   self.coarsen(blk).blocks.multiply(  # type: ignore[union-attr]
                                       other.coarsen(blk).blocks))

    def matmul(self, other: Pattern, exact: bool = True) -> Pattern:
        """The pattern of a product: the boolean product of the block grids.

        With ``exact``, the element pattern is resolved too when both are known and the
        product's elementary work is under :data:`EXACT_PRODUCT_LIMIT`.
        """
        if self.ndim != 2 or other.ndim != 2 or self.shape[1] != other.shape[0]:
            raise PatternError(f"matmul of patterns of shapes {self.shape} and {other.shape}")
        out_shape = (self.shape[0], other.shape[1])
        if self.is_dense and other.is_dense:
            return Pattern.dense(out_shape)
        if self.shape[1] == 0:
            return Pattern.from_elements(sp.csr_array(out_shape, dtype=bool))
        if (exact and self.elements is not None and other.elements is not None
                and _product_work(self.elements, other.elements,
                                  EXACT_PRODUCT_LIMIT) <= EXACT_PRODUCT_LIMIT):
            a = sp.csr_array((np.ones(self.elements.nnz), self.elements.indices,
                              self.elements.indptr), shape=self.elements.shape)
            b = sp.csr_array((np.ones(other.elements.nnz), other.elements.indices,
                              other.elements.indptr), shape=other.elements.shape)
            return Pattern.from_elements(_bool(a @ b))
        br = self.block[0] if self.block else _pow2_at_least(min(out_shape[0], MAX_BLOCK))
        bc = other.block[1] if other.block else _pow2_at_least(min(out_shape[1], MAX_BLOCK))
        bk = max(self.block[1] if self.block else 1, other.block[0] if other.block else 1)
        ga, gb = self._grid((br, bk)), other._grid((bk, bc))
        if bitset_cost(ga, gb) < _product_work(ga, gb):  # dense grids: bit rows, OR-ed
            return Pattern.from_blocks(out_shape, (br, bc), bool_matmul(ga, gb))
        return Pattern.from_blocks(out_shape, (br, bc),
                                   ga.astype(np.float32) @ gb.astype(np.float32))

    def matmul_on(self, other: Pattern, mask: Pattern) -> Pattern | None:
        """The exact pattern of the product's entries on ``mask``'s elements: each mask
        entry ``(i, j)`` where row ``i`` of ``self`` meets column ``j`` of ``other``, found
        in one mask-driven pass (never the whole product); ``None`` when an element
        pattern is unknown or the pass would visit over :data:`MASKED_PRODUCT_LIMIT`
        pairs.

        Example
        -------
        >>> L = Pattern.from_sparse(sp.csr_array(np.tril(np.ones((4, 4)), -1)))
        >>> L.matmul_on(L, L).elements.toarray().astype(int).tolist()
        [[0, 0, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0]]
        """
        res = self.matmul_on_pairs(other, mask, 0)
        return None if res is None else res[0]

    def matmul_on_pairs(self, other: Pattern, mask: Pattern, max_pairs: int
                        ) -> tuple[Pattern, Pairs | None] | None:
        """:meth:`matmul_on`, and from the same pass the pairs ``(a_ik, b_kj)`` of stored
        entries landing on each entry of the result (``(ptr, ia, ib)`` over its elements,
        as :func:`thrifty.sparse.masked.masked_pairs`) when there are at most
        ``max_pairs`` of them (else ``None``).

        Example
        -------
        >>> L = Pattern.from_sparse(sp.csr_array(np.tril(np.ones((4, 4)), -1)))
        >>> P, (ptr, ia, ib) = L.matmul_on_pairs(L, L, 100)
        >>> P.nnz, ptr.tolist(), ia.tolist(), ib.tolist()
        (3, [0, 1, 3, 4], [2, 4, 5, 5], [0, 0, 1, 2])
        """
        from thrifty.sparse.masked import kept_entries, masked_walk

        a, b, m = self.elements, other.elements, mask.elements
        if a is None or b is None or m is None or \
                mask.shape != (self.shape[0], other.shape[1]) or \
                _product_work(a, b, MASKED_PRODUCT_LIMIT) > MASKED_PRODUCT_LIMIT:
            return None
        cnt, pairs = masked_walk(a, b, m, max_pairs)
        # the entries kept, in one pass over the mask (a subset of a canonical CSR in its
        # own order is canonical: no sort needed), and their pairs' offsets
        indptr, indices, ptr = kept_entries(cnt, m)
        if len(indices) == m.nnz:
            return mask, pairs
        if pairs is not None:  # the pairs of the entries kept (the others have none)
            pairs = (ptr, pairs[1], pairs[2])
        E = sp.csr_array((np.ones(len(indices), dtype=bool), indices, indptr), shape=m.shape)
        return Pattern.from_elements(E, mask.block), pairs


#: A masked product's pairs: ``(ptr, ia, ib)`` (:func:`thrifty.sparse.masked.masked_pairs`).
Pairs = tuple[np.ndarray, np.ndarray, np.ndarray]


def _product_work(a: sp.csr_array, b: sp.csr_array, limit: float = -1.0) -> int:
    """Elementary multiply-adds of the product of two element patterns (or, when that is
    surely at most ``limit``, the bound ``a.nnz`` times ``b``'s longest row)."""
    bound = a.nnz * int(np.diff(b.indptr).max(initial=0))
    if bound <= limit:
        return bound
    col_counts = np.bincount(a.indices, minlength=a.shape[1])
    return int(np.dot(col_counts.astype(np.int64), np.diff(b.indptr).astype(np.int64)))

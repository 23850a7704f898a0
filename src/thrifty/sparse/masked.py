"""Mask-driven masked SpGEMM: ``(A @ B) * S`` computed only at the entries of ``S``.

Row by row (Gustavson's order), the mask row's columns are marked (a byte per column,
reset after the row), then each entry ``a_ik`` of the row of ``A`` walks row ``k`` of
``B`` and accumulates, into a dense accumulator over the columns, only where the column is
marked (Aznaveh et al., "Parallel GraphBLAS with OpenMP", CSC 2020; the masked row-wise
SpGEMM of Milaković et al., 2022). The test against the marks is branch-free: a block of
``B``'s row is compacted to its hits first (most entries miss the mask), and only the hits
are multiplied and added. An elementwise product with the mask's own values is applied as
each entry is read out, so ``(L @ L) * L`` is one pass and no intermediate product exists.

The same walk, run once at inspection, counts the pairs ``(a_ik, b_kj)`` landing on each
mask entry (:func:`masked_counts`): the entries with none are structurally zero
(the exact pattern of a masked product), and where the pairs are few next to the pairs
visited, their positions are recorded (:func:`masked_pairs`) so that a run only multiplies
and adds them, in the row walk's own order (:class:`MaskedPairs`: the inspector-executor
form of a masked product, whose work per call is the useful multiply-adds alone).

Example
-------
>>> import numpy as np, scipy.sparse as sp
>>> L = sp.csr_array(np.tril(np.ones((4, 4)), -1))
>>> out = np.empty(L.nnz)
>>> masked_rows(L, L, L, L.data * 2, out, 0, 4)
>>> D = L.toarray()
>>> bool(np.array_equal(out, ((D @ D) * D * 2)[D != 0]))
True
"""

from __future__ import annotations

import numba
import numpy as np
import scipy.sparse as sp

from thrifty.sparse.outputs import prefetch

__all__ = ["HIT_BLOCK", "HIT_RATE_BRANCH_FREE", "RECORD_LIMIT", "MaskedPairs", "MaskedRows",
           "entry_positions", "kept_entries", "masked_counts", "masked_pairs", "masked_rows",
           "masked_walk", "walk_chunks"]

_jit = numba.njit(nogil=True, cache=True)

#: At most this many pairs are recorded during the counting walk (:func:`masked_walk`;
#: 12 bytes each with 32-bit indices while recording): more are found by a second walk.
RECORD_LIMIT = 1 << 24


#: Entries of a row of ``B`` tested against the mask per block of :func:`_masked`'s
#: branch-free test: the positions of a block's hits fit in L1 cache beside the marks.
HIT_BLOCK = 256
#: :func:`_masked` tests a row's entries without a branch when more than one in this many
#: of the recent rows' entries hit the mask (a branch on each entry costs little where
#: hits are rare and mispredicts at every hit where they are not: rmat-14 took 1.28x,
#: 1.14x and 1.0x the time of one in 1024 with one in 16, 64 and 2**20, measured).
HIT_RATE_BRANCH_FREE = 1024


@_jit
def _masked(aip, aix, adata, bip, bix, bdata, mip, mix, scale, spos, out, mark, acc, hits,
            r0, r1, rate):  # pragma: no cover - compiled
    # Per row: the mask row's columns marked (mark[c] = 1: a byte per column), then for
    # each a_ik the row of B tested against the marks, and the hits multiplied and added
    # into acc, a dense accumulator over the columns; the mask row's entries are then read
    # out of acc (and acc reset there). Where more than one in `rate` of the entries seen
    # in the last rows hit (the counts halved at each row), the test is branch-free: each
    # block of B's row is compacted to its hits (each entry's position written, the count
    # advanced by its mark) and only those are multiplied and added (a branch on each
    # entry took 1.6-1.8x the time on rmat-14 and rmat-17, measured; where hits are rare,
    # as on poisson3d-40 and random-50000-16, the branch stays: 0.92-0.95x the time of
    # the position-array kernel this one replaced, whose pass had no counts to keep).
    # Each entry sums its terms in the walk's order (a_ik by k, then B's row) whichever
    # test runs.
    # (cutting each row of B to the mask row's column range by binary search, marking the
    # mask row only once a row of B reaches it, and searching the mask row's columns in
    # rows of B much longer than it ran slower or no faster, measured: the walk is kept)
    base = mip[r0]
    scaled = spos.shape[0] > 0
    nblk = hits.shape[0]
    seen, hit = 0, 0
    for i in range(r0, r1):
        m0, m1 = mip[i], mip[i + 1]
        if m0 == m1:
            continue
        for p in range(m0, m1):
            mark[mix[p]] = 1
        # a mask row of consecutive columns holds every column of a row of B within its
        # range: such rows of B need no test (a dense matrix stored sparse, bands, blocks)
        lo, hi = mix[m0], mix[m1 - 1]
        whole = hi - lo == m1 - m0 - 1
        compact = hit * rate > seen
        seen >>= 1
        hit >>= 1
        for pa in range(aip[i], aip[i + 1]):
            k = aix[pa]
            a = adata[pa]
            b0, b1 = bip[k], bip[k + 1]
            seen += b1 - b0
            if whole and b0 < b1 and bix[b0] >= lo and bix[b1 - 1] <= hi:
                for pb in range(b0, b1):
                    acc[bix[pb]] += a * bdata[pb]
                hit += b1 - b0
            elif compact:
                for s in range(b0, b1, nblk):
                    nh = 0
                    for pb in range(s, min(s + nblk, b1)):
                        hits[nh] = pb
                        nh += mark[bix[pb]]
                    for t in range(nh):
                        pb = hits[t]
                        acc[bix[pb]] += a * bdata[pb]
                    hit += nh
            else:
                for pb in range(b0, b1):
                    c = bix[pb]
                    if mark[c]:
                        acc[c] += a * bdata[pb]
                        hit += 1
        for p in range(m0, m1):
            c = mix[p]
            out[p - base] = acc[c] * scale[spos[p]] if scaled else acc[c]
            acc[c] = 0
            mark[c] = 0


@_jit
def _find(mix, m0, m1, c):  # pragma: no cover - compiled
    # the position of column c in the sorted mask row mix[m0:m1] (c is there)
    lo, hi = m0, m1 - 1
    while lo < hi:
        mid = (lo + hi) >> 1
        if mix[mid] < c:
            lo = mid + 1
        else:
            hi = mid
    return lo


@_jit
def _walk_pairs(aip, aix, bip, bix, mip, mix, bits, nxt, ia, ib):  # pragma: no cover
    # each pair (a_ik, b_kj) landing on a mask entry q: nxt[q] += 1, and with ia/ib not
    # empty (the fill pass, nxt starting at ptr) its positions stored at the old nxt[q].
    # The mask row's columns are marked in a bit set (a column per bit: it stays in L1
    # cache where a position array over the columns does not), and a pair that hits one
    # finds its entry by binary search in the mask row (sorted: canonical CSR); most
    # pairs miss the mask, so the search is rare (the count pass took 0.7x the time of
    # the position array's on random-200000-16, measured)
    fill = ia.shape[0] > 0
    one = np.uint64(1)
    for i in range(mip.shape[0] - 1):
        m0, m1 = mip[i], mip[i + 1]
        if m0 == m1 or aip[i] == aip[i + 1]:
            continue
        for p in range(m0, m1):
            c = mix[p]
            bits[c >> 6] |= one << np.uint64(c & 63)
        for pa in range(aip[i], aip[i + 1]):
            k = aix[pa]
            for pb in range(bip[k], bip[k + 1]):
                c = bix[pb]
                if bits[c >> 6] & (one << np.uint64(c & 63)):
                    q = _find(mix, m0, m1, c)
                    t = nxt[q]
                    if fill:
                        ia[t] = pa
                        ib[t] = pb
                    nxt[q] = t + 1
        for p in range(m0, m1):
            bits[mix[p] >> 6] = 0


@_jit
def _walk_record(aip, aix, bip, bix, mip, mix, bits, cnt, rq, ra, rb, r0, r1, o0, o1, dist):
    # pragma: no cover - compiled
    # _walk_pairs' count pass over rows [r0, r1) that also records each hit (q, pa, pb)
    # in walk order at rq/ra/rb[o0:o1] while they last; returns the hits recorded, or -1
    # when they did not fit (the buffers are never grown here: an array reassigned in
    # the walk's loop made every pair 3x slower, measured). With dist > 0, the row of B
    # that the entry dist ahead in A will walk is prefetched, and its bounds in bip twice
    # as far ahead (across rows: A's entries are contiguous): where those rows lie far
    # apart in memory, the walk waits on each (0.62x the time on random-200000-16,
    # measured; 1.1-1.4x on poisson3d-64, whose rows are near: :func:`_prefetch_distance`)
    one = np.uint64(1)
    n = o0
    rec = True
    lim = aix.shape[0] - 2 * dist if dist > 0 else 0
    for i in range(r0, r1):
        m0, m1 = mip[i], mip[i + 1]
        if m0 == m1 or aip[i] == aip[i + 1]:
            continue
        for p in range(m0, m1):
            c = mix[p]
            bits[c >> 6] |= one << np.uint64(c & 63)
        for pa in range(aip[i], aip[i + 1]):
            if pa < lim:
                prefetch(bip, aix[pa + 2 * dist])
                prefetch(bix, bip[aix[pa + dist]])
            k = aix[pa]
            for pb in range(bip[k], bip[k + 1]):
                c = bix[pb]
                if bits[c >> 6] & (one << np.uint64(c & 63)):
                    q = _find(mix, m0, m1, c)
                    cnt[q] += 1
                    if n == o1:
                        rec = False
                    if rec:
                        rq[n] = q
                        ra[n] = pa
                        rb[n] = pb
                        n += 1
        for p in range(m0, m1):
            bits[mix[p] >> 6] = 0
    return n - o0 if rec else -1


@numba.njit(nogil=True, cache=True, parallel=True)
def _walk_chunks(aip, aix, bip, bix, mip, mix, bits, cnt, rq, ra, rb, cuts, got, dist):
    # pragma: no cover - compiled
    # chunk c walks rows [cuts[c], cuts[c + 1]) with its own bit set, recording into its
    # own slice of the buffers (got[c]: its hits, or -1); the chunks' rows are disjoint,
    # so are the mask entries they count
    nc = cuts.shape[0] - 1
    seg = rq.shape[0] // nc
    for c in numba.prange(nc):
        got[c] = _walk_record(aip, aix, bip, bix, mip, mix, bits[c], cnt, rq, ra, rb,
                              cuts[c], cuts[c + 1], c * seg, (c + 1) * seg, dist)


@_jit
def _scatter(cnt, rq, ra, rb, got, seg, ptr, ia, ib):  # pragma: no cover - compiled
    # the recorded hits sorted by entry, stably (a counting sort: walk order per entry;
    # chunk c's hits at [c * seg, c * seg + got[c]), chunks in row order), and ptr from
    # cnt with no other array: ptr[q + 1] starts at entry q's first slot and, advanced
    # by each of its hits, ends at its last plus one (every hit recorded: cnt's sum)
    ptr[0] = 0
    s = 0
    for q in range(cnt.shape[0]):
        ptr[q + 1] = s
        s += cnt[q]
    for c in range(got.shape[0]):
        for t in range(c * seg, c * seg + got[c]):
            q = rq[t]
            j = ptr[q + 1]
            ia[j] = ra[t]
            ib[j] = rb[t]
            ptr[q + 1] = j + 1


@_jit
def _kept(cnt, mip, mix, indptr, indices, ptr):  # pragma: no cover - compiled
    # one pass over the mask: its entries with pairs (cnt > 0), as a CSR pattern
    # (indptr, indices) in the mask's order, and their pairs' offsets (ptr)
    k = 0
    for i in range(mip.shape[0] - 1):
        for p in range(mip[i], mip[i + 1]):
            c = cnt[p]
            if c > 0:
                indices[k] = mix[p]
                ptr[k + 1] = ptr[k] + c
                k += 1
        indptr[i + 1] = k


def kept_entries(cnt: np.ndarray, M: sp.csr_array
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(indptr, indices, ptr)``: the entries of mask ``M`` with pairs (``cnt > 0``,
    :func:`masked_counts`) as a CSR pattern of ``M``'s shape in ``M``'s order (canonical
    like ``M``), and the offsets of their pairs (``ptr``, from 0), in one pass over ``M``.

    Example
    -------
    >>> L = sp.csr_array(np.tril(np.ones((4, 4)), -1))
    >>> [a.tolist() for a in kept_entries(masked_counts(L, L, L), L)]
    [[0, 0, 0, 1, 3], [0, 0, 1], [0, 1, 3, 4]]
    """
    n = int(np.count_nonzero(cnt))
    indptr = np.zeros(M.shape[0] + 1, dtype=M.indptr.dtype)
    indices = np.empty(n, dtype=M.indices.dtype)
    ptr = np.zeros(n + 1, dtype=np.int64)
    if n:
        _kept(cnt, M.indptr, M.indices, indptr, indices, ptr)
    return indptr, indices, ptr


@_jit
def _positions(pip, pix, sip, six, pos, found):  # pragma: no cover - compiled
    # per row, each entry of P searched in S's row from where the last one was found
    # (both rows sorted): a galloping search, steps doubling from there, then a binary
    # search within the last step, so that an entry a few places on costs a few
    # comparisons (P is often most of S's entries: 0.62x the time of a binary search
    # over the rest of the row with P = S = rmat-17's triangle mask; 0.7-1.0x with a
    # random 70% or 10% of S's entries as P, and on poisson3d-64's, measured)
    last = max(six.shape[0] - 1, 0)
    for i in range(pip.shape[0] - 1):
        lo0, s1 = sip[i], sip[i + 1]
        for p in range(pip[i], pip[i + 1]):
            c = pix[p]
            lo, hi = lo0, s1
            if lo < s1 and six[lo] < c:
                step = 1
                while lo + step < s1 and six[lo + step] < c:
                    lo += step
                    step <<= 1
                hi = min(lo + step, s1)
                lo += 1
            while lo < hi:
                mid = (lo + hi) >> 1
                if six[mid] < c:
                    lo = mid + 1
                else:
                    hi = mid
            lo0 = lo
            ok = lo < s1 and six[lo] == c
            found[p] = ok
            pos[p] = lo if ok else min(lo, last)


def entry_positions(P: sp.csr_array, S: sp.csr_array) -> tuple[np.ndarray, np.ndarray]:
    """``(pos, found)``: where each entry of ``P`` is among the stored entries of ``S``
    (same shape, both canonical CSR; where ``found`` is False, ``pos`` is still an index
    of ``S``'s entries, or 0 when it has none), by a search in ``S``'s row per entry: no
    array the size of ``S`` (``P`` is often a few of ``S``'s entries: a masked product's
    pattern inside its mask).

    Example
    -------
    >>> S = sp.csr_array(np.tril(np.ones((4, 4)), -1))
    >>> P = sp.csr_array(np.eye(4, k=-1) + np.eye(4, k=1))
    >>> [a.tolist() for a in entry_positions(P, S)]
    [[0, 0, 1, 2, 3, 5], [False, True, False, True, False, True]]
    """
    if P.shape != S.shape:
        raise ValueError(f"entry_positions: patterns of shapes {P.shape} and {S.shape}; "
                         "the same shape is needed")
    pos = np.zeros(P.nnz, dtype=np.int64)
    found = np.zeros(P.nnz, dtype=bool)
    if P.nnz:
        _positions(P.indptr, P.indices, S.indptr, S.indices, pos, found)
    return pos, found


def _bits(n_cols: int) -> np.ndarray:
    return np.zeros((max(n_cols, 1) + 63) // 64, dtype=np.uint64)


@_jit
def _run_pairs(ptr, ia, ib, adata, bdata, scale, spos, zero, out):
    # pragma: no cover - compiled
    scaled = spos.shape[0] > 0
    for p in range(out.shape[0]):
        s = zero
        for t in range(ptr[p], ptr[p + 1]):
            s += adata[ia[t]] * bdata[ib[t]]
        out[p] = s * scale[spos[p]] if scaled else s


def masked_counts(A: sp.csr_array, B: sp.csr_array, M: sp.csr_array) -> np.ndarray:
    """How many pairs ``(a_ik, b_kj)`` of stored entries land on each stored entry of the
    mask ``M`` (``M``'s CSR order): zero where ``A @ B`` is structurally zero.

    Example
    -------
    >>> L = sp.csr_array(np.tril(np.ones((4, 4)), -1))
    >>> masked_counts(L, L, L).tolist()  # entries (1,0) (2,0) (2,1) (3,0) (3,1) (3,2)
    [0, 1, 0, 2, 1, 0]
    """
    return masked_walk(A, B, M, 0)[0]


def _index_type(A: sp.csr_array, B: sp.csr_array) -> np.dtype:
    return np.dtype(np.int32 if max(A.nnz, B.nnz) < 2**31 else np.int64)


def masked_walk(A: sp.csr_array, B: sp.csr_array, M: sp.csr_array, max_pairs: int
                ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray] | None]:
    """One row walk: :func:`masked_counts`, and :func:`masked_pairs` too when there are at
    most ``max_pairs`` pairs (else ``None``): each pair is recorded as the walk meets it,
    then the pairs are sorted by mask entry (stably: the walk's order per entry).

    Example
    -------
    >>> L = sp.csr_array(np.tril(np.ones((4, 4)), -1))
    >>> cnt, (ptr, ia, ib) = masked_walk(L, L, L, 100)
    >>> cnt.tolist(), ptr.tolist(), ia.tolist(), ib.tolist()
    ([0, 1, 0, 2, 1, 0], [0, 0, 1, 1, 3, 4, 4], [2, 4, 5, 5], [0, 0, 1, 2])
    >>> masked_walk(L, L, L, 3)[1] is None
    True
    """
    cnt = np.zeros(M.nnz, dtype=np.int64)
    idx = _index_type(A, B)
    q_idx = np.int32 if M.nnz < 2**31 else np.int64
    cuts = walk_chunks(A, B, M)
    nc = len(cuts) - 1
    # room for twice the mask's entries (or max_pairs), split among the chunks: past a
    # chunk's share, a second walk fills the pairs
    seg = max(0, min(int(max_pairs), 2 * M.nnz + 1024 * nc)) // nc
    rq, ra, rb = (np.empty(seg * nc, t) for t in (q_idx, idx, idx))
    got = np.zeros(nc, dtype=np.int64)
    if A.nnz and B.nnz and M.nnz:
        bits = np.zeros((nc, (max(B.shape[1], 1) + 63) // 64), dtype=np.uint64)
        args = (A.indptr, A.indices, B.indptr, B.indices, M.indptr, M.indices)
        dist = _prefetch_distance(A, B)
        if nc == 1:  # no parallel region (its threads spin after it: CPU time for nothing)
            got[0] = _walk_record(*args, bits[0], cnt, rq, ra, rb, 0, M.shape[0], 0, seg,
                                  dist)
        else:
            _walk_chunks(*args, bits, cnt, rq, ra, rb, cuts, got, dist)
    if (got < 0).any():
        if cnt.sum() <= max_pairs:
            return cnt, masked_pairs(A, B, M, cnt)
        return cnt, None
    hits = int(got.sum())  # every hit recorded
    ia, ib = np.empty(hits, dtype=idx), np.empty(hits, dtype=idx)
    if hits == 0:  # a structurally empty product: zeroed pages, never written
        return cnt, (np.zeros(M.nnz + 1, dtype=np.int64), ia, ib)
    ptr = np.empty(M.nnz + 1, dtype=np.int64)
    _scatter(cnt, rq, ra, rb, got, seg, ptr, ia, ib)
    return cnt, (ptr, ia, ib)


#: Prefetch distance of the walk (entries of ``A`` ahead) where ``B``'s rows are far apart.
PREFETCH_DISTANCE = 8
#: Bytes of ``B``'s rows between the row ``i`` of ``A`` and the rows its entries reach
#: (median of a sample) past which the walk prefetches: about a core's L2 cache.
PREFETCH_REACH = 1 << 20


def _prefetch_distance(A: sp.csr_array, B: sp.csr_array) -> int:
    """:data:`PREFETCH_DISTANCE` when the rows of ``B`` that ``A``'s entries walk lie far
    from their row's own place in ``B`` (more than :data:`PREFETCH_REACH` bytes at the
    median of up to 4096 entries sampled evenly), else 0 (no prefetch: the rows are near,
    in cache or streamed by the hardware, and the hints only cost)."""
    if A.nnz == 0 or B.shape[0] == 0:
        return 0
    at = np.linspace(0, A.nnz - 1, min(A.nnz, 4096)).astype(A.indptr.dtype)
    rows = np.searchsorted(A.indptr, at, side="right") - 1  # (no cast of indptr)
    here = rows * (B.shape[0] / max(A.shape[0], 1))  # row i's place among B's rows
    row_bytes = B.nnz * B.indices.itemsize / B.shape[0] + B.indptr.itemsize
    reach = float(np.median(np.abs(A.indices[at] - here))) * row_bytes
    return PREFETCH_DISTANCE if reach > PREFETCH_REACH else 0


def walk_chunks(A: sp.csr_array, B: sp.csr_array, M: sp.csr_array) -> np.ndarray:
    """Row cuts of :func:`masked_walk`: 4 chunks per numba thread, of about equal entries of ``A``
    in rows where ``M`` has entries (one chunk for short walks)."""
    nt = numba.get_num_threads()
    n = M.shape[0]
    # about the pairs visited: threads pay off only for long walks (a walk of 2.4e6
    # pairs, poisson3d-64's, took more CPU time in two chunks than in one, measured)
    work = A.nnz * (B.nnz / max(B.shape[0], 1))
    if nt <= 1 or work < 4e6 or n < 2:
        return np.array([0, n], dtype=np.int64)
    w = np.diff(A.indptr).astype(np.int64) * (np.diff(M.indptr) > 0)
    cum = np.concatenate([[0], np.cumsum(w)])
    cuts = np.searchsorted(cum, np.linspace(0, cum[-1], 4 * nt + 1)[1:-1])
    return np.unique(np.concatenate([[0], cuts, [n]])).astype(np.int64)


def masked_pairs(A: sp.csr_array, B: sp.csr_array, M: sp.csr_array,
                 counts: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ptr, ia, ib)``: the pairs landing on mask entry ``p`` are
    ``A.data[ia[t]] * B.data[ib[t]]`` for ``t`` in ``[ptr[p], ptr[p + 1])``, in the order
    of the row walk (``counts``: :func:`masked_counts`, when already known).

    Example
    -------
    >>> L = sp.csr_array(np.tril(np.ones((4, 4)), -1))
    >>> ptr, ia, ib = masked_pairs(L, L, L)
    >>> ptr.tolist(), ia.tolist(), ib.tolist()
    ([0, 0, 1, 1, 3, 4, 4], [2, 4, 5, 5], [0, 0, 1, 2])
    """
    if counts is None:
        cnt, pairs = masked_walk(A, B, M, RECORD_LIMIT)
        if pairs is not None:
            return pairs
    else:
        cnt = counts
    ptr = np.zeros(M.nnz + 1, dtype=np.int64)
    np.cumsum(cnt, out=ptr[1:])
    idx = _index_type(A, B)
    ia, ib = np.empty(int(ptr[-1]), dtype=idx), np.empty(int(ptr[-1]), dtype=idx)
    if ptr[-1]:
        _walk_pairs(A.indptr, A.indices, B.indptr, B.indices, M.indptr, M.indices,
                    _bits(B.shape[1]), ptr[:-1].copy(), ia, ib)
    return ptr, ia, ib


def masked_rows(A: sp.csr_array, B: sp.csr_array, M: sp.csr_array, scale: np.ndarray | None,
                out: np.ndarray, r0: int, r1: int, spos: np.ndarray | None = None) -> None:
    """Values of ``A @ B`` at the entries of mask ``M`` in rows ``[r0, r1)`` (CSR order;
    ``B`` and ``M`` canonical: rows sorted, no duplicates), each times ``scale[spos[p]]``
    at entry ``p`` when ``scale`` is given (``spos`` defaults to ``M``'s own entry order).

    Example: see the module docstring.
    """
    n_cols = max(B.shape[1], 1)
    sc = np.empty(0, dtype=out.dtype) if scale is None else scale
    sp_ = np.empty(0, dtype=np.int64) if scale is None else \
        np.arange(M.nnz, dtype=np.int64) if spos is None else spos
    _masked(A.indptr, A.indices, A.data, B.indptr, B.indices, B.data, M.indptr, M.indices,
            sc, sp_, out, np.zeros(n_cols, dtype=np.uint8), np.zeros(n_cols, dtype=out.dtype),
            np.empty(HIT_BLOCK, dtype=np.int64), r0, r1, HIT_RATE_BRANCH_FREE)


class MaskedRows:
    """Rows ``[r0, r1)`` of ``(A @ B) * S`` on the mask pattern ``P`` (``spos[p]``: where
    ``P``'s entry ``p`` is among ``S``'s stored entries), or of ``A @ B`` on ``P`` alone
    (``spos`` ``None``), written into the shared output of ``P.nnz`` values."""

    def __init__(self, r0: int, r1: int, P: sp.csr_array, dtype: str,
                 spos: np.ndarray | None = None) -> None:
        self.r0, self.r1, self.P, self.dtype, self.spos = r0, r1, P, dtype, spos

    def __call__(self, out: np.ndarray, A: sp.csr_array, B: sp.csr_array,
                 S: sp.csr_array | None = None) -> np.ndarray:
        P = self.P
        p0, p1 = P.indptr[self.r0], P.indptr[self.r1]
        A = A if A.dtype == self.dtype else A.astype(self.dtype)
        B = B if B.dtype == self.dtype else B.astype(self.dtype)
        scale = None if S is None else np.asarray(S.data, dtype=self.dtype)
        masked_rows(A, B, P, scale, out[p0:p1], self.r0, self.r1, self.spos)
        return out[p0:p1]


class MaskedPairs:
    """Entries ``[p0, p1)`` of a masked product from its recorded pairs
    (:func:`masked_pairs`, sliced to these entries: ``ptr`` starts at 0), each times
    ``S``'s value at ``spos[p]`` when ``spos`` is given, written into the shared output."""

    def __init__(self, r0: int, r1: int, P: sp.csr_array, dtype: str,
                 pairs: tuple[np.ndarray, np.ndarray, np.ndarray],
                 spos: np.ndarray | None = None) -> None:
        self.r0, self.r1, self.P, self.dtype, self.spos = r0, r1, P, dtype, spos
        self.ptr, self.ia, self.ib = pairs

    def __call__(self, out: np.ndarray, A: sp.csr_array, B: sp.csr_array,
                 S: sp.csr_array | None = None) -> np.ndarray:
        p0, p1 = self.P.indptr[self.r0], self.P.indptr[self.r1]
        dt = np.dtype(self.dtype)
        ad = np.asarray(A.data, dtype=dt)
        bd = np.asarray(B.data, dtype=dt)
        if S is None or self.spos is None:
            scale, spos = np.empty(0, dtype=dt), np.empty(0, dtype=np.int64)
        else:
            scale, spos = np.asarray(S.data, dtype=dt), self.spos[p0:p1]
        _run_pairs(self.ptr, self.ia, self.ib, ad, bd, scale, spos, dt.type(0), out[p0:p1])
        return out[p0:p1]

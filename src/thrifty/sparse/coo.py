"""Sparse iteration spaces of einsums: the stored entries of the sparse operands, joined.

An einsum whose operands include CSR matrices runs over the *relation* of their stored
entries: each sparse operand contributes its entries ``(i, j)`` (a repeated label, ``ii``,
keeps the diagonal ones), labels that no other term and not the output use are summed out
at once, and operands sharing labels are joined on them (a sort-merge join, so ``ij,jk``
visits exactly the pairs a row-wise SpGEMM visits, and ``ij,ij`` the intersection). Dense
operands are then gathered at the relation's label values, and one ``numpy.einsum`` over
the relation's axis computes every pair's contribution, summed per output key.

Everything here depends on the patterns only: it is computed once, when a plan is made,
and at run time each operand's values are gathered by the stored positions
(:class:`EinsumCoo`). No sparse operand is ever densified; the work is proportional to the
number of joined pairs times the dense operands' free extents.

Example
-------
>>> import numpy as np, scipy.sparse as sp
>>> A = sp.csr_array(np.array([[1.0, 0, 2], [0, 3, 0]]))
>>> rel = build_relation(["ij", "j"], {"i": 2, "j": 3}, "i", {0: A})
>>> rel.n, sorted(rel.labels)
(3, ['i', 'j'])
>>> rel = build_relation(["ij", "ij"], {"i": 2, "j": 3}, "i", {0: A, 1: A})
>>> rel.n, sorted(rel.labels)
(3, ['i', 'j'])
>>> build_relation(["ij", "kl"], {"i": 2, "j": 3, "k": 2, "l": 3}, "", {0: A, 1: A}).n
1
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

__all__ = ["Prep", "Relation", "bool_pattern", "build_relation", "coo_of", "group_keys",
           "label_key"]


def coo_of(S: sp.csr_array) -> tuple[np.ndarray, np.ndarray]:
    """Row and column of every stored entry of a canonical CSR matrix, in CSR order."""
    rows = np.repeat(np.arange(S.shape[0], dtype=np.int64), np.diff(S.indptr))
    return rows, S.indices.astype(np.int64)


def bool_pattern(rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int]) -> sp.csr_array:
    """The canonical boolean CSR matrix with an entry at each ``(rows[k], cols[k])``."""
    if len(rows) == 0:
        return sp.csr_array(shape, dtype=bool)
    M = sp.csr_array((np.ones(len(rows), dtype=bool), (rows, cols)), shape=shape)
    M.sum_duplicates()
    M.sort_indices()
    return M


@dataclass(frozen=True, slots=True)
class Prep:
    """How one sparse operand's stored values become the relation's value vector: take
    ``data[pos]`` (``None``: all of ``data``), then (when ``starts`` is set) sum consecutive
    runs starting there."""

    pos: np.ndarray | None
    starts: np.ndarray | None = None

    def __call__(self, data: np.ndarray) -> np.ndarray:
        v = data if self.pos is None else data[self.pos]
        if self.starts is None:
            return v
        if len(v) == 0:
            return np.zeros(len(self.starts), dtype=v.dtype)
        return np.add.reduceat(v, self.starts)


@dataclass(slots=True)
class Relation:
    """``n`` tuples: each label's value (``labels``) and, per sparse operand, the index of
    its prepared value (``refs``; ``None``: the tuple's own index)."""

    n: int
    labels: dict[str, np.ndarray] = field(default_factory=dict)
    refs: dict[int, np.ndarray | None] = field(default_factory=dict)
    preps: dict[int, Prep] = field(default_factory=dict)


def label_key(cols: Sequence[np.ndarray], sizes: Sequence[int]) -> np.ndarray:
    """One int64 key per tuple for the label values ``cols`` (mixed radix, compressed by a
    sort when the radix product would overflow)."""
    n = len(cols[0]) if cols else 0
    key = np.zeros(n, dtype=np.int64)
    span = 1
    for c, s in zip(cols, sizes):
        s = max(int(s), 1)
        if span * s >= 2**62:
            _, key = np.unique(key, return_inverse=True)
            key = key.astype(np.int64).reshape(-1)
            span = int(key.max()) + 1 if n else 1
        key = key * s + c
        span *= s
    return key


def group_keys(key: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(order, starts, unique)``: a stable sort of ``key``, where each run of equal keys
    starts in the sorted order, and the run's key."""
    order = np.argsort(key, kind="stable")
    sk = key[order]
    if len(sk) == 0:
        return order, np.zeros(0, dtype=np.int64), sk
    starts = np.flatnonzero(np.concatenate([[True], sk[1:] != sk[:-1]]))
    return order, starts, sk[starts]


def _operand_relation(k: int, term: str, S: sp.csr_array, keep: set[str],
                      sizes: Mapping[str, int]) -> Relation:
    """The stored entries of sparse operand ``k`` (term ``term``), diagonal-filtered for a
    repeated label, with labels outside ``keep`` summed out."""
    rows, cols = coo_of(S)
    pos = np.arange(len(rows), dtype=np.int64)
    a, b = term[0], term[1]
    if a == b:
        on = rows == cols
        pos, labels = pos[on], {a: rows[on]}
    else:
        labels = {a: rows, b: cols}
    kept = [c for c in labels if c in keep]
    if len(kept) == len(labels):
        return Relation(len(pos), labels, {k: None},
                        {k: Prep(None if a != b else pos)})
    if kept:
        order, starts, _ = group_keys(label_key([labels[c] for c in kept],
                                                [sizes[c] for c in kept]))
    else:  # every label summed out: one tuple, the total (none for no entries)
        order = np.arange(len(pos), dtype=np.int64)
        starts = np.zeros(min(len(pos), 1), dtype=np.int64)
    first = order[starts]
    new = {c: labels[c][first] for c in kept}
    n = len(starts)
    return Relation(n, new, {k: None}, {k: Prep(pos[order], starts)})


def _join(r1: Relation, r2: Relation, sizes: Mapping[str, int]) -> Relation:
    """The natural join of two relations on their shared labels."""
    shared = [c for c in r1.labels if c in r2.labels]
    if not shared:
        i1 = np.repeat(np.arange(r1.n, dtype=np.int64), r2.n)
        i2 = np.tile(np.arange(r2.n, dtype=np.int64), r1.n)
    else:
        ss = [sizes[c] for c in shared]
        k1 = label_key([r1.labels[c] for c in shared], ss)
        k2 = label_key([r2.labels[c] for c in shared], ss)
        order2 = np.argsort(k2, kind="stable")
        sk2 = k2[order2]
        lo = np.searchsorted(sk2, k1, "left")
        counts = np.searchsorted(sk2, k1, "right") - lo
        total = int(counts.sum())
        i1 = np.repeat(np.arange(r1.n, dtype=np.int64), counts)
        offs = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        i2 = order2[np.repeat(lo, counts) + offs]
    labels = {c: v[i1] for c, v in r1.labels.items()}
    labels.update({c: v[i2] for c, v in r2.labels.items() if c not in labels})
    refs: dict[int, np.ndarray | None] = {k: i1 if v is None else v[i1]
                                          for k, v in r1.refs.items()}
    refs.update({k: i2 if v is None else v[i2] for k, v in r2.refs.items()})
    return Relation(len(i1), labels, refs, {**r1.preps, **r2.preps})


def build_relation(terms: Sequence[str], sizes: Mapping[str, int], out: str,
                   sparse: Mapping[int, sp.csr_array]) -> Relation:
    """The joined stored entries of the sparse operands ``sparse`` (operand index to its
    canonical CSR structure) of the einsum ``terms -> out``."""
    rels = []
    for k, S in sparse.items():
        # summing a label out early pays only before a join (the output's grouping sums
        # the rest, without moving the values first)
        others = set(terms[k]) if len(sparse) == 1 else \
            set(out).union(*(t for j, t in enumerate(terms) if j != k))
        rels.append(_operand_relation(k, terms[k], S, others, sizes))
    rels.sort(key=lambda r: r.n)
    acc = rels[0]
    rest = rels[1:]
    while rest:  # join a relation sharing labels first (no cartesian product when avoidable)
        pick = next((j for j, r in enumerate(rest) if set(r.labels) & set(acc.labels)), 0)
        acc = _join(acc, rest.pop(pick), sizes)
    return acc

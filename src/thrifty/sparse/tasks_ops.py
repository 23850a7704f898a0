"""The callables of the general sparse ops: einsums over joined stored entries, reductions
and softmaxes along either axis of a CSR operand, elementwise ops with a dense result.

Like :mod:`thrifty.sparse.tasks`, each is built by :mod:`thrifty.sparse.registry` from a
task's attrs, holds only arrays computed from the patterns when the plan was made, and is a
module-level class (picklable). None densifies a sparse operand: each reads the operand's
stored values (``A.data``) at positions fixed by its pattern.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from thrifty.graph.ops import get_op
from thrifty.sparse import kernels as K
from thrifty.sparse.coo import Prep, coo_of
from thrifty.sparse.tasks import Gather

__all__ = ["DenseGather", "ElementwiseDenseOut", "EinsumCoo", "EinsumPlan", "MaxSegments",
           "ReduceMaxCsr", "SegSoftmax", "SoftmaxCsr", "SoftmaxDenseOut"]


def _data(v: Any, dtype: str) -> np.ndarray:
    d = v.data if sp.issparse(v) else np.asarray(v)
    return d if d.dtype == dtype else d.astype(dtype)


@dataclass(frozen=True, slots=True)
class DenseGather:
    """A dense operand at the relation's label values: axes ``perm`` (bound ones first),
    indexed by ``index`` (one array per bound axis); ``sub`` is its einsum term."""

    perm: tuple[int, ...]
    index: tuple[np.ndarray, ...]
    sub: str

    def __call__(self, v: Any, dtype: str) -> np.ndarray:
        x = np.asarray(v)
        x = x if x.dtype == dtype else x.astype(dtype)
        x = np.transpose(x, self.perm)
        return x[self.index] if self.index else x


@dataclass(frozen=True, slots=True)
class EinsumPlan:
    """An einsum over a relation (:mod:`thrifty.sparse.coo`), by operand: a ``Prep`` and
    relation refs (``None``: the identity) for sparse ones, a :class:`DenseGather` for
    dense ones. The output: summed over the relation (``mode == "sum"``), or each pair's
    contribution sent to output slot ``dest`` of ``n_dest`` (flat dense positions or the
    CSR pattern ``P``'s entries; pairs outside ``sel`` dropped) by a scatter (one pair per
    slot), ``numpy.bincount`` (real floats) or a sum over runs (``order``, ``starts``;
    ``dest`` is then per run); then ``shape``, ``perm`` and ``out_shape`` lay it out."""

    preps: Mapping[int, Prep]
    refs: Mapping[int, np.ndarray | None]
    dense: Mapping[int, DenseGather]
    e: str
    free_out: str
    mode: str
    sel: np.ndarray | None
    dest: np.ndarray | None
    order: np.ndarray | None
    starts: np.ndarray | None
    n_dest: int
    shape: tuple[int, ...]
    perm: tuple[int, ...]
    P: sp.csr_array | None
    out_shape: tuple[int, ...]


class EinsumCoo:
    """The ``einsum_coo`` kernel: one einsum over the joined stored entries."""

    def __init__(self, plan: EinsumPlan, dtype: str) -> None:
        self.plan, self.dtype = plan, dtype

    def _contrib(self, vals: Sequence[Any], to: str) -> np.ndarray:
        p, dt = self.plan, self.dtype
        w: np.ndarray | None = None
        for k, prep in p.preps.items():
            x = prep(_data(vals[k], dt))
            ref = p.refs[k]
            x = x if ref is None else x[ref]
            w = x if w is None else w * x
        assert w is not None  # at least one sparse operand
        ops: list[Any] = [w]
        subs = [p.e]
        for k, g in p.dense.items():
            ops.append(g(vals[k], dt))
            subs.append(g.sub)
        with np.errstate(all="ignore"):
            if len(ops) == 1 and to == p.e:
                return w
            if len(ops) == 2 and to == p.e and subs[1] == p.e:
                return np.multiply(w, ops[1])
            return np.asarray(np.einsum(",".join(subs) + "->" + to, *ops,
                                        optimize=len(ops) > 2)).astype(dt, copy=False)

    def _slots(self, c: np.ndarray) -> np.ndarray:
        """The contributions summed into the output's slots (flat, free axes kept)."""
        p, dt = self.plan, self.dtype
        if p.sel is not None:
            c = c[p.sel]
        if p.mode == "bincount":
            return np.bincount(p.dest, weights=c, minlength=p.n_dest).astype(  # type: ignore[arg-type]
                dt, copy=False)
        flat = np.zeros((p.n_dest,) + c.shape[1:], dtype=dt)
        if p.mode == "scatter":
            flat[p.dest] = c
        elif p.starts is not None and len(p.starts):
            flat[p.dest] = np.add.reduceat(c[p.order], p.starts, axis=0)
        return flat

    def __call__(self, *vals: Any) -> Any:
        p = self.plan
        if p.mode == "sum":
            out = self._contrib(vals, p.free_out)
            return np.transpose(out, p.perm).reshape(p.out_shape)
        flat = self._slots(self._contrib(vals, p.e + p.free_out))
        if p.P is not None:
            return K.csr_from_parts(flat, p.P.indices, p.P.indptr, p.P.shape)
        return np.transpose(flat.reshape(p.shape), p.perm).reshape(p.out_shape)


@dataclass(frozen=True, slots=True)
class MaxSegments:
    """The slices of a ``max``: ``order`` sorts the stored entries by slice (``None``: CSR
    order already), ``starts`` where each non-empty slice begins, ``slots`` its output
    position, ``full`` whether it stores every entry of its slice."""

    order: np.ndarray | None
    starts: np.ndarray
    slots: np.ndarray
    full: np.ndarray
    n_out: int
    out_shape: tuple[int, ...]


class ReduceMaxCsr:
    """``max`` of a CSR matrix over rows, columns or both, implicit zeros included: a slice
    with fewer stored entries than its length has a zero among its entries."""

    def __init__(self, segments: MaxSegments, dtype: str) -> None:
        self.s, self.dtype = segments, dtype

    def __call__(self, A: Any) -> np.ndarray:
        s = self.s
        d = _data(A, self.dtype)
        d = d if s.order is None else d[s.order]
        out = np.zeros(s.n_out, dtype=self.dtype)
        if len(s.starts):
            seg = np.maximum.reduceat(d, s.starts)
            # a slice not fully stored also holds a structural zero
            out[s.slots] = np.where(s.full, seg, np.maximum(seg, out[s.slots]))
        return out.reshape(s.out_shape)


@dataclass(frozen=True, slots=True)
class SegSoftmax:
    """Entries in CSR order grouped into slices: ``order`` sorts them by slice, ``seg`` is
    each sorted entry's slice, ``starts`` where each non-empty slice begins."""

    order: np.ndarray | None
    seg: np.ndarray
    starts: np.ndarray
    n_seg: int

    def sorted(self, v: np.ndarray) -> np.ndarray:
        return v if self.order is None else v[self.order]

    def unsort(self, v: np.ndarray) -> np.ndarray:
        if self.order is None:
            return v
        out = np.empty_like(v)
        out[self.order] = v
        return out

    def seg_reduce(self, ufunc: np.ufunc, v: np.ndarray, fill: float) -> np.ndarray:
        out = np.full(self.n_seg, fill, dtype=v.dtype)
        if len(self.starts):
            out[self.seg[self.starts]] = ufunc.reduceat(v, self.starts)
        return out


def _seg_softmax(s: SegSoftmax, x: np.ndarray, keep: np.ndarray, implicit: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Softmax values of the stored entries (CSR order), each slice's denominator and the
    value an implicit (zero) kept entry gets before division, as ``softmax_ref`` computes
    them; ``implicit`` counts each slice's kept entries that are not stored."""
    xs, ks = s.sorted(x), s.sorted(keep)
    with np.errstate(invalid="ignore", over="ignore"):
        mx = s.seg_reduce(np.maximum, np.where(ks, xs, -np.inf), -np.inf)
        mx = np.where(implicit > 0, np.maximum(mx, 0), mx)
        mx = np.where(np.isfinite(mx), mx, 0)
        e = np.where(ks, np.exp(xs - mx[s.seg]), 0).astype(x.dtype, copy=False)
        e_imp = np.exp(-mx).astype(x.dtype, copy=False)
        tot = s.seg_reduce(np.add, e, 0) + implicit * e_imp
    return s.unsort(e), tot, e_imp


class SoftmaxCsr:
    """``softmax_csr``: a masked softmax along rows or columns over the mask's pattern
    ``F`` (every entry the mask keeps), written on the output pattern ``P`` (positions
    ``take`` of ``F``'s entries) or densely when ``P`` is ``None``."""

    def __init__(self, s: SegSoftmax, gathers: tuple[Gather, Gather], take: np.ndarray | None,
                 P: sp.csr_array | None, F: sp.csr_array, dtype: str) -> None:
        self.s, self.gx, self.gm, self.take, self.P, self.F = s, *gathers, take, P, F
        self.dtype = dtype

    def __call__(self, x: Any, mask: Any) -> Any:
        xv = np.asarray(self.gx(x)).astype(self.dtype, copy=False)
        keep = np.asarray(self.gm(mask)) != 0
        e, tot, _ = _seg_softmax(self.s, xv, keep, np.zeros(self.s.n_seg))
        den = self.s.unsort(tot[self.s.seg])
        vals = np.zeros_like(e)
        np.divide(e, den, out=vals, where=den > 0)
        if self.P is None:
            out = np.zeros(self.F.shape, dtype=self.dtype)
            rows = np.repeat(np.arange(self.F.shape[0]), np.diff(self.F.indptr))
            out[rows, self.F.indices] = vals
            return out
        data = vals if self.take is None else vals[self.take]
        return K.csr_from_parts(np.ascontiguousarray(data), self.P.indices, self.P.indptr,
                                self.P.shape)


class SoftmaxDenseOut:
    """``softmax_dense_out``: the softmax of a CSR operand along ``axis``, without a mask
    or with a dense one: implicit entries are zeros, so each slice's maximum and
    denominator come from its stored entries and a count of the others."""

    def __init__(self, s: SegSoftmax, struct: sp.csr_array, axis: int, dtype: str) -> None:
        self.s, self.axis, self.dtype = s, axis, dtype
        self.rows, self.cols = coo_of(struct)
        self.shape = (int(struct.shape[0]), int(struct.shape[1]))

    def __call__(self, x: Any, mask: Any = None) -> np.ndarray:
        xv = _data(x, self.dtype)
        ax = self.axis
        length = self.shape[ax]
        if mask is None:
            keep_full = None
            keep = np.ones(len(xv), dtype=bool)
            kept = np.full(self.s.n_seg, length, dtype=np.int64)
        else:
            keep_full = np.broadcast_to(np.asarray(mask) != 0, self.shape)
            keep = keep_full[self.rows, self.cols]
            kept = keep_full.sum(axis=ax, dtype=np.int64)
        seg_of = self.rows if ax == 1 else self.cols
        implicit = kept - np.bincount(seg_of, weights=keep, minlength=self.s.n_seg).astype(
            np.int64)
        e, tot, e_imp = _seg_softmax(self.s, xv, keep, implicit)
        with np.errstate(invalid="ignore", divide="ignore"):
            base = np.where(tot > 0, e_imp / np.where(tot > 0, tot, 1), 0).astype(self.dtype)
        base = base[:, None] if ax == 1 else base[None, :]
        out = np.broadcast_to(base, self.shape).copy() if keep_full is None else \
            np.where(keep_full, base, np.zeros((), dtype=self.dtype))
        den = tot[seg_of]
        vals = np.zeros_like(e)
        np.divide(e, den, out=vals, where=den > 0)
        out[self.rows, self.cols] = vals
        return out


class ElementwiseDenseOut:
    """``elementwise_dense_out``: an elementwise op whose result is dense but some operand
    is CSR: the op on the dense operands with each CSR operand taken as zero, then the op
    on the gathered values of the stored entries of the CSR operands (pattern ``U``)."""

    def __init__(self, op: str, attrs: Mapping[str, Any], kinds: Sequence[str],
                 gathers: Sequence[Gather], U: sp.csr_array, shape: tuple[int, ...],
                 dtype: str) -> None:
        self.op, self.attrs, self.kinds, self.gathers = op, dict(attrs), tuple(kinds), gathers
        self.U, self.shape, self.dtype = U, shape, dtype
        self.rows = np.repeat(np.arange(U.shape[0], dtype=np.int64), np.diff(U.indptr))

    def __call__(self, *vals: Any) -> np.ndarray:
        ref = get_op(self.op).reference
        base_args = [np.zeros((), dtype=v.dtype) if k == "csr" else np.asarray(v)
                     for k, v in zip(self.kinds, vals)]
        with np.errstate(all="ignore"):
            base = np.asarray(ref(*base_args, **self.attrs))
            out = np.broadcast_to(base, self.shape).astype(self.dtype, copy=True)
            if self.U.nnz:
                at = np.asarray(ref(*[g(v) for g, v in zip(self.gathers, vals)],
                                    **self.attrs))
                out[self.rows, self.U.indices] = at
        return out

"""Lowering of the general ops on sparse operands: einsums over joined stored entries,
``sum``/``max`` over any axis, softmax along either axis (with or without a mask) and
elementwise ops whose result is dense.

Each function returns ``None`` where its sparse form does not apply (no CSR operand, a
dtype or rank the kernels do not take, a size-1 label broadcast against a longer one); the
table in :mod:`thrifty.sparse.lower` then runs the op's reference, which for those cases
densifies nothing (the operands are dense) or only a broadcast operand.
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from thrifty.graph.ir import Node
from thrifty.graph.ops import normalize_axes, normalize_einsum
from thrifty.sparse import registry
from thrifty.sparse.builder import Builder, Value, nbytes, sparse_out
from thrifty.sparse.colwise import colsum_dtype_ok, spmv_t_dtype_ok
from thrifty.sparse.coo import Relation, build_relation, coo_of, group_keys, label_key
from thrifty.sparse.tasks import NUMBA_DTYPES, Gather
from thrifty.sparse.tasks_ops import DenseGather, EinsumPlan, MaxSegments, SegSoftmax

__all__ = ["einsum_plan", "lower_einsum_coo", "lower_elementwise_dense_out",
           "lower_identity_transpose", "lower_max",
           "lower_softmax_general", "lower_sum", "split_einsum"]

#: Dtypes the softmax kernels compute in (the reference's float dtypes).
_FLOATS = ("float32", "float64")


def split_einsum(subscripts: str, shapes: Sequence[tuple[int, ...]]
                 ) -> tuple[list[str], str, dict[str, int]] | None:
    """Normalized terms, output and label sizes; ``None`` where a label of size 1 is
    broadcast against a longer one (the relation form needs equal extents)."""
    subs, sizes = normalize_einsum(subscripts, shapes)
    lhs, out = subs.split("->")
    terms = lhs.split(",")
    for t, sh in zip(terms, shapes):
        if any(sizes[c] != d for c, d in zip(t, sh)):
            return None
    return terms, out, sizes


def _positions(P: sp.csr_array, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Index of each ``(rows[k], cols[k])`` among ``P``'s stored entries, -1 if absent."""
    pr, pc = coo_of(P)
    w = max(P.shape[1], 1)
    pk = pr * w + pc
    q = rows * w + cols
    if len(pk) == 0:
        return np.full(len(q), -1, dtype=np.int64)
    # sorted needles: the search walks P's keys in order (random needles miss the cache)
    order = np.argsort(q, kind="stable")
    at = np.empty(len(q), dtype=np.int64)
    at[order] = np.minimum(np.searchsorted(pk, q[order]), len(pk) - 1)
    return np.where(pk[at] == q, at, -1).astype(np.int64)


def _grouping(dest: np.ndarray, free_out: str, dtype: str
              ) -> tuple[str, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """How pairs with output slots ``dest`` are summed: ``(mode, dest, order, starts)``."""
    order, starts, uniq = group_keys(dest)
    if len(starts) == len(dest):
        return "scatter", dest, None, None
    if not free_out and dtype in _FLOATS:
        return "bincount", dest, None, None
    return "reduceat", uniq, order, starts


def einsum_plan(rel: Relation, terms: Sequence[str], out: str, sizes: Mapping[str, int],
                P: sp.csr_array | None, out_shape: tuple[int, ...], dtype: str) -> EinsumPlan:
    """The run-time plan of an einsum over relation ``rel`` (``P``: the CSR output
    pattern, used only for a 2-D output both of whose labels the relation binds)."""
    used = set("".join(terms)) | set(out)
    e = next(c for c in string.ascii_letters if c not in used)
    dense = {}
    for k, t in enumerate(terms):
        if k in rel.preps:
            continue
        bound = [a for a, c in enumerate(t) if c in rel.labels]
        free = [a for a, c in enumerate(t) if c not in rel.labels]
        sub = (e if bound else "") + "".join(t[a] for a in free)
        dense[k] = DenseGather(tuple(bound + free), tuple(rel.labels[t[a]] for a in bound),
                               sub)
    bound_out = [c for c in out if c in rel.labels]
    free_out = "".join(c for c in out if c not in rel.labels)
    inner = bound_out + list(free_out)
    perm = tuple(inner.index(c) for c in out)
    shape = tuple(sizes[c] for c in inner)
    if not bound_out:
        return EinsumPlan(rel.preps, rel.refs, dense, e, free_out, "sum", None, None, None,
                          None, 1, shape, perm, None, out_shape)
    sel = None
    if P is not None and len(out) == 2 and not free_out:
        dest = _positions(P, rel.labels[out[0]], rel.labels[out[1]])
        n_dest = P.nnz
        if np.any(dest < 0):
            sel = np.flatnonzero(dest >= 0)
            dest = dest[sel]
    else:
        P = None
        dest = label_key([rel.labels[c] for c in bound_out], [sizes[c] for c in bound_out])
        n_dest = int(np.prod([sizes[c] for c in bound_out], dtype=np.int64))
    mode, dest, order, starts = _grouping(dest, free_out, dtype)
    return EinsumPlan(rel.preps, rel.refs, dense, e, free_out, mode, sel, dest, order, starts,
                      n_dest, shape, perm, P, out_shape)


def _einsum_task(b: Builder, node: Node, plan: EinsumPlan, work: int) -> Value:
    dtype = node.type.dtype
    b.flops(work)
    P = plan.P
    size = nbytes(P.shape, dtype, P.nnz) if P is not None else node.type.nbytes
    tid = b.task(f"v{node.id}", "einsum_coo", {"plan": plan, "dtype": dtype},
                 [b.values[i].buffer for i in node.inputs], size,
                 registry.seconds("einsum_coo", b.cost, flops=2.0 * work), node.id)
    return Value(tid, "csr", P) if P is not None else Value(tid, "dense")


def _relation_of(b: Builder, node: Node, terms: Sequence[str], out: str,
                 sizes: Mapping[str, int]) -> Relation | None:
    sparse = {k: b.values[i].struct for k, i in enumerate(node.inputs)
              if b.values[i].kind == "csr" and b.values[i].struct is not None}
    if not sparse:
        return None
    return build_relation(terms, sizes, out, sparse)  # type: ignore[arg-type]


def _lower_matvec(b: Builder, node: Node, terms: Sequence[str], out: str) -> Value | None:
    """``ij,j->i`` (``A @ x``) and ``ij,i->j`` (``y @ A``: ``spmv_t``, the entries scattered
    by column, no transpose; scipy's product for other dtypes) with a CSR ``A`` and a dense
    vector, in either operand order: one pass over the stored entries."""
    kinds = [b.values[i].kind for i in node.inputs]
    if len(terms) != 2 or sorted(kinds) != ["csr", "dense"] or \
            node.type.dtype not in NUMBA_DTYPES:
        return None
    s = kinds.index("csr")
    a, v = terms[s], terms[1 - s]
    if len(a) != 2 or a[0] == a[1] or len(v) != 1 or len(out) != 1 or \
            {v, out} != set(a):
        return None
    A, x = (b.values[node.inputs[k]] for k in (s, 1 - s))
    nnz = A.struct.nnz if A.struct is not None else 0
    b.flops(2 * nnz)
    dtype = node.type.dtype
    if v == a[1]:  # A @ x
        secs = registry.seconds("spmv_scipy", b.cost, nnz=nnz)
        return Value(b.task(f"v{node.id}", "spmv_scipy", {"dtype": dtype},
                            [A.buffer, x.buffer], node.type.nbytes, secs, node.id), "dense")
    kernel = "spmv_t" if spmv_t_dtype_ok(b.graph[node.inputs[s]].type.dtype,
                                         b.graph[node.inputs[1 - s]].type.dtype, dtype) \
        else "spmm_scipy"
    secs = registry.seconds("spmv_t", b.cost, nnz=nnz) if kernel == "spmv_t" else \
        registry.seconds("spmm_scipy", b.cost, flops=2.0 * nnz)
    return Value(b.task(f"v{node.id}", kernel, {"dtype": dtype}, [x.buffer, A.buffer],
                        node.type.nbytes, secs, node.id), "dense")


def lower_einsum_coo(b: Builder, node: Node) -> Value | None:
    """An einsum with CSR operands over the join of their stored entries."""
    if any(b.values[i].kind == "csr" and b.graph[i].type.ndim != 2 for i in node.inputs):
        return None
    split = split_einsum(node.attrs["subscripts"], [b.graph[i].type.shape
                                                    for i in node.inputs])
    if split is None:
        return None
    terms, out, sizes = split
    mv = _lower_matvec(b, node, terms, out)
    if mv is not None:
        return mv
    rel = _relation_of(b, node, terms, out, sizes)
    if rel is None:
        return None
    plan = einsum_plan(rel, terms, out, sizes, sparse_out(b, node.id), node.type.shape,
                       node.type.dtype)
    free = {c for t in terms for c in t if c not in rel.labels}
    work = max(1, rel.n) * int(np.prod([sizes[c] for c in free], dtype=np.int64))
    return _einsum_task(b, node, plan, work)


def lower_identity_transpose(b: Builder, node: Node) -> Value | None:
    """``transpose(axes=(0, 1))`` of a CSR matrix: the einsum ``ij->ij`` (a copy of its
    stored values on its pattern)."""
    S = _csr_operand(b, node)
    if S is None:
        return None
    sizes = {"i": S.shape[0], "j": S.shape[1]}
    rel = build_relation(["ij"], sizes, "ij", {0: S})
    plan = einsum_plan(rel, ["ij"], "ij", sizes, sparse_out(b, node.id), node.type.shape,
                       node.type.dtype)
    return _einsum_task(b, node, plan, max(1, S.nnz))


def _csr_operand(b: Builder, node: Node, k: int = 0) -> sp.csr_array | None:
    """The structure of ``node``'s input ``k`` when it is a 2-D CSR value."""
    x = node.inputs[k]
    v = b.values[x]
    ok = v.kind == "csr" and v.struct is not None and b.graph[x].type.ndim == 2
    return v.struct if ok else None


def lower_sum(b: Builder, node: Node) -> Value | None:
    """``sum`` over rows, columns or both of a CSR matrix: the einsum ``ij->i`` (``ij->j``,
    ``ij->``) over its stored entries; the column sums (``ij->j``) by ``colsum_csr`` and the
    row sums (``ij->i``) by ``rowsum_csr`` where their dtypes allow."""
    S = _csr_operand(b, node)
    axes = normalize_axes(node.attrs["axis"], 2, "sum")
    if S is None or not axes or node.type.dtype == "bool":
        return None
    out = "".join(c for a, c in enumerate("ij") if a not in axes)
    if out == "j" and colsum_dtype_ok(b.graph[node.inputs[0]].type.dtype, node.type.dtype):
        b.flops(S.nnz)  # the column sums: one pass scattering by column (no sort, no join)
        tid = b.task(f"v{node.id}", "colsum_csr",
                     {"dtype": node.type.dtype, "shape": node.type.shape},
                     [b.values[node.inputs[0]].buffer], node.type.nbytes,
                     registry.seconds("colsum_csr", b.cost, nnz=S.nnz), node.id)
        return Value(tid, "dense")
    if out == "i" and colsum_dtype_ok(b.graph[node.inputs[0]].type.dtype, node.type.dtype):
        b.flops(S.nnz)  # the row sums: one pass over the values by the row pointers
        tid = b.task(f"v{node.id}", "rowsum_csr",
                     {"dtype": node.type.dtype, "shape": node.type.shape},
                     [b.values[node.inputs[0]].buffer], node.type.nbytes,
                     registry.seconds("rowsum_csr", b.cost, nnz=S.nnz), node.id)
        return Value(tid, "dense")
    rel = build_relation(["ij"], {"i": S.shape[0], "j": S.shape[1]}, out, {0: S})
    plan = einsum_plan(rel, ["ij"], out, {"i": S.shape[0], "j": S.shape[1]}, None,
                       node.type.shape, node.type.dtype)
    return _einsum_task(b, node, plan, max(1, S.nnz))


def _slices(S: sp.csr_array, axis: int) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """``(order, seg, starts)``: the stored entries sorted by their slice along ``axis``
    (``order``, ``None`` for rows: CSR order already), each sorted entry's slice, and where
    each non-empty slice begins."""
    rows, cols = coo_of(S)
    if axis == 1:
        order, seg = None, rows
    else:
        order = np.argsort(cols, kind="stable")
        seg = cols[order]
    if len(seg) == 0:
        return order, seg, np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.concatenate([[True], seg[1:] != seg[:-1]]))
    return order, seg, starts


def lower_max(b: Builder, node: Node) -> Value | None:
    """``max`` over rows, columns or both of a CSR matrix: a segmented maximum of the stored
    values, and 0 for every slice that is not fully stored (its implicit zeros count)."""
    S = _csr_operand(b, node)
    axes = normalize_axes(node.attrs["axis"], 2, "max")
    if S is None or not axes:
        return None
    if len(axes) == 2:
        order, seg, starts = None, np.zeros(S.nnz, dtype=np.int64), \
            np.zeros(min(S.nnz, 1), dtype=np.int64)
        length, n_out = S.shape[0] * S.shape[1], 1
    else:
        keep_axis = 1 - axes[0]  # the slices are indexed along the kept axis
        order, seg, starts = _slices(S, 1 if keep_axis == 0 else 0)
        length, n_out = S.shape[axes[0]], S.shape[keep_axis]
    slots = seg[starts]
    counts = np.diff(np.concatenate([starts, [len(seg)]]))
    segs = MaxSegments(order, starts, slots, counts == length, n_out, node.type.shape)
    dtype = node.type.dtype
    b.flops(S.nnz)
    tid = b.task(f"v{node.id}", "reduce_max_csr", {"segments": segs, "dtype": dtype},
                 [b.values[node.inputs[0]].buffer], node.type.nbytes,
                 registry.seconds("reduce_max_csr", b.cost, n=S.nnz), node.id)
    return Value(tid, "dense")


def _seg_softmax(S: sp.csr_array, axis: int) -> SegSoftmax:
    order, seg, starts = _slices(S, axis)
    return SegSoftmax(order, seg, starts, S.shape[0] if axis == 1 else S.shape[1])


def _gather(b: Builder, nid: int, F: sp.csr_array) -> Gather | None:
    v, shape = b.values[nid], b.graph[nid].type.shape
    if v.kind == "csr" and (shape != F.shape or v.struct is None):
        return None  # a broadcast CSR operand
    return Gather(v.kind, F, shape, v.struct)


def lower_softmax_general(b: Builder, node: Node) -> Value | None:
    """Softmax along either axis: over a sparse mask's pattern (``softmax_csr``), or of a
    CSR operand without a mask or with a dense one (``softmax_dense_out``)."""
    t = node.type
    if t.ndim != 2 or t.dtype not in _FLOATS:
        return None
    (axis,) = normalize_axes(node.attrs["axis"], 2, "softmax")
    fwd = b.prop.forward[node.id]
    if len(node.inputs) == 2 and not fwd.is_dense and fwd.elements is not None:
        F = fwd.elements
        gx, gm = _gather(b, node.inputs[0], F), _gather(b, node.inputs[1], F)
        if gx is None or gm is None:
            return None
        P = sparse_out(b, node.id)
        take = None
        if P is not None and P.nnz != F.nnz:
            take = _positions(F, *coo_of(P))
        b.flops(5 * F.nnz)
        attrs = {"slices": _seg_softmax(F, axis), "gathers": (gx, gm), "take": take,
                 "pattern": P, "mask_pattern": F, "dtype": t.dtype}
        size = nbytes(P.shape, t.dtype, P.nnz) if P is not None else t.nbytes
        tid = b.task(f"v{node.id}", "softmax_csr", attrs,
                     [b.values[i].buffer for i in node.inputs], size,
                     registry.seconds("softmax_csr", b.cost, n=5 * F.nnz), node.id)
        return Value(tid, "csr", P) if P is not None else Value(tid, "dense")
    S = _csr_operand(b, node)
    if S is None or any(b.values[i].kind == "csr" for i in node.inputs[1:]):
        return None
    b.flops(5 * S.nnz + t.size)
    tid = b.task(f"v{node.id}", "softmax_dense_out",
                 {"slices": _seg_softmax(S, axis), "struct": S, "axis": axis,
                  "dtype": t.dtype}, [b.values[i].buffer for i in node.inputs], t.nbytes,
                 registry.seconds("softmax_dense_out", b.cost, n=t.size), node.id)
    return Value(tid, "dense")


def lower_elementwise_dense_out(b: Builder, node: Node) -> Value | None:
    """An elementwise op with a dense result and CSR operands of the result's shape: the op
    with those operands taken as 0, then on the union of their stored entries."""
    shape = node.type.shape
    vals = [b.values[i] for i in node.inputs]
    csr = [v for v in vals if v.kind == "csr"]
    if len(shape) != 2 or not csr or any(v.struct is None or v.struct.shape != shape
                                         for v in csr):
        return None
    U = sp.csr_array(csr[0].struct, dtype=bool)
    for v in csr[1:]:
        U = U + sp.csr_array(v.struct, dtype=bool)  # boolean: the union
    U = sp.csr_array(U, dtype=bool)
    U.sum_duplicates()
    U.sort_indices()
    gathers, kinds = [], []
    for i, v in zip(node.inputs, vals):
        ishape = b.graph[i].type.shape
        kinds.append(v.kind)
        gathers.append(Gather("scalar" if len(ishape) == 0 else v.kind, U, ishape, v.struct))
    b.flops(U.nnz + (node.type.size if any(k == "dense" for k in kinds) else 0))
    attrs = {"op": node.op, "op_attrs": dict(node.attrs), "kinds": tuple(kinds),
             "gathers": tuple(gathers), "pattern": U, "shape": shape,
             "dtype": node.type.dtype}
    tid = b.task(f"v{node.id}", "elementwise_dense_out", attrs, [v.buffer for v in vals],
                 node.type.nbytes,
                 registry.seconds("elementwise_dense_out", b.cost, n=node.type.size), node.id)
    return Value(tid, "dense")

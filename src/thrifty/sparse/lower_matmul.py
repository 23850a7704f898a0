"""Lowering of matrix products (``matmul`` and matmul-shaped ``einsum``) to kernel tasks.

Per product and from its operands' forms and propagated patterns: ``sddmm`` (dense @ dense
needed on a sparse set), ``masked_spgemm`` / ``masked_spgemm_dot`` (CSR @ CSR on a mask),
``gemm_full_pattern`` (a CSR operand holding every entry), ``spmv`` / ``spmv_scipy``,
``spmm_csr`` / ``spmm_panel`` (per block row CSR or a gathered dense panel, whichever the
cost model prices lower), ``spgemm``, and ``gemm`` / ``spmm_scipy`` / ``dense`` for the rest.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from thrifty.graph.ir import Node
from thrifty.graph.ops import get_op
from thrifty.sparse import kernels as K
from thrifty.sparse import registry
from thrifty.sparse.builder import Builder, Value, nbytes, panelled, sparse_out, split_rows
from thrifty.sparse.colwise import spmv_t_dtype_ok
from thrifty.sparse.masked import masked_counts, masked_pairs
from thrifty.sparse.pattern import MASKED_PRODUCT_LIMIT, Pairs, Pattern
from thrifty.sparse.sddmm import plan_blocks
from thrifty.sparse.tasks import NUMBA_DTYPES, Gather, Seg
from thrifty.sparse.transpose import transpose_pattern

__all__ = ["chain_is_left", "lower_einsum", "lower_matmul"]

#: A masked product records its pairs (two indices each) when they are at most this share
#: of the pairs a row walk visits ...
PAIRS_SHARE = 0.5
#: ... and take at most this many bytes.
PAIRS_BYTES_LIMIT = 1 << 30
#: Consecutive block rows that take gathered panels and have the same nonzero column blocks
#: share one panel of at most this many entries (256 KiB of float64, within a core's L2):
#: one BLAS call instead of one per block row.
PANEL_MAX_ENTRIES = 1 << 15


def lower_matmul(b: Builder, node: Node) -> Value:
    """``A @ B``: the kernel its operands' forms and patterns call for."""
    a_id, b_id = node.inputs
    dtype = node.type.dtype
    if _deferred_to_user(b, node):
        return Value(f"chain{node.id}", "deferred")
    va, vb = b.values[a_id], b.values[b_id]
    if "deferred" in (va.kind, vb.kind):
        return _lower_chain(b, node)
    shape_a, shape_b = b.graph[a_id].type.shape, b.graph[b_id].type.shape
    if dtype not in NUMBA_DTYPES or len(shape_a) != 2 or len(shape_b) not in (1, 2):
        return _generic_matmul(b, node, va, vb)
    P = sparse_out(b, node.id)
    need = b.prop.need[node.id]
    if P is not None and len(shape_b) == 2 and va.kind == "csr" and vb.kind == "csr":
        # a product with a known sparse output pattern is a masked SpGEMM over it
        need = need if need is not None else b.prop.forward[node.id]
    if P is not None and need is not None and len(shape_b) == 2:
        if va.kind == "dense" and vb.kind == "dense":
            return _lower_sddmm(b, node, va, vb, P, shape_a[1])
        if va.kind == "csr" and vb.kind == "csr":
            return _lower_masked_spgemm(b, node, va, vb, P)
    if va.kind == "csr" and vb.kind == "dense":
        return _lower_csr_dense(b, node, va, vb, shape_b)
    if va.kind == "csr" and vb.kind == "csr":
        flops = 2 * _masked_hits(va.struct, vb.struct)  # type: ignore[arg-type]
        b.flops(flops)
        return Value(b.task(f"v{node.id}", "spgemm", {"dtype": dtype, "sparse_out": False},
                            [va.buffer, vb.buffer], nbytes(node.type.shape, dtype),
                            registry.seconds("spgemm", b.cost, flops=flops), node.id), "dense")
    return _generic_matmul(b, node, va, vb)


def _chain_of(b: Builder, outer: Node) -> tuple[int, int, int, int] | None:
    """``(A, X, W, inner)`` when ``outer`` is ``A @ (X @ W)`` or ``(A @ X) @ W`` with ``A``
    CSR (not a full pattern), ``X`` and ``W`` dense 2-D, one dtype, and the inner product
    read by ``outer`` only: a chain whose association the cost model chooses."""
    g = b.graph
    if not b.cost.chains or outer.op != "matmul" or \
            outer.type.dtype not in NUMBA_DTYPES or outer.type.ndim != 2:
        return None
    x, y = outer.inputs
    for inner, right in ((y, True), (x, False)):
        n = g[inner]
        if n.op != "matmul" or g.users(inner) != (outer.id,) or inner in g.outputs or \
                n.type.dtype != outer.type.dtype:
            continue
        a, X, W = (x, *n.inputs) if right else (*n.inputs, y)
        if any(i not in b.values for i in (a, X, W)):
            return None
        va, vx, vw = b.values[a], b.values[X], b.values[W]
        A = va.struct
        if va.kind != "csr" or A is None or vx.kind != "dense" or vw.kind != "dense" or \
                A.nnz == A.shape[0] * A.shape[1] or g[X].type.ndim != 2 or \
                g[W].type.ndim != 2 or g[a].type.dtype != outer.type.dtype:
            return None
        return a, X, W, inner
    return None


def chain_is_left(b: Builder, chain: tuple[int, int, int, int]) -> bool:
    """Whether the cost model runs the chain as ``(A @ X) @ W`` fused per row panel."""
    a, X, W, _ = chain
    A = b.values[a].struct
    assert A is not None
    f_in, f_out = b.graph[W].type.shape
    left, right = b.cost.chain_seconds(A.nnz, A.shape[0], A.shape[1], f_in, f_out)
    return left <= right


def _deferred_to_user(b: Builder, node: Node) -> bool:
    """Whether ``node`` is the inner product of a chain lowered at its user instead."""
    users = b.graph.users(node.id)
    if len(users) != 1:
        return False
    chain = _chain_of(b, b.graph[users[0]])
    if chain is None or chain[3] != node.id:
        return False
    written_left = b.graph[users[0]].inputs[0] == node.id
    return written_left or chain_is_left(b, chain)


def _lower_chain(b: Builder, node: Node) -> Value:
    """A chain whose inner product was deferred: ``(A @ X) @ W`` fused per row panel, or
    ``X @ W`` by BLAS and then ``A @ (X @ W)``."""
    chain = _chain_of(b, node)
    assert chain is not None
    a, X, W, _ = chain
    va, dtype, cm = b.values[a], node.type.dtype, b.cost
    A = va.struct
    assert A is not None
    (m, f_in), f_out = b.graph[X].type.shape, b.graph[W].type.shape[1]
    if not chain_is_left(b, chain):
        flops = 2.0 * m * f_in * f_out
        b.flops(flops)
        xw = b.task(f"xw{node.id}", "gemm", {"dtype": dtype, "chain": True},
                    [b.values[X].buffer, b.values[W].buffer], nbytes((m, f_out), dtype),
                    registry.seconds("gemm", cm, flops=flops), node.id)
        return _lower_csr_dense(b, node, va, Value(xw, "dense"), (m, f_out),
                                b.prop.forward[a])
    return _fused_panels(b, node, A, b.prop.forward[a],
                         [va.buffer, b.values[X].buffer, b.values[W].buffer], (f_in, f_out))


def _trailing(b: Builder, node: Node, panelled: bool) -> tuple[int, int] | None:
    """``(product, W2)`` when the unary op fused into ``node`` is read only by
    ``post(node) @ W2`` (``W2`` dense 2-D, one dtype) and running that gemm on each row
    panel of ``node`` while it is in cache pays. When the product is the ``X @ W`` of a
    chain ``A @ (X @ W)``, the cost model decides
    (:meth:`~thrifty.sparse.cost.CostModel.across_pays`: the next layer's SpMM on the
    narrower width, and the calls per panel); otherwise it runs in the panels of a kernel
    already made per panel (``panelled``: a fused chain), where it saves writing and
    reading ``post(node)`` for one BLAS call per panel."""
    g = b.graph
    if not b.cost.chains or node.id not in b.post or node.type.ndim != 2:
        return None
    (u,) = g.users(node.id)
    if u in g.outputs or len(g.users(u)) != 1:
        return None
    mm = g[g.users(u)[0]]
    if mm.op != "matmul" or mm.inputs[0] != u or mm.inputs[1] == u or \
            mm.type.dtype != node.type.dtype:
        return None
    w = mm.inputs[1]
    vw = b.values.get(w)
    if vw is None or vw.kind != "dense" or g[w].type.ndim != 2:
        return None
    outer = g.users(mm.id)
    if len(outer) == 1 and mm.id not in g.outputs and g[outer[0]].op == "matmul" and \
            g[outer[0]].inputs[1] == mm.id:
        va = b.values.get(g[outer[0]].inputs[0])
        if va is not None and va.kind == "csr" and va.struct is not None:
            A = va.struct
            f_in, f_out = g[w].type.shape
            pays = b.cost.across_pays(A.nnz, A.shape[0], A.shape[1], f_in, f_out, panelled)
            return (mm.id, w) if pays else None
    return (mm.id, w) if panelled else None


def _fused_panels(b: Builder, node: Node, A: sp.csr_array, pat: Pattern,
                  reads: list[str], widths: tuple[int, ...]) -> Value:
    """``post(A @ X)`` (``widths`` ``(k,)``) or ``post((A @ X) @ W)`` (``(f_in, f_out)``)
    per cache panel (``spmm_chain``), each panel also multiplied by the next layer's
    ``W2`` when :func:`_trailing` finds that pays (the product is then fused into
    ``node``: its value is this kernel's output)."""
    dtype, cm = node.type.dtype, b.cost
    post = b.post.get(node.id)
    if post is not None:
        b.fused.add(node.id)
    with_w = len(widths) == 2
    trail = _trailing(b, node, with_w)
    if trail is not None:
        b.fuse_into[trail[0]] = node.id
        reads = [*reads, b.values[trail[1]].buffer]
        widths = (*widths, b.graph[trail[1]].type.shape[1])
    n = A.shape[0]
    gemm_flops = sum(2.0 * f * h for f, h in zip(widths, widths[1:]))
    # row tasks balanced (and counted) on the SpMM and the gemms together: the gemms are
    # most of a chain's work at equal widths
    by_range, _ = _spmm_tasks(b, A, pat, widths[0], gemm_flops / cm.gemm_flops)
    b.flops(n * gemm_flops)
    secs = registry.seconds("spmm_chain", cm, nnz=A.nnz, n=n, widths=widths)
    rows = cm.fused_rows(widths)
    return panelled(b, node, "chain", (n, widths[-1]), dtype, list(by_range),
                    lambda r0, r1: "spmm_chain",
                    lambda r0, r1: {"rows": (r0, r1), "segments": tuple(by_range[(r0, r1)]),
                                    "dtype": dtype, "post": post, "panel_rows": rows,
                                    "with_w": with_w, "after": trail is not None,
                                    "chain": True},
                    reads, secs, None)


def _lower_sddmm(b: Builder, node: Node, va: Value, vb: Value, P: sp.csr_array,
                 d: int) -> Value:
    dtype = node.type.dtype
    bp = plan_blocks(P, d, b.cost) if dtype in ("float32", "float64") else None
    if bp is not None:
        secs = registry.seconds("sddmm_blocks", b.cost, seconds=bp.seconds(b.cost, d))
        t = bp.tile
        tiles = np.minimum(np.arange(0, P.shape[0] + t, t), P.shape[0])
        cuts = split_rows(P.indptr[tiles].astype(np.float64), b.cost.n_tasks(secs))
        ranges = [(int(tiles[r0]), int(tiles[r1])) for r0, r1 in cuts]
        b.flops(2 * P.nnz * d, 2 * (bp.n_blocks * t * t + len(bp.rest_pos)) * d)
        return panelled(b, node, "sddmm", (P.nnz,), dtype, ranges,
                        lambda r0, r1: "sddmm_blocks",
                        lambda r0, r1: {"rows": (r0, r1), "blocks": bp, "dtype": dtype},
                        [va.buffer, vb.buffer], secs, P)
    secs = registry.seconds("sddmm", b.cost, flops=2.0 * P.nnz * d)
    ranges = split_rows(P.indptr.astype(np.float64), b.cost.n_tasks(secs))
    b.flops(2 * P.nnz * d)
    return panelled(b, node, "sddmm", (P.nnz,), dtype, ranges, lambda r0, r1: "sddmm",
                    lambda r0, r1: {"rows": (r0, r1), "pattern": P, "dtype": dtype},
                    [va.buffer, vb.buffer], secs, P)


def _lower_masked_spgemm(b: Builder, node: Node, va: Value, vb: Value,
                         P: sp.csr_array) -> Value:
    """CSR @ CSR on mask ``P``: the recorded pairs of each entry where they are few next
    to the pairs a row walk visits, else Gustavson rows, or one merged dot product per
    mask entry where that visits markedly fewer pairs."""
    dtype = node.type.dtype
    Sa, Sb = va.struct, vb.struct
    assert Sa is not None and Sb is not None
    pairs = _recorded_pairs(b, node, Sa, Sb, P)
    if pairs is not None:  # the pairs are known: only their share of the walk is needed
        hits, visits = int(pairs[0][-1]), _visits(Sa, Sb, P)
        if hits <= PAIRS_SHARE * visits and 8 * hits <= PAIRS_BYTES_LIMIT:
            b.flops(2 * hits)
            return _lower_pairs(b, node, va, vb, P, np.diff(pairs[0]),
                                _mask_scale(b, node, P), pairs)
    # pairs a row walk visits, per row: rows without mask entries are skipped
    cs = np.zeros(Sa.nnz + 1)
    np.cumsum(np.diff(Sb.indptr)[Sa.indices], out=cs[1:])
    row_work = (cs[Sa.indptr[1:]] - cs[Sa.indptr[:-1]]) * (np.diff(P.indptr) > 0)
    cum = np.concatenate([[0.0], np.cumsum(row_work + np.diff(P.indptr))])
    visits = float(cum[-1])
    counts = np.diff(pairs[0]) if pairs is not None else \
        masked_counts(Sa, Sb, P) if visits <= MASKED_PRODUCT_LIMIT else None
    hits = int(counts.sum()) if counts is not None else int(visits)
    b.flops(2 * hits)
    if counts is not None and hits <= PAIRS_SHARE * visits and \
            8 * hits <= PAIRS_BYTES_LIMIT:
        return _lower_pairs(b, node, va, vb, P, counts, _mask_scale(b, node, P), pairs)
    # the dot-product form merges a row of A with a column of B per mask entry
    bcol = np.bincount(Sb.indices, minlength=Sb.shape[1]).astype(np.float64)
    arow = np.diff(Sa.indptr).astype(np.float64)
    # its total first (per mask row: A's row length times the row's entries, plus B's
    # column lengths); the per-row sums only where the dot form is taken
    pcount = np.diff(P.indptr)
    dot_total = float(arow @ pcount) + float(bcol[P.indices].sum())
    dot = dot_total + 4.0 * Sb.nnz < 0.7 * visits
    work = cum
    if dot:
        prow = np.repeat(np.arange(P.shape[0]), pcount)
        work = np.concatenate([[0.0], np.cumsum(arow[prow] + bcol[P.indices])])[P.indptr]
    reads = [va.buffer, vb.buffer]
    spos = None
    if dot:
        kernel = "masked_spgemm_dot"
        secs = registry.seconds(kernel, b.cost, flops=2.0 * float(work[-1]))
        reads[1] = transposed(b, f"bt{node.id}", vb, nbytes(Sb.shape, dtype, Sb.nnz),
                              node.id).buffer
    else:
        kernel = "masked_spgemm"
        secs = registry.seconds(kernel, b.cost, visits=float(work[-1]), nnz=P.nnz)
        scale = _mask_scale(b, node, P)
        if scale is not None:  # (A @ B) * S, S stored on P's entries: S's values in the kernel
            b.fuse_into[scale[0]] = node.id
            b.fused.add(node.id)
            reads.append(scale[1])
            spos = scale[2]
    ranges = split_rows(work, b.cost.n_tasks(secs))
    return panelled(b, node, "mdot" if dot else "mspgemm", (P.nnz,), dtype, ranges,
                    lambda r0, r1: kernel,
                    lambda r0, r1: {"rows": (r0, r1), "pattern": P, "dtype": dtype,
                                    **({} if dot else {"scale_pos": spos})},
                    reads, secs, P)


def _visits(Sa: sp.csr_array, Sb: sp.csr_array, P: sp.csr_array) -> float:
    """Pairs a row walk of ``A @ B`` on ``P`` visits, plus ``P``'s entries (rows of ``P``
    without entries are skipped): read from ``A``'s entries in ``P``'s rows alone."""
    rows = np.flatnonzero(np.diff(P.indptr))
    starts, lens = Sa.indptr[rows], np.diff(Sa.indptr)[rows]
    n = int(lens.sum())
    if n == 0:
        return float(P.nnz)
    # the positions of those rows' entries of A, row after row
    at = np.repeat(starts - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens) + np.arange(n)
    return float(np.diff(Sb.indptr)[Sa.indices[at]].sum() + P.nnz)


def _recorded_pairs(b: Builder, node: Node, Sa: sp.csr_array, Sb: sp.csr_array,
                    P: sp.csr_array) -> Pairs | None:
    """The pairs of ``A @ B`` on ``P`` that propagation recorded while finding ``P``
    (:attr:`Propagation.pairs`), when they are for these very operands' structures."""
    rec = b.prop.pairs.get(node.id)
    if rec is None or rec[2].elements is not P:
        return None
    for pat, S in ((rec[0], Sa), (rec[1], Sb)):
        E = pat.elements
        if E is None or not _same_pattern(E, S):
            return None
    return rec[3]


def _lower_pairs(b: Builder, node: Node, va: Value, vb: Value, P: sp.csr_array,
                 counts: np.ndarray, scale: tuple[int, str, np.ndarray] | None,
                 pairs: Pairs | None = None) -> Value:
    """A masked product run from the pairs recorded at inspection: per task, its entries'
    pairs (a slice, so that a task sent to another process carries only its own)."""
    dtype = node.type.dtype
    ptr, ia, ib = pairs if pairs is not None else \
        masked_pairs(va.struct, vb.struct, P, counts)  # type: ignore[arg-type]
    secs = registry.seconds("masked_spgemm_pairs", b.cost, pairs=float(ptr[-1]), nnz=P.nnz)
    ranges = split_rows((ptr + np.arange(P.nnz + 1))[P.indptr].astype(np.float64),
                        b.cost.n_tasks(secs))
    reads = [va.buffer, vb.buffer]
    spos = None
    if scale is not None:  # (A @ B) * S, S stored on P's entries: S's values in the kernel
        b.fuse_into[scale[0]] = node.id
        b.fused.add(node.id)
        reads.append(scale[1])
        spos = scale[2]

    def attrs(r0: int, r1: int) -> dict[str, Any]:
        p0, p1 = int(P.indptr[r0]), int(P.indptr[r1])
        t0, t1 = int(ptr[p0]), int(ptr[p1])
        return {"rows": (r0, r1), "pattern": P, "dtype": dtype, "scale_pos": spos,
                "pairs": (ptr[p0:p1 + 1] - t0, ia[t0:t1], ib[t0:t1])}
    return panelled(b, node, "mpairs", (P.nnz,), dtype, ranges,
                    lambda r0, r1: "masked_spgemm_pairs", attrs, reads, secs, P)


def _mask_scale(b: Builder, node: Node, P: sp.csr_array
                ) -> tuple[int, str, np.ndarray] | None:
    """``(mul node, buffer of S, where P's entries are among S's)`` when ``node``'s only
    reader is ``node * S`` (either order) with ``S`` a CSR value stored at every entry of
    ``P`` and the product's pattern ``P``: the masked kernel then multiplies by ``S``'s
    values as it writes each entry."""
    g = b.graph
    users = g.users(node.id)
    if len(users) != 1 or node.id in g.outputs:
        return None
    u = g[users[0]]
    others = [i for i in u.inputs if i != node.id]
    if u.op != "mul" or len(others) != 1 or u.type != node.type or \
            g[others[0]].type != node.type or others[0] not in b.values:
        return None
    vs, Pu = b.values[others[0]], sparse_out(b, u.id)
    if vs.kind != "csr" or vs.struct is None or Pu is None or not _same_pattern(Pu, P):
        return None
    if P.nnz == 0:
        return u.id, vs.buffer, np.zeros(0, dtype=np.int64)
    g_s = Gather("csr", P, P.shape, vs.struct)
    if g_s.kind == "same":
        return u.id, vs.buffer, np.arange(P.nnz, dtype=np.int64)
    assert g_s.found is not None and g_s.pos is not None
    return (u.id, vs.buffer, g_s.pos.astype(np.int64)) if g_s.found.all() else None


def _same_pattern(A: sp.csr_array, B: sp.csr_array) -> bool:
    return A.shape == B.shape and A.nnz == B.nnz and \
        K.same_values(A.indptr, B.indptr) and K.same_values(A.indices, B.indices)


def _lower_csr_dense(b: Builder, node: Node, va: Value, vb: Value,
                     shape_b: tuple[int, ...], pat: Pattern | None = None) -> Value:
    """CSR @ dense: the full-pattern gemm, SpMV or SpMM."""
    dtype, cm = node.type.dtype, b.cost
    A = va.struct
    assert A is not None
    reads = [va.buffer, vb.buffer]
    if A.nnz and A.nnz == A.shape[0] * A.shape[1]:
        # a full pattern: its canonical CSR values, row by row, are the dense matrix
        flops = 2 * A.nnz * (shape_b[1] if len(shape_b) == 2 else 1)
        b.flops(flops)
        return Value(b.task(f"v{node.id}", "gemm_full_pattern",
                            {"shape": A.shape, "dtype": dtype}, reads, node.type.nbytes,
                            registry.seconds("gemm_full_pattern", cm, flops=flops), node.id),
                     "dense")
    if len(shape_b) == 1:
        secs = registry.seconds("spmv", cm, nnz=A.nnz)
        ranges = split_rows(A.indptr.astype(np.float64), cm.n_tasks(secs))
        b.flops(2 * A.nnz)
        if len(ranges) == 1:
            return Value(b.task(f"v{node.id}", "spmv_scipy", {"dtype": dtype}, reads,
                                node.type.nbytes, secs, node.id), "dense")
        return panelled(b, node, "spmv", node.type.shape, dtype, ranges,
                        lambda r0, r1: "spmv", lambda r0, r1: {"rows": (r0, r1), "dtype": dtype},
                        reads, secs, None)
    return _lower_spmm(b, node, A, reads, shape_b[1], pat)


def _lower_spmm(b: Builder, node: Node, A: sp.csr_array, reads: list[str], k: int,
                pat: Pattern | None = None) -> Value:
    """CSR @ dense matrix: row segments in CSR or gathered panels, grouped into tasks."""
    dtype = node.type.dtype
    if _trailing(b, node, False) is not None:
        return _fused_panels(b, node, A, pat or b.prop.forward[node.inputs[0]], reads, (k,))
    post = b.post.get(node.id)
    if post is not None:
        b.fused.add(node.id)
    by_range, secs = _spmm_tasks(b, A, pat or b.prop.forward[node.inputs[0]], k)

    def kernel_of(r0: int, r1: int) -> str:
        forms = {s.form for s in by_range[(r0, r1)]}
        return "spmm_panel" if forms == {"panel"} else "spmm_csr"

    def attrs_of(r0: int, r1: int) -> dict[str, Any]:
        return {"rows": (r0, r1), "segments": tuple(by_range[(r0, r1)]), "dtype": dtype,
                "post": post}

    return panelled(b, node, "spmm", node.type.shape, dtype, list(by_range), kernel_of,
                    attrs_of, reads, secs, None)


def _spmm_tasks(b: Builder, A: sp.csr_array, pat: Pattern, k: int, row_seconds: float = 0.0
                ) -> tuple[dict[tuple[int, int], list[Seg]], float]:
    """The segments of ``A @ X`` (``X`` of ``k`` columns) grouped into row tasks of about
    equal estimated time, by row range, and the total estimate; counts the flops.
    ``row_seconds``: further work per row of the task (a fused chain's gemm by ``W``)."""
    cm = b.cost
    segs = _spmm_segments(b, A, pat, k, 0, A.shape[0])
    seg_secs = []
    executed = 0
    for s in segs:
        nnz = int(A.indptr[s.r1] - A.indptr[s.r0])
        if s.form == "csr":
            seg_secs.append(registry.seconds("spmm_csr", cm, nnz=nnz, k=k))
            executed += 2 * nnz * k
        else:
            cols = len(s.cols)  # type: ignore[arg-type]
            seg_secs.append(registry.seconds("spmm_panel", cm, rows=s.r1 - s.r0, cols=cols,
                                             nnz=nnz, k=k))
            executed += 2 * (s.r1 - s.r0) * cols * k
        seg_secs[-1] += row_seconds * (s.r1 - s.r0)
    b.flops(2 * A.nnz * k, executed)
    secs = float(sum(seg_secs))
    groups = _group_segments(segs, seg_secs, cm.n_tasks(secs), A.indptr, row_seconds)
    by_range = {(g[0].r0, g[-1].r1): g for g in groups} or {(0, 0): [Seg(0, 0, "csr")]}
    return by_range, secs


def _spmm_segments(b: Builder, A: sp.csr_array, pat: Pattern, k: int,
                   r0: int, r1: int) -> list[Seg]:
    """Per block row of ``[r0, r1)``: CSR, or a gathered dense panel where it is cheaper.
    Consecutive block rows that take panels and have the same nonzero column blocks share
    one panel (one BLAS call) of up to :data:`PANEL_MAX_ENTRIES` entries: the form of
    each block row is chosen alone, as if it were its own panel, and only then joined."""
    cm = b.cost
    n_cols = A.shape[1]
    if pat.is_dense or pat.blocks is None:
        return [Seg(r0, r1, "csr")]
    br, bc = pat.block  # type: ignore[misc]
    grid = pat.blocks
    segs: list[Seg] = []
    run: tuple[int, int, np.ndarray] | None = None  # the panel being joined: rows, blocks
    for I0 in range(r0 // br, -(-r1 // br)):
        a, z = max(r0, I0 * br), min(r1, (I0 + 1) * br)
        nnz = int(A.indptr[z] - A.indptr[a])
        cblocks = grid.indices[grid.indptr[I0]:grid.indptr[I0 + 1]]
        width = min(n_cols, len(cblocks) * bc)
        if not (nnz and width and nnz / ((z - a) * width) >= cm.panel_density_threshold and
                registry.seconds("spmm_panel", cm, rows=z - a, cols=width, nnz=nnz, k=k)
                < registry.seconds("spmm_csr", cm, nnz=nnz, k=k)):
            if run is not None:
                segs.append(_panel_seg(A, *run, bc))
                run = None
            if segs and segs[-1].form == "csr" and segs[-1].r1 == a:
                segs[-1] = Seg(segs[-1].r0, z, "csr")
            else:
                segs.append(Seg(a, z, "csr"))
            continue
        if run is not None and run[1] == a and (z - run[0]) * width <= PANEL_MAX_ENTRIES \
                and np.array_equal(run[2], cblocks):
            run = (run[0], z, cblocks)
            continue
        if run is not None:
            segs.append(_panel_seg(A, *run, bc))
        run = (a, z, cblocks)
    if run is not None:
        segs.append(_panel_seg(A, *run, bc))
    return segs


def _panel_seg(A: sp.csr_array, a: int, z: int, cblocks: np.ndarray, bc: int) -> Seg:
    """The gathered panel of rows ``[a, z)`` of ``A`` on column blocks ``cblocks`` (of
    ``bc`` columns): its columns and each stored entry's flat position in it."""
    n_cols = A.shape[1]
    cols = (cblocks[:, None].astype(np.int64) * bc + np.arange(bc)[None, :]).ravel()
    cols = cols[cols < n_cols]
    p0, p1 = A.indptr[a], A.indptr[z]
    rows = np.repeat(np.arange(z - a, dtype=np.int64), np.diff(A.indptr[a:z + 1]))
    cidx = A.indices[p0:p1].astype(np.int64)
    rank = np.searchsorted(cblocks, cidx // bc)
    flat = rows * len(cols) + rank * bc + cidx % bc
    return Seg(a, z, "panel", cols, flat)


def _masked_hits(A: sp.csr_array, B: sp.csr_array) -> int:
    """Multiply-adds of ``A @ B``, without forming it."""
    if A.nnz == 0 or B.nnz == 0:
        return 0
    cc = np.bincount(A.indices, minlength=A.shape[1]).astype(np.int64)
    return int(np.dot(cc, np.diff(B.indptr).astype(np.int64)))


def _group_segments(segs: list[Seg], secs: list[float], n_tasks: int,
                    indptr: np.ndarray | None = None,
                    row_seconds: float = 0.0) -> list[list[Seg]]:
    """Split segments into ``n_tasks`` contiguous groups of about equal time (CSR segments
    are cut at the row where their nonzeros reach the group's share of their time, given
    the matrix's ``indptr``, else in proportion to their rows). By nonzeros, not rows: in
    R-MAT graphs the first quarter of the rows holds over half the nonzeros (rmat-14: 54 %),
    and a task cut by rows then holds two of four tasks' work. ``row_seconds`` of each
    segment's time is per row (a fused chain's gemm), the rest per nonzero."""
    total = sum(secs)
    if n_tasks <= 1 or total <= 0:
        return [segs] if segs else []
    target = total / n_tasks
    groups: list[list[Seg]] = [[]]
    acc = 0.0
    for s, t in zip(segs, secs):
        while s.form == "csr" and acc + t > target * 1.05 and len(groups) < n_tasks \
                and s.r1 - s.r0 > 1:
            by_nnz = indptr is not None and indptr[s.r1] > indptr[s.r0]
            if by_nnz:
                cost = _cum_cost(indptr, s, t, row_seconds)  # type: ignore[arg-type]
                cut = s.r0 + 1 + int(np.searchsorted(cost, target - acc, "left"))
            else:
                cut = s.r0 + max(1, int(round((s.r1 - s.r0) * (target - acc) / t)))
            if cut >= s.r1:
                break
            groups[-1].append(Seg(s.r0, cut, "csr"))
            groups.append([])
            t = t - float(cost[cut - s.r0 - 1]) if by_nnz else t * (s.r1 - cut) / (s.r1 - s.r0)
            s = Seg(cut, s.r1, "csr")
            acc = 0.0
        groups[-1].append(s)
        acc += t
        if acc >= target and len(groups) < n_tasks:
            groups.append([])
            acc = 0.0
    return [g for g in groups if g]


def _cum_cost(indptr: np.ndarray, s: Seg, t: float, row_seconds: float) -> np.ndarray:
    """Estimated time of rows ``s.r0 .. s.r0 + i`` (inclusive) of a CSR segment of time
    ``t``: ``row_seconds`` per row, the rest shared by the nonzeros."""
    rows = s.r1 - s.r0
    per_row = min(row_seconds, t / rows)
    nnz = indptr[s.r0 + 1:s.r1 + 1] - indptr[s.r0]
    return nnz * ((t - per_row * rows) / nnz[-1]) + per_row * np.arange(1, rows + 1)


def _generic_matmul(b: Builder, node: Node, va: Value, vb: Value) -> Value:
    """Mixed forms, other ranks and unusual dtypes: scipy/numpy on whole values."""
    pa, pb = (b.prop.effective[i] for i in node.inputs)
    flops = get_op("matmul").flops([b.graph[i].type for i in node.inputs], node.type, {})
    dtype = node.type.dtype
    ta, tb = (b.graph[i].type for i in node.inputs)
    if va.kind == "dense" and vb.kind == "csr" and vb.struct is not None and \
            ta.ndim == 1 and tb.ndim == 2 and spmv_t_dtype_ok(tb.dtype, ta.dtype, dtype):
        b.flops(2 * vb.struct.nnz)  # y @ A: A's entries scattered by column (no transpose)
        return Value(b.task(f"v{node.id}", "spmv_t", {"dtype": dtype}, [va.buffer, vb.buffer],
                            node.type.nbytes,
                            registry.seconds("spmv_t", b.cost, nnz=vb.struct.nnz), node.id),
                     "dense")
    kernel = "gemm" if va.kind == vb.kind == "dense" else "spmm_scipy"
    attrs: dict[str, Any] = {"dtype": dtype}
    if dtype not in NUMBA_DTYPES:
        kernel, attrs = "dense", {"op": "matmul", "op_attrs": {}, "dtype": dtype}
    useful = flops if kernel != "spmm_scipy" else 2 * min(pa.nnz, pb.nnz) * \
        max(1, node.type.size // max(1, min(node.type.shape)))
    b.flops(useful, flops)
    return Value(b.task(f"v{node.id}", kernel, attrs, [va.buffer, vb.buffer],
                        node.type.nbytes, registry.seconds(kernel, b.cost, flops=flops),
                        node.id), "dense")


def transposed(b: Builder, tid: str, v: Value, size: int, node: int) -> Value:
    """A transpose task of ``v`` (its structure transposed too; a CSR value's transpose
    pattern is computed once, here, and a run only gathers its values)."""
    if v.kind == "csr" and v.struct is not None:
        # the transpose's pattern and value permutation computed here, once: a run gathers
        P, perm = transpose_pattern(v.struct)
        tid = b.task(tid, "transpose_csr", {"pattern": P, "perm": perm}, [v.buffer], size,
                     registry.seconds("transpose_csr", b.cost, n=P.nnz), node, False)
        return Value(tid, "csr", P)
    return Value(b.task(tid, "transpose", {}, [v.buffer], size, 0.0, node, False), v.kind,
                 None)


def lower_einsum(b: Builder, node: Node, form: tuple[bool, bool, bool]) -> Value:
    """A matmul-shaped einsum: transposes around a whole-value product."""
    a_id, b_id = node.inputs
    ta, tb, tout = form
    vals = []
    for i, t in ((a_id, ta), (b_id, tb)):
        v = b.values[i]
        vals.append(transposed(b, f"t{node.id}.{i}", v, b.graph[i].type.nbytes, node.id)
                    if t else v)
    flops = get_op("einsum").flops([b.graph[i].type for i in node.inputs], node.type,
                                   node.attrs)
    b.flops(flops)
    kernel = "gemm" if all(v.kind == "dense" for v in vals) else "spmm_scipy"
    out = Value(b.task(f"m{node.id}", kernel, {"dtype": node.type.dtype},
                       [v.buffer for v in vals], node.type.nbytes,
                       registry.seconds(kernel, b.cost, flops=flops), node.id), "dense")
    if tout:
        out = transposed(b, f"v{node.id}", out, node.type.nbytes, node.id)
    return out

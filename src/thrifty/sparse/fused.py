"""Fused row-panel kernels of matmul chains: ``post((A @ X) @ W)`` one cache panel at a time.

A graph-convolution layer ``relu(A @ (X @ W))`` written as three passes over ``n x f``
arrays (a gemm, an SpMM, an elementwise op) moves each intermediate through memory twice.
Associated as ``(A @ X) @ W`` it runs per panel of rows: the SpMM rows of ``A @ X`` land in
a scratch panel small enough to stay in cache, BLAS multiplies that panel by ``W`` into the
output rows, and the elementwise op runs on those rows while they are still in cache (the
"fused" GNN kernels of Huang et al., "GE-SpMM", SC 2020, and of FusedMM, Rahman et al.,
IPDPS 2021, in their row-panel form). The cost model picks this association or
``A @ (X @ W)`` from the operands' nonzeros and widths
(:meth:`thrifty.sparse.cost.CostModel.chain_seconds`).

A layer whose output ``H`` is read only by ``H @ W2`` (the next GCN layer's ``X @ W``)
multiplies each panel of ``H`` by ``W2`` while it is in cache and writes ``H @ W2`` instead
(``after``) where the cost model prices the next layer's ``A @ (H @ W2)`` made that way
below both associations made on their own
(:meth:`~thrifty.sparse.cost.CostModel.across_pays`).

Panels stay below the size at which OpenBLAS splits a gemm over its own threads
(:meth:`~thrifty.sparse.cost.CostModel.chain_rows`): the row tasks are the parallelism.

Example
-------
>>> import numpy as np, scipy.sparse as sp
>>> from thrifty.sparse.tasks import Seg
>>> A = sp.random_array((50, 40), density=0.1, format="csr", rng=0)
>>> X, W = np.ones((40, 3)), np.ones((3, 2))
>>> k = ChainPanel(0, 50, (Seg(0, 50, "csr"),), "float64", ("relu", {}), 16, True)
>>> bool(np.allclose(k(np.empty((50, 2)), A, X, W), np.maximum((A @ X) @ W, 0)))
True
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from thrifty.graph.ops import get_op
from thrifty.sparse import kernels as K
from thrifty.sparse.tasks import Seg

__all__ = ["ChainPanel", "as_written", "inplace_post"]


def inplace_post(op: str, attrs: Mapping[str, Any]) -> Callable[[np.ndarray], None]:
    """An elementwise unary op that overwrites its argument (relu without a temporary).

    Example
    -------
    >>> v = np.array([-1.0, 2.0]); inplace_post("relu", {})(v); v.tolist()
    [0.0, 2.0]
    """
    if op == "relu":
        def relu(v: np.ndarray) -> None:
            np.maximum(v, 0, out=v)
        return relu
    ref = get_op(op).reference
    kw = dict(attrs)

    def post(v: np.ndarray) -> None:
        with np.errstate(all="ignore"):
            v[...] = ref(v, **kw)
    return post


def _subpanels(segs: Sequence[Seg], rows: int) -> Iterator[tuple[int, int, Seg]]:
    """Each segment's rows in runs of at most ``rows`` (a gathered dense panel stays
    whole: its positions were computed for the whole segment)."""
    for s in segs:
        if s.form != "csr":
            yield s.r0, s.r1, s
            continue
        for p in range(s.r0, s.r1, rows):
            yield p, min(s.r1, p + rows), s


class ChainPanel:
    """Rows ``[r0, r1)`` of ``post(A @ X)`` (``with_w`` false) or ``post((A @ X) @ W)``,
    cache panel by cache panel, written into the shared output; with ``after``, each
    panel of that result is multiplied by one more matrix ``W2`` while still in cache
    (the next layer's ``X @ W2`` of a GCN: ``post(...) @ W2`` is written, the layer's own
    output never is).

    ``segs`` are the rows' segments (CSR rows or gathered dense panels,
    :func:`thrifty.sparse.lower_matmul._spmm_segments`); ``post`` is ``(op, attrs)`` of an
    elementwise unary or ``None``. Called as ``(out, A, X)``, then ``W`` when ``with_w``,
    then ``W2`` when ``after``.
    """

    def __init__(self, r0: int, r1: int, segs: Sequence[Seg], dtype: str,
                 post: tuple[str, Mapping[str, Any]] | None, rows: int,
                 with_w: bool, after: bool = False) -> None:
        self.r0, self.r1, self.segs, self.dtype = r0, r1, tuple(segs), dtype
        self.post = None if post is None else inplace_post(*post)
        self.rows, self.with_w, self.after = int(rows), with_w, after

    def __call__(self, out: np.ndarray, A: sp.csr_array, X: np.ndarray,
                 *mats: np.ndarray) -> np.ndarray:
        X = np.ascontiguousarray(X, dtype=self.dtype)
        data = A.data if A.data.dtype == self.dtype else A.data.astype(self.dtype)
        Ws = [np.ascontiguousarray(w, dtype=self.dtype)
              for w in mats[:int(self.with_w) + int(self.after)]]
        # one scratch panel per product before the last: the SpMM rows, then (with both
        # W and W2) the rows times W; the last product writes into the output rows
        widths = [X.shape[1]] + [w.shape[1] for w in Ws[:-1]]
        longest = max([min(self.rows, s.r1 - s.r0) if s.form == "csr" else s.r1 - s.r0
                       for s in self.segs] or [0])
        scratch = [np.empty((longest, f), dtype=self.dtype) for f in widths[:len(Ws)]]
        for p, q, s in _subpanels(self.segs, self.rows):
            o = out[p:q]
            panels = [t[:q - p] for t in scratch] + [o]
            t = panels[0]
            if s.form == "csr":
                K.spmm_rows(A.indptr, A.indices, data, X, t, p, q)
            else:
                p0, p1 = A.indptr[p], A.indptr[q]
                K.panel_gemm(s.flat_pos, data[p0:p1], (q - p, len(s.cols)),  # type: ignore[arg-type]
                             s.cols, X, t)  # type: ignore[arg-type]
            if self.with_w:
                np.matmul(t, Ws[0], out=panels[1])
                t = panels[1]
            if self.post is not None:
                self.post(t)
            if self.after:
                np.matmul(t, Ws[-1], out=o)
        return out[self.r0:self.r1]


def as_written(plan: Any, inputs: Mapping[str, Any]) -> Any:
    """``plan``, or when it associated a matmul chain (its tasks compute a product the spec
    did not write), the plan of the same graph and inputs with each product lowered as
    written (``CostModel(chains=False)``): what a replay of the spec's products one by one
    (matrix-unit emulation) must follow."""
    if not any(t.attrs.get("chain") for t in plan.taskgraph.tasks.values()):
        return plan
    from dataclasses import replace

    from thrifty.sparse.specialize import specialize

    return specialize(plan.graph, inputs, structure=plan.structure,
                      cost=replace(plan.cost, chains=False))

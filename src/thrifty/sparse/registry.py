"""The kernel registry: every task of a sparse plan names one of these kernels.

A task's ``kernel`` is a registered name and its ``attrs`` the kernel's parameters (row
range, segments, output pattern, post-op, dtype; plus ``node``, the graph node it computes).
Each entry says

* how to build the task's callable from its attrs (:func:`build`; the executor calls it);
* how the cost model prices it (:func:`seconds`, from the work: stored entries, columns,
  flops);
* its matrix-unit form: how :func:`thrifty.runtime.emulate.plan_product` runs it on a unit
  model (``"row_segments"``: CSR row segments and gathered dense panels; ``"spmv"``;
  ``"sddmm"`` and ``"masked_spgemm"``: dot products at the pattern's entries; ``"gemm"``:
  the whole product; ``"reference"``: the op's own definition; ``None``: not a product:
  allocation, assembly, transposition, elementwise work);
* whether it reads its sparse operands' index arrays at run time (a plan whose every
  reader of an input does so holds nothing derived from that input's pattern).

Example
-------
>>> spec = KERNELS["spmv"]
>>> spec.unit_form, sorted(spec.params)
('spmv', ['dtype', 'rows'])
>>> fn = build("spmv_scipy", {"dtype": "float64"})
>>> import numpy as np, scipy.sparse as sp
>>> fn(sp.csr_array(np.eye(2)), np.array([1.0, 2.0])).tolist()
[1.0, 2.0]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from thrifty.errors import SpecError
from thrifty.graph.taskgraph import Task
from thrifty.sparse import colwise as CW
from thrifty.sparse import fused as F
from thrifty.sparse import masked as M
from thrifty.sparse import sddmm as SD
from thrifty.sparse import tasks as T
from thrifty.sparse import tasks_ops as TO
from thrifty.sparse import transpose as TR
from thrifty.sparse.cost import CostModel

__all__ = ["KERNELS", "KernelSpec", "build", "reads_pattern_at_run_time", "seconds",
           "unit_form"]


@dataclass(frozen=True, slots=True)
class KernelSpec:
    """One kernel: its name, parameters, callable, price and matrix-unit form."""

    name: str
    params: tuple[str, ...]
    make: Callable[[Mapping[str, Any]], Callable[..., Any]]
    price: Callable[..., float] = field(default=lambda cm, **work: 0.0)
    unit_form: str | None = None
    pattern_free: Callable[[Mapping[str, Any]], bool] = field(default=lambda attrs: False)
    doc: str = ""


def _post(attrs: Mapping[str, Any]) -> Callable[[Any], Any] | None:
    post = attrs.get("post")
    return None if post is None else T.Unary(post[0], post[1])


def _rows(attrs: Mapping[str, Any]) -> tuple[int, int]:
    r0, r1 = attrs["rows"]
    return int(r0), int(r1)


def _gemm_price(cm: CostModel, flops: float) -> float:
    return flops / cm.gemm_flops


def _csr_price(cm: CostModel, flops: float) -> float:
    return flops / cm.csr_flops


def _spmm_pattern_free(attrs: Mapping[str, Any]) -> bool:
    return attrs.get("post") is None and all(s.form == "csr" for s in attrs["segments"])


_ENTRIES = [
    KernelSpec("alloc", ("shape", "dtype"), lambda a: T.Alloc(a["shape"], a["dtype"]),
               doc="the uninitialised output of row-panel tasks"),
    KernelSpec("assemble", ("pattern",),
               lambda a: T.assemble_dense if a["pattern"] is None else
               T.CsrAssemble(a["pattern"]),
               doc="row panels joined: their common base array, or CSR on the pattern"),
    KernelSpec("transpose", (), lambda a: T.Transpose(), doc="a 2-D transpose (CSR sorted)"),
    KernelSpec("spmm_csr", ("rows", "segments", "dtype", "post"),
               lambda a: T.SpmmPanel(*_rows(a), a["segments"], a["dtype"], _post(a)),
               lambda cm, nnz, k: cm.spmm_seconds(nnz, k), "row_segments",
               _spmm_pattern_free, "rows of CSR @ dense, per segment CSR or gathered panel"),
    KernelSpec("spmm_panel", ("rows", "segments", "dtype", "post"),
               lambda a: T.SpmmPanel(*_rows(a), a["segments"], a["dtype"], _post(a)),
               lambda cm, rows, cols, nnz, k: cm.panel_seconds(rows, cols, nnz, k),
               "row_segments", _spmm_pattern_free,
               "rows of CSR @ dense, every segment a gemm on a gathered dense panel"),
    KernelSpec("spmv", ("rows", "dtype"), lambda a: T.SpmvPanel(*_rows(a), a["dtype"]),
               lambda cm, nnz: cm.spmm_seconds(nnz, 1), "spmv", lambda a: True,
               "rows of CSR @ vector (the compiled, self-checking kernel on the whole arrays)"),
    KernelSpec("spmv_scipy", ("dtype",), lambda a: T.SpmvWhole(a["dtype"]),
               lambda cm, nnz: cm.spmm_seconds(nnz, 1), "spmv", lambda a: True,
               "CSR @ vector in one call of the compiled, self-checking kernel"),
    KernelSpec("gemm_full_pattern", ("shape", "dtype"),
               lambda a: T.FullPattern(a["shape"], a["dtype"]), _gemm_price, "gemm",
               lambda a: True,
               "a CSR operand holding every entry: its values as the dense matrix (each "
               "call checks that its index arrays still hold every entry: a PatternError "
               "otherwise, never a product of another pattern)"),
    KernelSpec("sddmm", ("rows", "pattern", "dtype"),
               lambda a: T.SddmmPanel(*_rows(a), a["pattern"], a["dtype"]), _csr_price,
               "sddmm", doc="dense @ dense at the entries of a pattern"),
    KernelSpec("masked_spgemm_dot", ("rows", "pattern", "dtype"),
               lambda a: T.MaskedDotPanel(*_rows(a), a["pattern"], a["dtype"]),
               _csr_price, "masked_spgemm",
               doc="CSR @ CSR on a mask, one merged dot product per mask entry"),
    KernelSpec("masked_softmax", ("rows", "pattern", "gathers"),
               lambda a: T.SoftmaxPanel(*_rows(a), a["pattern"], a["gathers"][0],
                                       a["gathers"][1]),
               lambda cm, nnz: 20.0 * nnz / cm.csr_flops,
               doc="softmax over the entries of the mask's pattern"),
    KernelSpec("elementwise_csr", ("op", "op_attrs", "gathers", "pattern", "dtype"),
               lambda a: T.ElementwiseCsr(a["op"], a["op_attrs"], a["gathers"],
                                          a["pattern"], a["dtype"]),
               lambda cm, n: cm.elementwise_seconds(n),
               doc="an elementwise op on the values of the output pattern"),
    KernelSpec("spgemm", ("dtype", "sparse_out"),
               lambda a: T.Spgemm(a["dtype"], a["sparse_out"]), _csr_price, "gemm",
               doc="CSR @ CSR (scipy)"),
    KernelSpec("gemm", ("dtype",), lambda a: T.DenseMatmul(a["dtype"]), _gemm_price, "gemm",
               lambda a: True, "dense @ dense (BLAS through numpy)"),
    KernelSpec("spmm_scipy", ("dtype",), lambda a: T.DenseMatmul(a["dtype"]), _gemm_price,
               "gemm", lambda a: True, "mixed dense/CSR products through scipy"),
    KernelSpec("dense", ("op", "op_attrs", "dtype"),
               lambda a: T.DenseMatmul(a["dtype"]) if a["op"] == "matmul" else
               T.DenseRef(a["op"], a["op_attrs"], a["dtype"]),
               lambda cm, n=0, flops=0: cm.elementwise_seconds(n) + flops / cm.gemm_flops,
               "reference",
               lambda a: a["op"] == "matmul",
               "the op's numpy reference on densified operands (matmul: numpy/scipy)"),
    # the general ops on sparse operands (thrifty.sparse.lower_ops)
    KernelSpec("einsum_coo", ("plan", "dtype"), lambda a: TO.EinsumCoo(a["plan"], a["dtype"]),
               _csr_price, doc="an einsum over the joined stored entries of its CSR operands"),
    KernelSpec("reduce_max_csr", ("segments", "dtype"),
               lambda a: TO.ReduceMaxCsr(a["segments"], a["dtype"]),
               lambda cm, n: cm.elementwise_seconds(n),
               doc="max over rows/columns of CSR, implicit zeros included"),
    KernelSpec("softmax_csr", ("slices", "gathers", "take", "pattern", "mask_pattern", "dtype"),
               lambda a: TO.SoftmaxCsr(a["slices"], a["gathers"], a["take"], a["pattern"],
                                       a["mask_pattern"], a["dtype"]),
               lambda cm, n: cm.elementwise_seconds(n),
               doc="softmax along rows or columns over the mask's pattern"),
    KernelSpec("softmax_dense_out", ("slices", "struct", "axis", "dtype"),
               lambda a: TO.SoftmaxDenseOut(a["slices"], a["struct"], a["axis"], a["dtype"]),
               lambda cm, n: cm.elementwise_seconds(n),
               doc="softmax of a CSR operand (no mask, or a dense one): a dense result"),
    KernelSpec("elementwise_dense_out",
               ("op", "op_attrs", "kinds", "gathers", "pattern", "shape", "dtype"),
               lambda a: TO.ElementwiseDenseOut(a["op"], a["op_attrs"], a["kinds"],
                                                a["gathers"], a["pattern"], a["shape"],
                                                a["dtype"]),
               lambda cm, n: cm.elementwise_seconds(n),
               doc="an elementwise op with a dense result: CSR operands as 0, then their "
                   "stored entries"),
    KernelSpec("spmm_chain", ("rows", "segments", "dtype", "post", "panel_rows", "with_w",
                              "after"),
               lambda a: F.ChainPanel(*_rows(a), a["segments"], a["dtype"], a["post"],
                                      a["panel_rows"], a["with_w"], a["after"]),
               lambda cm, nnz, n, widths: cm.fused_seconds(nnz, n, widths),
               doc="rows of post((A @ X) @ W) (or post(A @ X)) per cache panel: SpMM rows, "
                   "their gemm by W and the elementwise op while the panel is in cache; "
                   "with after, that panel times the next layer's W2 is written instead"),
    KernelSpec("masked_spgemm", ("rows", "pattern", "dtype", "scale_pos"),
               lambda a: M.MaskedRows(*_rows(a), a["pattern"], a["dtype"], a["scale_pos"]),
               lambda cm, visits, nnz: cm.masked_seconds(visits, nnz), "masked_spgemm",
               doc="CSR @ CSR on a mask (Gustavson's rows, a dense accumulator); for "
                   "(A @ B) * S, S's values applied as each entry is written"),
    KernelSpec("masked_spgemm_pairs", ("rows", "pattern", "dtype", "scale_pos", "pairs"),
               lambda a: M.MaskedPairs(*_rows(a), a["pattern"], a["dtype"], a["pairs"],
                                       a["scale_pos"]),
               lambda cm, pairs, nnz: cm.masked_seconds(pairs, nnz), "masked_spgemm",
               doc="CSR @ CSR on a mask from the pairs of entries landing on each mask "
                   "entry, recorded at inspection: only the useful multiply-adds; for "
                   "(A @ B) * S, S's values applied as each entry is written"),
    KernelSpec("sddmm_blocks", ("rows", "blocks", "dtype"),
               lambda a: SD.BlockSddmm(*_rows(a), a["blocks"], a["dtype"]),
               lambda cm, seconds: seconds, "sddmm",
               doc="dense @ dense at a pattern's entries: its dense tiles by BLAS, the "
                   "rest by dot products"),
    KernelSpec("spmv_t", ("dtype",), lambda a: CW.SpmvT(a["dtype"]),
               lambda cm, nnz: cm.spmm_seconds(nnz, 1), "gemm", lambda a: True,
               "y @ A (A.T @ y) for a CSR A: its entries scattered by column, no transpose"),
    KernelSpec("colsum_csr", ("dtype", "shape"),
               lambda a: CW.ColSums(a["dtype"], a["shape"]),
               lambda cm, nnz: 12.0 * nnz / cm.bandwidth, None, lambda a: True,
               "the column sums of a CSR matrix: its values scattered by column"),
    KernelSpec("rowsum_csr", ("dtype", "shape"),
               lambda a: CW.RowSums(a["dtype"], a["shape"]),
               lambda cm, nnz: 12.0 * nnz / cm.bandwidth, None, lambda a: True,
               "the row sums of a CSR matrix: each row's values added in order"),
    KernelSpec("transpose_csr", ("pattern", "perm"),
               lambda a: TR.CsrTranspose(a["pattern"], a["perm"]),
               lambda cm, n: cm.elementwise_seconds(n),
               doc="A.T of an inspected CSR pattern: its values gathered into the "
                   "transpose's precomputed pattern"),
]

#: Every kernel a sparse plan's task can name.
KERNELS: Mapping[str, KernelSpec] = {k.name: k for k in _ENTRIES}


def _spec(name: str) -> KernelSpec:
    spec = KERNELS.get(name)
    if spec is None:
        raise SpecError(f"unknown kernel {name!r}; registered: {sorted(KERNELS)}")
    return spec


def build(name: str, attrs: Mapping[str, Any]) -> Callable[..., Any]:
    """The callable of a task of kernel ``name`` with these attrs."""
    spec = _spec(name)
    missing = [p for p in spec.params if p not in attrs]
    if missing:
        raise SpecError(f"kernel {name!r} needs attrs {list(spec.params)}; missing {missing}")
    return spec.make(attrs)


def seconds(name: str, cost: CostModel, **work: float | tuple[int, ...]) -> float:
    """The cost model's estimate for kernel ``name`` doing ``work`` (its price's keywords:
    ``nnz``, ``k``, ``rows``, ``cols``, ``flops``, ``n``; a fused chain's ``widths``)."""
    return float(_spec(name).price(cost, **work))


def unit_form(name: str | None) -> str | None:
    """How emulation runs kernel ``name`` on a matrix unit (``None``: not a product)."""
    return None if name is None else _spec(name).unit_form


def reads_pattern_at_run_time(task: Task) -> bool:
    """Whether ``task`` reads its sparse operands' index arrays at run time only."""
    return task.kernel is not None and _spec(task.kernel).pattern_free(task.attrs)

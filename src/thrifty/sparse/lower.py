"""The lowering table: for every op of :data:`thrifty.graph.ops.OPS`, how the sparse engine
turns one node into kernel tasks (:data:`LOWERINGS`, keyed by op name).

Every op of the spec language has a sparse lowering: CSR operands are read in place (their
stored values at positions fixed by their patterns), never densified. An op whose sparse
form does not pay would have an explicit dense entry (``dense_reason``); none has one. Each
entry's ``dense_cases`` says where its lowering still runs the op's numpy reference and
why (operands that are all dense, and a few shapes and dtypes named there).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from thrifty.errors import SpecError
from thrifty.graph.ir import Graph, Node
from thrifty.graph.ops import get_op, normalize_axes
from thrifty.sparse import registry
from thrifty.sparse.builder import (
    Builder,
    Value,
    input_buffer_id,
    nbytes,
    panelled,
    ref_task,
    sparse_out,
    split_rows,
)
from thrifty.sparse.lower_matmul import lower_einsum, lower_matmul, transposed
from thrifty.sparse.lower_ops import (
    lower_einsum_coo,
    lower_elementwise_dense_out,
    lower_identity_transpose,
    lower_max,
    lower_softmax_general,
    lower_sum,
)
from thrifty.sparse.propagate import einsum_as_matmul
from thrifty.sparse.tasks import Gather

__all__ = ["LOWERINGS", "Lowering", "fusable_posts", "lower_node"]


@dataclass(frozen=True, slots=True)
class Lowering:
    """How one op is lowered; ``dense_reason`` is set for a dense-fallback entry, and
    ``dense_cases`` says where a sparse lowering still runs the op's reference, and why."""

    lower: Callable[[Builder, Node], Value]
    dense_reason: str | None = None
    dense_cases: str | None = None


def _lower_einsum(b: Builder, node: Node) -> Value:
    """A matmul-shaped einsum as a product; any other einsum with a CSR operand over the
    join of the operands' stored entries (``einsum_coo``); all-dense ones run numpy."""
    form = einsum_as_matmul(node.attrs["subscripts"]) if len(node.inputs) == 2 else None
    if form is not None:
        return lower_einsum(b, node, form)
    return lower_einsum_coo(b, node) or ref_task(b, node)


def _lower_reduce(b: Builder, node: Node) -> Value:
    """``sum``/``max`` of a CSR matrix over any axes on its stored entries; over no axis an
    elementwise op; of a dense operand numpy."""
    if b.values[node.inputs[0]].kind == "csr" and not normalize_axes(
            node.attrs["axis"], b.graph[node.inputs[0]].type.ndim, node.op):
        return _lower_elementwise(b, node)
    low = lower_sum if node.op == "sum" else lower_max
    return low(b, node) or ref_task(b, node)


def _lower_transpose(b: Builder, node: Node) -> Value:
    """A 2-D transpose as a transposed CSR (or dense view); the identity permutation of a
    CSR matrix copies its stored values; other ranks are dense and run numpy."""
    if tuple(node.attrs["axes"]) == (0, 1):
        return lower_identity_transpose(b, node) or ref_task(b, node)
    if tuple(node.attrs["axes"]) != (1, 0):
        return ref_task(b, node)
    return transposed(b, f"v{node.id}", b.values[node.inputs[0]], node.type.nbytes, node.id)


def _lower_softmax(b: Builder, node: Node) -> Value:
    """A masked softmax along rows needed on the whole mask pattern: the compiled
    ``masked_softmax``; along either axis, on part of the pattern, without a mask or with
    a dense one: :func:`~thrifty.sparse.lower_ops.lower_softmax_general`; a softmax of
    dense operands: numpy."""
    P = sparse_out(b, node.id)
    fwd = b.prop.forward[node.id]
    if len(node.inputs) != 2 or node.attrs["axis"] not in (1, -1) or node.type.ndim != 2 \
            or P is None or node.type.dtype not in ("float32", "float64") \
            or fwd.elements is None or fwd.elements.nnz != P.nnz \
            or any(b.values[i].kind == "csr" and b.graph[i].type.shape != P.shape
                   for i in node.inputs):
        return lower_softmax_general(b, node) or ref_task(b, node)
    x_id, m_id = node.inputs
    vx, vm = b.values[x_id], b.values[m_id]
    gathers = (Gather(vx.kind, P, b.graph[x_id].type.shape, vx.struct),
               Gather(vm.kind, P, b.graph[m_id].type.shape, vm.struct))
    secs = registry.seconds("masked_softmax", b.cost, nnz=P.nnz)
    ranges = split_rows(P.indptr.astype(np.float64), b.cost.n_tasks(secs))
    b.flops(5 * P.nnz)
    return panelled(b, node, "softmax", (P.nnz,), node.type.dtype, ranges,
                    lambda r0, r1: "masked_softmax",
                    lambda r0, r1: {"rows": (r0, r1), "pattern": P, "gathers": gathers},
                    [vx.buffer, vm.buffer], secs, P)


def _lower_elementwise(b: Builder, node: Node) -> Value:
    """On the values of a sparse output pattern where an operand is CSR, else the
    reference."""
    vals = [b.values[i] for i in node.inputs]
    P = sparse_out(b, node.id)
    if not any(v.kind == "csr" for v in vals):
        return ref_task(b, node)
    if P is None or any(v.kind == "csr" and b.graph[i].type.shape != P.shape
                        for i, v in zip(node.inputs, vals)):
        return lower_elementwise_dense_out(b, node) or ref_task(b, node)
    gathers = []
    for i, v in zip(node.inputs, vals):
        shape = b.graph[i].type.shape
        kind = "scalar" if len(shape) == 0 else v.kind
        gathers.append(Gather(kind, P, shape, v.struct))
    b.flops(P.nnz)
    dtype = node.type.dtype
    attrs = {"op": node.op, "op_attrs": dict(node.attrs), "gathers": tuple(gathers),
             "pattern": P, "dtype": dtype}
    return Value(b.task(f"v{node.id}", "elementwise_csr", attrs, [v.buffer for v in vals],
                        nbytes(P.shape, dtype, P.nnz),
                        registry.seconds("elementwise_csr", b.cost, n=P.nnz), node.id),
                 "csr", P)


def _lower_input(b: Builder, node: Node) -> Value:
    s = b.inputs[node.name or ""]
    size = nbytes(s.shape, s.dtype)
    if s.sparse and s.indices is not None and s.indptr is not None:  # the CSR arrays' bytes
        size = len(s.indices) * (np.dtype(s.dtype).itemsize + s.indices.itemsize) + \
            s.indptr.nbytes
    bid = b.buffer(input_buffer_id(s.name), size, None)
    struct = b.prop.forward[node.id].elements if s.sparse else None
    return Value(bid, "csr" if s.sparse else "dense", struct)


def _lower_const(b: Builder, node: Node) -> Value:
    bid = b.buffer(f"c{node.id}", node.type.nbytes, None)
    b.consts[bid] = np.asarray(node.attrs["value"])
    return Value(bid, "dense")


_DENSE_OPERANDS = "operands that are all dense run numpy (nothing to densify); "
_ELEMENTWISE = Lowering(_lower_elementwise, dense_cases=(
    _DENSE_OPERANDS + "a CSR operand broadcast against a larger shape (a 1 x n CSR row "
    "times an m x n matrix), or into a result of more than 2 dimensions, runs the "
    "reference: the gathers index a CSR operand by the result's 2-D entries, so only CSR "
    "operands of the result's shape are read in place"))
_REDUCE = Lowering(_lower_reduce, dense_cases=(
    _DENSE_OPERANDS + "sparse values are 2-D, so every sum/max of a CSR operand is sparse"))

#: How each op is lowered, by op name (a test checks every op of ``OPS`` has an entry).
LOWERINGS: Mapping[str, Lowering] = {
    "input": Lowering(_lower_input), "const": Lowering(_lower_const),
    "matmul": Lowering(lower_matmul, dense_cases=(
        _DENSE_OPERANDS + "dtypes without compiled kernels (int16, float16) run numpy/scipy "
        "on the CSR value itself (scipy's product, no densification)")),
    "einsum": Lowering(_lower_einsum, dense_cases=(
        _DENSE_OPERANDS + "a label of size 1 broadcast against a longer one (numpy's einsum "
        "broadcasting) runs the reference: the join matches labels by value, so it needs "
        "equal extents")),
    "transpose": Lowering(_lower_transpose, dense_cases=_DENSE_OPERANDS.rstrip("; ")),
    "softmax": Lowering(_lower_softmax, dense_cases=(
        _DENSE_OPERANDS + "a complex softmax, and a CSR mask of a broadcast shape (1 x n) run "
        "the reference: the kernels compute in float32/float64 on masks of the input's "
        "shape")),
    "sum": _REDUCE, "max": _REDUCE,
    **{op: _ELEMENTWISE for op in ("add", "sub", "mul", "div", "lt", "le", "gt", "ge", "eq",
                                   "ne", "neg", "abs", "exp", "log", "sqrt", "relu",
                                   "sigmoid", "tanh", "where")},
}


def lower_node(b: Builder, node: Node) -> Value:
    """The tasks of one node, by its op's entry in :data:`LOWERINGS`."""
    entry = LOWERINGS.get(node.op)
    if entry is None:
        raise SpecError(f"op {node.op!r} has no entry in the sparse lowering table; add one "
                        "(a dense fallback counts) to thrifty.sparse.lower.LOWERINGS")
    return entry.lower(b, node)


def fusable_posts(graph: Graph) -> dict[int, int]:
    """``{matmul id: unary id}`` for a unary elementwise op that alone reads a matmul result
    of its own dtype (it can run on each row panel as the panel is computed)."""
    out = {}
    for n in graph:
        if len(n.inputs) != 1 or get_op(n.op).kind != "elementwise":
            continue
        (m,) = n.inputs
        mn = graph[m]
        if mn.op == "matmul" and graph.users(m) == (n.id,) and m not in graph.outputs \
                and mn.type == n.type:
            out[m] = n.id
    return out

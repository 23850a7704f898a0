"""The lowering table: for every op of :data:`thrifty.graph.ops.OPS`, how the sparse engine
turns one node into kernel tasks (:data:`LOWERINGS`, keyed by op name).

An op whose sparse form does not pay (or is not written yet) has an explicit ``dense``
entry with the reason: it runs the op's numpy reference on densified operands.
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
    """How one op is lowered; ``dense_reason`` is set for a dense-fallback entry."""

    lower: Callable[[Builder, Node], Value]
    dense_reason: str | None = None


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


_ELEMENTWISE = Lowering(_lower_elementwise)
_REDUCE = Lowering(_lower_reduce)

#: How each op is lowered, by op name (a test checks every op of ``OPS`` has an entry).
LOWERINGS: Mapping[str, Lowering] = {
    "input": Lowering(_lower_input), "const": Lowering(_lower_const),
    "matmul": Lowering(lower_matmul), "einsum": Lowering(_lower_einsum),
    "transpose": Lowering(_lower_transpose), "softmax": Lowering(_lower_softmax),
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

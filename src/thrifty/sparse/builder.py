"""The state of one lowering: tasks and buffers made so far, where each node's value lives.

Every task is made by :meth:`Builder.task` from a registered kernel name and its attrs
(:mod:`thrifty.sparse.registry` builds the callable); nothing else puts work in a plan.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from thrifty.graph.ir import Graph, Node
from thrifty.graph.ops import get_op
from thrifty.graph.taskgraph import Buffer, Task
from thrifty.sparse import registry
from thrifty.sparse.cost import CostModel
from thrifty.sparse.inputs import InputSpec
from thrifty.sparse.propagate import Propagation

__all__ = ["Builder", "Value", "input_buffer_id", "nbytes", "panelled", "ref_task",
           "sparse_out", "split_rows"]


@dataclass(slots=True)
class Value:
    """Where a node's value lives at run time and in which form."""

    buffer: str
    kind: str  # "dense" or "csr"
    struct: sp.csr_array | None = None  # exact structure of a csr value


class Builder:
    """Tasks, buffers, constants and counters of one lowering."""

    def __init__(self, graph: Graph, prop: Propagation, cost: CostModel,
                 inputs: Mapping[str, InputSpec]) -> None:
        self.graph, self.prop, self.cost, self.inputs = graph, prop, cost, inputs
        self.tasks: list[Task] = []
        self.buffers: list[Buffer] = []
        self.values: dict[int, Value] = {}
        self.kernels: Counter[str] = Counter()
        self.useful = 0
        self.executed = 0
        self.consts: dict[str, Any] = {}
        self.post: dict[int, tuple[str, Mapping[str, Any]]] = {}  # fusable unary per matmul
        self.fused: set[int] = set()
        self.fuse_into: dict[int, int] = {}

    def buffer(self, bid: str, size: int, producer: str | None) -> str:
        self.buffers.append(Buffer(bid, int(size), producer))
        return bid

    def task(self, tid: str, kernel: str, attrs: Mapping[str, Any], reads: Sequence[str],
             size: int, seconds: float, node: int, count: bool = True) -> str:
        """A task of ``kernel`` with ``attrs`` writing buffer ``tid`` of ``size`` bytes."""
        fn = registry.build(kernel, attrs)
        self.tasks.append(Task(tid, tuple(reads), (tid,), max(seconds, 0.0), 0, fn, kernel,
                               {"node": node, **attrs}))
        self.buffer(tid, size, tid)
        if count:
            self.kernels[kernel] += 1
        return tid

    def flops(self, useful: float, executed: float | None = None) -> None:
        """Count multiply-adds (``executed`` defaults to ``useful``)."""
        self.useful += int(useful)
        self.executed += int(useful if executed is None else executed)


def input_buffer_id(name: str) -> str:
    """The id of the TaskGraph buffer that holds input ``name`` (``SparsePlan.input_buffer``
    is the public way to get it)."""
    return f"in:{name}"


def nbytes(shape: tuple[int, ...], dtype: str, nnz: int | None = None) -> int:
    """Bytes of a dense value, or of a CSR value with ``nnz`` entries."""
    item = np.dtype(dtype).itemsize
    if nnz is not None:
        return int(nnz * (item + 4) + 4 * (shape[0] + 1))
    return int(np.prod(shape, dtype=np.int64)) * item


def sparse_out(b: Builder, nid: int) -> sp.csr_array | None:
    """The exact output pattern when the node should produce CSR, else ``None``."""
    p = b.prop.effective[nid]
    if p.is_dense or p.elements is None or p.ndim != 2:
        return None
    return p.elements if p.density < b.cost.sparse_output_density else None


def split_rows(cum: np.ndarray, n_tasks: int) -> list[tuple[int, int]]:
    """Split rows ``[0, len(cum) - 1)`` into ``n_tasks`` ranges of equal cumulative cost."""
    n = len(cum) - 1
    if n_tasks <= 1 or n <= 1:
        return [(0, n)]
    targets = np.linspace(0, cum[-1], n_tasks + 1)[1:-1]
    cuts = np.unique(np.concatenate([[0], np.searchsorted(cum, targets), [n]]))
    return [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:]) if b > a] or [(0, n)]


def ref_task(b: Builder, node: Node) -> Value:
    """The op's numpy reference on densified operands (the ``dense`` kernel)."""
    reads = [b.values[i].buffer for i in node.inputs]
    flops = get_op(node.op).flops([b.graph[i].type for i in node.inputs], node.type,
                                  node.attrs)
    b.flops(flops)
    attrs = {"op": node.op, "op_attrs": dict(node.attrs), "dtype": node.type.dtype}
    tid = b.task(f"v{node.id}", "dense", attrs, reads, node.type.nbytes,
                 registry.seconds("dense", b.cost, n=node.type.size), node.id)
    return Value(tid, "dense")


def panelled(b: Builder, node: Node, name: str, out_shape: tuple[int, ...], dtype: str,
             ranges: list[tuple[int, int]], kernel_of: Callable[[int, int], str],
             attrs_of: Callable[[int, int], Mapping[str, Any]], reads: Sequence[str],
             seconds: float, P: sp.csr_array | None) -> Value:
    """Tasks for a row-panel kernel: one allocation, one task per range (kernel
    ``kernel_of(r0, r1)`` with ``attrs_of(r0, r1)``), one assembly (CSR on ``P`` when
    given)."""
    nid = node.id
    alloc = b.task(f"alloc{nid}", "alloc", {"shape": out_shape, "dtype": dtype}, [],
                   nbytes(out_shape, dtype), 0.0, nid, count=False)
    total_rows = max(1, (P.shape[0] if P is not None else out_shape[0]))
    parts = []
    for k, (r0, r1) in enumerate(ranges):
        frac = (r1 - r0) / total_rows
        parts.append(b.task(f"{name}{nid}.{k}", kernel_of(r0, r1), attrs_of(r0, r1),
                            [alloc, *reads], int(nbytes(out_shape, dtype) * frac),
                            seconds * frac, nid))
    size = nbytes(P.shape, dtype, P.nnz) if P is not None else nbytes(out_shape, dtype)
    out = b.task(f"v{nid}", "assemble", {"pattern": P}, parts, size, 0.0, nid, False)
    return Value(out, "dense") if P is None else Value(out, "csr", P)

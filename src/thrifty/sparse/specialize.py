"""Specialization: a dense spec and its inputs' patterns become a TaskGraph of kernel calls.

The inspector/executor split of Saltz et al. ("Run-time parallelization and scheduling of
loops", IEEE TC 1991), as sparse tensor compilers use it today (Taco's assemble/compute
split; Kjolstad et al., OOPSLA 2017): :func:`specialize` *inspects* the inputs once
(patterns, :mod:`~thrifty.sparse.propagate`, lowering), and the returned :class:`SparsePlan`
*executes* on any inputs with the same patterns (the runtime runs it,
:mod:`thrifty.runtime.sparse_run`).

The engine's parts: :mod:`~thrifty.sparse.inputs` (what a plan expects of its inputs),
:mod:`~thrifty.sparse.lower` (the lowering table, one entry per op) and
:mod:`~thrifty.sparse.lower_matmul`, :mod:`~thrifty.sparse.registry` (the kernels a task can
name, with their parameters, price and matrix-unit form), :mod:`~thrifty.sparse.tasks`
(their callables), :mod:`~thrifty.sparse.plan` (the plan).

Lowering picks, per op and from its propagated patterns, one registered kernel:

======================  ===============================================================
op and patterns         kernel
======================  ===============================================================
csr @ dense matrix      ``spmm``: per block row, CSR SpMM or gemm on a gathered dense
                        panel, whichever the :class:`~thrifty.sparse.cost.CostModel` finds
                        cheaper (``spmm_csr`` / ``spmm_panel``)
csr @ dense, every      ``gemm_full_pattern``: the CSR values viewed as the dense matrix
entry stored            (no copy), BLAS
csr @ dense vector      ``spmv``: the compiled CSR kernel on row panels read in place, or
                        ``spmv_scipy``: one call of it when splitting would not pay
csr @ (dense @ dense)   ``spmm_chain``: the association the cost model prices lower; as
or (csr @ dense) @      ``(A @ X) @ W``, SpMM rows, their gemm by ``W`` and a unary
dense                   elementwise op per cache panel (``thrifty.sparse.fused``);
                        a panel read only by ``@ W2`` is multiplied by ``W2`` in cache
dense @ dense, needed   ``sddmm`` (only the needed entries), or ``sddmm_blocks``: dense
only on a sparse set    tiles of the pattern by BLAS, the rest entry by entry
csr @ csr, needed on    ``masked_spgemm`` (Gustavson with the mask as admission set; a
a sparse set            product by the mask's values applied in the kernel)
csr transposed          ``transpose_csr``: the transpose's pattern computed once, a run
                        gathers the values
csr @ csr               ``spgemm`` (scipy)
dense @ dense           ``gemm`` (BLAS through numpy)
masked softmax          ``masked_softmax`` over the mask's pattern
elementwise, sparse     ``elementwise_csr``: numpy on the values of the output pattern
elementwise, dense      ``elementwise_dense_out``: the op with CSR operands as 0, then on
result                  their stored entries
other einsums, sum      ``einsum_coo``: one einsum over the joined stored entries of the
                        CSR operands (:mod:`~thrifty.sparse.coo`)
max over axes           ``reduce_max_csr`` (implicit zeros count)
softmax, either axis    ``softmax_csr`` (over a sparse mask) or ``softmax_dense_out``
anything else           ``dense``: the op's numpy reference (dense operands)
======================  ===============================================================

Row-panel kernels are split into as many tasks as the cost model finds worth the
scheduler's overhead (one task carries at least ``min_task_seconds`` of estimated work);
the panels write into one output buffer when they share memory (sync and threaded
schedulers) and are concatenated otherwise (a distributed cluster).

Example
-------
>>> import numpy as np, scipy.sparse as sp, thrifty as th
>>> gcn = th.program(lambda A, X, W: th.relu(A @ (X @ W)))
>>> A = sp.random_array((200, 200), density=0.02, format="csr", rng=0)
>>> X, W = np.ones((200, 8)), np.ones((8, 4))
>>> plan = gcn.specialize(A=A, X=X, W=W)
>>> sorted(plan.report()["kernels"])
['fused_relu', 'gemm', 'spmm_csr']
>>> bool(np.allclose(plan(A=A, X=X, W=W), np.maximum(A @ (X @ W), 0)))
True
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import scipy.sparse as sp

from thrifty.errors import ShapeError, SpecError
from thrifty.graph.ir import Graph
from thrifty.graph.taskgraph import Task, TaskGraph
from thrifty.sparse import kernels as K
from thrifty.sparse import registry
from thrifty.sparse.builder import Builder, input_buffer_id
from thrifty.sparse.cost import CostModel
from thrifty.sparse.inputs import InputSpec, input_spec_csr
from thrifty.sparse.lower import fusable_posts, lower_node
from thrifty.sparse.pattern import Pattern
from thrifty.sparse.plan import SparsePlan
from thrifty.sparse.propagate import propagate

__all__ = ["InputSpec", "SparsePlan", "specialize"]


def _pattern_free_inputs(graph: Graph, tasks: Sequence[Task],
                         specs: Mapping[str, InputSpec]) -> list[str]:
    """Sparse inputs whose pattern the plan does not depend on: the spec is one op (a
    matmul, or another op all of whose tasks are such kernels: ``A.T @ x``, column sums)
    and every task reading the input is a kernel that reads the index arrays at run time
    (row ranges only balance the work), so a run is right for any pattern of that shape."""
    ops = [n for n in graph if n.op not in ("input", "const")]
    if len(ops) != 1 or ops[0].id not in graph.outputs:
        return []
    if ops[0].op != "matmul" and not all(registry.reads_pattern_at_run_time(t)
                                         for t in tasks):
        return []  # another op: only when no task at all holds anything of the pattern
    free = []
    for name, s in specs.items():
        readers = [t for t in tasks if input_buffer_id(name) in t.reads]
        if s.sparse and readers and all(registry.reads_pattern_at_run_time(t)
                                        for t in readers):
            free.append(name)
    return free


def _input_specs(graph: Graph, inputs: Mapping[str, Any]
                 ) -> tuple[dict[str, InputSpec], dict[str, sp.csr_array]]:
    """The inputs' specs, and the sparse ones' values as canonical CSR on the specs' own
    index arrays (the inspected patterns: the caller's arrays may change later)."""
    missing = [n for n in graph.input_names if n not in inputs]
    if missing:
        raise SpecError(f"missing input(s) {missing}; the graph's inputs are "
                        f"{list(graph.input_names)}")
    specs: dict[str, InputSpec] = {}
    canon: dict[str, sp.csr_array] = {}
    for i in graph.inputs:
        node = graph[i]
        spec, C = input_spec_csr(node, inputs[node.name or ""])
        specs[spec.name] = spec
        if C is not None:
            canon[spec.name] = C
        v = inputs[spec.name]
        vshape = tuple(v.shape) if hasattr(v, "shape") else np.shape(v)
        if vshape != node.type.shape:
            raise ShapeError(f"input {spec.name!r} has shape {vshape}, but the graph was "
                             f"traced for shape {node.type.shape}")
    return specs, canon


def specialize(graph: Graph, inputs: Mapping[str, Any], structure: type | None = None,
               cost: CostModel | None = None) -> SparsePlan:
    """Inspect ``inputs`` and lower ``graph`` to a :class:`SparsePlan` (data; the runtime
    runs it: :func:`thrifty.runtime.specialize` returns it ready to run).

    Parameters
    ----------
    graph:
        A traced dense spec.
    inputs:
        Values (or, for dense inputs, anything with the traced shape) by input name; scipy
        sparse values are specialized to their patterns.
    structure:
        ``tuple``/``list`` when the spec returned several tensors, else ``None``.
    cost:
        The machine model; :class:`CostModel` defaults.
    """
    t0 = time.perf_counter()
    cost = cost or CostModel()
    specs, canon = _input_specs(graph, inputs)
    # the sparse inputs' patterns, canonical already (not checked again)
    prop = propagate(graph, {n: Pattern.from_elements(K.csr_from_parts(
        np.ones(C.nnz, dtype=bool), C.indices, C.indptr, C.shape)) for n, C in canon.items()})
    b = Builder(graph, prop, cost, specs)
    for m, u in fusable_posts(graph).items():
        b.post[m] = (graph[u].op, dict(graph[u].attrs))
        b.fuse_into[u] = m
    for node in graph:
        if b.fuse_into.get(node.id) in b.fused:
            b.values[node.id] = b.values[b.fuse_into[node.id]]
            b.kernels[f"fused_{node.op}"] += 1
        else:
            b.values[node.id] = lower_node(b, node)
    outs = [b.values[o] for o in graph.outputs]
    for n in _pattern_free_inputs(graph, b.tasks, specs):
        specs[n] = replace(specs[n], pattern_free=True)
    tg = TaskGraph(b.tasks, b.buffers, results=[v.buffer for v in outs],
                   name=f"sparse plan of {len(graph)} nodes")
    return SparsePlan(graph, structure, prop, tg, specs, outs, b.consts, b.kernels, b.useful,
                      b.executed, time.perf_counter() - t0, cost)

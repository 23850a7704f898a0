"""The sparse plan: what the sparse engine hands the runtime.

A :class:`SparsePlan` is data: the TaskGraph of kernel calls (every task names a
registered kernel and its attrs, :mod:`thrifty.sparse.registry`), the specs its inputs
must meet, its constants, and where and in which form its outputs are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from thrifty.errors import PatternError, ShapeError, SpecError
from thrifty.graph.ir import Graph
from thrifty.graph.ops import get_op
from thrifty.graph.taskgraph import TaskGraph
from thrifty.sparse.builder import Value, input_buffer_id
from thrifty.sparse.cost import CostModel
from thrifty.sparse.inputs import InputSpec
from thrifty.sparse.propagate import Propagation

__all__ = ["SparsePlan"]


class SparsePlan:
    """A spec specialized to its inputs' patterns: the TaskGraph of kernel calls and what
    running it needs (input specs, constants, output buffers and forms).

    A SparsePlan is data: the runtime runs it (:class:`thrifty.runtime.sparse_run.
    RunnablePlan`, which is what ``program.specialize`` returns: call it like the program,
    or ``plan.run(inputs, scheduler=...)``). :meth:`report` summarises what was chosen.
    """

    def __init__(self, graph: Graph, structure: type | None, prop: Propagation,
                 taskgraph: TaskGraph, inputs: Mapping[str, InputSpec],
                 outputs: Sequence[Value], consts: Mapping[str, Any],
                 kernels: Mapping[str, int], useful: int, executed: int,
                 inspect_seconds: float, cost: CostModel) -> None:
        self.graph = graph
        self.structure = structure
        self.propagation = prop
        self.taskgraph = taskgraph
        self.inputs = dict(inputs)
        self._outputs = list(outputs)
        self._consts = dict(consts)
        self.kernels = dict(kernels)
        self.useful_flops = int(useful)
        self.executed_flops = int(executed)
        self.inspect_seconds = float(inspect_seconds)
        self.cost = cost
        self.parallel = any(len(taskgraph.successors(t)) > 1 for t in taskgraph.order) or \
            sum(1 for t in taskgraph.order if not taskgraph.predecessors(t)) > 1
        # the per-call path, prepared once: input names and buffers, each output's dtype
        self._names = tuple(self.inputs)
        self._specs = tuple(self.inputs.values())
        self.feed_keys = tuple(self.input_buffer(n) for n in self._names) + tuple(self._consts)
        self.const_values = tuple(self._consts.values())
        self._out_dtypes = tuple(np.dtype(graph[o].type.dtype) for o in graph.outputs)

    @property
    def fingerprint(self) -> tuple[tuple[str, str, str], ...]:
        """``(name, pattern fingerprint, dtype)`` per input (the patterns hashed on first use)."""
        return tuple((n, s.fingerprint, s.dtype) for n, s in self.inputs.items())

    def run(self, inputs: Mapping[str, Any], scheduler: Any = None) -> Any:
        """Refused: a SparsePlan is data; the runtime runs it."""
        raise SpecError("a SparsePlan is the sparse engine's data and does not run itself; "
                        "run it with thrifty.runtime.RunnablePlan.of(plan), or get a "
                        "runnable plan from program.specialize(...) or "
                        "thrifty.runtime.specialize(graph, inputs)")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.run(kwargs)

    def input_buffer(self, name: str) -> str:
        """The buffer of :attr:`taskgraph` that holds input ``name``."""
        if name not in self.inputs:
            raise SpecError(f"no input {name!r}; the plan's inputs are {list(self.inputs)}")
        return input_buffer_id(name)

    def matches(self, values: Mapping[str, Any]) -> bool:
        """Whether ``values`` fit this plan (types, forms and sparsity patterns)."""
        try:
            self.check_inputs(values)
        except (PatternError, ShapeError, SpecError):
            return False
        return True

    def check_inputs(self, inputs: Mapping[str, Any]) -> list[Any]:
        """The inputs in the plan's run-time forms, in the plan's order; raises
        :class:`SpecError` (missing or unknown names, dtype), :class:`ShapeError` or
        :class:`PatternError` when they do not fit the plan."""
        values = None
        if len(inputs) == len(self._names):
            try:
                values = [inputs[n] for n in self._names]
            except KeyError:
                pass
        if values is None:
            missing = [n for n in self._names if n not in inputs]
            if missing:
                raise SpecError(f"missing input(s) {missing}; the plan's inputs are "
                                f"{list(self.inputs)}")
            unknown = [n for n in inputs if n not in self.inputs]
            raise SpecError(f"unknown input(s) {unknown}; the plan's inputs are "
                            f"{list(self.inputs)}")
        return [s.check(v) for s, v in zip(self._specs, values)]

    def pack_outputs(self, vals: Sequence[Any]) -> Any:
        """The values of :meth:`output_buffers` as the program returns them: each in its
        node's dtype (CSR arrays as ``csr_array``), in the structure the spec returned."""
        if self.structure is None and len(vals) == 1:  # the common case, cheaply
            val = vals[0]
            if type(val) is np.ndarray and val.dtype == self._out_dtypes[0]:
                return val
        outs = []
        for val, dt in zip(vals, self._out_dtypes):
            if type(val) is np.ndarray:
                if val.dtype != dt:
                    val = val.astype(dt)
            elif sp.issparse(val):
                if not isinstance(val, sp.csr_array):
                    val = sp.csr_array(val)
                if val.dtype != dt:
                    val = val.astype(dt)
            else:
                val = np.asarray(val)
                if val.dtype != dt:
                    val = val.astype(dt)
            outs.append(val)
        if self.structure is None:
            return outs[0]
        return self.structure(outs)

    def feed(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """The values of :attr:`taskgraph`'s input buffers for these inputs (checked against
        the plan's patterns), constants included: what a memory plan of the task graph
        runs on (:func:`thrifty.runtime.execute`)."""
        return self.feed_checked(self.check_inputs(inputs))

    def feed_checked(self, checked: Sequence[Any]) -> dict[str, Any]:
        """:meth:`feed` for inputs already returned by :meth:`check_inputs`."""
        return dict(zip(self.feed_keys, [*checked, *self.const_values]))

    def output_buffers(self) -> list[str]:
        """The buffers of :attr:`taskgraph` that hold the outputs, in order."""
        return [v.buffer for v in self._outputs]

    def report(self) -> dict[str, Any]:
        """Tasks, kernels ``{name: count}``, useful and executed flops, inspection time."""
        dense = sum(get_op(n.op).flops([self.graph[i].type for i in n.inputs], n.type,
                                       n.attrs) for n in self.graph if n.op not in
                    ("input", "const"))
        return {
            "tasks": len(self.taskgraph),
            "kernels": dict(sorted(self.kernels.items())),
            "useful_flops": self.useful_flops,
            "executed_flops": self.executed_flops,
            "dense_flops": int(dense),
            "inspect_seconds": self.inspect_seconds,
            "estimated_seconds": self.taskgraph.total_time(),
            "propagation_rounds": self.propagation.rounds,
            "outputs": ["csr" if v.kind == "csr" else "dense" for v in self._outputs],
        }

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(inputs={list(self.inputs)}, "
                f"tasks={len(self.taskgraph)}, kernels={self.kernels})")

"""Running a sparse plan: the object ``program.specialize`` returns.

:class:`RunnablePlan` is a :class:`~thrifty.sparse.specialize.SparsePlan` (the data the
sparse engine made: the TaskGraph of kernel calls, the input specs, the output buffers)
that the runtime can run: ``plan(**inputs)`` or ``plan.run(inputs, scheduler=...)`` with
any scheduler of :mod:`thrifty.runtime.schedulers`. With no scheduler named, small plans
run in process (:class:`~thrifty.runtime.taskrun.CompiledGraph`: a few microseconds per
call above the kernels) and plans with parallel tasks and at least ``cost.dask_seconds`` of
estimated work on Dask's threaded scheduler (where its 100-200 µs per task is amortised).

Example
-------
>>> import numpy as np, scipy.sparse as sp, thrifty as th
>>> spmv = th.program(lambda A, x: A @ x)
>>> A = sp.random_array((100, 100), density=0.05, format="csr", rng=0)
>>> x = np.ones(100)
>>> plan = spmv.specialize(A=A, x=x)
>>> bool(np.allclose(plan.run({"A": A, "x": x}, scheduler="sync"), A @ x))
True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from thrifty.errors import SpecError
from thrifty.graph.ir import Graph
from thrifty.runtime.schedulers import is_client, resolve_scheduler
from thrifty.runtime.taskrun import CompiledGraph, run_taskgraph
from thrifty.sparse.cost import CostModel
from thrifty.sparse.plan import SparsePlan
from thrifty.sparse.specialize import specialize as _lower
from thrifty.sparse.tasks import SpmvWhole, spmv_fast_path

__all__ = ["RunnablePlan", "specialize"]

_MISSING = object()


class RunnablePlan(SparsePlan):
    """A :class:`~thrifty.sparse.specialize.SparsePlan` the runtime runs.

    Call it like the program (``plan(A=A2, X=X2)``) or with :meth:`run` to choose the
    scheduler.
    """

    _compiled: CompiledGraph
    _use_dask: bool
    _direct: tuple[Any, tuple[int, ...]] | None
    _fast: Any
    _spmv: Any
    _spmv_names: tuple[str, str]

    @classmethod
    def of(cls, plan: SparsePlan) -> RunnablePlan:
        """The runnable form of ``plan`` (sharing its data)."""
        self = cls.__new__(cls)
        self.__dict__.update(plan.__dict__)
        self._compiled = CompiledGraph(self.taskgraph, self.feed_keys, self.output_buffers(),
                                       self.cost.threads, self.cost.parallel_seconds,
                                       self.cost.idle_check)
        self._use_dask = self.parallel and \
            self.taskgraph.total_time() >= self.cost.dask_seconds
        # a plan of one task reading only inputs: its kernel called straight from the
        # checked inputs (no feed list, no graph walk)
        single = self._compiled.single
        self._direct = single if single is not None and not self._use_dask and \
            all(r < len(self._names) for r in single[1]) else None
        # ... and when it reads every input once, in order, and returns the one output
        direct = self._direct
        self._fast = direct[0] if direct is not None and self.structure is None and \
            direct[1] == tuple(range(len(self._names))) else None
        # ... and when that kernel is one SpMV: inputs tested and the kernel called in one
        # frame (thrifty.sparse.tasks.spmv_fast_path)
        self._spmv, self._spmv_names = None, ("", "")
        if self._fast is not None and type(self._fast) is SpmvWhole and \
                len(self._names) == 2 and self._out_dtypes[0] == self._fast.np_dtype:
            self._spmv = spmv_fast_path(self._specs[0], self._specs[1], self._fast)
            self._spmv_names = (self._names[0], self._names[1])
        return self

    def fast_call(self, inputs: Mapping[str, Any]) -> Any:
        """The outputs for ``inputs`` by the plan's one-frame path (a one-SpMV plan given
        the arrays it inspected), or ``None`` where that path does not apply."""
        sv = self._spmv
        if sv is not None and len(inputs) == 2:
            na, nx = self._spmv_names
            a, x = inputs.get(na), inputs.get(nx)
            if a is not None and x is not None:
                return sv(a, x)
        return None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        sv = self._spmv
        if sv is not None and not args and len(kwargs) == 2:  # one SpMV: one frame
            na, nx = self._spmv_names
            a, x = kwargs.get(na), kwargs.get(nx)
            if a is not None and x is not None:
                out = sv(a, x)
                if out is not None:
                    return out
        if args:
            kwargs = {**dict(zip(self.inputs, args)), **kwargs}
        fast = self._fast
        if fast is not None and len(kwargs) == len(self._names):
            # the per-call path of a one-kernel plan: each input checked by its spec, the
            # kernel called on them (a missing name falls through to the full error); two
            # inputs (A @ x) spelled out: no comprehension frames
            names, specs = self._names, self._specs
            if len(names) == 2:
                a, b = kwargs.get(names[0], _MISSING), kwargs.get(names[1], _MISSING)
                if a is not _MISSING and b is not _MISSING:
                    out = fast(specs[0].check(a), specs[1].check(b))
                    if type(out) is np.ndarray and out.dtype == self._out_dtypes[0]:
                        return out
                    return self.pack_outputs([out])
            elif all(n in kwargs for n in names):
                out = fast(*[s.check(kwargs[n]) for s, n in zip(specs, names)])
                return self.pack_outputs([out])
        return self.run_checked(self.check_inputs(kwargs))

    def run(self, inputs: Mapping[str, Any], scheduler: Any = None) -> Any:
        """Execute on ``inputs``.

        Parameters
        ----------
        inputs:
            Values by input name, with the patterns the plan was specialized for.
        scheduler:
            Any of :mod:`thrifty.runtime.schedulers`: ``None`` (choose: in process, the
            independent row panels of a level on ``cost.threads`` threads when they carry
            at least ``cost.parallel_seconds`` of work and, with ``cost.idle_check``, a
            core is idle (else in this thread, one call where they merge), or Dask's
            threaded scheduler when the plan has parallel tasks and at least
            ``cost.dask_seconds`` of estimated work), ``"sync"`` (the tasks in order in
            this thread, merged row panels one call), ``"threads"`` (Dask's threaded
            scheduler with ``cost.threads`` workers), a
            ``dask.distributed.Client`` or an address ``"tcp://HOST:PORT"`` (row panels
            on the workers holding their rows, inputs scattered once per plan and
            cluster: :meth:`distribute`).

        Returns
        -------
        The outputs as numpy arrays, or scipy CSR arrays where the propagated output pattern
        is sparse, in the structure the spec returned them.
        """
        if scheduler is None and self._spmv is not None:
            out = self.fast_call(inputs)
            if out is not None:
                return out
        return self.run_checked(self.check_inputs(inputs), scheduler)

    def run_checked(self, checked: Sequence[Any], scheduler: Any = None) -> Any:
        """:meth:`run` on inputs already returned by :meth:`check_inputs`."""
        if scheduler is None:
            direct = self._direct
            if direct is not None:
                fn, reads = direct
                return self.pack_outputs([fn(*[checked[r] for r in reads])])
            if not self._use_dask:
                return self.pack_outputs(self._compiled([*checked, *self.const_values]))
            sched: Any = "threads"
        else:
            sched = resolve_scheduler(scheduler)
            if is_client(sched):
                from thrifty.runtime.distributed import handle_for

                return handle_for(self, sched).run_feed(self.feed_checked(checked))
        if sched == "sync":
            vals = self._compiled([*checked, *self.const_values], parallel=False)
        else:
            vals = run_taskgraph(self.taskgraph, self.feed_checked(checked),
                                 self.output_buffers(), sched, self.cost.threads)
        return self.pack_outputs(vals)

    def distribute(self, client: Any, inputs: Mapping[str, Any] | None = None,
                   attempts: int = 3) -> Any:
        """This plan on a ``dask.distributed`` cluster: a
        :class:`~thrifty.runtime.distributed.DistributedPlan` whose ``run(inputs)`` places
        the row panels on the workers holding their rows, sends each input once (the
        ``inputs`` given here now, the others on their first run) and survives lost
        workers. ``client`` is a Client or an address ``"tcp://HOST:PORT"``."""
        from thrifty.runtime.distributed import DistributedPlan

        sched = resolve_scheduler(client)
        if not is_client(sched):
            raise SpecError(f"distribute needs a dask.distributed.Client or an address "
                            f"'tcp://HOST:PORT', got {client!r}")
        handle = DistributedPlan(self, sched, attempts=attempts)
        if inputs:
            handle.scatter(inputs)
        return handle


def specialize(graph: Graph, inputs: Mapping[str, Any], structure: type | None = None,
               cost: CostModel | None = None) -> RunnablePlan:
    """:func:`thrifty.sparse.specialize.specialize`, runnable: inspect ``inputs``, lower
    ``graph`` to a plan of kernel calls, and return it ready to run."""
    return RunnablePlan.of(_lower(graph, inputs, structure=structure, cost=cost))

"""The runtime: everything that runs a TaskGraph or a Graph on values.

* :func:`execute` — a memory Plan's computes, frees, offloads and prefetches, with the
  measured peak (:mod:`thrifty.runtime.execute`);
* :func:`specialize` and :class:`RunnablePlan` — sparse plans that run
  (:mod:`thrifty.runtime.sparse_run`);
* :class:`DistributedPlan` — a sparse plan on a ``dask.distributed`` cluster, row panels
  placed by data (``plan.distribute(client)``, :mod:`thrifty.runtime.distributed`);
* :func:`run_taskgraph` — any TaskGraph whose tasks carry callables
  (:mod:`thrifty.runtime.taskrun`), on any scheduler of :mod:`thrifty.runtime.schedulers`;
* :func:`emulate` — a Graph in emulated low precision (:mod:`thrifty.runtime.emulate`);
* :func:`evaluate` — the float64 reference (:mod:`thrifty.runtime.reference`).

The names :func:`execute` and :func:`emulate` are the functions; their modules stay
importable as ``from thrifty.runtime.execute import ...``.
"""

from thrifty.runtime.distributed import DistributedPlan
from thrifty.runtime.emulate import emulate
from thrifty.runtime.execute import ExecResult, execute
from thrifty.runtime.reference import evaluate
from thrifty.runtime.schedulers import resolve_scheduler
from thrifty.runtime.sparse_run import RunnablePlan, specialize
from thrifty.runtime.taskrun import CompiledGraph, run_taskgraph

__all__ = ["CompiledGraph", "DistributedPlan", "ExecResult", "RunnablePlan", "emulate",
           "evaluate", "execute", "resolve_scheduler", "run_taskgraph", "specialize"]

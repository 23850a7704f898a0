"""The sparse engine: specialize a dense spec at run time to the sparsity of its inputs.

* :mod:`~thrifty.sparse.pattern` — two-level (block + element) sparsity patterns;
* :mod:`~thrifty.sparse.propagate` — forward and backward sparsity propagation (one rule
  per op and direction);
* :mod:`~thrifty.sparse.specialize` — inspection and lowering to a
  :class:`~thrifty.sparse.plan.SparsePlan`: a TaskGraph whose every task names a kernel of
  :mod:`~thrifty.sparse.registry` (built by :mod:`~thrifty.sparse.lower`,
  :mod:`~thrifty.sparse.lower_matmul`; inputs checked by :mod:`~thrifty.sparse.inputs`);
* :mod:`~thrifty.sparse.kernels` — the compiled kernels; :mod:`~thrifty.sparse.tasks` — the
  task callables; :mod:`~thrifty.sparse.cost` — the cost model (the benchmark:
  ``benchmarks/sparse_bench.py``).

A SparsePlan is data; the runtime runs it (:func:`thrifty.runtime.specialize`). Most users
call ``program.specialize(**inputs)`` or simply ``program(**inputs)``.
"""

from thrifty.sparse.cost import CostModel
from thrifty.sparse.pattern import Pattern
from thrifty.sparse.plan import SparsePlan
from thrifty.sparse.propagate import Propagation, propagate
from thrifty.sparse.specialize import specialize

__all__ = ["CostModel", "Pattern", "Propagation", "SparsePlan", "propagate", "specialize"]

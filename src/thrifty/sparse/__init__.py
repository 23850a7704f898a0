"""The sparse engine: specialize a dense spec at run time to the sparsity of its inputs.

* :mod:`~thrifty.sparse.pattern` — two-level (block + element) sparsity patterns;
* :mod:`~thrifty.sparse.propagate` — forward and backward sparsity propagation;
* :mod:`~thrifty.sparse.specialize` — lowering to a TaskGraph of kernel calls, and the
  :class:`~thrifty.sparse.specialize.SparsePlan` that runs it (sync, threads, cluster);
* :mod:`~thrifty.sparse.kernels` — the kernel library; :mod:`~thrifty.sparse.cost` — the
  cost model (the benchmark: ``benchmarks/sparse_bench.py``).

Most users call ``program.specialize(**inputs)`` or simply ``program(**inputs)``.
"""

from thrifty.sparse.cost import CostModel
from thrifty.sparse.pattern import Pattern
from thrifty.sparse.propagate import Propagation, propagate
from thrifty.sparse.specialize import SparsePlan, specialize

__all__ = ["CostModel", "Pattern", "Propagation", "SparsePlan", "propagate", "specialize"]

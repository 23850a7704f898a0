"""Minimum-peak task orders: exact algorithms, heuristics and baselines.

Every ordering works on a :class:`~thrifty.memory.order.compact.Compact` view of a TaskGraph
(tasks numbered in topological order) and returns a topological order of task numbers.

* :mod:`~thrifty.memory.order.compact`: the integer view, its eager-free peak evaluator and
  the lower bounds (per task: what must be in use while it runs, in every order);
* :mod:`~thrifty.memory.order.tree`: Liu's exact algorithm for in-trees (1987);
* :mod:`~thrifty.memory.order.sp`: Kayaaslan, Lambert, Marchal and Uçar's exact algorithm
  for series-parallel graphs (TCS 2018), on :mod:`~thrifty.memory.order.segments`;
* :mod:`~thrifty.memory.order.exact`: best-first search over executed sets with dominance
  pruning (Serenity, MLSys 2020), exact under a time limit;
* :mod:`~thrifty.memory.order.local`: exact re-solving of windows around an order's peak;
* :mod:`~thrifty.memory.order.reduce`: merges of tasks that keep the least peak (before the
  exact search), independent parts of a graph and a merge of their orders;
* :mod:`~thrifty.memory.order.heuristics` (:data:`HEURISTICS`, :data:`BASELINES`): the file's
  order, dask.order, DFS, BFS, greedy orders, reverse post-order, beam search;
* :mod:`~thrifty.memory.order.generate`: seeded generators for tests and benchmarks.

:func:`thrifty.memory.schedule` chooses among them and says what is proven.
"""

from __future__ import annotations

from thrifty.memory.order.compact import Compact
from thrifty.memory.order.exact import ExactResult, exact_order
from thrifty.memory.order.heuristics import BASELINES, HEURISTICS
from thrifty.memory.order.local import improve_order
from thrifty.memory.order.reduce import Reduction, reduce_graph
from thrifty.memory.order.sp import sp_decompose, sp_order
from thrifty.memory.order.tree import is_in_forest, liu_in_tree

__all__ = ["BASELINES", "HEURISTICS", "Compact", "ExactResult", "Reduction", "exact_order",
           "improve_order", "is_in_forest", "liu_in_tree", "reduce_graph", "sp_decompose",
           "sp_order"]

"""What to save and what to recompute, as a minimum cut of the joint graph's activation graph.

A partition of a joint forward/backward graph keeps some forward values for the backward
(*saved*) and runs some forward tasks again in the backward (*recomputed*); a recomputed task
needs its inputs available in the backward (saved or recomputed themselves), and so does
every backward task. Each choice has a price: a saved buffer its bytes, a recomputed task
``lam`` times its (nominal roofline) time. The cheapest choice for one ``lam`` is a minimum
s-t cut of this network (:func:`cut_at`):

* a node per forward task ``t``; the edge ``source -> t`` of capacity ``lam * time(t)`` is cut
  when ``t`` is recomputed (infinite for ops that must run once: random draws, batch norm's
  running-statistics update);
* a node per buffer ``b`` (a view is its base buffer: views cost nothing); the edge
  ``producer(b) -> b`` of capacity ``bytes(b)`` is cut when ``b`` is saved (an activation
  from an earlier graph: ``source -> b``); a buffer on the sink side is *available* in the
  backward;
* infinite edges ``b -> t`` for every forward task ``t`` reading ``b`` (a recomputed task
  needs its inputs) and ``b -> sink`` for every buffer a backward task reads.

The sink side of the cut is then exactly a valid partition, and its cost is
``saved bytes + lam * recompute cost`` (:func:`recompute_cost`). :func:`cheapest_within`
searches ``lam`` (bisection on a log scale) for the largest price at which the saved bytes
fit the budget: the least recomputation among the cuts of this family that fit (the family
of a parametric cut, so not every trade-off is reached: a cut between two prices may fit
with less recomputation). ``lam`` is capped (:data:`FREE_RATIO`): below the cap, recomputing
a memory-bound op (a ReLU, a layer norm, a view chain) that spares at least ``FREE_RATIO`` of
its traffic in saved bytes is taken even when the budget does not ask for it, as PyTorch's
partitioners do for cheap fusible ops. Under a budget below eager's saved bytes
(``memory_bound_first``), ops without flops are priced at a hundredth of their traffic at
every price (:func:`price`): cheap memory-bound recomputation (a GELU's ``tanh`` chain, a
copy) is taken before any recomputation that costs flops, as PyTorch's min-cut partitioner
does.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any

from thrifty.graph.taskgraph import Task
from thrifty.torch.importer import NOMINAL_BYTES_PER_S, NOMINAL_FLOPS
from thrifty.torch.joint import JointGraph

__all__ = ["BYTES_WEIGHT", "FREE_RATIO", "MEMORY_BOUND_WEIGHT", "TIE_BREAK", "cheapest_within",
           "cut_at", "price", "recompute_cost"]

#: The weight of a recomputed op's memory traffic against its flops: a recomputation runs
#: next to the backward op that reads it, where its inputs are hot and a compiler fuses it
#: (PyTorch's own knapsack counts flops only).
BYTES_WEIGHT = 0.1
#: Below ``lam = FREE_RATIO * NOMINAL_BYTES_PER_S / BYTES_WEIGHT`` a memory-bound op is
#: recomputed whenever that spares at least ``FREE_RATIO`` of its traffic in saved bytes.
FREE_RATIO = 0.25
#: Recomputing the ``k``-th of ``n`` forward tasks is priced ``1 + TIE_BREAK * k / n`` times
#: its cost: identical blocks then cross from saved to recomputed at distinct prices, one
#: after the other (earlier blocks first: their recomputation runs at the end of the
#: backward, when little else is held), instead of all at one price.
TIE_BREAK = 0.2
#: With ``memory_bound_first``, recomputing an op without flops (elementwise, a copy, a
#: softmax, a norm) costs this fraction of its traffic in bytes, whatever the price ``lam``
#: of flops-costing recomputation: such an op is recomputed wherever that spares more than
#: a hundredth of its traffic in saved bytes.
MEMORY_BOUND_WEIGHT = 0.01


def recompute_cost(task: Task) -> float:
    """Nominal seconds of recomputing ``task``: its flops at :data:`NOMINAL_FLOPS` plus
    :data:`BYTES_WEIGHT` of its traffic at :data:`NOMINAL_BYTES_PER_S`."""
    compute = task.attrs.get("flops", 0) / NOMINAL_FLOPS
    return compute + BYTES_WEIGHT * max(0.0, task.time - compute)
_SOURCE, _SINK = ("source",), ("sink",)


def price(task: Task, lam: float, rank: float, memory_bound_first: bool = False) -> int:
    """The capacity of recomputing ``task`` in the cut network at price ``lam``: ``lam``
    times its :func:`recompute_cost`, times ``1 + TIE_BREAK * rank`` (``rank``: its position
    among the forward tasks, in [0, 1)), plus 1 (never recompute for nothing; at ``lam = 0``
    recomputing is free). With ``memory_bound_first``, an op without flops costs
    :data:`MEMORY_BOUND_WEIGHT` of its traffic instead, at every ``lam`` (but 0)."""
    if memory_bound_first and lam > 0 and not task.attrs.get("flops", 0):
        traffic = task.time * NOMINAL_BYTES_PER_S
        return int(MEMORY_BOUND_WEIGHT * traffic * (1 + TIE_BREAK * rank)) + 1
    return int(lam * recompute_cost(task) * (1 + TIE_BREAK * rank)) + (lam > 0)


def _network(jg: JointGraph, lam: float, memory_bound_first: bool = False) -> Any:
    import networkx as nx

    g = jg.graph
    net = nx.DiGraph()
    net.add_node(_SOURCE)
    net.add_node(_SINK)
    order = [t for t in jg.order if not g.tasks[t].attrs["backward"]]
    fwd = set(order)
    for pos, t in enumerate(order):
        task = g.tasks[t]
        if task.attrs["random"]:
            net.add_edge(_SOURCE, ("t", t))  # no capacity: infinite
        else:
            net.add_edge(_SOURCE, ("t", t), capacity=price(task, lam, pos / len(order),
                                                            memory_bound_first))
        for b in task.writes:
            net.add_edge(("t", t), ("b", b), capacity=int(g.buffers[b].size))
        for b in task.reads:
            net.add_edge(("b", b), ("t", t))
    for b, buf in g.buffers.items():
        if buf.producer is None and buf.size:
            net.add_edge(_SOURCE, ("b", b), capacity=int(buf.size))
    for task in g.tasks.values():
        if task.attrs["backward"]:
            for b in task.reads:
                p = g.buffers[b].producer
                if p is None or p in fwd:
                    net.add_edge(("b", b), _SINK)
    return net


def cut_at(jg: JointGraph, lam: float, memory_bound_first: bool = False) -> set[Hashable]:
    """The forward tasks recomputed by the minimum cut at price ``lam`` (bytes per second
    of recompute time; see the module docstring and :func:`price`)."""
    import networkx as nx

    net = _network(jg, lam, memory_bound_first)
    if not nx.has_path(net, _SOURCE, _SINK):
        return set()
    _, (keep, _) = nx.minimum_cut(net, _SOURCE, _SINK)
    return {n[1] for n in net.nodes if len(n) == 2 and n[0] == "t" and n not in keep}


def cheapest_within(jg: JointGraph, limit: int, saved: Any, iterations: int = 24,
                    memory_bound_first: bool = False) -> set[Hashable] | None:
    """The recompute set of the largest price ``lam`` (at most the cap) whose cut saves at
    most ``limit`` bytes, as measured by ``saved(recompute)``; ``None`` when even the
    fewest saved bytes (``lam = 0``) do not fit: then no partition fits. With
    ``memory_bound_first`` (see :func:`price`), ops without flops are recomputed wherever
    that spares bytes before any op with flops is."""
    def cut(lam: float) -> set[Hashable]:
        return cut_at(jg, lam, memory_bound_first)

    hi = FREE_RATIO * NOMINAL_BYTES_PER_S / BYTES_WEIGHT
    best = cut(hi)
    if saved(best) <= limit:
        return best
    best = cut(0.0)  # the fewest saved bytes of any valid partition
    if saved(best) > limit:
        return None
    lo = 1.0
    r = cut(lo)
    if saved(r) > limit:
        return best
    best = r
    for _ in range(iterations):
        mid = math.sqrt(lo * hi)
        r = cut(mid)
        if saved(r) <= limit:
            lo, best = mid, r
        else:
            hi = mid
    return best

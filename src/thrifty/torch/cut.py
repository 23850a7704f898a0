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

Saved bytes are not the step's peak, which comes in the backward: saved values, recomputed
values, gradients and the backward's temporaries are alive at once, and a cut that
recomputes a long chain holds all of its values until their backward uses.
:func:`backward_peak` models that peak (:func:`backward_order`: the order PyTorch runs the
backward in), and :func:`lowest_peak_within` refines the budget's cut against it.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any

from thrifty.graph.taskgraph import Task
from thrifty.torch.importer import NOMINAL_BYTES_PER_S, NOMINAL_FLOPS
from thrifty.torch.joint import JointGraph

__all__ = ["BYTES_WEIGHT", "FREE_RATIO", "MEMORY_BOUND_WEIGHT", "SPREAD", "TIE_BREAK",
           "backward_order", "backward_peak", "cheapest_within", "cut_at", "lowest_peak_within",
           "price", "recompute_cost"]

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
#: :func:`lowest_peak_within` also searches from the cuts at the prices ``lam / SPREAD**k``
#: (more recomputation, fewer saved bytes: room to save what breaks a chain).
SPREAD = 4.0


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
    found = _cheapest(jg, limit, saved, iterations, memory_bound_first)
    return None if found is None else found[0]


def _cheapest(jg: JointGraph, limit: int, saved: Any, iterations: int,
              memory_bound_first: bool,
              fits: list[set[Hashable]] | None = None) -> tuple[set[Hashable], float] | None:
    """:func:`cheapest_within`'s recompute set and the price ``lam`` of its cut; the cuts
    of the search that fit are appended to ``fits`` (when given), in the search's order."""
    def cut(lam: float) -> set[Hashable]:
        r = cut_at(jg, lam, memory_bound_first)
        if fits is not None and saved(r) <= limit:
            fits.append(r)
        return r

    hi = FREE_RATIO * NOMINAL_BYTES_PER_S / BYTES_WEIGHT
    best = cut(hi)
    if saved(best) <= limit:
        return best, hi
    best = cut(0.0)  # the fewest saved bytes of any valid partition
    if saved(best) > limit:
        return None
    lo = 1.0
    r = cut(lo)
    if saved(r) > limit:
        return best, 0.0
    best = r
    for _ in range(iterations):
        mid = math.sqrt(lo * hi)
        r = cut(mid)
        if saved(r) <= limit:
            lo, best = mid, r
        else:
            hi = mid
    return best, lo


# -- the backward's peak ---------------------------------------------------------------------

def backward_order(jg: JointGraph, recompute: set[Hashable]) -> list[Hashable]:
    """The tasks the backward graph runs, in the order PyTorch runs them: the backward tasks
    in the joint graph's order from the first one reading an output gradient (a
    ``tangents`` input; the ones before it when something needs them, else at the end),
    each preceded by the recomputed forward tasks it needs that have not run yet (in the
    joint graph's order), as ``reordering_to_mimic_autograd_engine`` places them. A
    recomputed task nothing in the backward needs does not run."""
    g = jg.graph
    pos = jg.position()
    deps: dict[Hashable, list[Hashable]] = {}
    for t, task in g.tasks.items():
        if task.attrs["backward"] or t in recompute:
            deps[t] = [p for b in task.reads if (p := g.buffers[b].producer) is not None
                       and (p in recompute or g.tasks[p].attrs["backward"])]
    bwd = [t for t in jg.order if g.tasks[t].attrs["backward"]]
    first = next((i for i, t in enumerate(bwd) if any(
        str(b).startswith("in:tangents") for b in g.tasks[t].reads)), 0)
    placed: set[Hashable] = set()
    out: list[Hashable] = []
    for t in bwd[first:] + bwd[:first]:
        todo: set[Hashable] = set()
        stack = [t]
        while stack:
            u = stack.pop()
            if u not in todo and u not in placed:
                todo.add(u)
                stack.extend(deps[u])
        for u in sorted(todo, key=pos.__getitem__):
            placed.add(u)
            out.append(u)
    return out


def _simulate(jg: JointGraph,
              recompute: set[Hashable]) -> tuple[int, set[Hashable], set[Hashable]]:
    """:func:`backward_peak`; the forward values alive at the peak (saved, or recomputed:
    the buffers a change of the partition can free there); the recomputed tasks that run
    (those the backward needs)."""
    g = jg.graph
    order = backward_order(jg, recompute)
    ran = set(order)
    last: dict[Hashable, int] = {}
    saved: set[Hashable] = set()
    for i, t in enumerate(order):
        for b in g.tasks[t].reads:
            last[b] = i
            p = g.buffers[b].producer
            if p is None or p not in ran:
                saved.add(b)
    frees: list[list[Hashable]] = [[] for _ in order]
    for b in saved:
        frees[last[b]].append(b)
    cur = sum(g.buffers[b].size for b in saved)
    peak, at = cur, -1
    for i, t in enumerate(order):
        for w in g.tasks[t].writes:
            cur += jg.backward_bytes(w)
            if w not in g.results:
                frees[last.get(w, i)].append(w)
        if cur > peak:
            peak, at = cur, i
        cur -= sum(jg.backward_bytes(b) if b not in saved else g.buffers[b].size
                   for b in frees[i])
    alive = {b for b in saved if last[b] >= at and g.buffers[b].size}
    made = {t for t in order[:at + 1] if t in recompute}
    alive |= {w for t in made for w in g.tasks[t].writes if last.get(w, at) >= at}
    return peak, alive, ran & recompute


def backward_peak(jg: JointGraph, recompute: set[Hashable]) -> int:
    """The modelled peak bytes of the backward of a partition that recomputes ``recompute``
    (run in :func:`backward_order`): the saved values (forward values and sized inputs the
    backward reads and does not compute) are alive from its start to their last use, a
    value it computes (recomputed forward values at their size, backward values at
    :meth:`~thrifty.torch.joint.JointGraph.backward_bytes`) from its task to its last use,
    and the graph's results (the weight gradients) from their task to the end. Values the
    backward does not allocate (parameters, data, output gradients) count nothing."""
    return _simulate(jg, recompute)[0]


def lowest_peak_within(jg: JointGraph, limit: int, saved: Any, iterations: int = 24,
                       memory_bound_first: bool = False, tries: int = 12,
                       starts: int = 4, peak_weight: float = 1.0) -> set[Hashable] | None:
    """A recompute set that saves at most ``limit`` bytes (``saved(recompute)``) with a
    low modelled backward peak (:func:`backward_peak`); ``None`` when no partition fits.

    The objective is ``peak_weight`` times the modelled peak plus the recomputation's
    :func:`price` at the price ``lam`` of :func:`cheapest_within`'s cut (bytes of peak
    against priced recomputation, as the cut weighs saved bytes; a larger ``peak_weight``
    buys a lower peak with more recomputation). From that cut, from up to ``starts - 1``
    other cuts of its bisection that fit (the last ones met: near the limit) and from the
    cuts at the prices ``lam / SPREAD**k`` (``k < starts``: dearer in recomputation, fewer
    saved bytes), a local search changes one task at a time: it tries up to ``tries`` of the
    forward tasks whose values are alive at the modelled peak (the largest first):
    recomputing a saved one, or saving a recomputed one (which breaks a chain of
    recomputation held at once), each only where the saved bytes stay within ``limit`` and
    the peak does not rise, and takes the one that lowers the objective the most, until
    none does. Returns the search's result of the least objective among those whose peak is
    at most the one from the cut: never above the cut's modelled peak."""
    fits: list[set[Hashable]] = []
    found = _cheapest(jg, limit, saved, iterations, memory_bound_first, fits)
    if found is None:
        return None
    first, lam = found
    begin = [first]
    for r in reversed(fits):  # the search's last cuts: near the limit
        if len(begin) < starts and r not in begin:
            begin.append(r)
    for k in range(1, starts if lam > 0 else 1):  # dearer cuts: more recomputation
        r = cut_at(jg, lam / SPREAD ** k, memory_bound_first)
        if r not in begin and saved(r) <= limit:
            begin.append(r)
    g = jg.graph
    fwd = jg.forward_tasks()
    rank = {t: k / len(fwd) for k, t in enumerate(fwd)}
    cost = {t: price(g.tasks[t], lam, rank[t], memory_bound_first) for t in fwd
            if not g.tasks[t].attrs["random"]}
    results = [_descend(jg, r, limit, saved, cost, tries, peak_weight) for r in begin]
    ceiling = results[0][0]
    return min((r for r in results if r[0] <= ceiling), key=lambda r: r[1])[2]


def _descend(jg: JointGraph, recompute: set[Hashable], limit: int, saved: Any,
             cost: dict[Hashable, int], tries: int,
             weight: float = 1.0) -> tuple[int, float, set[Hashable]]:
    """:func:`lowest_peak_within`'s local search from ``recompute``: its (peak, objective,
    recompute set)."""
    g = jg.graph
    peak, alive, recompute = _simulate(jg, recompute)
    obj = weight * peak + sum(cost[t] for t in recompute)
    while True:
        gain: dict[Hashable, int] = {}
        for b in alive:
            p = g.buffers[b].producer
            if p is not None and p in cost:
                gain[p] = gain.get(p, 0) + g.buffers[b].size
        best: tuple[float, int, set[Hashable], set[Hashable]] | None = None
        for t in sorted(gain, key=lambda t: -gain[t])[:tries]:
            r = recompute - {t} if t in recompute else recompute | {t}
            if saved(r) > limit:
                continue
            p, a, r = _simulate(jg, r)
            o = weight * p + sum(cost[u] for u in r)
            if p <= peak and o < obj and (best is None or o < best[0]):
                best = (o, p, a, r)
        if best is None:
            return peak, obj, recompute
        obj, peak, alive, recompute = best

"""Planning under a memory budget: recompute and offload at the least time cost.

``plan(g, budget)`` returns a :class:`~thrifty.memory.model.Plan` whose peak (in the memory
model of ARCHITECTURE.md, as replayed by :func:`thrifty.memory.simulate`) is at most
``budget`` and whose makespan (compute, recomputations included, plus any wait for a
transfer) is as small as the planners can make it. Planners, all behind one signature in
:data:`PLANNERS`:

* ``checkpoint_all``: the best schedule, nothing recomputed or offloaded (fits or fails);
* ``chain``: exact dynamic programming for forward/backward chains (Rotor: Beaumont et al.,
  ACM TOMS 2024), see :mod:`.chain`;
* ``milp``: an exact MILP for small general graphs (Checkmate: Jain et al., MLSys 2020;
  with ``offload_bandwidth``, paging as well, after POET: Patil et al., ICML 2022), solved
  by HiGHS through ``scipy.optimize.milp``, see :mod:`.milp`;
* ``evict``: eviction with look-ahead, recompute and offload choices (after DTR, Kirisame
  et al., ICLR 2021), see :mod:`.evict`; ``refine`` adds a local search and prefetch
  hoisting (:mod:`.refine`);
* baselines: ``sqrt_n`` (Chen et al., 2016, segment sizes swept), ``dtr`` (DTR's own
  staleness rule, no look-ahead, recompute only);
* ``descent``: a backward search over resident sets (a reverse pebble game, see
  :mod:`.descent`) for recompute-only plans; ``auto`` runs it only when no other planner
  found a plan (its plans may recompute much). When it exhausts its search, no
  recompute-only plan fits the budget, and :class:`~thrifty.errors.InfeasibleBudget` says
  so.

``method="auto"`` runs the applicable ones (each the MILP, the chain DP and the local search
with its own ``time_limit``; the MILP only on small graphs; not the local search where the
chain DP counted memory exactly and nothing may be offloaded) and keeps the plan of least
estimated makespan, so it is never worse than any baseline it ran. Every returned plan's
peak is checked against the budget with the planners' replay (:mod:`.replay`); the tests
replay every plan with the independent simulator.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from thrifty.errors import InfeasibleBudget, PlanError
from thrifty.graph.taskgraph import TaskGraph
from thrifty.graph.taskgraph_io import as_taskgraph
from thrifty.memory.budget.bounds import (
    best_order,
    lower_bound,
    parse_budget,
    search_smallest,
    smallest_feasible,
)
from thrifty.memory.budget.evict import NoRoom, Policy, evict_plan, passes_of, time_bound
from thrifty.memory.budget.refine import hoist_prefetches, local_search
from thrifty.memory.budget.replay import estimate, remembered
from thrifty.memory.model import Plan
from thrifty.memory.schedule import schedule
from thrifty.sizes import is_fraction

__all__ = ["PLANNERS", "Context", "NoPlan", "best_order", "lower_bound", "parse_budget", "plan",
           "smallest_feasible"]


class NoPlan(Exception):  # noqa: N818 - internal signal, mapped to InfeasibleBudget/PlanError
    """Internal: a planner found no plan within the budget (not a proof of infeasibility)."""


class NoPlanProven(NoPlan):
    """Internal: a planner proved that no plan of its kind fits the budget."""


@dataclass(frozen=True, slots=True)
class Context:
    """What every planner gets besides the graph and the budget."""

    bandwidth: float | None
    recompute: bool
    time_limit: float
    order: tuple[Hashable, ...]
    seed: int = 0
    no_offload: frozenset[Hashable] = frozenset()

    def force(self) -> dict[Hashable, str]:
        """Per-buffer overrides for the eviction policies."""
        return dict.fromkeys(self.no_offload, "free")


Planner = Callable[[TaskGraph, int, Context], Plan]


def _evict(policy: Policy) -> Planner:
    def run(g: TaskGraph, budget: int, ctx: Context) -> Plan:
        pol = replace(policy, recompute=policy.recompute and ctx.recompute,
                      offload=policy.offload and ctx.bandwidth is not None,
                      force=ctx.force())
        if not pol.recompute and not pol.offload:
            raise NoPlan("neither recompute nor offload is allowed")
        try:
            p = evict_plan(g, ctx.order, budget, ctx.bandwidth, pol)
        except NoRoom as e:
            raise NoPlan(str(e)) from None
        return hoist_prefetches(g, p, budget, ctx.bandwidth)
    return run


def _checkpoint_all(g: TaskGraph, budget: int, ctx: Context) -> Plan:
    p = evict_plan(g, ctx.order, 2**62, None,
                   Policy(recompute=False, offload=False, evict=False))
    if estimate(g, p.steps, None).peak > budget:
        raise NoPlan("the best schedule does not fit without recompute or offload")
    return replace(p, budget=budget)


def _refine(g: TaskGraph, budget: int, ctx: Context) -> Plan:
    best: tuple[float, Plan, Policy] | None = None
    for lookahead in (True, False):
        pol = Policy(lookahead=lookahead, recompute=ctx.recompute,
                     offload=ctx.bandwidth is not None, seed=ctx.seed, force=ctx.force())
        if not pol.recompute and not pol.offload:
            raise NoPlan("neither recompute nor offload is allowed")
        try:
            p = hoist_prefetches(g, evict_plan(g, ctx.order, budget, ctx.bandwidth, pol),
                                 budget, ctx.bandwidth)
        except NoRoom:
            continue
        t = estimate(g, p.steps, ctx.bandwidth).makespan
        if best is None or t < best[0]:
            best = (t, p, pol)
    if best is None:
        raise NoPlan("eviction found no plan")
    return local_search(g, ctx.order, budget, ctx.bandwidth, best[2], best[1],
                        ctx.time_limit, seed=ctx.seed)


def _sqrt_n(g: TaskGraph, budget: int, ctx: Context) -> Plan:
    from thrifty.memory.budget.baselines import sqrt_n_plan

    if not ctx.recompute:
        raise NoPlan("√n checkpointing needs recompute")
    try:
        return sqrt_n_plan(g, ctx.order, budget)
    except NoRoom as e:
        raise NoPlan(str(e)) from None


def _chain(g: TaskGraph, budget: int, ctx: Context) -> Plan:
    from thrifty.memory.budget.chain import ChainError, as_chain, chain_plan

    if not ctx.recompute:
        raise NoPlan("the chain DP plans recomputation")
    try:
        n = len(as_chain(g).forward)
        slots = max(16, min(CHAIN_SLOTS, int(CHAIN_SLOTS * (23 / n) ** 3)))
        return chain_plan(g, budget, slots=slots, time_limit=ctx.time_limit)
    except ChainError as e:
        raise NoPlan(str(e)) from None


def _milp(g: TaskGraph, budget: int, ctx: Context) -> Plan:
    from thrifty.memory.budget.milp import milp_plan

    if not ctx.recompute and ctx.bandwidth is None:
        raise NoPlan("the MILP plans recomputation or paging; neither is allowed")
    p = milp_plan(g, budget, order=ctx.order, time_limit=ctx.time_limit,
                  bandwidth=ctx.bandwidth, recompute=ctx.recompute,
                  no_offload=ctx.no_offload)
    if p is None:
        raise NoPlan("the MILP found no plan within its time limit")
    return p


def _descent(g: TaskGraph, budget: int, ctx: Context) -> Plan:
    from thrifty.memory.budget.descent import descent_plan

    if not ctx.recompute:
        raise NoPlan("the descent search plans recomputation")
    p, d = descent_plan(g, budget, time_limit=ctx.time_limit)
    if p is None:
        if d.status == "infeasible" and ctx.bandwidth is None:
            raise NoPlanProven(f"no recompute-only plan fits (exhaustive search over "
                               f"{d.sets} resident sets)")
        raise NoPlan(f"the descent search found no plan ({d.status})")
    return p


PLANNERS: dict[str, Planner] = {
    "checkpoint_all": _checkpoint_all,
    "chain": _chain,
    "milp": _milp,
    "evict": _evict(Policy()),
    "refine": _refine,
    "sqrt_n": _sqrt_n,
    "dtr": _evict(Policy(lookahead=False, offload=False)),
    "descent": _descent,
}

#: Memory slots of the chain DP when the gcd of the sizes would give it too many to count
#: memory exactly (it then counts ``budget / CHAIN_SLOTS`` units, sizes rounded up) on
#: chains of up to 23 layers (VGG16); longer chains get fewer (the DP costs layers³ x slots).
CHAIN_SLOTS = 500

#: Graphs up to this many tasks get the MILP in ``method="auto"``.
MILP_MAX_TASKS = 40


def plan(g: TaskGraph, budget: int | float | str, offload_bandwidth: float | None = None,
         recompute: bool = True, method: str = "auto", time_limit: float = 10.0,
         order: Sequence[Hashable] | None = None, seed: int = 0,
         no_offload: Iterable[Hashable] = (), use_milp: bool | None = None) -> Plan:
    """A plan of ``g`` with peak <= ``budget`` bytes and the least makespan found.

    Parameters
    ----------
    g:
        The task graph.
    budget:
        Bytes (an int, or a string such as ``"64MiB"``), or a fraction in (0, 1] of the
        best schedule's peak (``0.7``); see :mod:`thrifty.sizes`.
    offload_bandwidth:
        Bytes per time unit of the copy stream; ``None`` forbids offloading.
    recompute:
        Whether tasks may be computed more than once.
    method:
        ``"auto"`` (every applicable planner, the best plan kept) or a key of
        :data:`PLANNERS`.
    time_limit:
        Seconds for the MILP (wall clock) and for the local search (CPU time of this
        process, so that load does not change the plan) each (``auto`` splits nothing:
        each gets this limit); also bounds each pass of the search for the smallest
        feasible budget when no plan is found.
    order:
        The order of first computations; default: the best schedule's.
    seed:
        Seeds the local search and candidate sampling.
    no_offload:
        Buffers that may be freed and recomputed but never offloaded.
    use_milp:
        Whether ``auto`` runs the MILP; ``None``: on graphs of at most
        :data:`MILP_MAX_TASKS` tasks.

    Returns
    -------
    Plan
        With ``info``: ``offload_bandwidth``, ``peak``, ``makespan``, ``compute_time``,
        ``overhead`` (makespan / total compute time - 1), ``lower_bound`` (bytes),
        ``candidates`` (estimated makespan per planner that ran) and ``optimal``
        (``True`` only when proven: the makespan equals the total compute time, which no
        plan can beat; the exact planners' own claims are in their ``info``).

    Raises
    ------
    InfeasibleBudget
        When no plan was found; ``smallest`` is the smallest budget found feasible. The
        message calls ``budget`` infeasible only when that is proven (below the lower
        bound, or below a smallest budget proven so); otherwise it says no plan was found.
    PlanError
        On a bad argument.

    Example
    -------
    >>> from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
    >>> g = TaskGraph([Task("a", writes=("x",), time=1.0),
    ...                Task("b", reads=("x",), writes=("y",), time=1.0),
    ...                Task("c", reads=("x", "y"), writes=("z",), time=1.0)],
    ...               [Buffer("x", 4, "a"), Buffer("y", 4, "b"), Buffer("z", 4, "c")])
    >>> plan(g, 12, order=["a", "b", "c"]).info["overhead"]
    0.0
    """
    g = as_taskgraph(g)
    # the planners of "auto" share their identical eviction passes and replays
    with passes_of(g), remembered():
        return _plan(g, budget, offload_bandwidth, recompute, method, time_limit, order, seed,
                     no_offload, use_milp)


def _plan(g: TaskGraph, budget: int | float | str, offload_bandwidth: float | None,
          recompute: bool, method: str, time_limit: float, order: Sequence[Hashable] | None,
          seed: int, no_offload: Iterable[Hashable], use_milp: bool | None) -> Plan:
    ord_ = tuple(order) if order is not None else None
    order_optimal = False
    if is_fraction(budget):  # a fraction of the peak of the order the plan follows
        from thrifty.memory.simulate import simulate

        if ord_ is None:
            sched = schedule(g, time_limit=min(time_limit, 10.0))
            ord_, order_optimal = tuple(sched.order), sched.optimal
        b = parse_budget(budget, peak=simulate(g, ord_).peak)
    else:
        b = parse_budget(budget)
    bw = _check_bandwidth(offload_bandwidth)
    if method != "auto" and method not in PLANNERS:
        raise PlanError(f"unknown planning method {method!r}; valid: auto, "
                        + ", ".join(PLANNERS))
    if not (time_limit > 0):
        raise PlanError(f"time_limit is {time_limit!r}; it must be a number of seconds > 0")
    lb = lower_bound(g, offload=bw is not None)
    if b < lb:
        _infeasible(g, b, bw, recompute, lb, time_limit, ord_, order_optimal,
                    no_offload=frozenset(no_offload))
    if ord_ is None:
        sched = schedule(g, time_limit=min(time_limit, 10.0))
        ord_, order_optimal = tuple(sched.order), sched.optimal
    ctx = Context(bw, recompute, time_limit, ord_, seed, frozenset(no_offload))
    total = g.total_time()
    names = list(PLANNERS) if method == "auto" else [method]
    candidates: dict[str, float] = {}
    best: tuple[float, str, Plan] | None = None
    best_est = None
    optimal = proven = False
    for name in names:
        if method == "auto" and _skip(name, g, best, bw, use_milp):
            continue
        try:
            p = PLANNERS[name](g, b, ctx)
        except NoPlanProven:
            proven = True
            continue
        except NoPlan:
            continue
        est = estimate(g, p.steps, bw)
        if est.peak > b:  # a planner bug would show here; never return such a plan
            raise PlanError(f"planner {name!r} made a plan of peak {est.peak} > budget {b}")
        candidates[name] = est.makespan
        if best is None or est.makespan < best[0] - 1e-12 * max(1.0, est.makespan):
            best, best_est = (est.makespan, name, p), est
            # Proven only when no time is lost: every plan computes each task once at least.
            optimal = est.makespan <= total * (1 + 1e-12)
        if method == "auto" and optimal and math.isclose(best[0], total):
            break
    if best is None:
        if method != "auto":
            raise PlanError(f"planner {method!r} found no plan within budget {b} bytes; "
                            "try method='auto'")
        p = _infeasible(g, b, bw, recompute, lb, time_limit, ord_, order_optimal,
                        ctx.no_offload, proven)
        name = "evict"
        candidates["smallest"] = estimate(g, p.steps, bw).makespan
        optimal = candidates["smallest"] <= total * (1 + 1e-12)
        best, best_est = (candidates["smallest"], name, p), None
    makespan, name, p = best
    est = best_est if best_est is not None else estimate(g, p.steps, bw)
    info: dict[str, Any] = dict(p.info)
    if "optimal" in info:  # the planner's own claim, within its plan space
        info["planner_optimal"] = info.pop("optimal")
    info.update({"offload_bandwidth": bw, "peak": est.peak, "makespan": est.makespan,
                 "compute_time": est.compute_time,
                 "overhead": (est.makespan / total - 1.0) if total > 0 else 0.0,
                 "lower_bound": lb, "candidates": candidates, "optimal": optimal,
                 "planner": name})
    return Plan(p.steps, budget=b, method=name, info=info)


def _skip(name: str, g: TaskGraph, best: tuple[float, str, Plan] | None, bw: float | None,
          use_milp: bool | None) -> bool:
    """Whether ``method="auto"`` skips planner ``name``, given the best plan so far."""
    if name == "milp":
        return not (use_milp if use_milp is not None else len(g.tasks) <= MILP_MAX_TASKS)
    if best is None:
        return False
    if name == "evict":
        return True  # "refine" below starts from the same eviction
    if name == "refine":  # recompute only: the DP's exact optimum, the local search rarely beats
        return bw is None and best[1] == "chain" and bool(best[2].info.get("dp_optimal"))
    return name == "descent"  # a last resort: its plans recompute much


def _check_bandwidth(bw: float | None) -> float | None:
    if bw is None:
        return None
    try:
        v = float(bw)
    except (TypeError, ValueError):
        raise PlanError(f"offload_bandwidth is {bw!r}; give bytes per time unit > 0, "
                        "or None to forbid offloading") from None
    if not (v > 0):
        raise PlanError(f"offload_bandwidth is {bw!r}; it must be > 0 (bytes per time unit), "
                        "or None to forbid offloading")
    return v


def _infeasible(g: TaskGraph, budget: int, bw: float | None, recompute: bool, lb: int,
                time_limit: float, order: tuple[Hashable, ...] | None = None,
                order_optimal: bool = False,
                no_offload: frozenset[Hashable] = frozenset(),
                searched: bool = False) -> Plan:
    """The plan found while searching for the smallest feasible budget, when it fits
    ``budget`` (the eviction planner is not monotone in the budget); else raise
    :class:`InfeasibleBudget`, claiming infeasibility only when it is proven (``searched``:
    the descent search proved that no recompute-only plan fits ``budget``)."""
    with time_bound(time_limit):  # each pass of the search, too, not only the bisection
        small, proven, found = search_smallest(g, bw, recompute, order, time_limit=time_limit,
                                               order_optimal=order_optimal,
                                               no_offload=no_offload)
    if small <= budget:
        return replace(found, budget=budget)
    how = ("recompute and offload" if recompute and bw is not None else
           "recompute" if recompute else "offload" if bw is not None else
           "scheduling alone")
    if proven:
        which = ("it equals the lower bound" if small <= lb
                 else "the peak of a schedule proven optimal")
        raise InfeasibleBudget(
            f"{g.name}: budget {budget} bytes is infeasible with {how}; the smallest "
            f"feasible budget is {small} bytes (proven: {which})", budget=budget,
            smallest=small)
    if searched and bw is None:
        raise InfeasibleBudget(
            f"{g.name}: budget {budget} bytes is infeasible with {how} (an exhaustive "
            f"search over resident sets found no plan); the smallest feasible budget our "
            f"planners found is {small} bytes", budget=budget, smallest=small)
    if budget < lb:
        raise InfeasibleBudget(
            f"{g.name}: budget {budget} bytes is infeasible with {how} (below the proven "
            f"lower bound {lb}); the smallest feasible budget our planners found is {small} "
            "bytes", budget=budget, smallest=small)
    raise InfeasibleBudget(
        f"{g.name}: no plan found within budget {budget} bytes with {how} (not proven "
        f"impossible: the proven lower bound is {lb}); the smallest feasible budget our "
        f"planners found is {small} bytes", budget=budget, smallest=small)

"""Minimum-peak scheduling: the best order of a task graph under eager frees, and what is proven.

Policy (``method="auto"``):

1. an in-forest is solved exactly by Liu's algorithm (:mod:`thrifty.memory.order.tree`),
   a series-parallel graph whose buffers each have one reader by the algorithm of
   Kayaaslan, Lambert, Marchal and Uçar (:mod:`thrifty.memory.order.sp`);
2. otherwise every heuristic of :data:`thrifty.memory.order.HEURISTICS` runs (the file's
   order, dask.order, DFS, BFS, reverse post-order, two greedy least-memory-first orders,
   a beam search over executed sets; the last and dask.order only up to 10,000 and 20,000
   tasks) and the best is kept;
3. if that best is above the lower bound, windows around its peak are re-solved exactly
   (:mod:`thrifty.memory.order.local`, 40% of ``time_limit``; on graphs above 5,000
   tasks, until 80% of ``time_limit`` after the call began, the beam search there
   completing its best state greedily at 70%), then the exact best-first
   search over executed sets (:mod:`thrifty.memory.order.exact`, Serenity-style with
   dominance pruning) looks for a better order in the rest of ``time_limit`` (graphs of
   up to 5,000 tasks); when it finishes the result is proven optimal, and when it stops it
   still raises the proven lower bound.

Before 2., graphs of up to 5,000 tasks are *reduced* (:mod:`thrifty.memory.order.reduce`):
tasks that some optimal order runs back to back are merged, which keeps the least peak.
When the reduced graph is an in-forest or series-parallel, Liu's or Kayaaslan et al.'s
algorithm solves it exactly (method ``"reduce+liu"``, ``"reduce+sp"``); otherwise, when it has
at most :data:`REDUCED_ENOUGH` of the tasks, the exact search runs on the reduced graph
(fewer tasks, fewer executed sets) and its lower bounds
(:meth:`~thrifty.memory.order.compact.Compact.task_bounds` of the merged tasks) count too.
Orders of the reduced graph are expanded to orders of ``g`` with the same peak.
``info["reduction"]`` says what the reductions did (tasks before and after, merges by rule).

``optimal`` is True only when proven: by Liu's theorem or Kayaaslan et al.'s, by the search
finishing, or by the peak meeting the lower bound: the bytes at the start, the results at the
end, and for each task what it uses while it runs in every order (its reads, outputs and
workspace, and every buffer made before it and read after it:
:meth:`~thrifty.memory.order.compact.Compact.task_bounds`).
Both exact polynomial algorithms are checked against the exhaustive search in the tests.

Example
-------
>>> from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
>>> g = TaskGraph([Task("a", writes=("x",)), Task("b", reads=("x",), writes=("y",))],
...               [Buffer("x", 8, "a"), Buffer("y", 4, "b")])
>>> r = schedule(g)
>>> r.order, r.peak, r.optimal
(('a', 'b'), 12, True)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from thrifty.errors import ThriftyError
from thrifty.graph.taskgraph import TaskGraph
from thrifty.graph.taskgraph_io import TaskGraphFile, as_taskgraph
from thrifty.memory.model import ScheduleResult
from thrifty.memory.order import HEURISTICS, Compact, exact_order, is_in_forest, liu_in_tree
from thrifty.memory.order.compact import DENSE_BOUND_TASKS
from thrifty.memory.order.exact import Lattice
from thrifty.memory.order.heuristics import BEAM_MAX_TASKS, beam
from thrifty.memory.order.local import improve_order
from thrifty.memory.order.reduce import Reduction, reduce_graph
from thrifty.memory.order.sp import sp_order

__all__ = ["METHODS", "schedule"]

EXACT_MAX_TASKS = 5000
"""Graphs with more tasks skip the exact search (its states are sets of tasks)."""

REDUCE_MAX_TASKS = EXACT_MAX_TASKS
"""Graphs with more tasks are not reduced (the reductions serve the exact search)."""

REDUCED_ENOUGH = 0.95
"""``auto`` works on the reduced graph only when it has at most this share of the tasks
(building its bounds and search structures again is not worth a few merges)."""

DASK_MAX_TASKS = 20_000
"""Above this many tasks ``auto`` skips dask.order (26 s for 50,000 tasks on 2 cores, where
the other heuristics take under a second each); ``method="dask"`` still runs it."""

PEAK_TASKS_BOUNDED = 16
"""Above :data:`~thrifty.memory.order.compact.DENSE_BOUND_TASKS` tasks, the lower bound
also counts what must be live across each of the tasks at this many highest steps of the
best order (:meth:`~thrifty.memory.order.compact.Compact.task_bounds_of`)."""

LOCAL_SHARE = 0.4
"""The share of ``time_limit`` spent re-solving windows around the peak before the search."""

LARGE_BEAM_SHARE = 0.7
"""On graphs of more than :data:`EXACT_MAX_TASKS` tasks (no exact search), the beam search
completes its best state greedily once this share of ``time_limit`` has passed since the
call began."""

LARGE_LOCAL_SHARE = 0.8
"""On those graphs, the local re-solving stops once this share of ``time_limit`` has passed
since the call began (the rest is left for the last peak evaluation)."""

METHODS: tuple[str, ...] = ("auto", "liu", "sp", "exact", "heuristic", *HEURISTICS)
"""Valid values of ``schedule(method=...)``."""


def schedule(g: TaskGraph | TaskGraphFile, method: str = "auto", time_limit: float = 10.0,
             reference_order: Sequence[Hashable] | None = None,
             reduce: bool = True) -> ScheduleResult:
    """Order the tasks of ``g`` for the least memory peak (eager frees).

    Parameters
    ----------
    g:
        The task graph, or a file read by :func:`thrifty.graph.taskgraph_io.read_taskgraph`
        (its reference order, if any, is then the ``"file"`` baseline).
    method:
        ``"auto"`` (see the module docstring), ``"liu"`` (in-forests only), ``"sp"``
        (series-parallel graphs with one reader per buffer only), ``"exact"``
        (the search alone, from no upper bound), ``"heuristic"`` (best heuristic, no search)
        or the name of one heuristic or baseline (``"file"``, ``"dask"``, ``"dfs"``,
        ``"bfs"``, ``"greedy"``, ``"greedy_delta"``, ``"postorder"``, ``"beam"``).
    time_limit:
        Seconds the local re-solving and the exact search may take together (the
        heuristics and bounds come on top: about a second per 5,000 tasks). Graphs of
        more than :data:`EXACT_MAX_TASKS` tasks have no exact search: there
        ``time_limit`` counts from the call's start, the beam search widens no more after
        :data:`LARGE_BEAM_SHARE` of it and the local re-solving stops at
        :data:`LARGE_LOCAL_SHARE` of it, so the call takes about that long (longer only
        when the other heuristics alone take longer).
    reference_order:
        A topological order to use as the ``"file"`` baseline (default: the file's order
        when ``g`` is a file that has one, else the order the tasks are listed in when it
        is topological, else ``g.order``).
    reduce:
        Apply the peak-preserving reductions before the exact methods (``"auto"`` and
        ``"exact"``; graphs of up to :data:`REDUCE_MAX_TASKS` tasks). ``False`` searches the
        graph as given (for comparison).

    Returns
    -------
    ScheduleResult
        ``order`` (task ids), ``peak``, ``optimal`` (proven), ``lower_bound``, ``method``
        (what produced the order) and ``info`` (``"peaks"``: each heuristic's peak,
        ``"seconds"``, ``"states"``: executed sets the search stored, ``"reduction"``: tasks
        before and after the reductions and merges by rule, when they ran).

    Example
    -------
    >>> from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
    >>> g = TaskGraph([Task("a", writes=("x",))], [Buffer("x", 3, "a")])
    >>> schedule(g, method="bfs").peak
    3
    """
    if method not in METHODS:
        raise ThriftyError(f"unknown scheduling method {method!r}; valid methods are "
                           f"{', '.join(METHODS)}")
    if not (time_limit >= 0):
        raise ThriftyError(f"time_limit is {time_limit!r}; it must be a number of seconds >= 0")
    g = as_taskgraph(g, file=True)
    t0 = time.perf_counter()
    if isinstance(g, TaskGraphFile):
        if reference_order is None:
            reference_order = g.order
        g = g.graph
    c = Compact.of(g)
    heuristics = _heuristics(c, g, reference_order)
    bounds = c.task_bounds()
    lb = c.lower_bound(bounds)
    done = _Finish(c, t0)
    result = _structured(g, c, method, lb, done)
    if result is not None:
        return result
    red = _reduced(g, c, bounds, lb, method, reduce, done)
    if red.result is not None:
        return red.result
    if method == "exact":
        return _exact(g, red, time_limit, done)
    if method in heuristics:
        return done(heuristics[method](c), method, False, red.lb)
    return _search(c, bounds, heuristics, red, method, time_limit, done)


class _Finish:
    """Makes the :class:`ScheduleResult` of one call (its ``info``, the seconds taken)."""

    def __init__(self, c: Compact, t0: float) -> None:
        self.c = c
        self.t0 = t0
        self.info: dict[str, Any] = {}

    def __call__(self, order: list[int], how: str, optimal: bool,
                 bound: int) -> ScheduleResult:
        peak = self.c.peak_of(order)
        if peak <= bound:
            optimal = True
        self.info["seconds"] = time.perf_counter() - self.t0
        return ScheduleResult(order=self.c.to_ids(order), peak=peak, optimal=optimal,
                              lower_bound=peak if optimal else bound, method=how,
                              info=self.info)


def _heuristics(c: Compact, g: TaskGraph, reference_order: Sequence[Hashable] | None
                ) -> dict[str, Callable[[Compact], list[int]]]:
    """The heuristics, with the ``"file"`` baseline: ``reference_order``, else the order
    the tasks are listed in when it is topological (a file's node order)."""
    heuristics = dict(HEURISTICS)
    if reference_order is not None:
        ref = _reference(c, reference_order)
    else:
        try:
            ref = _reference(c, list(g.tasks))
        except ThriftyError:
            ref = list(range(c.n))
    heuristics["file"] = lambda _c: ref
    return heuristics


def _structured(g: TaskGraph, c: Compact, method: str, lb: int,
                done: _Finish) -> ScheduleResult | None:
    """The exact polynomial algorithms (``"liu"``, ``"sp"``, and ``"auto"`` when they
    apply); ``None`` when they do not apply to an ``"auto"`` call or another method."""
    if method == "liu" or (method == "auto" and is_in_forest(c)):
        if not is_in_forest(c):
            raise ThriftyError(f"{g.name} is not an in-forest (a task with two successors, an "
                               "input of nonzero size, or an inner result); use method='auto'")
        return done(liu_in_tree(c), "liu", True, lb)
    if method in ("sp", "auto"):
        sp = sp_order(c)
        if sp is not None:
            return done(sp, "sp", True, lb)
        if method == "sp":
            raise ThriftyError(f"{g.name} is not series-parallel with one reader per buffer "
                               "(closed by a virtual source and sink); use method='auto'")
    return None


@dataclass
class _Problem:
    """The graph the exact methods work on (``g``'s, or its reduction's): ``rc`` and its
    task bounds, ``expand`` (its orders as orders of ``g``), the lower bound ``lb``, and a
    ``result`` when the reduced graph was solved outright."""

    rc: Compact
    rbounds: list[int]
    expand: Callable[[list[int]], list[int]]
    lb: int
    result: ScheduleResult | None = None


def _reduced(g: TaskGraph, c: Compact, bounds: list[int], lb: int, method: str, reduce: bool,
             done: _Finish) -> _Problem:
    """Reduce ``g`` when asked and worth it (module docstring); solve the reduced graph
    outright when it is an in-forest or series-parallel (``"auto"``)."""
    red: Reduction | None = None
    if reduce and method in ("auto", "exact") and c.n <= REDUCE_MAX_TASKS:
        t1 = time.perf_counter()
        red = reduce_graph(g)
        done.info["reduction"] = {**red.info, "seconds": time.perf_counter() - t1}
    if red is None or red.graph is g or not (
            method == "exact" or len(red.graph.tasks) <= REDUCED_ENOUGH * c.n):
        return _Problem(c, bounds, lambda order: order, lb)
    # solve the reduced graph
    rc = Compact.of(red.graph)
    rpos = {t: i for i, t in enumerate(c.ids)}
    expand_ids = red.expand

    def expand(order: list[int]) -> list[int]:
        return [rpos[t] for t in expand_ids(rc.to_ids(order))]

    rbounds = rc.task_bounds()
    lb = max(lb, rc.lower_bound(rbounds))
    problem = _Problem(rc, rbounds, expand, lb)
    if method == "auto" and is_in_forest(rc):
        problem.result = done(expand(liu_in_tree(rc)), "reduce+liu", True, lb)
    elif method == "auto":
        rsp = sp_order(rc)
        if rsp is not None:
            problem.result = done(expand(rsp), "reduce+sp", True, lb)
    return problem


def _exact(g: TaskGraph, p: _Problem, time_limit: float, done: _Finish) -> ScheduleResult:
    """``method="exact"``: the search alone, from no upper bound."""
    res = exact_order(p.rc, None, time_limit=time_limit, task_bounds=p.rbounds)
    done.info["states"] = res.states
    if res.order is not None:
        return done(p.expand(res.order), "exact", True, max(p.lb, res.lower_bound))
    raise ThriftyError(f"{g.name}: the exact search did not finish in {time_limit} s "
                       f"(proven lower bound {res.lower_bound}); raise time_limit or use "
                       "method='auto'")


def _search(c: Compact, bounds: list[int], heuristics: dict[str, Callable[[Compact], list[int]]],
            p: _Problem, method: str, time_limit: float, done: _Finish) -> ScheduleResult:
    """``"auto"`` and ``"heuristic"`` past the exact algorithms: the best heuristic, then
    (``"auto"``) the local re-solving and the exact search from its peak."""
    info, lb = done.info, p.lb
    large = c.n > EXACT_MAX_TASKS  # no exact search: time_limit counts from the call's start
    if large and "beam" in heuristics:
        heuristics = {**heuristics, "beam": lambda c: beam(c, time_limit=max(
            0.0, done.t0 + LARGE_BEAM_SHARE * time_limit - time.perf_counter()))}
    best_name, best_order, info["peaks"] = _best_heuristic(c, heuristics)
    best_peak = info["peaks"][best_name]
    if c.n > DENSE_BOUND_TASKS:  # bounds of the tasks where the best order peaks
        during, _ = c.profile(best_order)
        top = sorted(range(c.n), key=lambda k: -during[k])[:PEAK_TASKS_BOUNDED]
        lb = max([lb, *c.task_bounds_of([best_order[k] for k in top])])
    if method == "heuristic" or best_peak <= lb:
        return done(best_order, best_name, False, lb)
    lattice = Lattice(c, bounds)
    local_limit = LOCAL_SHARE * time_limit
    if large:
        local_limit = done.t0 + LARGE_LOCAL_SHARE * time_limit - time.perf_counter()
    better = improve_order(c, best_order, lattice, time_limit=max(0.0, local_limit),
                           lower_bound=lb)
    if c.peak_of(better) < best_peak:
        best_name, best_order, best_peak = f"{best_name}+local", better, c.peak_of(better)
    if best_peak <= lb or large:
        return done(best_order, best_name, False, lb)
    rlattice = lattice if p.rc is c else Lattice(p.rc, p.rbounds)
    res = exact_order(p.rc, best_peak, time_limit=(1 - LOCAL_SHARE) * time_limit,
                      lattice=rlattice)
    info["states"] = res.states
    bound = max(lb, res.lower_bound)
    if res.order is not None:
        return done(p.expand(res.order), "exact", True, bound)
    return done(best_order, best_name, res.optimal, bound)


def _best_heuristic(c: Compact, heuristics: dict[str, Callable[[Compact], list[int]]]
                    ) -> tuple[str, list[int], dict[str, int]]:
    """Run every heuristic (beam search and dask.order only up to their size limits); keep
    the best."""
    peaks: dict[str, int] = {}
    best_name, best_order = "", []
    for name, fn in heuristics.items():
        if (name == "beam" and c.n > BEAM_MAX_TASKS) or (name == "dask"
                                                         and c.n > DASK_MAX_TASKS):
            continue
        order = fn(c)
        peaks[name] = c.peak_of(order)
        if not best_name or peaks[name] < peaks[best_name]:
            best_name, best_order = name, order
    return best_name, best_order, peaks


def _reference(c: Compact, order: Sequence[Hashable]) -> list[int]:
    """Task numbers of a given order, checked to be a topological order of every task."""
    pos = {t: i for i, t in enumerate(c.ids)}
    try:
        idx = [pos[t] for t in order]
    except KeyError as e:
        raise ThriftyError(f"reference_order names unknown task {e.args[0]!r}") from None
    seen = [False] * c.n
    for i in idx:
        if seen[i] or not all(seen[p] for p in c.preds[i]):
            raise ThriftyError(f"reference_order is not a topological order of every task once "
                               f"(at task {c.ids[i]!r})")
        seen[i] = True
    if len(idx) != c.n:
        raise ThriftyError(f"reference_order has {len(idx)} tasks; the graph has {c.n}")
    return idx

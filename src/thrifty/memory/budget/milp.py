"""Exact MILPs for small general graphs: recomputation (Checkmate: Jain et al., MLSys 2020)
and, when a bandwidth is given, paging to host memory as well (POET: Patil et al., ICML
2022), with transfers overlapping compute per stage. Solved by HiGHS through
:func:`scipy.optimize.milp`.

Stages
------
Tasks are numbered by a topological order (the *order of first computations*); stage ``t``
computes task ``t`` for the first time and may recompute any earlier task before it, each
at most once and in order. With paging, stage ``t`` is, in plan order::

    prefetch Pn[t]   prefetch Pl[t]   compute (and free) R[t, 0..t]   offload Oo[t]   offload On[t]

Variables (Checkmate's, with the memory accounting rewritten for the memory model of
ARCHITECTURE.md, plus POET-style paging):

* ``R[t,k]`` (binary): task ``k`` is computed in stage ``t`` (``R[t,t] = 1``);
* ``S[t,b]`` (binary): buffer ``b`` is resident on the device when stage ``t`` starts;
* ``N[t,k,b]`` (continuous, forced to 0/1): ``b`` is used at step ``k`` or later in stage
  ``t`` (read, offloaded at the end of the stage, or carried into stage ``t+1``);
* ``L[t,k,b]`` (continuous, forced to 0/1): ``b`` is resident while step ``k`` of stage
  ``t`` runs;

and with paging, for each buffer that may be offloaded (not a result, not of size 0, not
in ``no_offload``):

* ``H[t,b]`` (binary): ``b`` is on the host (offloaded, not resident) when stage ``t``
  starts;
* ``Pn[t,b]`` / ``Pl[t,b]`` (binary): ``b`` is prefetched at the start of stage ``t``, to
  be read in this stage (``Pn``: the stage's computes may wait for it) or only from the
  next stage on (``Pl``: the copy overlaps this stage's computes);
* ``Oo[t,b]`` / ``On[t,b]`` (binary): ``b`` is offloaded at the end of stage ``t``; ``Oo``
  when it was resident at the start of the stage (its copy may overlap the stage's
  computes), ``On`` when it was (re)computed in the stage;
* ``D[t]`` (continuous): the time of stage ``t``;
* ``Lp[t,b]`` (continuous, forced to 0/1): ``b`` is resident once the stage's prefetches
  are issued.

Constraints. Recompute (Checkmate): a computed task's reads are resident (computed earlier
in the stage, carried in, or prefetched by ``Pn``); a buffer carried into a stage was
resident in the previous one and not offloaded; a task is not recomputed while its output
is resident (or prefetched in the same stage); results stay resident once produced;
``L >= N + (S or Pn or Pl or R[producer]) - 1``; for every step the resident bytes plus
the outputs and workspace of the task computed there fit the budget. Paging: a buffer is
either resident or on the host (``S + H <= 1``); a prefetch needs the buffer on the host
(``Pn + Pl <= H``); ``Oo <= S``, ``On <= R[producer]``; a buffer is on the host at the next
stage only if it was and was not prefetched, or was offloaded
(``H[t+1] <= H[t] - Pn - Pl + Oo + On``), and a recompute puts it back on the device
(``H[t+1] <= 1 - R[t,producer] + On``); an offloaded buffer is used until the end of its
stage (``N[t,t] >= S[t+1] + Oo + On``) and a prefetched one at its first step; the bytes
resident once the prefetches are issued fit the budget.

Time. Without a bandwidth the objective is the total compute time (Checkmate). With one,
each transfer of ``b`` takes ``x_b = size(b) / bandwidth`` and the objective is
``sum_t D[t]`` with, per stage, ``C[t] = sum_k R[t,k] time(k)``,
``X(V) = sum_b x_b V[t,b]``::

    D[t] >= X(Pn) + C[t] + X(On)               (compute stream, then the new offloads)
    D[t] >= X(Pn) + X(Pl) + X(Oo) + X(On)      (copy stream)

This is an upper bound of the makespan that :func:`thrifty.memory.simulate` finds for the
plan built below: by induction, at ``T[t] = D[0] + ... + D[t-1]`` both streams are idle and
every resident buffer is ready (the prefetches start by ``T[t]``; the computes wait at most
for the ``Pn`` copies and the offloads of earlier stages; the ``Oo`` buffers are ready by
``T[t]``, the ``On`` ones once the stage's computes end). Transfers of a stage overlap its
computes (``max`` above) but never those of another stage.

What the optimum is exact for. The plan space: plans whose first computations follow the
given order, that recompute a task at most once per stage, free eagerly, prefetch only at
the start of a stage and offload only at its end (each at most once per stage), keep
results resident once produced, and cost ``sum_t D[t]`` (the staged time above, not the
simulator's exact makespan, which is at most that). Over that space, with ``info["optimal"]``
true, the MILP's plan is of least cost; without a bandwidth this is Checkmate's space and
cost (compute time). Every plan without paging is in the paging space with the same cost,
so with a bandwidth the optimum is at most the recompute-only optimum.

Size. ``N[t,k,b]`` only changes at the steps that read ``b``, and ``L[t,k,b]`` also where
``b`` is written, so the steps between two such points share one variable (an exact
reformulation: any feasible ``N`` can be lowered to its segment's least value). This
brings the ``N`` and ``L`` variables from ``O(n^3)`` down to ``O(n^2 x readers)``.

Solving with paging. The recompute-only MILP (far smaller) is solved first, with half the
time limit: its plan is in the paging space at the same cost, so its cost is added as an
upper bound on ``sum_t D[t]``, and when it is optimal with no overhead at all it is
returned as optimal (no plan costs less than the total compute time). The paging MILP gets
the rest of the limit; if it finds nothing better, the recompute-only plan is returned with
``optimal`` false. ``info["objective"]`` is recomputed from the chosen stages (not the
solver's ``D``, which may carry its tolerance); ``info["solver_objective"]`` is the
solver's. HiGHS may overrun the time limit during presolve on the larger models.

The plan is written by :func:`staged_plan`: the stages' prefetches, computes and offloads
in the order above, and every buffer freed right after its last use (a read, or an
offload) before it is rewritten, or right after it is written or prefetched if nothing uses
it, so the plan's peak is at most the MILP's accounting.
"""

from __future__ import annotations

import math
import time
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array

from thrifty.graph.taskgraph import TaskGraph
from thrifty.memory.budget.sequence import Stage, plan_from_sequence, staged_plan
from thrifty.memory.model import Plan

__all__ = ["Stage", "milp_plan", "staged_plan"]

#: Objective weight of each transfer (the objective is in units of the total compute time):
#: among plans of equal time, the MILP prefers fewer transfers.
_TIE = 1e-7


class _Vars:
    def __init__(self) -> None:
        self.index: dict[tuple, int] = {}
        self.lo: list[float] = []
        self.hi: list[float] = []
        self.integer: list[int] = []
        self.cost: list[float] = []

    def add(self, key: tuple, integer: bool, lo: float = 0.0, hi: float = 1.0,
            cost: float = 0.0) -> int:
        i = len(self.lo)
        self.index[key] = i
        self.lo.append(lo)
        self.hi.append(hi)
        self.integer.append(1 if integer else 0)
        self.cost.append(cost)
        return i


class _Rows:
    def __init__(self) -> None:
        self.r: list[int] = []
        self.c: list[int] = []
        self.v: list[float] = []
        self.lo: list[float] = []
        self.hi: list[float] = []

    def add(self, terms: Sequence[tuple[int, float]], lo: float, hi: float) -> None:
        k = len(self.lo)
        for c, v in terms:
            self.r.append(k)
            self.c.append(c)
            self.v.append(v)
        self.lo.append(lo)
        self.hi.append(hi)




def milp_plan(g: TaskGraph, budget: int, order: Sequence[Hashable] | None = None,
              time_limit: float = 10.0, *, bandwidth: float | None = None,
              recompute: bool = True, no_offload: Iterable[Hashable] = ()) -> Plan | None:
    """The least-cost plan within ``budget`` in the MILP's plan space; ``None`` if none found.

    Without ``bandwidth``: recompute only, cost = compute time (Checkmate). With
    ``bandwidth`` (bytes per time unit; ``math.inf`` for instant copies): recompute and
    paging, cost = the staged makespan bound of the module docstring. ``recompute=False``
    forbids recomputation; ``no_offload`` names buffers that are never offloaded.

    ``plan.info["optimal"]`` says whether HiGHS proved optimality within ``time_limit``;
    ``plan.info["objective"]`` is the MILP's cost (time units; with paging an upper bound of
    the plan's simulated makespan) and ``plan.info["bound"]`` its proven lower bound.

    Example
    -------
    >>> from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
    >>> g = TaskGraph([Task("a", writes=("x",), time=1.0),
    ...                Task("b", reads=("x",), writes=("y",), time=1.0),
    ...                Task("c", reads=("x", "y"), writes=("z",), time=1.0)],
    ...               [Buffer("x", 4, "a"), Buffer("y", 4, "b"), Buffer("z", 4, "c")])
    >>> milp_plan(g, 12).info["optimal"]
    True

    With paging: ``x`` (needed again by ``d``) goes to the host while ``b`` runs.

    >>> g = TaskGraph([Task("a", writes=("x",), time=3.0),
    ...                Task("b", reads=("x",), writes=("y",), time=1.0),
    ...                Task("c", reads=("y",), writes=("z",), time=1.0),
    ...                Task("d", reads=("x", "z"), writes=("w",), time=1.0)],
    ...               [Buffer("x", 4, "a"), Buffer("y", 4, "b"), Buffer("z", 4, "c"),
    ...                Buffer("w", 1, "d")])
    >>> milp_plan(g, 9).info["objective"]  # recompute only: a runs twice
    9.0
    >>> p = milp_plan(g, 9, bandwidth=8.0)
    >>> p.info["objective"], [(s.op, s.target) for s in p.steps if s.op != "compute"]
    (6.5, [('offload', 'x'), ('free', 'y'), ('prefetch', 'x'), ('free', 'x'), ('free', 'z')])
    """
    if bandwidth is None:
        return _solve(g, budget, order, time_limit, None, recompute, no_offload, None)
    if not (bandwidth > 0):
        raise ValueError(f"bandwidth is {bandwidth!r}; it must be > 0")
    # The recompute-only optimum first (a far smaller MILP): its plan is in the paging
    # space with the same cost, so it bounds the paging MILP's objective from above, and
    # when it loses no time at all (cost = total compute) it is optimal there too.
    t0 = time.perf_counter()
    total = sum(t.time for t in g.tasks.values())
    rec = _solve(g, budget, order, time_limit / 2, None, recompute, no_offload, None)
    if rec is not None:
        rec = replace(rec, info={**rec.info, "offload_bandwidth": bandwidth, "paging": True,
                                 "recompute_only": True})
        if rec.info["optimal"] and rec.info["objective"] <= total * (1 + 1e-9):
            return rec
        rec.info["optimal"] = False  # not proven in the paging space
    left = max(time_limit - (time.perf_counter() - t0), time_limit / 10)
    cutoff = rec.info["objective"] if rec is not None else None
    pag = _solve(g, budget, order, left, bandwidth, recompute, no_offload, cutoff)
    if pag is None or (rec is not None
                       and pag.info["objective"] > rec.info["objective"] * (1 + 1e-9)):
        return rec  # the paging MILP's incumbent (if any) is no better within its limit
    return pag


class _Model:
    """The MILP of :func:`_solve` under construction: the graph's data, the variables by
    kind and the constraints (variables and rows are added in a fixed order)."""

    def __init__(self, g: TaskGraph, budget: int, order: list[Hashable],
                 bandwidth: float | None, recompute: bool,
                 no_offload: Iterable[Hashable]) -> None:
        self.g = g
        self.order = order
        self.n = len(order)
        pos = {t: i for i, t in enumerate(order)}
        self.size = {b: buf.size for b, buf in g.buffers.items()}
        self.paging = bandwidth is not None
        self.bandwidth = bandwidth
        self.recompute = recompute
        self.scale = float(max(budget, 1))
        self.tasks = tasks = [g.tasks[t] for t in order]
        self.pb = {b: (pos[buf.producer] if buf.producer is not None else -1)
                   for b, buf in g.buffers.items()}
        self.readers_at: dict[Hashable, set[int]] = {b: set() for b in g.buffers}
        for k, task in enumerate(tasks):
            for b in task.reads:
                self.readers_at[b].add(k)
        self.total = sum(t.time for t in tasks) or 1.0
        self.V, self.C = _Vars(), _Rows()
        self.R: dict[tuple[int, int], int] = {}
        self.S: dict[tuple[int, Hashable], int] = {}
        self.bufs = list(g.buffers)
        banned = frozenset(no_offload)
        self.pageable = [b for b in self.bufs if self.paging and self.size[b] > 0
                         and b not in g.results and b not in banned]
        self.H: dict[tuple[int, Hashable], int] = {}
        self.Pn: dict[tuple[int, Hashable], int] = {}
        self.Pl: dict[tuple[int, Hashable], int] = {}
        self.Oo: dict[tuple[int, Hashable], int] = {}
        self.On: dict[tuple[int, Hashable], int] = {}
        self.D: dict[int, int] = {}

    def avail(self, t: int, b: Hashable) -> list[tuple[int, float]]:
        """Terms of "b is resident once stage t's prefetches are issued"."""
        return [(v[t, b], 1.0) for v in (self.S, self.Pn, self.Pl) if (t, b) in v]

    def offloads(self, t: int, b: Hashable, sign: float) -> list[tuple[int, float]]:
        """Terms ``sign * (Oo[t,b] + On[t,b])`` for the variables that exist."""
        return [(v[t, b], sign) for v in (self.Oo, self.On) if (t, b) in v]


def _add_compute_vars(m: _Model) -> None:
    """The ``R`` (compute) and ``S`` (resident at stage start) variables."""
    V, n, pb = m.V, m.n, m.pb
    for t in range(n):
        for k in range(t + 1):
            lo = 1.0 if k == t else 0.0
            hi = 1.0 if (k == t or m.recompute) else 0.0
            m.R[t, k] = V.add(("R", t, k), True, lo, hi,
                              0.0 if m.paging else m.tasks[k].time / m.total)
    for t in range(n):
        for b in m.bufs:
            if pb[b] < t:
                pinned = b in m.g.results or (pb[b] < 0 and t == 0)
                m.S[t, b] = V.add(("S", t, b), True, 1.0 if pinned else 0.0, 1.0)


def _add_paging_vars(m: _Model) -> None:
    """The ``H``, ``Pn``, ``Pl``, ``Oo`` and ``On`` variables (none without a bandwidth)."""
    V, n, pb = m.V, m.n, m.pb
    for b in m.pageable:
        for t in range(n):
            if 1 <= t and pb[b] < t:
                m.H[t, b] = V.add(("H", t, b), True)
                m.Pn[t, b] = V.add(("Pn", t, b), True, cost=_TIE)
                if t + 1 < n:
                    m.Pl[t, b] = V.add(("Pl", t, b), True, cost=_TIE)
            if t + 1 < n:
                if pb[b] < t:
                    m.Oo[t, b] = V.add(("Oo", t, b), True, cost=_TIE)
                if 0 <= pb[b] <= t and (pb[b] == t or m.recompute):
                    m.On[t, b] = V.add(("On", t, b), True, cost=_TIE)


def _add_stage_constraints(m: _Model, t: int) -> None:
    """Stage ``t``'s residency constraints: reads resident, no recompute of a resident
    buffer, carrying, and the paging transitions."""
    C, R, S, H, Pn, Pl, pb = m.C, m.R, m.S, m.H, m.Pn, m.Pl, m.pb
    for k in range(t + 1):
        for b in m.tasks[k].reads:  # reads resident: computed before in the stage, or carried
            terms = [(R[t, k], 1.0), (S[t, b], -1.0)]
            if (t, b) in Pn:
                terms.append((Pn[t, b], -1.0))
            if pb[b] >= 0:
                terms.append((R[t, pb[b]], -1.0))
            C.add(terms, -np.inf, 0.0)
    for b in m.bufs:
        if pb[b] >= 0 and pb[b] < t:  # no recompute while the old copy is resident
            C.add([(R[t, pb[b]], 1.0)] + m.avail(t, b), -np.inf, 1.0)
        if t + 1 < m.n and pb[b] <= t:  # carried only if resident in this stage
            terms = [(S[t + 1, b], 1.0)] + [(c, -v) for c, v in m.avail(t, b)]
            if pb[b] >= 0:
                terms.append((R[t, pb[b]], -1.0))
            terms += m.offloads(t, b, 1.0)
            C.add(terms, -np.inf, 0.0)
        if (t, b) in H:
            C.add([(S[t, b], 1.0), (H[t, b], 1.0)], -np.inf, 1.0)
            C.add([(Pn[t, b], 1.0), (H[t, b], -1.0)]
                  + ([(Pl[t, b], 1.0)] if (t, b) in Pl else []), -np.inf, 0.0)
        if (t, b) in m.Oo:
            C.add([(m.Oo[t, b], 1.0), (S[t, b], -1.0)], -np.inf, 0.0)
        if (t, b) in m.On:
            C.add([(m.On[t, b], 1.0), (R[t, pb[b]], -1.0)], -np.inf, 0.0)
        if (t + 1, b) in H:
            _add_host_transition(m, t, b)


def _add_host_transition(m: _Model, t: int, b: Hashable) -> None:
    """``b`` is on the host at stage ``t+1`` only if it stayed there or was offloaded in
    stage ``t``, and a recompute drops the host copy (unless offloaded again)."""
    C, H, Pn, Pl, On, pb = m.C, m.H, m.Pn, m.Pl, m.On, m.pb
    terms = [(H[t + 1, b], 1.0)]
    if (t, b) in H:
        terms += [(H[t, b], -1.0), (Pn[t, b], 1.0)]
        if (t, b) in Pl:
            terms.append((Pl[t, b], 1.0))
    terms += m.offloads(t, b, -1.0)
    C.add(terms, -np.inf, 0.0)
    if pb[b] >= 0:
        terms = [(H[t + 1, b], 1.0), (m.R[t, pb[b]], 1.0)]
        if (t, b) in On:
            terms.append((On[t, b], -1.0))
        C.add(terms, -np.inf, 1.0)


def _needed_chain(m: _Model, t: int, b: Hashable) -> list[int | None]:
    """The needed-later (``N``) variables of ``b`` in stage ``t``, per step (``None``
    where ``b`` is not needed any more); steps between two readers share one."""
    V, C = m.V, m.C
    carried = m.S.get((t + 1, b))
    end_needed = t + 1 == m.n and b in m.g.results
    top: int | None = None  # used after the stage's last reader of b
    if carried is not None:
        top = V.add(("N", t, "end", b), False)
        C.add([(top, 1.0), (carried, -1.0)] + m.offloads(t, b, -1.0), 0.0, np.inf)
    elif end_needed:
        top = V.add(("N", t, "end", b), False, 1.0, 1.0)
    n_at: list[int | None] = [None] * (t + 1)
    cur = top
    for k in range(t, -1, -1):
        if k in m.readers_at[b]:
            nk = V.add(("N", t, k, b), False)
            if cur is not None:
                C.add([(nk, 1.0), (cur, -1.0)], 0.0, np.inf)
            C.add([(nk, 1.0), (m.R[t, k], -1.0)], 0.0, np.inf)
            cur = nk
        n_at[k] = cur
    return n_at


def _prefetch_terms(m: _Model, t: int, b: Hashable,
                    n0: int | None) -> list[tuple[int, float]]:
    """Constraints on ``b``'s prefetch in stage ``t`` (used in the stage or carried) and
    its terms in the memory in use once the stage's prefetches are issued."""
    V, C, S, Pn, Pl, size = m.V, m.C, m.S, m.Pn, m.Pl, m.size
    pre_terms: list[tuple[int, float]] = []
    if (t, b) in Pn:  # a prefetched buffer is used in the stage or carried
        terms = [(Pn[t, b], 1.0)] + ([(Pl[t, b], 1.0)] if (t, b) in Pl else [])
        C.add(terms + ([(n0, -1.0)] if n0 is not None else []), -np.inf, 0.0)
        if size[b]:
            lp = V.add(("Lp", t, b), False)
            C.add([(lp, 1.0)] + [(c, -v) for c, v in terms], 0.0, np.inf)
            pre_terms.append((lp, size[b] / m.scale))
    if (t, b) in S and n0 is not None and size[b] and any(
            (t, c) in Pn for c in m.pageable):
        lp = V.add(("Ls", t, b), False)
        C.add([(lp, 1.0), (n0, -1.0), (S[t, b], -1.0)], -1.0, np.inf)
        pre_terms.append((lp, size[b] / m.scale))
    return pre_terms


def _add_resident_terms(m: _Model, t: int, b: Hashable, n_at: list[int | None],
                        mem_terms: list[list[tuple[int, float]]]) -> None:
    """The resident (``L``) variables of ``b`` in stage ``t``, one per segment of steps
    sharing an ``N`` variable, appended to each step's memory terms."""
    pb = m.pb
    shared: dict[tuple[int, bool], int] = {}
    for k in range(t + 1):
        nk_ = n_at[k]
        if k == pb[b] or nk_ is None:
            continue  # the step that writes b counts it as an output
        written = 0 <= pb[b] < k
        key = (nk_, written)
        if key not in shared:
            terms = [(c, -v) for c, v in m.avail(t, b)]
            if written:
                terms.append((m.R[t, pb[b]], -1.0))
            if not terms:
                continue  # b cannot be resident at this step
            lk = m.V.add(("L", t, k, b), False)
            m.C.add([(lk, 1.0), (nk_, -1.0)] + terms, -1.0, np.inf)
            shared[key] = lk
        mem_terms[k].append((shared[key], m.size[b] / m.scale))


def _add_memory(m: _Model, t: int) -> None:
    """Stage ``t``'s needed-later (``N``) and resident (``L``) variables, then its memory
    constraints per step (and once the prefetches are issued)."""
    mem_terms: list[list[tuple[int, float]]] = [[] for _ in range(t + 1)]
    pre_terms: list[tuple[int, float]] = []
    for b in m.bufs:
        if m.pb[b] > t:
            continue
        n_at = _needed_chain(m, t, b)
        pre_terms += _prefetch_terms(m, t, b, n_at[0])
        if not m.size[b]:
            continue
        _add_resident_terms(m, t, b, n_at, mem_terms)
    for k in range(t + 1):
        task = m.tasks[k]
        own = (sum(m.size[w] for w in task.writes) + task.workspace) / m.scale
        m.C.add(mem_terms[k] + [(m.R[t, k], own)], -np.inf, 1.0)
    if pre_terms:
        m.C.add(pre_terms, -np.inf, 1.0)


def _add_stage_times(m: _Model, cutoff: float | None) -> None:
    """The stage times ``D[t]`` (compute and copy streams) and the ``cutoff`` bound."""
    n, total = m.n, m.total
    bw = float(m.bandwidth)  # type: ignore[arg-type]
    x = {b: (0.0 if math.isinf(bw) else m.size[b] / bw) / total for b in m.bufs}
    for t in range(n):
        m.D[t] = m.V.add(("D", t), False, 0.0, np.inf, 1.0)
        comp = [(m.R[t, k], -m.tasks[k].time / total) for k in range(t + 1)]
        pn = [(m.Pn[t, b], -x[b]) for b in m.pageable if (t, b) in m.Pn]
        pl = [(m.Pl[t, b], -x[b]) for b in m.pageable if (t, b) in m.Pl]
        oo = [(m.Oo[t, b], -x[b]) for b in m.pageable if (t, b) in m.Oo]
        on = [(m.On[t, b], -x[b]) for b in m.pageable if (t, b) in m.On]
        m.C.add([(m.D[t], 1.0)] + pn + comp + on, 0.0, np.inf)
        if pn or pl or oo or on:
            m.C.add([(m.D[t], 1.0)] + pn + pl + oo + on, 0.0, np.inf)
    if cutoff is not None:
        m.C.add([(m.D[t], 1.0) for t in range(n)], 0.0, cutoff / total * (1 + 1e-9) + 1e-12)


def _paging_plan(m: _Model, sol: np.ndarray, budget: int, info: dict[str, Any]) -> Plan:
    """The staged plan of a paging MILP's solution, with its staged time recomputed from
    the chosen stages (no solver tolerance)."""
    g, n, order = m.g, m.n, m.order
    bw = float(m.bandwidth)  # type: ignore[arg-type]

    def chosen(v: dict[tuple[int, Hashable], int], t: int) -> tuple[Hashable, ...]:
        return tuple(b for b in m.pageable if (t, b) in v and sol[v[t, b]] > 0.5)

    stages: list[Stage] = [
        (chosen(m.Pn, t), chosen(m.Pl, t),
         tuple(order[k] for k in range(t + 1) if sol[m.R[t, k]] > 0.5),
         chosen(m.Oo, t), chosen(m.On, t)) for t in range(n)]
    xs = {b: (0.0 if math.isinf(bw) else m.size[b] / bw) for b in m.bufs}

    def cost(pn: Iterable[Hashable], pl: Iterable[Hashable], comps: Iterable[Hashable],
             oo: Iterable[Hashable], on: Iterable[Hashable]) -> float:
        """The staged time of one stage, from its discrete choices (no solver tolerance)."""
        xn, xl, xo, xw = (sum(xs[b] for b in v) for v in (pn, pl, oo, on))
        c = sum(g.tasks[k].time for k in comps)
        return max(xn + c + xw, xn + xl + xo + xw)

    times = [cost(*st) for st in stages]
    info.update({"objective": sum(times), "offload_bandwidth": m.bandwidth, "paging": True,
                 "stage_times": times,
                 "solver_objective": sum(float(sol[m.D[t]]) for t in range(n)) * m.total})
    return staged_plan(g, stages, budget=budget, method="milp", info=info)


def _solve(g: TaskGraph, budget: int, order: Sequence[Hashable] | None, time_limit: float,
           bandwidth: float | None, recompute: bool, no_offload: Iterable[Hashable],
           cutoff: float | None) -> Plan | None:
    """Build and solve one MILP (module docstring); ``cutoff``: an upper bound on the
    staged makespan (the cost of a plan known to be in the space)."""
    order = list(order) if order is not None else list(g.order)
    if sum(buf.size for buf in g.buffers.values() if buf.producer is None) > budget:
        return None  # the inputs alone do not fit
    m = _Model(g, budget, order, bandwidth, recompute, no_offload)
    _add_compute_vars(m)
    _add_paging_vars(m)
    for t in range(m.n):
        _add_stage_constraints(m, t)
    # Needed-later (N) and resident (L) variables, then memory per step. N[t,k,b] only
    # changes at the steps that read b, and L[t,k,b] also where b is written, so steps
    # between two readers share one N and one L variable (an exact reformulation).
    for t in range(m.n):
        _add_memory(m, t)
    if m.paging:
        _add_stage_times(m, cutoff)
    V, C = m.V, m.C
    nv = len(V.lo)
    A = coo_array((C.v, (C.r, C.c)), shape=(len(C.lo), nv)).tocsr()
    res = milp(np.array(V.cost), constraints=LinearConstraint(A, C.lo, C.hi),
               integrality=np.array(V.integer), bounds=Bounds(V.lo, V.hi),
               options={"time_limit": float(time_limit), "disp": False})
    if res.x is None:
        return None
    sol = res.x
    bound = getattr(res, "mip_dual_bound", None)
    info: dict[str, Any] = {
        "optimal": bool(res.status == 0), "objective": float(res.fun) * m.total,
        "bound": float(bound) * m.total if bound is not None else None,
        "variables": nv, "constraints": len(C.lo)}
    if not m.paging:
        seq = [order[k] for t in range(m.n) for k in range(t + 1) if sol[m.R[t, k]] > 0.5]
        return plan_from_sequence(g, seq, budget=budget, method="milp", info=info)
    return _paging_plan(m, sol, budget, info)

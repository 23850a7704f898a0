"""An exact MILP for recomputation under a budget (Checkmate: Jain et al., MLSys 2020).

Tasks are numbered by a topological order; stage ``t`` computes task ``t`` for the first
time and may recompute any earlier task before it. Variables (Checkmate's, with the memory
accounting rewritten for the memory model of ARCHITECTURE.md):

* ``R[t,k]`` (binary): task ``k`` is computed in stage ``t`` (``R[t,t] = 1``);
* ``S[t,b]`` (binary): buffer ``b`` is resident when stage ``t`` starts;
* ``N[t,k,b]`` (continuous, forced to 0/1): ``b`` is read at step ``k`` or later in stage
  ``t``, or carried into stage ``t+1``;
* ``L[t,k,b]`` (continuous, forced to 0/1): ``b`` is resident while step ``k`` of stage
  ``t`` runs.

Constraints: a computed task's reads are resident (computed earlier in the stage or carried
in); a buffer carried into a stage was resident in the previous one; a task is not
recomputed while its output is still resident; results stay resident once produced;
``L >= N + (S or R[producer]) - 1``; and for every step the resident bytes plus the outputs
and workspace of the task computed there fit the budget. The objective is the total compute
time. The frees are written by :func:`~thrifty.memory.budget.sequence.plan_from_sequence`
(eager, the least memory for the chosen computations), so the plan's peak is at most the
MILP's accounting. Solved by HiGHS through :func:`scipy.optimize.milp`; the optimum is exact
for plans whose first computations follow the given order and that recompute a task at
most once per stage (Checkmate's plan space). Offloading is not modelled here.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array

from thrifty.graph.taskgraph import TaskGraph
from thrifty.memory.budget.sequence import plan_from_sequence
from thrifty.memory.model import Plan

__all__ = ["milp_plan"]


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
              time_limit: float = 10.0) -> Plan | None:
    """The least-compute-time recompute plan within ``budget``; ``None`` if none was found.

    ``plan.info["optimal"]`` says whether HiGHS proved optimality within ``time_limit``;
    ``plan.info["objective"]`` is the MILP's compute time and ``plan.info["bound"]`` its
    proven lower bound on it.

    Example
    -------
    >>> from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
    >>> g = TaskGraph([Task("a", writes=("x",), time=1.0),
    ...                Task("b", reads=("x",), writes=("y",), time=1.0),
    ...                Task("c", reads=("x", "y"), writes=("z",), time=1.0)],
    ...               [Buffer("x", 4, "a"), Buffer("y", 4, "b"), Buffer("z", 4, "c")])
    >>> milp_plan(g, 12).info["optimal"]
    True
    """
    order = list(order) if order is not None else list(g.order)
    n = len(order)
    pos = {t: i for i, t in enumerate(order)}
    size = {b: buf.size for b, buf in g.buffers.items()}
    scale = float(max(budget, 1))
    tasks = [g.tasks[t] for t in order]
    pb = {b: (pos[buf.producer] if buf.producer is not None else -1)
          for b, buf in g.buffers.items()}
    readers_at: dict[Hashable, set[int]] = {b: set() for b in g.buffers}
    for k, task in enumerate(tasks):
        for b in task.reads:
            readers_at[b].add(k)
    total = sum(t.time for t in tasks) or 1.0
    V, C = _Vars(), _Rows()
    R: dict[tuple[int, int], int] = {}
    S: dict[tuple[int, Hashable], int] = {}
    for t in range(n):
        for k in range(t + 1):
            lo = 1.0 if k == t else 0.0
            R[t, k] = V.add(("R", t, k), True, lo, 1.0, tasks[k].time / total)
    bufs = list(g.buffers)
    for t in range(n):
        for b in bufs:
            if pb[b] < t:
                pinned = b in g.results or (pb[b] < 0 and t == 0)
                S[t, b] = V.add(("S", t, b), True, 1.0 if pinned else 0.0, 1.0)
    for t in range(n):
        for k in range(t + 1):
            task = tasks[k]
            for b in task.reads:  # reads resident: computed before in the stage, or carried
                terms = [(R[t, k], 1.0), (S[t, b], -1.0)]
                if pb[b] >= 0:
                    terms.append((R[t, pb[b]], -1.0))
                C.add(terms, -np.inf, 0.0)
        for b in bufs:
            if pb[b] >= 0 and pb[b] < t:  # no recompute while the old copy is resident
                C.add([(R[t, pb[b]], 1.0), (S[t, b], 1.0)], -np.inf, 1.0)
            if t + 1 < n and pb[b] <= t:  # carried only if resident in this stage
                terms = [(S[t + 1, b], 1.0)]
                if (t, b) in S:
                    terms.append((S[t, b], -1.0))
                if pb[b] >= 0:
                    terms.append((R[t, pb[b]], -1.0))
                C.add(terms, -np.inf, 0.0)
    # Needed-later (N) and resident (L) chains, then memory per step.
    for t in range(n):
        mem_terms: list[list[tuple[int, float]]] = [[] for _ in range(t + 1)]
        for b in bufs:
            if pb[b] > t:
                continue
            carried = S.get((t + 1, b))
            end_needed = (1.0 if b in g.results else 0.0) if t + 1 == n else None
            nxt: int | None = None
            for k in range(t, -1, -1):
                nk = V.add(("N", t, k, b), False)
                if nxt is None:
                    if carried is not None:
                        C.add([(nk, 1.0), (carried, -1.0)], 0.0, np.inf)
                    elif end_needed:
                        C.add([(nk, 1.0)], end_needed, np.inf)
                else:
                    C.add([(nk, 1.0), (nxt, -1.0)], 0.0, np.inf)
                if k in readers_at[b]:
                    C.add([(nk, 1.0), (R[t, k], -1.0)], 0.0, np.inf)
                nxt = nk
                if k == pb[b]:
                    continue  # the step that writes b counts it as an output
                lk = V.add(("L", t, k, b), False)
                terms = [(lk, 1.0), (nk, -1.0)]
                if (t, b) in S:
                    terms.append((S[t, b], -1.0))
                if 0 <= pb[b] < k:
                    terms.append((R[t, pb[b]], -1.0))
                elif (t, b) not in S:
                    continue
                C.add(terms, -1.0, np.inf)
                if size[b]:
                    mem_terms[k].append((lk, size[b] / scale))
        for k in range(t + 1):
            task = tasks[k]
            own = (sum(size[w] for w in task.writes) + task.workspace) / scale
            C.add(mem_terms[k] + [(R[t, k], own)], -np.inf, 1.0)
    nv = len(V.lo)
    A = coo_array((C.v, (C.r, C.c)), shape=(len(C.lo), nv)).tocsr()
    res = milp(np.array(V.cost), constraints=LinearConstraint(A, C.lo, C.hi),
               integrality=np.array(V.integer), bounds=Bounds(V.lo, V.hi),
               options={"time_limit": float(time_limit), "disp": False})
    if res.x is None:
        return None
    x = res.x
    seq = [order[k] for t in range(n) for k in range(t + 1) if x[R[t, k]] > 0.5]
    bound = getattr(res, "mip_dual_bound", None)
    return plan_from_sequence(
        g, seq, budget=budget, method="milp",
        info={"optimal": bool(res.status == 0), "objective": float(res.fun) * total,
              "bound": float(bound) * total if bound is not None else None,
              "variables": nv, "constraints": len(C.lo)})

"""An independent simulator of schedules and plans: the oracle every planner is checked by.

``simulate(g, order_or_plan)`` replays either

* a **Schedule** (a sequence of task ids, each run once): inputs are resident at the start,
  every buffer is freed eagerly right after its last reader has run, results stay resident;
* a **Plan** (:class:`~thrifty.memory.model.Plan`): every ``compute``, ``free``, ``offload``
  and ``prefetch`` is explicit and nothing is freed implicitly;

following the memory model of ARCHITECTURE.md: while task ``t`` runs, memory in use is the
bytes of all resident buffers plus ``t``'s outputs plus ``t``'s workspace, and the peak is the
largest such value (and the bytes resident at the start).

Choices this simulator makes where the model leaves room (planners must follow them):

* **Accounting is by step.** Each step changes the resident set at once in step order;
  the peak is a maximum over steps, not over wall-clock time. The time model below is
  chosen so that, at every moment of the real run, the bytes in memory are at most the
  bytes the step accounting says.
* **Recompute of a task whose output is still resident** counts that output twice while the
  task runs (the new copy is written before the old one is dropped).
* **Transfers** run in plan order on one copy stream at ``offload_bandwidth`` bytes per time
  unit (argument, else ``plan.info["offload_bandwidth"]``); ``size / bandwidth`` each.
  An offload starts when the copy stream is free and the buffer has been produced (it may
  overlap the computes that read the buffer before it in the plan). Its memory is released
  when the copy ends (conservative): every compute issued after an offload waits for that
  copy to end. A prefetch allocates its buffer when it starts, which is no earlier than the
  end of the compute issued just before it, nor than the end of the buffer's offload; a
  compute that reads a prefetched buffer waits for the prefetch to end.
* **Frees take no time.** A result may not be freed; a result may be offloaded if it is
  prefetched back before the end. Every task must be computed at least once.
* ``makespan`` is the end of the last step on either stream; ``compute_time`` is the sum of
  the durations of all computes (recomputations included).

Example
-------
>>> from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
>>> g = TaskGraph([Task("a", writes=("x",), time=1.0),
...                Task("b", reads=("x",), writes=("y",), time=2.0)],
...               [Buffer("x", 8, "a"), Buffer("y", 4, "b")])
>>> r = simulate(g, ["a", "b"])
>>> r.peak, r.makespan
(12, 3.0)
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from thrifty.errors import PlanError
from thrifty.graph.taskgraph import TaskGraph
from thrifty.memory.model import Plan, ScheduleResult, Step

__all__ = ["SimResult", "StepRecord", "simulate"]


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One replayed step.

    ``resident`` is the bytes in memory during the step: for a compute, the resident buffers
    plus its outputs and workspace; for a free, the bytes after it; for an offload, the bytes
    before it (the buffer is held until its copy ends); for a prefetch, the bytes after it.
    ``start`` and ``end`` are times on the compute stream (compute, free) or the copy stream
    (offload, prefetch).
    """

    index: int
    op: str
    target: Hashable
    resident: int
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class SimResult:
    """What a replay found: peak bytes, times, the per-step timeline and what was re-done."""

    peak: int
    makespan: float
    compute_time: float
    timeline: tuple[StepRecord, ...]
    recomputed: tuple[Hashable, ...]
    offloaded: tuple[Hashable, ...]

    def to_json(self) -> dict[str, Any]:
        return {"peak": self.peak, "makespan": self.makespan, "compute_time": self.compute_time,
                "recomputed": list(self.recomputed), "offloaded": list(self.offloaded)}


def simulate(g: TaskGraph, plan_or_order: Plan | ScheduleResult | Iterable[Hashable], *,
             offload_bandwidth: float | None = None) -> SimResult:
    """Replay a schedule (task order) or a :class:`Plan` on ``g``; raise on any invalid step.

    Parameters
    ----------
    g:
        The task graph.
    plan_or_order:
        A :class:`Plan`, a :class:`ScheduleResult` (its order is replayed), or a sequence of
        task ids (a Schedule: each task exactly once, eager frees).
    offload_bandwidth:
        Bytes per time unit of the copy stream, for plans with offloads or prefetches.
        ``None`` takes ``plan.info["offload_bandwidth"]``; ``math.inf`` makes copies instant.

    Returns
    -------
    SimResult

    Raises
    ------
    PlanError
        Naming the first invalid step (its index, op, target and why).

    Example
    -------
    >>> from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
    >>> g = TaskGraph([Task("a", writes=("x",), time=1.0),
    ...                Task("b", reads=("x",), writes=("y",), time=1.0)],
    ...               [Buffer("x", 8, "a"), Buffer("y", 4, "b")])
    >>> plan = Plan.from_steps([("compute", "a"), ("compute", "b"), ("free", "x")])
    >>> simulate(g, plan).peak
    12
    """
    if isinstance(plan_or_order, Plan):
        bw = offload_bandwidth
        if bw is None:
            bw = plan_or_order.info.get("offload_bandwidth")
        return _replay_plan(g, plan_or_order.steps, bw)
    if isinstance(plan_or_order, ScheduleResult):
        return _replay_order(g, plan_or_order.order)
    if isinstance(plan_or_order, (str, bytes)):
        raise PlanError(f"simulate expects a Plan or a sequence of task ids, got the string "
                        f"{plan_or_order!r}")
    return _replay_order(g, list(plan_or_order))


def _fail(i: int, op: str, target: Hashable, why: str) -> PlanError:
    return PlanError(f"step {i} ({op} {target!r}): {why}")


def _replay_order(g: TaskGraph, order: Sequence[Hashable]) -> SimResult:
    """Schedule semantics: each task once, eager frees after the last reader."""
    pos: dict[Hashable, int] = {}
    for i, t in enumerate(order):
        try:
            known = t in g.tasks
        except TypeError:
            known = False
        if not known:
            raise _fail(i, "compute", t, f"unknown task id; {g.name} has {len(g.tasks)} tasks")
        if t in pos:
            raise _fail(i, "compute", t, f"task already ran at step {pos[t]}; a schedule runs "
                        "each task once (use a Plan to recompute)")
        pos[t] = i
    missing = [t for t in g.tasks if t not in pos]
    if missing:
        raise _fail(len(order), "end", missing[0],
                    f"task never computed ({len(missing)} of {len(g.tasks)} tasks missing)")
    # The step after which each buffer is freed (-1: at the start); None: never (a result).
    frees_after: dict[int, list[Hashable]] = {}
    resident: set[Hashable] = set()
    mem = 0
    for b, buf in g.buffers.items():
        if buf.producer is None:
            resident.add(b)
            mem += buf.size
        if b in g.results:
            continue
        readers = g.readers[b]
        last = max((pos[r] for r in readers), default=None)
        if last is None:
            last = -1 if buf.producer is None else pos[buf.producer]
        frees_after.setdefault(last, []).append(b)
    peak = mem
    for b in frees_after.get(-1, ()):
        resident.discard(b)
        mem -= g.buffers[b].size
    timeline: list[StepRecord] = []
    clock = 0.0
    for i, t in enumerate(order):
        task = g.tasks[t]
        for b in task.reads:
            if b not in resident:
                p = g.buffers[b].producer
                raise _fail(i, "compute", t, f"reads buffer {b!r}, which is not resident "
                            f"(its producer {p!r} has not run yet)")
        out = sum(g.buffers[b].size for b in task.writes)
        during = mem + out + task.workspace
        peak = max(peak, during)
        for b in task.writes:
            resident.add(b)
        mem += out
        for b in frees_after.get(i, ()):
            resident.discard(b)
            mem -= g.buffers[b].size
        timeline.append(StepRecord(i, "compute", t, during, clock, clock + task.time))
        clock += task.time
    return SimResult(peak=peak, makespan=clock, compute_time=clock, timeline=tuple(timeline),
                     recomputed=(), offloaded=())


_ABSENT, _RESIDENT, _HOST = 0, 1, 2


def _replay_plan(g: TaskGraph, steps: Sequence[Step], bandwidth: float | None) -> SimResult:
    """Plan semantics: explicit steps, a compute stream and a copy stream (module docstring)."""
    if bandwidth is not None and not (bandwidth > 0):
        raise PlanError(f"offload_bandwidth is {bandwidth!r}; it must be a number > 0 "
                        "(bytes per time unit; math.inf for instant copies)")
    replay = _Replay(g, bandwidth)
    for i, st in enumerate(steps):
        if not isinstance(st, Step):
            raise _fail(i, "?", st, "not a Step; build plans with Plan.from_steps")
        if st.op == "compute":
            replay.compute(i, st)
        else:
            replay.move(i, st)
    return replay.result(len(steps))


class _Replay:
    """The state of a plan's replay (:func:`_replay_plan`): where each buffer is, when its
    data is ready, memory in use and the ends of the two streams."""

    def __init__(self, g: TaskGraph, bandwidth: float | None) -> None:
        self.g = g
        self.bandwidth = bandwidth
        self.state: dict[Hashable, int] = {b: _ABSENT for b in g.buffers}
        self.ready_at: dict[Hashable, float] = {}  # when the buffer's data is in device memory
        self.host_at: dict[Hashable, float] = {}   # when its offload copy ended
        self.mem = 0
        for b, buf in g.buffers.items():
            if buf.producer is None:
                self.state[b] = _RESIDENT
                self.ready_at[b] = 0.0
                self.mem += buf.size
        self.peak = self.mem
        self.computed: set[Hashable] = set()
        self.recomputed: list[Hashable] = []
        self.offloaded: list[Hashable] = []
        self.compute_end = 0.0  # end of the last compute issued
        self.copy_end = 0.0     # end of the last transfer issued
        self.release_at = 0.0   # end of the latest offload copy issued so far
        self.compute_time = 0.0
        self.makespan = 0.0
        self.timeline: list[StepRecord] = []

    def copy_time(self, i: int, st: Step) -> float:
        if self.bandwidth is None:
            raise _fail(i, st.op, st.target, "the plan moves data but no offload_bandwidth was "
                        "given; pass offload_bandwidth= (bytes per time unit) or set "
                        "plan.info['offload_bandwidth']")
        size = self.g.buffers[st.target].size
        return 0.0 if math.isinf(self.bandwidth) else size / self.bandwidth

    def compute(self, i: int, st: Step) -> None:
        """A compute step: on the compute stream, once its reads are ready."""
        g, state, op, x = self.g, self.state, st.op, st.target
        try:
            task = g.tasks[x]
        except (KeyError, TypeError):
            raise _fail(i, op, x, f"unknown task id; {g.name} has {len(g.tasks)} "
                        "tasks") from None
        start = max(self.compute_end, self.release_at)
        for b in task.reads:
            if state[b] != _RESIDENT:
                where = ("offloaded (prefetch it first)" if state[b] == _HOST
                         else "not resident (never produced, or freed)")
                raise _fail(i, op, x, f"reads buffer {b!r}, which is {where}")
            start = max(start, self.ready_at[b])
        out = sum(g.buffers[b].size for b in task.writes)
        during = self.mem + out + task.workspace
        self.peak = max(self.peak, during)
        end = start + task.time
        for b in task.writes:
            if state[b] != _RESIDENT:
                self.mem += g.buffers[b].size
            state[b] = _RESIDENT
            self.ready_at[b] = end
        if x in self.computed:
            self.recomputed.append(x)
        self.computed.add(x)
        self.compute_end = end
        self.compute_time += task.time
        self.makespan = max(self.makespan, end)
        self.timeline.append(StepRecord(i, op, x, during, start, end))

    def move(self, i: int, st: Step) -> None:
        """A free, offload or prefetch step."""
        g, state, op, x = self.g, self.state, st.op, st.target
        try:
            buf = g.buffers[x]
        except (KeyError, TypeError):
            raise _fail(i, op, x, f"unknown buffer id; {g.name} has {len(g.buffers)} "
                        "buffers") from None
        if op == "free":
            if state[x] != _RESIDENT:
                raise _fail(i, op, x, "frees a buffer that is not resident")
            if x in g.results:
                raise _fail(i, op, x, "frees a result; results stay resident to the end")
            state[x] = _ABSENT
            self.mem -= buf.size
            self.timeline.append(StepRecord(i, op, x, self.mem, self.compute_end,
                                            self.compute_end))
        elif op == "offload":
            if state[x] != _RESIDENT:
                raise _fail(i, op, x, "offloads a buffer that is not resident")
            start = max(self.copy_end, self.ready_at[x])
            end = start + self.copy_time(i, st)
            self.timeline.append(StepRecord(i, op, x, self.mem, start, end))
            state[x] = _HOST
            self.host_at[x] = end
            self.mem -= buf.size
            self.copy_end = end
            self.release_at = max(self.release_at, end)
            self.makespan = max(self.makespan, end)
            self.offloaded.append(x)
        else:  # prefetch
            if state[x] != _HOST:
                why = ("is already resident" if state[x] == _RESIDENT
                       else "has no copy in the slow tier (offload it first)")
                raise _fail(i, op, x, f"prefetches a buffer that {why}")
            start = max(self.copy_end, self.compute_end, self.host_at[x])
            end = start + self.copy_time(i, st)
            state[x] = _RESIDENT
            self.ready_at[x] = end
            self.mem += buf.size
            self.peak = max(self.peak, self.mem)
            self.copy_end = end
            self.makespan = max(self.makespan, end)
            self.timeline.append(StepRecord(i, op, x, self.mem, start, end))

    def result(self, n_steps: int) -> SimResult:
        """The replay's result, once every task ran and every result is resident."""
        g, state = self.g, self.state
        never = [t for t in g.tasks if t not in self.computed]
        if never:
            raise _fail(n_steps, "end", never[0],
                        f"task never computed ({len(never)} of {len(g.tasks)} tasks missing)")
        for b in g.results:
            if state[b] != _RESIDENT:
                where = "offloaded" if state[b] == _HOST else "not resident"
                raise _fail(n_steps, "end", b,
                            f"result buffer is {where} at the end of the plan")
        return SimResult(peak=self.peak, makespan=self.makespan,
                         compute_time=self.compute_time, timeline=tuple(self.timeline),
                         recomputed=tuple(self.recomputed), offloaded=tuple(self.offloaded))

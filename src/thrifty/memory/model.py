"""Plans and schedules: the results every memory planner returns.

A :class:`Plan` is a list of explicit steps over a :class:`~thrifty.graph.taskgraph.TaskGraph`:
``compute(task)``, ``free(buffer)``, ``offload(buffer)``, ``prefetch(buffer)``. A
recompute is a second ``compute`` of the same task. Nothing is freed implicitly: a plan's
memory is exactly what its steps say (see ARCHITECTURE.md, "The memory model").
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from thrifty.errors import PlanError
from thrifty.graph.taskgraph import TaskGraph

StepOp = Literal["compute", "free", "offload", "prefetch"]
STEP_OPS: tuple[str, ...] = ("compute", "free", "offload", "prefetch")


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a plan: ``op`` applied to a task (compute) or a buffer (the others)."""

    op: StepOp
    target: Hashable

    def __post_init__(self) -> None:
        if self.op not in STEP_OPS:
            raise PlanError(f"unknown step op {self.op!r}; valid ops are {', '.join(STEP_OPS)}")

    def to_json(self) -> dict[str, Any]:
        key = "task" if self.op == "compute" else "buffer"
        return {"op": self.op, key: self.target}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Step:
        op = d.get("op")
        key = "task" if op == "compute" else "buffer"
        if op not in STEP_OPS or key not in d:
            raise PlanError(f"malformed step {d!r}; expected {{'op': 'compute', 'task': id}} "
                            "or {'op': 'free'|'offload'|'prefetch', 'buffer': id}")
        return Step(op, d[key])


@dataclass(frozen=True, slots=True)
class Plan:
    """An explicit sequence of steps, with the budget it was made for and the planner's notes."""

    steps: tuple[Step, ...]
    budget: int | None = None
    method: str = ""
    info: dict[str, Any] = field(default_factory=dict, compare=False)

    def computes(self) -> list[Hashable]:
        """Task ids in the order they are computed (recomputations included)."""
        return [s.target for s in self.steps if s.op == "compute"]

    def to_json(self) -> dict[str, Any]:
        return {"budget": self.budget, "method": self.method,
                "steps": [s.to_json() for s in self.steps]}

    @staticmethod
    def from_steps(steps: Sequence[Step | tuple[str, Hashable]], **kw: Any) -> Plan:
        # a tuple's op is any str here; Step.__post_init__ rejects an unknown one
        return Plan(tuple(s if isinstance(s, Step) else Step(*cast("tuple[StepOp, Hashable]", s))
                          for s in steps), **kw)

    @staticmethod
    def from_order(g: TaskGraph, order: Sequence[Hashable], **kw: Any) -> Plan:
        """The plan of a Schedule: compute in ``order``, free each buffer (inputs included)
        right after its last reader, keep results; a buffer nobody reads that is not a
        result is freed right after it is written."""
        pos = {t: i for i, t in enumerate(order)}
        missing = [t for t in g.tasks if t not in pos]
        if missing or len(pos) != len(order):
            raise PlanError(f"an order must list each of the {len(g.tasks)} tasks once; "
                            f"missing {missing[:5]!r}" if missing else "a task repeats")
        last: dict[int, list[Hashable]] = {}
        for b, readers in g.readers.items():
            if b in g.results:
                continue
            producer = g.buffers[b].producer
            when = max((pos[r] for r in readers), default=None)
            if when is None:
                if producer is None:
                    continue
                when = pos[producer]
            last.setdefault(when, []).append(b)
        steps: list[Step] = []
        for i, t in enumerate(order):
            steps.append(Step("compute", t))
            steps.extend(Step("free", b) for b in last.get(i, ()))
        return Plan(tuple(steps), **kw)


@dataclass(frozen=True, slots=True)
class ScheduleResult:
    """An order of tasks (each once) with eager frees, and what is known about its peak."""

    order: tuple[Hashable, ...]
    peak: int
    optimal: bool
    lower_bound: int
    method: str = ""
    info: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"peak": self.peak, "optimal": self.optimal, "lower_bound": self.lower_bound,
                "order": list(self.order)}

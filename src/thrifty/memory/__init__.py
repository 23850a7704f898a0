"""Memory engine: minimum-peak schedules, and recompute and offload under a memory budget.

Public API: :func:`load` a task graph file, :func:`schedule` it for the least peak,
:func:`plan` it under a budget, :func:`simulate` any schedule or plan (the independent
oracle); and the result types
:class:`Plan`, :class:`Step`, :class:`ScheduleResult`, :class:`SimResult`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from thrifty.memory.model import Plan, ScheduleResult, Step
from thrifty.memory.schedule import schedule
from thrifty.memory.simulate import SimResult, StepRecord, simulate

if TYPE_CHECKING:
    from thrifty.graph.taskgraph import TaskGraph

__all__ = ["Plan", "ScheduleResult", "SimResult", "Step", "StepRecord", "load",
           "plan", "schedule", "simulate"]


def load(path: Any) -> TaskGraph:
    """Read a task graph file (node-link JSON, thrifty JSON or DOT) as a TaskGraph.

    See :func:`thrifty.graph.taskgraph_io.load_taskgraph`.
    """
    from thrifty.graph.taskgraph_io import load_taskgraph

    return load_taskgraph(path)


def plan(g: TaskGraph, budget: Any, *args: Any, **kwargs: Any) -> Plan:
    """A plan of ``g`` with peak <= ``budget`` and the least makespan.

    See :func:`thrifty.memory.budget.plan`.
    """
    from thrifty.memory.budget import plan as _plan

    return _plan(g, budget, *args, **kwargs)

"""One planning call's eviction passes: identical passes run once, and time bounds.

:func:`passes_of` opens a session for a graph: within it,
:func:`thrifty.memory.budget.evict.evict_plan` remembers its last passes (and failures) so
that planners repeating a pass get the first one's result, and :func:`time_bound` (wall
clock) and :func:`cpu_bound` (this process's CPU time) make a pass that may evict give up
when its bound passes. A pass that gave up proves nothing and is never remembered.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from thrifty.graph.taskgraph import TaskGraph

if TYPE_CHECKING:
    from thrifty.memory.budget.evict import NoRoom
    from thrifty.memory.model import Plan

__all__ = ["SESSION", "TIMED_OUT", "Session", "cpu_bound", "passes_of", "time_bound"]

TIMED_OUT = "the pass ran out of its time bound"


@dataclass(slots=True)
class Session:
    """The passes of one planning call on ``graph``: :func:`~.evict.evict_plan`'s memo of
    passes and failures, and the time bounds in force."""

    graph: TaskGraph
    memo: dict[tuple[object, ...], Plan | NoRoom] = field(default_factory=dict)
    deadline: float | None = None  # time.perf_counter()
    cpu_deadline: float | None = None  # time.process_time()


SESSION: ContextVar[Session | None] = ContextVar("thrifty_evict_session", default=None)


@contextmanager
def passes_of(g: TaskGraph) -> Iterator[None]:
    """Within this block, a pass of :func:`~.evict.evict_plan` on ``g`` repeated with the
    same order, budget, bandwidth and policy (``method="auto"`` runs several planners that
    start from the same pass) returns the first one's plan, or raises its
    :class:`~.evict.NoRoom` again."""
    token = SESSION.set(Session(g))
    try:
        yield
    finally:
        SESSION.reset(token)


@contextmanager
def time_bound(seconds: float) -> Iterator[None]:
    """Within this block (and inside :func:`passes_of`), a pass that may evict and runs past
    ``seconds`` gives up (:class:`~.evict.NoRoom`): for searches whose passes may fail early, such
    as the search for the smallest feasible budget."""
    s = SESSION.get()
    if s is None:
        yield
        return
    before = s.deadline
    s.deadline = time.perf_counter() + seconds
    try:
        yield
    finally:
        s.deadline = before


@contextmanager
def cpu_bound(deadline: float) -> Iterator[None]:
    """Within this block (and inside :func:`passes_of`), a pass that may evict and is still
    running when this process's CPU time (``time.process_time()``) passes ``deadline``
    gives up (:class:`~.evict.NoRoom`): for a search with a CPU time limit, such as the local
    search of :mod:`thrifty.memory.budget.refine`, whose passes on a large graph take
    seconds each."""
    s = SESSION.get()
    if s is None:
        yield
        return
    before = s.cpu_deadline
    s.cpu_deadline = deadline if before is None else min(before, deadline)
    try:
        yield
    finally:
        s.cpu_deadline = before

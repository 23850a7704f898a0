"""The planners' own fast replay of a plan: peak, makespan and per-step memory.

This is the estimate the planners optimise against while they search; it follows the time
and memory model documented in :mod:`thrifty.memory.simulate` (step accounting; one copy
stream; an offload releases its memory when its copy ends and every later compute waits for
that; a prefetch starts no earlier than the end of the compute issued before it). It does
not validate: :func:`thrifty.memory.simulate` stays the independent oracle, and the tests
check that both agree on every plan.

Within :func:`remembered` (as in :func:`thrifty.memory.budget.plan`, whose planners replay
the same plans several times), a replay of the same steps (the same tuple object) of the
same graph at the same bandwidth returns the first replay's estimate.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from thrifty.graph.taskgraph import TaskGraph
from thrifty.memory.model import Step

__all__ = ["Estimate", "estimate", "memo", "recall", "remember", "remembered"]


@dataclass(frozen=True, slots=True)
class Estimate:
    """Peak bytes, makespan, compute time, and the bytes in use during each step."""

    peak: int
    makespan: float
    compute_time: float
    during: tuple[int, ...]


#: Replays (and other results keyed by a steps tuple) kept by :func:`remembered`.
_MEMO_SIZE = 16

Store = dict[tuple[object, ...], tuple[tuple[object, ...], object]]

_MEMO: ContextVar[Store | None] = ContextVar("thrifty_replay_memo", default=None)


@contextmanager
def remembered() -> Iterator[None]:
    """Within this block, :func:`estimate` remembers its last replays (see the module
    docstring), and :func:`memo` gives the same store to other pure functions of a plan's
    steps (the hoisting of prefetches)."""
    token = _MEMO.set({})
    try:
        yield
    finally:
        _MEMO.reset(token)


def memo() -> Store | None:
    """The store of :func:`remembered`, or ``None`` outside it."""
    return _MEMO.get()


def recall(store: Store, tag: str, owners: tuple[object, ...], *rest: object) -> object:
    """The value remembered for ``tag``, the objects ``owners`` (by identity: the key holds
    their ``id()``, and a hit must be those very objects, so a reused id never matches)
    and the values ``rest``; ``None`` when there is none."""
    hit = store.get((tag, *map(id, owners), *rest))
    if hit is None or len(hit[0]) != len(owners) or any(
            a is not b for a, b in zip(hit[0], owners)):
        return None
    return hit[1]


def remember(store: Store, tag: str, owners: tuple[object, ...], *rest: object,
             value: object) -> None:
    """Remember ``value`` for :func:`recall`, dropping the oldest entry when full."""
    if len(store) >= _MEMO_SIZE:
        del store[next(iter(store))]
    store[(tag, *map(id, owners), *rest)] = (owners, value)


def estimate(g: TaskGraph, steps: Sequence[Step], bandwidth: float | None) -> Estimate:
    """Replay ``steps`` on ``g`` (assumed valid) and return an :class:`Estimate`.

    Example
    -------
    >>> from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
    >>> g = TaskGraph([Task("a", writes=("x",), time=1.0)], [Buffer("x", 8, "a")])
    >>> estimate(g, [Step("compute", "a")], None).peak
    8
    """
    store = _MEMO.get()
    if store is None or not isinstance(steps, tuple):
        return _estimate(g, steps, bandwidth)
    hit = recall(store, "estimate", (g, steps), bandwidth)
    if isinstance(hit, Estimate):
        return hit
    est = _estimate(g, steps, bandwidth)
    remember(store, "estimate", (g, steps), bandwidth, value=est)
    return est


def _estimate(g: TaskGraph, steps: Sequence[Step], bandwidth: float | None) -> Estimate:
    size = {b: buf.size for b, buf in g.buffers.items()}
    resident: set[Hashable] = {b for b, buf in g.buffers.items() if buf.producer is None}
    mem = sum(size[b] for b in resident)
    peak = mem
    ready: dict[Hashable, float] = dict.fromkeys(resident, 0.0)
    host_at: dict[Hashable, float] = {}
    compute_end = copy_end = release_at = compute_time = makespan = 0.0
    during: list[int] = []

    def xfer(b: Hashable) -> float:
        if bandwidth is None or math.isinf(bandwidth):
            return 0.0
        return size[b] / bandwidth

    for st in steps:
        x = st.target
        if st.op == "compute":
            task = g.tasks[x]
            start = max(compute_end, release_at)
            for b in task.reads:
                start = max(start, ready[b])
            out = sum(size[b] for b in task.writes)
            d = mem + out + task.workspace
            peak = max(peak, d)
            end = start + task.time
            for b in task.writes:
                if b not in resident:
                    mem += size[b]
                    resident.add(b)
                ready[b] = end
            compute_end = end
            compute_time += task.time
            makespan = max(makespan, end)
        elif st.op == "free":
            resident.discard(x)
            mem -= size[x]
            d = mem
        elif st.op == "offload":
            d = mem
            start = max(copy_end, ready[x])
            end = start + xfer(x)
            host_at[x] = end
            copy_end = end
            release_at = max(release_at, end)
            makespan = max(makespan, end)
            resident.discard(x)
            mem -= size[x]
        else:
            start = max(copy_end, compute_end, host_at[x])
            end = start + xfer(x)
            ready[x] = end
            copy_end = end
            resident.add(x)
            mem += size[x]
            d = mem
            peak = max(peak, mem)
            makespan = max(makespan, end)
        during.append(d)
    return Estimate(peak, makespan, compute_time, tuple(during))

"""Running a TaskGraph whose tasks carry ``fn``: the in-process fast path and Dask.

:class:`CompiledGraph` is the fast path: buffer names become slots, tasks are grouped into
levels of mutually independent tasks, a level that carries enough work runs on a
process-wide pool of threads, and a graph of one task is one direct call.
:func:`run_taskgraph` runs a graph on any scheduler of
:mod:`thrifty.runtime.schedulers`.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from thrifty.graph.taskgraph import TaskGraph
from thrifty.runtime.schedulers import resolve_scheduler

__all__ = ["CompiledGraph", "core_idle", "run_taskgraph"]


def _open_loadavg() -> int:
    try:
        return os.open("/proc/loadavg", os.O_RDONLY)
    except OSError:
        return -1


_LOADAVG = _open_loadavg()
_CPUS = os.cpu_count() or 1


def core_idle(helpers: int = 1) -> bool:
    """Whether ``helpers`` cores are idle now: at most as many threads runnable on the
    machine (the caller's included) as it has cores less ``helpers``, by the kernel's count
    in ``/proc/loadavg`` (about 2 µs); ``True`` where that file cannot be read. Both counts
    are the machine's: in a container on a larger host this says whether the host has
    idle cores."""
    if _LOADAVG < 0:
        return True
    try:
        running = int(os.pread(_LOADAVG, 128, 0).split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return True
    return running + helpers <= _CPUS


_POOLS: dict[int, Any] = {}
_POOLS_LOCK = threading.Lock()


def _pool(workers: int) -> Any:
    """A process-wide pool of ``workers`` threads, created on first use."""
    pool = _POOLS.get(workers)
    if pool is None:
        with _POOLS_LOCK:
            pool = _POOLS.get(workers)
            if pool is None:
                from concurrent.futures import ThreadPoolExecutor

                pool = _POOLS[workers] = ThreadPoolExecutor(workers,
                                                            thread_name_prefix="thrifty")
    return pool


Step = tuple[Callable[..., Any], tuple[int, ...], int]
Merged = tuple[Callable[..., Any], tuple[int, ...], tuple[int, ...]]


class CompiledGraph:
    """A TaskGraph compiled for an in-process run: slots instead of buffer names, and levels
    of tasks that do not depend on each other.

    The per-call cost is a few microseconds plus the tasks (Dask's schedulers spend about
    100-200 µs per task, which is the whole run of a small SpMV). A level of several tasks
    whose estimated time is at least ``parallel_seconds`` runs on ``threads`` threads (a
    process-wide pool plus the calling thread, all taking tasks from one queue); the kernels
    release the GIL (numba ``nogil``, BLAS, scipy).

    With ``idle_check``, such a level runs on the pool only when ``threads - 1`` cores are
    idle (:func:`core_idle`); else, and in a sequential run, in the calling thread, where the
    row panels of one op are one call when their class can merge them (a ``merge``
    classmethod: :meth:`thrifty.sparse.tasks.SpmvPanel.merge`), which writes the same
    values: a pooled thread waiting for a busy core made the call wait for it
    (``benchmarks/task_split.py``), and the panels one by one cost more than one call (one
    thread, minimum of 301 rounds at load 4.7: two and four panels 1.07x, eight 1.14-1.15x
    one call, on poisson3d-64's SpMV and poisson2d-300's SpMM at k = 16).
    """

    def __init__(self, tg: TaskGraph, inputs: Sequence[Hashable], keys: Sequence[Hashable],
                 threads: int, parallel_seconds: float, idle_check: bool = False) -> None:
        slot: dict[Hashable, int] = {b: i for i, b in enumerate(inputs)}
        level: dict[Hashable, int] = {}
        by_level: list[list[Hashable]] = []
        for tid in tg.order:
            lv = 1 + max((level[p] for p in tg.predecessors(tid)), default=-1)
            level[tid] = lv
            while len(by_level) <= lv:
                by_level.append([])
            by_level[lv].append(tid)
        last_use: dict[Hashable, int] = {}
        for lv, tids in enumerate(by_level):
            for tid in tids:
                for r in tg.tasks[tid].reads:
                    last_use[r] = lv
        keep = set(keys) | set(inputs)
        self.levels: list[tuple[tuple[Step, ...], bool, tuple[int, ...], Merged | None]] = []
        self.single: tuple[Callable[..., Any], tuple[int, ...]] | None
        for lv, tids in enumerate(by_level):
            steps = []
            for tid in tids:
                t = tg.tasks[tid]
                assert t.fn is not None and len(t.writes) == 1
                slot[t.writes[0]] = len(slot)
                steps.append((t.fn, tuple(slot[r] for r in t.reads), slot[t.writes[0]]))
            # parallel only with two tasks that do work: a level of one gemm and the
            # allocations of later outputs (estimated at 0 s) runs in the calling thread,
            # not handed to a pooled thread whose wake-up can cost more than the gemm
            par = threads > 1 and sum(tg.tasks[t].time > 0 for t in tids) > 1 and \
                sum(tg.tasks[t].time for t in tids) >= parallel_seconds
            free = tuple(slot[b] for b, u in last_use.items()
                         if u == lv and b not in keep)
            self.levels.append((tuple(steps), par, free, _merged(steps) if par else None))
        self.n_slots = len(slot)
        self.keys = tuple(slot[k] for k in keys)
        self.threads = threads
        self.idle_check = idle_check
        # one task computing the one output from the feed: called directly
        self.single = None
        if len(self.levels) == 1 and len(self.levels[0][0]) == 1 and \
                self.keys == (self.levels[0][0][0][2],):
            fn, reads, _ = self.levels[0][0][0]
            self.single = (fn, reads)

    def __call__(self, feed: Sequence[Any], parallel: bool = True) -> list[Any]:
        if self.single is not None:
            fn, reads = self.single
            return [fn(*[feed[r] for r in reads])]
        env: list[Any] = [None] * self.n_slots
        env[:len(feed)] = feed
        for steps, par, free, merged in self.levels:
            if par and parallel and (not self.idle_check or core_idle(self.threads - 1)):
                self._parallel(steps, env)
            elif merged is not None:
                fn, reads, outs = merged
                for o, v in zip(outs, fn(*[env[r] for r in reads])):
                    env[o] = v
            else:
                for fn, reads, out in steps:
                    env[out] = fn(*[env[r] for r in reads])
            for f in free:
                env[f] = None
        return [env[k] for k in self.keys]

    def _parallel(self, steps: Sequence[Step], env: list[Any]) -> None:
        queue = iter(steps)  # a C iterator: next() is atomic under the GIL

        def work() -> None:
            for fn, reads, out in queue:
                env[out] = fn(*[env[r] for r in reads])

        if threading.current_thread().name.startswith("thrifty"):
            work()  # a plan run from inside a pooled task: no waiting on the pool itself
            return
        pool = _pool(self.threads - 1)
        futures = [pool.submit(work) for _ in range(min(self.threads, len(steps)) - 1)]
        try:
            work()
        finally:
            # a helper that has not started yet is not waited for: on a loaded machine the
            # wake-up of a pooled thread can take a scheduler time slice (milliseconds),
            # longer than the tasks the calling thread has meanwhile run itself
            for f in futures:
                if not f.cancel():
                    f.result()


def _merged(steps: Sequence[Step]) -> Merged | None:
    """The steps of a level as one call ``(fn, reads, outs)`` when all read the same slots
    and their class merges them (``type(fn).merge(fns)``: a callable returning each one's
    result, in order), else ``None``."""
    merge = getattr(type(steps[0][0]), "merge", None) if steps else None
    if merge is None or any(r != steps[0][1] for _, r, _ in steps):
        return None
    fn = merge([f for f, _, _ in steps])
    return None if fn is None else (fn, steps[0][1], tuple(o for _, _, o in steps))


def run_taskgraph(tg: TaskGraph, feed: Mapping[Any, Any], keys: Sequence[Any],
                  scheduler: Any = "sync", threads: int = 2) -> list[Any]:
    """Run a TaskGraph whose tasks carry ``fn`` (one write each); ``feed`` gives its input
    buffers; returns the values of ``keys``.

    ``scheduler`` is any of :mod:`thrifty.runtime.schedulers` (``None`` runs in process).
    """
    sched = resolve_scheduler(scheduler)
    if sched in ("auto", "sync"):
        prog = CompiledGraph(tg, list(feed), keys, threads, 0.0)
        return prog(list(feed.values()), parallel=sched == "auto")
    dsk: dict[Hashable, Any] = dict(feed.items())
    for t in tg.tasks.values():
        dsk[t.writes[0]] = (t.fn, *t.reads)
    if sched == "threads":
        from dask.threaded import get

        return list(get(dsk, list(keys), num_workers=threads))  # type: ignore[arg-type]
    # a cluster: fresh key names per run (it may still be forgetting the previous run's keys)
    tag = uuid.uuid4().hex[:12]
    name = {k: f"{k}@{tag}" for k in dsk}
    fresh: dict[str, Any] = {name[k]: v for k, v in feed.items()}
    for t in tg.tasks.values():
        fresh[name[t.writes[0]]] = (t.fn, *(name[r] for r in t.reads))
    return list(sched.get(fresh, [name[k] for k in keys], sync=True))

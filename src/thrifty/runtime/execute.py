"""Plan-driven execution: perform a Plan's computes, frees, offloads and prefetches.

``execute(taskgraph, plan, inputs)`` replays the plan on real values and measures the real
peak of resident buffer bytes (the bytes of the values actually held, ``nbytes`` of numpy
arrays and of scipy.sparse components). The plan is first checked by the independent
simulator (:func:`thrifty.memory.simulate`), whose peak is the prediction.

Parallelism. A plan is a sequence, but a run of consecutive ``compute`` steps with no
free, offload or prefetch between them, none of which reads what another of the run
writes, can run at once without raising the peak: while they run, memory holds the
resident set plus their outputs, which is exactly what the plan's accounting charges for
the last step of the run. Such runs are handed to Dask (the threaded scheduler, or a
``dask.distributed.Client``); ``"sync"`` runs everything in order in this thread.

Tiers. Offloaded values go to host memory (a copy), or, with ``offload_dir``, to files in
that directory (numpy ``.npy`` files opened as memmaps for arrays, pickles otherwise) and
are read back on prefetch.
"""

from __future__ import annotations

import itertools
import os
import pickle
import time
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from thrifty.errors import PlanError, ThriftyError
from thrifty.graph.taskgraph import TaskGraph
from thrifty.memory.model import Plan, Step
from thrifty.runtime.schedulers import resolve_scheduler

#: With no scheduler named, plans whose task graph carries at least this many seconds of
#: work run their independent computes on Dask's threads (Dask spends 100-200 µs a task).
AUTO_THREADS_SECONDS = 5.0e-2


def nbytes(value: Any) -> int:
    """Bytes held by a value: numpy arrays, scipy.sparse matrices, tuples of them, numbers."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if hasattr(value, "indptr") and hasattr(value, "data"):  # CSR / CSC
        return int(value.data.nbytes + value.indices.nbytes + value.indptr.nbytes)
    if hasattr(value, "coords") and hasattr(value, "data"):  # COO
        return int(value.data.nbytes + sum(c.nbytes for c in value.coords))
    if isinstance(value, tuple | list):
        return sum(nbytes(v) for v in value)
    if value is None:
        return 0
    return int(np.asarray(value).nbytes)


@dataclass(frozen=True, slots=True)
class ExecResult:
    """Results of a plan's run, with its measured and predicted memory."""

    results: dict[Hashable, Any]
    peak_bytes: int
    predicted_peak: int
    seconds: float
    computes: int
    recomputes: int
    offloads: int
    timeline: tuple[int, ...] = field(repr=False)
    files_written: int = 0  # offloads that went to files (``offload_dir``), removed after

    def to_json(self) -> dict[str, Any]:
        return {"peak_bytes": self.peak_bytes, "predicted_peak": self.predicted_peak,
                "seconds": self.seconds, "computes": self.computes,
                "recomputes": self.recomputes, "offloads": self.offloads,
                "files_written": self.files_written}


class _HostTier:
    """Where offloaded values live: a dict of copies, or files in a directory."""

    def __init__(self, directory: str | os.PathLike[str] | None) -> None:
        self.dir = Path(directory) if directory is not None else None
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
        self.store: dict[Hashable, Any] = {}
        self._serial = itertools.count()
        self.files_written = 0

    def _path(self, ext: str) -> Path:
        """A fresh file name for one offload (unique within this tier's run)."""
        assert self.dir is not None
        return self.dir / f"buf-{id(self):x}-{next(self._serial)}{ext}"

    def put(self, key: Hashable, value: Any) -> None:
        if self.dir is None:
            self.store[key] = value.copy() if hasattr(value, "copy") else value
            return
        self.files_written += 1
        if isinstance(value, np.ndarray) and value.dtype != object:
            path = self._path(".npy")
            mm = np.lib.format.open_memmap(path, mode="w+", dtype=value.dtype,
                                           shape=value.shape)
            mm[...] = value
            mm.flush()
            del mm
            self.store[key] = ("npy", path)
        else:
            path = self._path(".pkl")
            with open(path, "wb") as f:
                pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
            self.store[key] = ("pkl", path)

    def take(self, key: Hashable) -> Any:
        item = self.store.pop(key)
        if self.dir is None:
            return item
        kind, path = item
        if kind == "npy":
            value = np.array(np.load(path, mmap_mode="r"))
        else:
            with open(path, "rb") as f:
                value = pickle.load(f)
        os.unlink(path)
        return value

    def close(self) -> None:
        if self.dir is not None:
            for item in self.store.values():
                Path(item[1]).unlink(missing_ok=True)
        self.store.clear()


def _call(task_fn: Any, n_out: int, *args: Any) -> tuple[Any, ...]:
    out = task_fn(*args)
    if n_out == 1:
        return (out,)
    if not isinstance(out, tuple | list) or len(out) != n_out:
        raise PlanError(f"a task declared {n_out} outputs but its function returned "
                        f"{type(out).__name__}")
    return tuple(out)


def _runs(steps: tuple[Step, ...], g: TaskGraph) -> list[list[Step]]:
    """Split steps into groups: runs of independent consecutive computes, other steps alone."""
    groups: list[list[Step]] = []
    written: set[Hashable] = set()
    for st in steps:
        if st.op == "compute":
            t = g.tasks[st.target]
            if groups and groups[-1][0].op == "compute" and not (set(t.reads) & written) \
                    and not (set(t.writes) & written):
                groups[-1].append(st)
                written |= set(t.writes)
                continue
            groups.append([st])
            written = set(t.writes)
        else:
            groups.append([st])
            written = set()
    return groups


def execute(g: TaskGraph, plan: Plan, inputs: Mapping[Hashable, Any], *,
            scheduler: Any = "sync", offload_dir: str | os.PathLike[str] | None = None,
            offload_bandwidth: float | None = None) -> ExecResult:
    """Run ``plan`` on ``g`` with real values; return results and the measured peak.

    Parameters
    ----------
    g:
        A TaskGraph whose tasks carry ``fn``.
    plan:
        The plan to follow (checked first by :func:`thrifty.memory.simulate`).
    inputs:
        A value for every input buffer (buffers with no producer), keyed by buffer id.
    scheduler:
        Any of :mod:`thrifty.runtime.schedulers`: ``"sync"`` (in order, this thread),
        ``"threads"`` (Dask's threaded scheduler for runs of independent computes), a
        ``dask.distributed.Client`` or an address ``"tcp://HOST:PORT"``, or ``None``
        (threads when the task graph's total time is at least
        :data:`AUTO_THREADS_SECONDS`, else in order).
    offload_dir:
        Offload to ``.npy``/pickle files in this directory instead of host-memory copies.

    Example
    -------
    >>> from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
    >>> g = TaskGraph([Task("double", reads=("x",), writes=("y",), fn=lambda x: 2 * x)],
    ...               [Buffer("x", 8), Buffer("y", 8, "double")])
    >>> p = Plan.from_steps([("compute", "double"), ("free", "x")])
    >>> r = execute(g, p, {"x": np.ones(1)})
    >>> r.results["y"].tolist(), r.peak_bytes
    ([2.0], 16)
    """
    from thrifty.memory.simulate import simulate

    missing = [b for b in g.inputs if b not in inputs]
    if missing:
        raise PlanError(f"no value given for input buffer(s) {missing!r}; inputs of "
                        f"{g.name} are {list(g.inputs)!r}")
    no_fn = [t.id for t in g.tasks.values() if t.fn is None]
    if no_fn:
        raise PlanError(f"tasks {no_fn[:5]!r} carry no function to run; only task graphs "
                        "built with callables (e.g. by the sparse engine) can be executed")
    sim = simulate(g, plan, offload_bandwidth=offload_bandwidth
                   if offload_bandwidth is not None else float("inf"))
    backend = _backend(scheduler, g)
    host = _HostTier(offload_dir)
    resident: dict[Hashable, Any] = {b: backend.put(inputs[b]) for b in g.inputs}
    sizes: dict[Hashable, int] = {b: nbytes(inputs[b]) for b in g.inputs}
    timeline = [sum(sizes.values())]
    seen: set[Hashable] = set()
    computes = recomputes = offloads = 0
    t0 = time.perf_counter()
    try:
        for group in _runs(plan.steps, g):
            st = group[0]
            if st.op == "compute":
                outs = backend.compute([g.tasks[s.target] for s in group], resident)
                during = sum(sizes.values())
                for s in group:
                    for b in g.tasks[s.target].writes:
                        during += outs[b][1]
                timeline.append(during)
                for s in group:
                    computes += 1
                    recomputes += s.target in seen
                    seen.add(s.target)
                for b, (val, size) in outs.items():
                    resident[b], sizes[b] = val, size
            elif st.op == "free":
                backend.release(resident.pop(st.target))
                sizes.pop(st.target)
            elif st.op == "offload":
                host.put(st.target, backend.get(resident[st.target]))
                backend.release(resident.pop(st.target))
                sizes.pop(st.target)
                offloads += 1
            else:  # prefetch
                value = host.take(st.target)
                resident[st.target] = backend.put(value)
                sizes[st.target] = nbytes(value)
            timeline.append(sum(sizes.values()))
        results = {b: backend.get(resident[b]) for b in g.results}
    finally:
        host.close()
        for v in resident.values():
            backend.release(v)
    return ExecResult(results, max(timeline), sim.peak, time.perf_counter() - t0, computes,
                      recomputes, offloads, tuple(timeline), host.files_written)


class _Local:
    """Values held in this process; runs of computes in order or on Dask's thread pool."""

    def __init__(self, threaded: bool) -> None:
        self.threaded = threaded

    def put(self, value: Any) -> Any:
        return value

    def get(self, handle: Any) -> Any:
        return handle

    def release(self, handle: Any) -> None:
        return None

    def compute(self, tasks: list[Any], resident: Mapping[Hashable, Any]
                ) -> dict[Hashable, tuple[Any, int]]:
        if self.threaded and len(tasks) > 1:
            import dask.threaded

            dsk = {("t", i): (_call, t.fn, len(t.writes), *[resident[b] for b in t.reads])
                   for i, t in enumerate(tasks)}
            outs = dask.threaded.get(dsk, [("t", i) for i in range(len(tasks))])
        else:
            outs = [_call(t.fn, len(t.writes), *[resident[b] for b in t.reads]) for t in tasks]
        return {b: (v, nbytes(v)) for t, o in zip(tasks, outs) for b, v in zip(t.writes, o)}


class _Distributed:
    """Values held on a dask.distributed cluster as futures; offload gathers them here."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def put(self, value: Any) -> Any:
        return self.client.scatter(value, hash=False)

    def get(self, handle: Any) -> Any:
        try:
            return handle.result()
        except Exception as e:  # a lost worker that held scattered data
            raise ThriftyError(f"the cluster lost a value and cannot recompute it: {e!r}; "
                               "run the plan again") from e

    def release(self, handle: Any) -> None:
        handle.release()

    def compute(self, tasks: list[Any], resident: Mapping[Hashable, Any]
                ) -> dict[Hashable, tuple[Any, int]]:
        from distributed import wait

        futs = [self.client.submit(_call, t.fn, len(t.writes),
                                   *[resident[b] for b in t.reads], pure=False)
                for t in tasks]
        wait(futs)
        out: dict[Hashable, tuple[Any, int]] = {}
        for t, f in zip(tasks, futs):
            for i, b in enumerate(t.writes):
                part = self.client.submit(_pick, f, i, pure=False)
                size = self.client.submit(nbytes, part, pure=False)
                out[b] = (part, int(self.get(size)))
                size.release()
            f.release()
        return out


def _pick(values: tuple[Any, ...], i: int) -> Any:
    return values[i]


def _backend(scheduler: Any, g: TaskGraph) -> _Local | _Distributed:
    sched = resolve_scheduler(scheduler)
    if sched == "auto":  # Dask's threads where the plan carries enough work to pay for them
        return _Local(threaded=g.total_time() >= AUTO_THREADS_SECONDS)
    if sched in ("sync", "threads"):
        return _Local(threaded=sched == "threads")
    return _Distributed(sched)

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

Tiers. Offloaded values go to host memory (a copy), or, with ``offload_dir``, numeric
arrays to ``.npy`` files (no pickle; ``O_EXCL``, mode 0600) in a private directory made
inside it and removed at the end of the run; other values stay in host memory.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
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
    """Where offloaded values live: host-memory copies, or ``.npy`` files in a private
    directory of ``offload_dir``.

    Files hold numeric arrays only (a CSR/CSC matrix as its three arrays), written and read
    without pickle (``allow_pickle=False``), each created with ``O_EXCL`` and mode 0600 in a
    directory made by :func:`tempfile.mkdtemp` (mode 0700); :meth:`close` removes the
    directory with whatever is left in it (after success, failure or an interrupt). Other
    values (tuples, object arrays, anything else) stay in host memory as copies.
    """

    def __init__(self, directory: str | os.PathLike[str] | None) -> None:
        self.dir: Path | None = None
        if directory is not None:
            self.dir = _private_dir(Path(directory))
        self.store: dict[Hashable, Any] = {}
        self._serial = itertools.count()
        self.files_written = 0

    def put(self, key: Hashable, value: Any) -> None:
        if self.dir is not None and _numeric(value):
            self.store[key] = ("npy", self._write(value))
        elif self.dir is not None and _compressed(value):
            parts = tuple(self._write(a) for a in (value.data, value.indices, value.indptr))
            self.store[key] = ("sparse", (parts, value.shape, value.format, type(value)))
        else:
            self.store[key] = ("mem", value.copy() if hasattr(value, "copy") else value)
            return
        self.files_written += 1

    def _write(self, array: np.ndarray) -> Path:
        """A new file (``O_EXCL``, mode 0600) holding ``array`` as ``.npy``, no pickle."""
        assert self.dir is not None
        path = self.dir / f"{next(self._serial)}.npy"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            np.lib.format.write_array(f, np.ascontiguousarray(array), allow_pickle=False)
        return path

    def take(self, key: Hashable) -> Any:
        kind, item = self.store.pop(key)
        if kind == "mem":
            return item
        if kind == "npy":
            return _read(item)
        (pd, pi, pp), shape, fmt, cls = item
        return cls((_read(pd), _read(pi), _read(pp)), shape=shape)

    def close(self) -> None:
        self.store.clear()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)


def _numeric(value: Any) -> bool:
    return isinstance(value, np.ndarray) and not value.dtype.hasobject


def _compressed(value: Any) -> bool:
    """A scipy CSR/CSC matrix or array of numeric values."""
    return getattr(value, "format", None) in ("csr", "csc") and _numeric(value.data) and \
        _numeric(value.indices) and _numeric(value.indptr)


def _read(path: Path) -> np.ndarray:
    value = np.load(path, allow_pickle=False)
    os.unlink(path)
    return value


def _private_dir(directory: Path) -> Path:
    """A fresh private directory (mode 0700) inside ``directory``, created if missing."""
    if directory.exists() and not directory.is_dir():
        raise PlanError(f"offload_dir {str(directory)!r} is a file; give a directory (it is "
                        "created if missing)")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix="thrifty-offload-", dir=directory))
    except OSError as e:
        raise PlanError(f"offload_dir {str(directory)!r} is not a writable directory "
                        f"({e.strerror or e}); give one this process can write to") from None


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
        Offload numeric arrays to ``.npy`` files in a private directory made inside this one
        (removed at the end of the run, whatever its outcome) instead of host-memory
        copies; other values stay in host memory.

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

    _check_inputs(g, inputs)
    sim = simulate(g, plan, offload_bandwidth=offload_bandwidth
                   if offload_bandwidth is not None else float("inf"))
    backend = _backend(scheduler, g)
    host = _HostTier(offload_dir)
    run = _Replay(g, backend, host)
    t0 = time.perf_counter()
    try:
        for b in g.inputs:
            run.resident[b], run.sizes[b] = backend.put(inputs[b]), nbytes(inputs[b])
        run.timeline.append(sum(run.sizes.values()))
        for group in _runs(plan.steps, g):
            run.step(group)
        results = {b: backend.get(run.resident[b]) for b in g.results}
    finally:
        host.close()
        for v in run.resident.values():
            backend.release(v)
    return ExecResult(results, max(run.timeline), sim.peak, time.perf_counter() - t0,
                      run.computes, run.recomputes, run.offloads, tuple(run.timeline),
                      host.files_written)


def _check_inputs(g: TaskGraph, inputs: Mapping[Hashable, Any]) -> None:
    """Raise :class:`PlanError` unless every input buffer has a value no larger than its
    declared size and every task carries a function."""
    missing = [b for b in g.inputs if b not in inputs]
    if missing:
        raise PlanError(f"no value given for input buffer(s) {missing!r}; inputs of "
                        f"{g.name} are {list(g.inputs)!r}")
    for b in g.inputs:
        actual, declared = nbytes(inputs[b]), g.buffers[b].size
        if actual > declared:
            raise PlanError(f"input buffer {b!r} of {g.name} is declared as {declared} bytes, "
                            f"but its value holds {actual} bytes: the plan's memory figures "
                            "would not hold; pass a value of the declared size or declare "
                            "the buffer's real size")
    no_fn = [t.id for t in g.tasks.values() if t.fn is None]
    if no_fn:
        raise PlanError(f"tasks {no_fn[:5]!r} carry no function to run; only task graphs "
                        "built with callables (e.g. by the sparse engine) can be executed")


class _Replay:
    """The state of one plan's replay: resident values, their bytes, the timeline."""

    def __init__(self, g: TaskGraph, backend: _Local | _Distributed, host: _HostTier) -> None:
        self.g, self.backend, self.host = g, backend, host
        self.resident: dict[Hashable, Any] = {}
        self.sizes: dict[Hashable, int] = {}
        self.timeline: list[int] = []
        self.seen: set[Hashable] = set()
        self.computes = self.recomputes = self.offloads = 0

    def step(self, group: list[Step]) -> None:
        """One step, or a run of independent computes at once."""
        st, backend, resident, sizes = group[0], self.backend, self.resident, self.sizes
        if st.op == "compute":
            tasks = [self.g.tasks[s.target] for s in group]
            outs = backend.compute(tasks, resident)
            self.timeline.append(sum(sizes.values()) +
                                 sum(outs[b][1] for t in tasks for b in t.writes))
            for s in group:
                self.computes += 1
                self.recomputes += s.target in self.seen
                self.seen.add(s.target)
            for b, (val, size) in outs.items():
                resident[b], sizes[b] = val, size
        elif st.op == "free":
            backend.release(resident.pop(st.target))
            sizes.pop(st.target)
        elif st.op == "offload":
            self.host.put(st.target, backend.get(resident[st.target]))
            backend.release(resident.pop(st.target))
            sizes.pop(st.target)
            self.offloads += 1
        else:  # prefetch
            value = self.host.take(st.target)
            resident[st.target] = backend.put(value)
            sizes[st.target] = nbytes(value)
        self.timeline.append(sum(sizes.values()))


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
    """Values held on a dask.distributed cluster as futures; offload gathers them here.

    Every value has a lineage on the scheduler (inputs and prefetched values are tasks that
    return them), so a worker lost at any point of a run is recovered by recomputation.
    """

    def __init__(self, client: Any) -> None:
        self.client = client

    def put(self, value: Any) -> Any:
        # a task that returns the value, not scattered data: the scheduler keeps the value
        # in the task's spec, so a worker lost with it can recompute it (scattered data has
        # no lineage and would be lost for good)
        return self.client.submit(_identity, value, pure=False)

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


def _identity(value: Any) -> Any:
    return value


def _pick(values: tuple[Any, ...], i: int) -> Any:
    return values[i]


def _backend(scheduler: Any, g: TaskGraph) -> _Local | _Distributed:
    sched = resolve_scheduler(scheduler)
    if sched == "auto":  # Dask's threads where the plan carries enough work to pay for them
        return _Local(threaded=g.total_time() >= AUTO_THREADS_SECONDS)
    if sched in ("sync", "threads"):
        return _Local(threaded=sched == "threads")
    return _Distributed(sched)

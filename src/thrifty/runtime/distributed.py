"""A sparse plan on a ``dask.distributed`` cluster: row panels placed by data.

:class:`DistributedPlan` (``plan.distribute(client)``) runs a
:class:`~thrifty.runtime.sparse_run.RunnablePlan` on the worker processes of a cluster:

* **inputs scattered once**: each input is sent to the workers on its first run (or by
  :meth:`DistributedPlan.scatter`) and kept there; a later run with the same input objects
  sends nothing again. "The same" is the objects' identity (their arrays' identity for a
  sparse matrix) plus their shape, dtype and a CRC-32 of their whole content, so an input
  changed in place is sent again (:meth:`DistributedPlan.forget` drops what was sent).
* **panels placed by data**: a sparse input read only by row-panel kernels (SpMV, SpMM,
  fused ``SpMM → elementwise``) is not sent whole. Its panels are split into one contiguous
  block of rows per worker, balanced by nonzeros, and each panel's rows are scattered to
  the worker of its block; the panel's task runs there, on those rows only, and writes a
  fresh output of its rows. Dense inputs the panels read are broadcast to every worker
  (an operand computed on the cluster, like ``X @ W``, goes where Dask sends it).
  Every other task of the plan (``X @ W``, elementwise, SDDMM, masked SpGEMM, softmax) runs
  where Dask puts it.
* **results gathered**: the outputs' panels are gathered and joined in this process.
* **a worker lost mid-run**: Dask reruns the tasks of a worker that died elsewhere; data
  that only the dead worker held (scattered inputs cannot be recomputed) is scattered again
  from this process's copy and the run is submitted again (up to ``attempts`` times). An
  error raised by a kernel itself is raised as it is.

``plan.run(inputs, scheduler=client)`` (or an address ``"tcp://HOST:PORT"``) does the same
with a handle the plan keeps per client, so repeated runs on one cluster scatter each input
once.

Example
-------
>>> import numpy as np, scipy.sparse as sp, thrifty as th
>>> from thrifty.runtime.cluster import connect
>>> A = sp.random_array((2000, 2000), density=0.01, format="csr", rng=0)
>>> X = np.ones((2000, 4))
>>> plan = th.program(lambda A, X: A @ X).specialize(A=A, X=X)
>>> with connect(local_workers=2) as client:                      # doctest: +SKIP
...     cluster_plan = plan.distribute(client, {"A": A})           # A's rows go out once
...     bool(np.allclose(cluster_plan.run({"A": A, "X": X}), A @ X))
True
"""

from __future__ import annotations

import dataclasses
import time
import uuid
import zlib
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from thrifty.errors import ThriftyError
from thrifty.graph.taskgraph import TaskGraph
from thrifty.sparse.tasks import SpmmPanel, SpmvPanel, SpmvWhole, assemble_dense

if TYPE_CHECKING:
    from thrifty.runtime.sparse_run import RunnablePlan

__all__ = ["DistributedPlan", "handle_for"]

def _rebased(fn: Any) -> Any:
    """The panel callable ``fn`` writing its rows from row 0 of an output of its own rows
    (and reading its rows from row 0 of the matrix it is given); ``None`` when ``fn`` is
    not a row-panel kernel this module knows how to move."""
    if type(fn) is SpmvPanel:
        return SpmvPanel(0, fn.r1 - fn.r0, fn.dtype)
    if type(fn) is SpmmPanel:
        segs = [dataclasses.replace(s, r0=s.r0 - fn.r0, r1=s.r1 - fn.r0) for s in fn.segs]
        return SpmmPanel(0, fn.r1 - fn.r0, segs, fn.dtype, fn.post)
    return None


def _rows(A: Any, r0: int, r1: int) -> sp.csr_array:
    """Rows ``[r0, r1)`` of the CSR matrix ``A`` (views of its values and indices)."""
    p0, p1 = int(A.indptr[r0]), int(A.indptr[r1])
    return sp.csr_array((A.data[p0:p1], A.indices[p0:p1], A.indptr[r0:r1 + 1] - p0),
                        shape=(r1 - r0, A.shape[1]), copy=False)


def run_panel(fn: Any, A: sp.csr_array, X: np.ndarray, tail: tuple[int, ...],
              dtype: str) -> np.ndarray:
    """A moved panel's task on a worker: its rows of the product, in a fresh array."""
    out = np.empty((A.shape[0], *tail), dtype=dtype)
    return np.asarray(fn(out, A, X))


@dataclasses.dataclass(frozen=True)
class _Panel:
    """A row-panel task moved to the worker holding its rows."""

    tid: Hashable
    matrix: Hashable     # the input buffer of the sparse matrix
    rows: tuple[int, int]
    fn: Any              # rebased: writes rows from 0
    operand: Hashable    # the dense operand's buffer
    tail: tuple[int, ...]
    dtype: str


def _split(indptr: np.ndarray | None, n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous row ranges of ``n`` rows, balanced by nonzeros when the
    pattern's ``indptr`` is known (else by rows)."""
    parts = max(1, min(parts, n))
    if indptr is None or indptr[-1] == 0:
        cuts = np.linspace(0, n, parts + 1).astype(int)
    else:
        goal = np.linspace(0, indptr[-1], parts + 1)
        cuts = np.searchsorted(indptr, goal).clip(0, n)
        cuts[0], cuts[-1] = 0, n
    cuts = np.unique(cuts)
    return [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:])]


def _moved(tg: TaskGraph, specs: Mapping[Any, Any], parts: int
           ) -> dict[Hashable, list[_Panel]]:
    """The tasks of ``tg`` that run on rows of one input matrix only: the panels each
    becomes, by task id.

    A row-panel task reads ``(alloc, matrix, operand)`` (its output rows come from an
    ``alloc`` task) and stays one panel; a whole SpMV (``spmv_scipy``) becomes ``parts``
    panels balanced by nonzeros. The matrix must be an input (``specs``: its spec by
    buffer) that no other kind of task reads (it is never needed whole), and the callable
    one this module can rebase (:func:`_rebased`)."""
    writer = {t.writes[0]: t for t in tg.tasks.values()}
    found: dict[Hashable, list[_Panel]] = {}
    for tid in tg.order:
        t = tg.tasks[tid]
        if type(t.fn) is SpmvWhole and len(t.reads) == 2 and t.reads[0] in specs:
            spec = specs[t.reads[0]]
            found[tid] = [_Panel(f"{tid}.{i}", t.reads[0], r,
                                 SpmvPanel(0, r[1] - r[0], t.fn.dtype), t.reads[1], (),
                                 t.fn.dtype)
                          for i, r in enumerate(_split(getattr(spec, "indptr", None),
                                                       spec.shape[0], parts))]
            continue
        if len(t.reads) != 3 or "rows" not in (t.attrs or {}):
            continue
        alloc, matrix, operand = t.reads
        src = writer.get(alloc)
        fn = _rebased(t.fn)
        if fn is None or matrix not in specs or src is None or src.kernel != "alloc":
            continue
        r0, r1 = t.attrs["rows"]
        found[tid] = [_Panel(tid, matrix, (int(r0), int(r1)), fn, operand,
                             tuple(src.attrs["shape"][1:]), str(src.attrs["dtype"]))]
    moved = {p.matrix for ps in found.values() for p in ps}
    whole = {r for tid, t in tg.tasks.items() if tid not in found for r in t.reads}
    return {tid: ps for tid, ps in found.items() if ps[0].matrix in moved - whole}


def _place(A: Any, ranges: Sequence[tuple[int, int]], workers: Sequence[str]
           ) -> dict[tuple[int, int], str]:
    """A worker for each row range: contiguous blocks of ranges, balanced by nonzeros."""
    ranges = sorted(set(ranges))
    nnz = np.array([A.indptr[r1] - A.indptr[r0] for r0, r1 in ranges], dtype=float)
    total = max(float(nnz.sum()), 1.0)
    mid = (np.cumsum(nnz) - nnz / 2) / total
    return {r: workers[min(int(m * len(workers)), len(workers) - 1)]
            for r, m in zip(ranges, mid)}


def _stamp(value: Any) -> tuple[Any, ...]:
    """What identifies an input: its arrays' identity, shape and dtype, and a CRC-32 of
    each array's whole content (about 0.4 ms per MB here: a value changed in place is
    seen, so it is sent again)."""
    arrays: tuple[Any, ...]
    if sp.issparse(value):
        arrays = (value.data, value.indices, value.indptr)
    else:
        arrays = (np.asarray(value),)
    parts: list[Any] = [type(value), getattr(value, "shape", None)]
    for a in arrays:
        flat = np.ascontiguousarray(a).reshape(-1)  # 1-D: empty shapes cast too
        parts += [id(a), a.shape, a.dtype.str, zlib.crc32(flat.data.cast("B"))]
    return tuple(parts)


@dataclasses.dataclass
class _Sent:
    """An input as the cluster holds it: whole, or as row pieces placed on workers."""

    value: Any
    stamp: tuple[Any, ...]
    whole: Any = None                                   # a Future
    pieces: dict[tuple[int, int], tuple[Any, str]] = dataclasses.field(default_factory=dict)

    def futures(self) -> list[Any]:
        return [self.whole] if self.whole is not None else [f for f, _ in
                                                            self.pieces.values()]

    def lost(self) -> bool:
        return any(f.status in ("cancelled", "lost", "error") for f in self.futures())


_RETRY_ERRORS: tuple[type[BaseException], ...] = (OSError, TimeoutError)


def _retry_errors() -> tuple[type[BaseException], ...]:
    """The errors of a lost worker or lost data (retried), not of a kernel (raised)."""
    from concurrent.futures import CancelledError

    from distributed.scheduler import KilledWorker

    return (CancelledError, KilledWorker, *_RETRY_ERRORS)


class DistributedPlan:
    """A plan bound to a ``dask.distributed`` client, with the inputs it has scattered.

    Parameters
    ----------
    plan:
        The :class:`~thrifty.runtime.sparse_run.RunnablePlan` to run.
    client:
        A ``dask.distributed.Client``.
    attempts:
        How many times a run is submitted when workers or data are lost (at least 1).

    :attr:`timings` holds the seconds of the last :meth:`run`: ``scatter`` (inputs sent in
    that run), ``compute`` (submitting and waiting for the tasks, gathering the outputs)
    and ``attempts`` (runs submitted).
    """

    def __init__(self, plan: RunnablePlan, client: Any, attempts: int = 3) -> None:
        if attempts < 1:
            raise ThriftyError(f"attempts must be at least 1, got {attempts}")
        self.plan = plan
        self.client = client
        self.attempts = int(attempts)
        tg = plan.taskgraph
        specs = {plan.input_buffer(n): s for n, s in plan.inputs.items() if s.sparse}
        threads = sum(w.get("nthreads", 1) for w in
                      client.scheduler_info()["workers"].values())
        self._moved = _moved(tg, specs, max(1, threads))
        self._joined = {tid for tid in self._moved if len(tg.tasks[tid].reads) == 2}
        moved_allocs = {tg.tasks[t].reads[0] for t in self._moved if t not in self._joined}
        readers = {r for tid, t in tg.tasks.items() if tid not in self._moved
                   for r in t.reads}
        self._skip = {b for b in moved_allocs if b not in readers}
        panels = [p for ps in self._moved.values() for p in ps]
        self._broadcast = {p.operand for p in panels}
        self._ranges: dict[Hashable, list[tuple[int, int]]] = {}
        for p in panels:
            self._ranges.setdefault(p.matrix, []).append(p.rows)
        self._sent: dict[Hashable, _Sent] = {}
        self.timings: dict[str, float] = {}

    # -- data --------------------------------------------------------------------------

    def _workers(self) -> list[str]:
        workers = sorted(self.client.scheduler_info()["workers"])
        if not workers:
            raise ThriftyError("the Dask cluster has no workers; start some (or wait for "
                               "them) before running a plan on it")
        return workers

    def _send(self, buf: Hashable, value: Any, stamp: tuple[Any, ...] | None = None) -> _Sent:
        """Scatter one input (whole, broadcast, or as placed row pieces); ``stamp``: its
        :func:`_stamp`, when the caller has it already (a CRC of the whole content)."""
        sent = _Sent(value, _stamp(value) if stamp is None else stamp)
        ranges = self._ranges.get(buf)
        if ranges is None:
            sent.whole = self.client.scatter(value, hash=False,
                                             broadcast=buf in self._broadcast)
            return sent
        where = _place(value, ranges, self._workers())
        for w in sorted(set(where.values())):
            mine = [r for r, at in where.items() if at == w]
            futs = self.client.scatter([_rows(value, *r) for r in mine], workers=[w],
                                       hash=False)
            sent.pieces.update({r: (f, w) for r, f in zip(mine, futs)})
        return sent

    def _feed(self, inputs: Mapping[str, Any]) -> dict[Hashable, Any]:
        """The input buffers' values: the plan's inputs checked, and its constants."""
        checked = self.plan.check_inputs(inputs)
        return dict(zip(self.plan.feed_keys, [*checked, *self.plan.const_values]))

    def _ensure(self, feed: Mapping[Any, Any]) -> float:
        """Scatter what the cluster does not hold yet (or lost); the seconds it took."""
        t0 = time.perf_counter()
        for buf, value in feed.items():
            sent = self._sent.get(buf)
            stamp = _stamp(value)
            if sent is not None and not sent.lost() and sent.stamp == stamp:
                continue
            if sent is not None:
                self.client.cancel(sent.futures())
            self._sent[buf] = self._send(buf, value, stamp)
        return time.perf_counter() - t0

    def scatter(self, inputs: Mapping[str, Any]) -> float:
        """Send these inputs (all or some of the plan's) to the cluster now; later runs
        with the same objects reuse them. Returns the seconds it took."""
        names = list(self.plan.inputs)
        unknown = [n for n in inputs if n not in names]
        if unknown:
            raise ThriftyError(f"unknown input(s) {unknown}; the plan's inputs are {names}")
        specs = self.plan.inputs
        feed = {self.plan.input_buffer(n): specs[n].check(v) for n, v in inputs.items()}
        return self._ensure(feed)

    def placement(self) -> dict[str, dict[str, list[tuple[int, int]]]]:
        """Where the row pieces of each matrix sent by rows are: ``{input: {worker:
        [(r0, r1), ...]}}`` (inputs sent whole or broadcast are not listed)."""
        names = {self.plan.input_buffer(n): n for n in self.plan.inputs}
        out: dict[str, dict[str, list[tuple[int, int]]]] = {}
        for buf, sent in self._sent.items():
            if sent.pieces and buf in names:
                by: dict[str, list[tuple[int, int]]] = {}
                for r, (_, w) in sorted(sent.pieces.items()):
                    by.setdefault(w, []).append(r)
                out[names[buf]] = by
        return out

    def forget(self) -> None:
        """Release every scattered input (the next run sends them again)."""
        for sent in self._sent.values():
            self.client.cancel(sent.futures())
        self._sent.clear()

    # -- running -----------------------------------------------------------------------

    def _submit(self, feed_keys: Sequence[Hashable]
                ) -> tuple[dict[Hashable, Any], dict[Hashable, tuple[Any, list[Any]]]]:
        """Submit the plan's tasks; the futures by buffer, and the outputs joined here
        (the joining callable and the futures of its parts, by buffer)."""
        tg, client = self.plan.taskgraph, self.client
        env: dict[Hashable, Any] = {}
        for buf in feed_keys:
            sent = self._sent[buf]
            if sent.whole is not None:
                env[buf] = sent.whole
        outputs = set(self.plan.output_buffers())
        local: dict[Hashable, tuple[Any, list[Any]]] = {}
        tag = uuid.uuid4().hex[:12]
        for tid in tg.order:
            t = tg.tasks[tid]
            out = t.writes[0]
            key = f"{out}@{tag}"
            if tid in self._moved:
                futs = []
                for p in self._moved[tid]:
                    fut, where = self._sent[p.matrix].pieces[p.rows]
                    futs.append(client.submit(run_panel, p.fn, fut, env[p.operand], p.tail,
                                              p.dtype, key=f"{p.tid}@{tag}",
                                              workers=[where], allow_other_workers=True,
                                              pure=False))
                if tid not in self._joined:
                    env[out] = futs[0]
                elif out in outputs:
                    local[out] = (assemble_dense, futs)
                else:
                    env[out] = client.submit(assemble_dense, *futs, key=key, pure=False)
            elif out in self._skip:
                continue
            elif out in outputs and t.kernel == "assemble":
                local[out] = (t.fn, [env[r] for r in t.reads])
            else:
                env[out] = client.submit(t.fn, *[env[r] for r in t.reads], key=key,
                                         pure=False)
        return env, local

    def _attempt(self, feed: Mapping[Any, Any]) -> list[Any]:
        """One submission of the plan: the outputs' values."""
        env, local = self._submit(list(feed))
        keys = self.plan.output_buffers()
        wanted: list[Any] = []
        for k in keys:
            if k not in feed:  # an input returned as it is needs no cluster
                wanted += local[k][1] if k in local else [env[k]]
        try:
            got = iter(self.client.gather(wanted))
        finally:
            del env, wanted
        vals = []
        for k in keys:
            if k in feed:
                vals.append(feed[k])
            elif k in local:
                fn, parts = local[k]
                vals.append(fn(*[next(got) for _ in parts]))
            else:
                vals.append(next(got))
        return vals

    def run(self, inputs: Mapping[str, Any]) -> Any:
        """The plan's outputs for ``inputs`` (as :meth:`RunnablePlan.run` returns them),
        computed on the cluster; inputs it holds already are not sent again."""
        return self.run_feed(self._feed(inputs))

    def run_feed(self, feed: Mapping[Any, Any]) -> Any:
        """:meth:`run` on the input buffers' values (checked inputs and constants)."""
        retry = _retry_errors()
        scatter = compute = 0.0
        for attempt in range(1, self.attempts + 1):
            try:
                scatter += self._ensure(feed)
                t0 = time.perf_counter()
                vals = self._attempt(feed)
                compute += time.perf_counter() - t0
            except retry:
                if attempt == self.attempts:
                    raise
                self._wait_for_workers()
                continue
            self.timings = {"scatter": scatter, "compute": compute, "attempts": attempt}
            return self.plan.pack_outputs(vals)
        raise AssertionError("unreachable")  # pragma: no cover

    def _wait_for_workers(self, timeout: float = 30.0) -> None:
        """After a loss: wait until the cluster has a worker again (a nanny restarts the
        ones that died) and drop the inputs it lost (by the scheduler's word: no worker
        holds them; the futures here may not know yet)."""
        deadline = time.monotonic() + timeout
        while not self.client.scheduler_info()["workers"] and time.monotonic() < deadline:
            time.sleep(0.1)
        live = [f for s in self._sent.values() for f in s.futures() if f.status == "finished"]
        try:
            held = self.client.who_has(live) if live else {}
        except _retry_errors():
            held = {}  # ask no more: send everything again
        for buf in [b for b, s in self._sent.items()
                    if s.lost() or any(not held.get(f.key) for f in s.futures())]:
            self.client.cancel(self._sent.pop(buf).futures())


def handle_for(plan: RunnablePlan, client: Any) -> DistributedPlan:
    """The handle ``plan`` keeps for ``client`` (made on first use)."""
    handles: dict[str, DistributedPlan] = plan.__dict__.setdefault("_distributed", {})
    h = handles.get(client.id)
    if h is None or h.client is not client:
        h = handles[client.id] = DistributedPlan(plan, client)
    return h

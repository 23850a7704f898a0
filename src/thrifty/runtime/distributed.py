"""A sparse plan on a ``dask.distributed`` cluster: row panels placed by data.

:class:`DistributedPlan` (``plan.distribute(client)``) runs a
:class:`~thrifty.runtime.sparse_run.RunnablePlan` on the worker processes of a cluster:

* **inputs scattered once**: each input is sent to the workers on its first run (or by
  :meth:`DistributedPlan.scatter`) and kept there; a later run with the same input objects
  sends nothing again. "The same" is the objects' identity (their arrays' identity for a
  sparse matrix) plus their shape, dtype and the CRC-32s of their whole content, in chunks
  on two threads (:mod:`thrifty.runtime.stamps`), so an input changed in place is sent
  again (:meth:`DistributedPlan.forget` drops what was sent).
* **panels placed by data**: a sparse input read only by row-panel kernels (SpMV, SpMM,
  ``SpMM → elementwise``, the fused chain ``(A @ X) @ W``) is not sent whole. Its panels
  are split into one contiguous block of rows per worker, balanced by nonzeros, and each
  panel's rows are scattered to the worker of its block, with the panel's callable; the
  panel's task runs there, on those rows only, and writes a fresh output of its rows.
* **operands sliced to what the panels read**: a worker gets, of the dense operand ``X``
  of ``A @ X``, only the rows its block's column indices touch (and the columns of its
  gathered dense segments): a range (sent as a view: no copy) or, when they fill less than
  3/4 of their range, the rows gathered (:mod:`thrifty.runtime.slicing`). The block's
  column indices are renumbered to positions in that slice once, when the block is sent;
  an input operand is sliced and sent once per value like the matrix, an operand computed
  on the cluster (``X @ W``) is sliced by a task on the worker. The other operands of a
  panel (``W`` of a fused chain) are broadcast to every worker. Every other task of the
  plan (``X @ W``, elementwise, SDDMM, masked SpGEMM, softmax) runs where Dask puts it.
* **results gathered**: the outputs' panels come back as arrays (Dask sends numpy buffers
  without a pickled copy) and are copied once, into the joined output: one of an earlier
  run that the caller has dropped, else a new one (a
  :class:`~thrifty.sparse.outputs.BufferPool` per output, so its pages stay mapped).
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
import itertools
import time
import uuid
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from thrifty.errors import ThriftyError
from thrifty.graph.ops import get_op
from thrifty.graph.taskgraph import TaskGraph
from thrifty.runtime.slicing import (
    Cols,
    by_worker,
    columns,
    place,
    rebase,
    seg_columns,
    split,
    take_rows,
)
from thrifty.runtime.stamps import stamp as stamp_of
from thrifty.sparse.outputs import BufferPool
from thrifty.sparse.tasks import DenseRef, SpmvPanel, SpmvWhole, assemble_dense

if TYPE_CHECKING:
    from thrifty.runtime.sparse_run import RunnablePlan

__all__ = ["DistributedPlan", "handle_for"]

def run_panel(fn: Any, A: sp.csr_array, X: np.ndarray, tail: tuple[int, ...],
              dtype: str, extra: Sequence[Any] = (), post: Any = None,
              post_args: Sequence[Any] = ()) -> np.ndarray:
    """A moved panel's task on a worker: its rows of the product, in a fresh array; with
    ``post``, that elementwise op of them (``None`` in ``post_args``) and of the other
    operands' rows (or whole broadcast operands)."""
    out = np.empty((A.shape[0], *tail), dtype=dtype)
    val = np.asarray(fn(out, A, X, *extra))
    if post is None:
        return val
    return np.asarray(post(*[val if a is None else a for a in post_args]))


@dataclasses.dataclass(frozen=True)
class _Panel:
    """A row-panel task moved to the worker holding its rows."""

    tid: Hashable
    matrix: Hashable     # the input buffer of the sparse matrix
    rows: tuple[int, int]
    fn: Any              # as planned: rows [r0, r1) of the whole matrix and operand
    operand: Hashable    # the dense operand's buffer (sliced to the rows the panel reads)
    extra: tuple[Hashable, ...]  # further operands, sent whole (W of a fused chain)
    tail: tuple[int, ...]
    dtype: str
    post: Any = None     # an elementwise op of the panel's rows, run on the worker
    post_args: tuple[tuple[str, Hashable] | None, ...] = ()  # None: the panel's rows


def _fusions(tg: TaskGraph, moved: Mapping[Hashable, list[_Panel]],
             dense: Mapping[Hashable, tuple[int, ...]], outputs: set[Hashable]
             ) -> dict[Hashable, tuple[Hashable, tuple[tuple[str, Hashable] | None, ...]]]:
    """The elementwise tasks that can run on the workers, per panel: ``{task: (the
    assemble task it follows, its reads' layout)}``.

    Such a task reads the joined panels of a moved row-panel op (nothing else reads them)
    and dense inputs (``dense``: their shapes by buffer) that are either row-aligned with
    the panels' output (the same shape: each panel gets its rows, ``("rows", buf)``) or
    broadcast along the rows (fewer dimensions, or one row: sent whole,
    ``("whole", buf)``)."""
    panel_out = {tg.tasks[tid].writes[0]: tid for tid in moved
                 if type(tg.tasks[tid].fn) is not SpmvWhole}
    readers: dict[Hashable, list[Hashable]] = {}
    for tid, t in tg.tasks.items():
        for r in set(t.reads):
            readers.setdefault(r, []).append(tid)
    found: dict[Hashable, tuple[Hashable, tuple[tuple[str, Hashable] | None, ...]]] = {}
    for aid, a in tg.tasks.items():
        if a.kernel != "assemble" or not a.reads or any(r not in panel_out for r in a.reads):
            continue
        v, first = a.writes[0], moved[panel_out[a.reads[0]]][0]
        shape = (tg.tasks[tg.tasks[first.tid].reads[0]].attrs["shape"][0], *first.tail)
        users = readers.get(v, [])
        e = tg.tasks[users[0]] if len(users) == 1 else None
        if v in outputs or e is None or type(e.fn) is not DenseRef or \
                get_op(e.fn.op).kind != "elementwise" or e.reads.count(v) != 1:
            continue
        layout: list[tuple[str, Hashable] | None] = []
        for r in e.reads:
            if r == v:
                layout.append(None)
            elif r in dense and tuple(dense[r]) == tuple(shape):
                layout.append(("rows", r))
            elif r in dense and (len(dense[r]) < len(shape) or tuple(dense[r][:1]) == (1,)):
                layout.append(("whole", r))
            else:
                break
        else:
            found[users[0]] = (aid, tuple(layout))
    return found


def _moved(tg: TaskGraph, specs: Mapping[Any, Any], parts: int
           ) -> dict[Hashable, list[_Panel]]:
    """The tasks of ``tg`` that run on rows of one input matrix only: the panels each
    becomes, by task id.

    A row-panel task reads ``(alloc, matrix, operand, *extra)`` (its output rows come from
    an ``alloc`` task) and stays one panel; a whole SpMV (``spmv_scipy``) becomes ``parts``
    panels balanced by nonzeros. The matrix must be an input (``specs``: its spec by
    buffer) that no other kind of task reads (it is never needed whole), and the callable
    one this module can rebase (:func:`~thrifty.runtime.slicing.rebase`)."""
    writer = {t.writes[0]: t for t in tg.tasks.values()}
    found: dict[Hashable, list[_Panel]] = {}
    for tid in tg.order:
        t = tg.tasks[tid]
        if type(t.fn) is SpmvWhole and len(t.reads) == 2 and t.reads[0] in specs:
            spec = specs[t.reads[0]]
            found[tid] = [_Panel(f"{tid}.{i}", t.reads[0], r,
                                 SpmvPanel(r[0], r[1], t.fn.dtype), t.reads[1], (), (),
                                 t.fn.dtype)
                          for i, r in enumerate(split(getattr(spec, "indptr", None),
                                                      spec.shape[0], parts))]
            continue
        if len(t.reads) < 3 or "rows" not in (t.attrs or {}):
            continue
        alloc, matrix, operand, *extra = t.reads
        src = writer.get(alloc)
        r0, r1 = (int(r) for r in t.attrs["rows"])
        fn: Any = t.fn
        if rebase(fn) is None or matrix not in specs or src is None or \
                src.kernel != "alloc" or matrix in (operand, *extra) or \
                (fn.r0, fn.r1) != (r0, r1):
            continue
        found[tid] = [_Panel(tid, matrix, (r0, r1), t.fn, operand, tuple(extra),
                             tuple(src.attrs["shape"][1:]), str(src.attrs["dtype"]))]
    moved = {p.matrix for ps in found.values() for p in ps}
    whole = {r for tid, t in tg.tasks.items() if tid not in found for r in t.reads}
    return {tid: ps for tid, ps in found.items() if ps[0].matrix in moved - whole}


_SERIAL = itertools.count()


@dataclasses.dataclass
class _Sent:
    """An input as the cluster holds it: whole, as row pieces placed on workers (a matrix:
    with each worker's operand rows and its panels' callables), or as the operand rows
    each worker's pieces of a matrix read (a dense operand)."""

    value: Any
    stamp: tuple[Any, ...]
    whole: Any = None                                   # a Future
    pieces: dict[tuple[int, int], tuple[Any, str]] = dataclasses.field(default_factory=dict)
    cols: dict[str, Cols] = dataclasses.field(default_factory=dict)      # by worker
    fns: dict[Hashable, Any] = dataclasses.field(default_factory=dict)   # by panel task
    slices: dict[tuple[Hashable, str], Any] = dataclasses.field(default_factory=dict)
    basis: tuple[tuple[Hashable, int], ...] = ()        # (matrix, serial) it was sliced for
    serial: int = dataclasses.field(default_factory=lambda: next(_SERIAL))

    def futures(self) -> list[Any]:
        return ([self.whole] if self.whole is not None else []) + \
            [f for f, _ in self.pieces.values()] + list(self.fns.values()) + \
            list(self.slices.values())

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

    :attr:`timings` holds the seconds of the last :meth:`run`: ``scatter`` (checking the
    inputs' stamps and sending those the cluster lacks), of which ``stamp`` (the CRC-32 of
    every input); ``compute`` (submitting, waiting, gathering and joining the outputs), of
    which ``submit``, ``gather`` (waiting for the tasks and receiving their results) and
    ``join`` (the panels' rows copied once into each output); and ``attempts`` (runs
    submitted).
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
        self._joined = {tid for tid in self._moved if type(tg.tasks[tid].fn) is SpmvWhole}
        self._fuse(tg)
        moved_allocs = {tg.tasks[t].reads[0] for t in self._moved if t not in self._joined}
        readers = {r for tid, t in tg.tasks.items()
                   if tid not in self._moved and tid not in self._fused_skip for r in t.reads}
        self._skip = {b for b in moved_allocs if b not in readers}
        self._read = readers
        panels = [p for ps in self._moved.values() for p in ps]
        self._broadcast = {r for p in panels for r in p.extra} | \
            {a[1] for p in panels for a in p.post_args if a is not None and a[0] == "whole"}
        # operands the cluster needs whole (else each worker gets the rows it reads only)
        self._whole = readers | self._broadcast | set(plan.output_buffers())
        self._ranges: dict[Hashable, list[tuple[int, int]]] = {}
        self._panels: dict[Hashable, list[_Panel]] = {}    # by matrix
        self._readers: dict[Hashable, list[Hashable]] = {}  # operand: matrices sliced for
        self._rowwise: dict[Hashable, tuple[Hashable, set[tuple[int, int]]]] = {}
        for p in panels:
            self._ranges.setdefault(p.matrix, []).append(p.rows)
            self._panels.setdefault(p.matrix, []).append(p)
            if p.matrix not in self._readers.setdefault(p.operand, []):
                self._readers[p.operand].append(p.matrix)
            for a in p.post_args:
                if a is not None and a[0] == "rows":
                    self._rowwise.setdefault(a[1], (p.matrix, set()))[1].add(p.rows)
        self._sent: dict[Hashable, _Sent] = {}
        self._stamping = 0.0
        self._pools: dict[Hashable, BufferPool] = {}  # joined outputs, by buffer
        self.timings: dict[str, float] = {}

    def _fuse(self, tg: TaskGraph) -> None:
        """Attach to the moved panels the elementwise tasks that run per panel
        (:func:`_fusions`); a row-aligned operand goes by rows with one matrix only."""
        plan = self.plan
        dense: dict[Hashable, tuple[int, ...]] = {
            plan.input_buffer(n): tuple(s.shape) for n, s in plan.inputs.items()
            if not s.sparse}
        found = _fusions(tg, self._moved, dense, set(plan.output_buffers()))
        by_rows: dict[Hashable, Hashable] = {}
        self._fused_into: dict[Hashable, Hashable] = {}   # panel task: elementwise task
        self._fused_skip: set[Hashable] = set()           # tasks done by the panels
        self._fused_from: dict[Hashable, Hashable] = {}   # elementwise task: assemble
        for eid, (aid, layout) in found.items():
            tids = [t for t in self._moved if tg.tasks[t].writes[0] in tg.tasks[aid].reads]
            matrix = self._moved[tids[0]][0].matrix
            rows = {a[1] for a in layout if a is not None and a[0] == "rows"}
            if any(by_rows.setdefault(b, matrix) != matrix for b in rows) or \
                    any(self._moved[t][0].matrix != matrix for t in tids):
                continue
            post = tg.tasks[eid].fn
            for t in tids:
                self._moved[t] = [dataclasses.replace(p, post=post, post_args=layout)
                                  for p in self._moved[t]]
                self._fused_into[t] = eid
            self._fused_skip |= {aid, eid}
            self._fused_from[eid] = aid

    # -- data --------------------------------------------------------------------------

    def _workers(self) -> list[str]:
        workers = sorted(self.client.scheduler_info()["workers"])
        if not workers:
            raise ThriftyError("the Dask cluster has no workers; start some (or wait for "
                               "them) before running a plan on it")
        return workers

    def _send(self, buf: Hashable, value: Any, stamp: tuple[Any, ...] | None = None) -> _Sent:
        """Scatter one input (whole, broadcast, as placed row pieces, or as the operand
        rows each worker reads); ``stamp``: its :func:`~thrifty.runtime.stamps.stamp`,
        when the caller has it already (CRCs of the whole content)."""
        sent = _Sent(value, stamp_of(value) if stamp is None else stamp)
        if buf in self._ranges:
            self._send_pieces(buf, value, sent)
            return sent
        if buf in self._rowwise:
            self._send_rows(buf, value, sent)
        if (buf not in self._readers and buf not in self._rowwise) or buf in self._whole:
            sent.whole = self.client.scatter(value, hash=False,
                                             broadcast=buf in self._broadcast)
        sent.basis = self._basis(buf)
        for matrix in self._readers.get(buf, ()):
            held = self._sent.get(matrix)
            for w, cols in ({} if held is None else held.cols).items():
                if not cols.whole or sent.whole is None:
                    sent.slices[(matrix, w)] = self.client.scatter(
                        cols.of(value), workers=[w], hash=False)
        return sent

    def _send_pieces(self, buf: Hashable, A: Any, sent: _Sent) -> None:
        """Scatter matrix ``A``'s row pieces, each worker's block with its column indices
        renumbered to the operand rows that block reads, and its panels' callables."""
        panels = self._panels[buf]
        seg_cols: dict[tuple[int, int], list[np.ndarray]] = {}
        for p in panels:
            seg_cols.setdefault(p.rows, []).extend(seg_columns(p.fn))
        where = by_worker(place(A, self._ranges[buf], self._workers()))
        for w, mine in where.items():
            cols, pieces = columns(A, mine, [c for r in mine for c in seg_cols.get(r, ())])
            sent.cols[w] = cols
            mine_p = [p for p in panels if p.rows in set(mine)]
            futs = self.client.scatter([*pieces, *[rebase(p.fn, cols) for p in mine_p]],
                                       workers=[w], hash=False)
            sent.pieces.update({r: (f, w) for r, f in zip(mine, futs)})
            sent.fns.update({p.tid: f for p, f in zip(mine_p, futs[len(mine):])})

    def _send_rows(self, buf: Hashable, value: Any, sent: _Sent) -> None:
        """Scatter the row blocks of a row-aligned operand to the workers holding the same
        rows of its matrix (views: no copy)."""
        matrix, ranges = self._rowwise[buf]
        held = self._sent.get(matrix)
        mine: dict[str, list[tuple[int, int]]] = {}
        for r, (_, w) in ({} if held is None else held.pieces).items():
            if r in ranges:
                mine.setdefault(w, []).append(r)
        for w, rs in mine.items():
            futs = self.client.scatter([value[r0:r1] for r0, r1 in rs], workers=[w],
                                       hash=False)
            sent.pieces.update({r: (f, w) for r, f in zip(rs, futs)})

    def _basis(self, buf: Hashable) -> tuple[tuple[Hashable, int], ...]:
        """The sends of the matrices whose placement the operand ``buf`` was sent by."""
        ms = [*self._readers.get(buf, ()), *self._rowwise.get(buf, ((),))[:1]]
        return tuple((m, self._sent[m].serial if m in self._sent else -1)
                     for m in ms if m != ())

    def _feed(self, inputs: Mapping[str, Any]) -> dict[Hashable, Any]:
        """The input buffers' values: the plan's inputs checked, and its constants."""
        checked = self.plan.check_inputs(inputs)
        return dict(zip(self.plan.feed_keys, [*checked, *self.plan.const_values]))

    def _ensure(self, feed: Mapping[Any, Any]) -> float:
        """Scatter what the cluster does not hold yet (or lost); the seconds it took (of
        which ``self._stamping`` computing the inputs' stamps)."""
        t0 = time.perf_counter()
        self._stamping = 0.0
        # the matrices first: an operand is sliced by their placement
        for buf in sorted(feed, key=lambda b: b not in self._ranges):
            value, sent = feed[buf], self._sent.get(buf)
            t1 = time.perf_counter()
            stamp = stamp_of(value)
            self._stamping += time.perf_counter() - t1
            if sent is not None and not sent.lost() and sent.stamp == stamp and \
                    sent.basis == self._basis(buf):
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
        return {names[buf]: by_worker({r: w for r, (_, w) in sent.pieces.items()})
                for buf, sent in self._sent.items() if sent.pieces and buf in names}

    def operand_rows(self) -> dict[str, dict[str, int]]:
        """How many rows of each dense input sent by slices each worker holds: ``{input:
        {worker: rows}}`` (the rows its pieces of the matrix read)."""
        names = {self.plan.input_buffer(n): n for n in self.plan.inputs}
        out: dict[str, dict[str, int]] = {}
        for buf, sent in self._sent.items():
            for (matrix, w) in sent.slices:
                if buf in names and matrix in self._sent:
                    out.setdefault(names[buf], {})[w] = self._sent[matrix].cols[w].width
        return out

    @property
    def fused(self) -> list[Hashable]:
        """The elementwise tasks that run on the workers, per panel, with its rows."""
        return sorted(self._fused_from, key=str)

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
        sliced: dict[tuple[Hashable, Hashable, str], Any] = {}
        tag = uuid.uuid4().hex[:12]
        panel_out: dict[Hashable, Any] = {}  # futures of panels an elementwise op joins
        for tid in tg.order:
            t = tg.tasks[tid]
            out = t.writes[0]
            key = f"{out}@{tag}"
            if tid in self._moved:
                parts = self._submit_panels(tid, env, sliced, tag)
                if tid in self._fused_into:
                    panel_out[out] = parts[0]
                    continue
                if tid not in self._joined:
                    env[out] = parts[0]
                    continue
            elif tid in self._fused_from:
                parts = [panel_out[r] for r in tg.tasks[self._fused_from[tid]].reads]
            elif tid in self._fused_skip or out in self._skip:
                continue
            elif out in outputs and t.kernel == "assemble":
                local[out] = (t.fn, [env[r] for r in t.reads])
                continue
            else:
                env[out] = client.submit(t.fn, *[env[r] for r in t.reads], key=key,
                                         pure=False)
                continue
            if out in outputs and out not in self._read:  # panels joined here, or there
                local[out] = (assemble_dense, parts)
            else:
                env[out] = client.submit(assemble_dense, *parts, key=key, pure=False)
        return env, local

    def _submit_panels(self, tid: Hashable, env: Mapping[Hashable, Any],
                       sliced: dict[tuple[Hashable, Hashable, str], Any], tag: str
                       ) -> list[Any]:
        """Submit the panels of moved task ``tid``, each to the worker holding its rows;
        their futures."""
        futs = []
        for p in self._moved[tid]:
            held = self._sent[p.matrix]
            fut, where = held.pieces[p.rows]
            x = self._operand(p, where, env, sliced, tag)
            post_args = [None if a is None else
                         self._sent[a[1]].pieces[p.rows][0] if a[0] == "rows" else env[a[1]]
                         for a in p.post_args]
            futs.append(self.client.submit(
                run_panel, held.fns[p.tid], fut, x, p.tail, p.dtype,
                [env[r] for r in p.extra], p.post, post_args, key=f"{p.tid}@{tag}",
                workers=[where], allow_other_workers=True, pure=False))
        return futs

    def _operand(self, p: _Panel, where: str, env: Mapping[Hashable, Any],
                 sliced: dict[tuple[Hashable, Hashable, str], Any], tag: str) -> Any:
        """The future of the operand rows panel ``p`` reads on worker ``where``: sent
        (an input), the whole operand (the worker's pieces read all its rows), or taken on
        the worker from an operand computed on the cluster (once per run)."""
        sent = self._sent.get(p.operand)
        if sent is not None and (p.matrix, where) in sent.slices:
            return sent.slices[(p.matrix, where)]
        cols = self._sent[p.matrix].cols[where]
        if cols.whole:
            return env[p.operand]
        k = (p.operand, p.matrix, where)
        if k not in sliced:
            sliced[k] = self.client.submit(
                take_rows, env[p.operand], cols, key=f"rows-{p.operand}-{len(sliced)}@{tag}",
                workers=[where], allow_other_workers=True, pure=False)
        return sliced[k]

    def _attempt(self, feed: Mapping[Any, Any], clock: dict[str, float]) -> list[Any]:
        """One submission of the plan: the outputs' values (``clock``: the seconds spent
        submitting, gathering and joining, added to)."""
        t0 = time.perf_counter()
        env, local = self._submit(list(feed))
        keys = self.plan.output_buffers()
        wanted: list[Any] = []
        for k in keys:
            if k not in feed:  # an input returned as it is needs no cluster
                wanted += local[k][1] if k in local else [env[k]]
        t1 = time.perf_counter()
        try:
            got = iter(self.client.gather(wanted))
        finally:
            del env, wanted
        t2 = time.perf_counter()
        vals = []
        for k in keys:
            if k in feed:
                vals.append(feed[k])
            elif k in local:
                fn, parts = local[k]
                vals.append(self._join(k, fn, [next(got) for _ in parts]))
            else:
                vals.append(next(got))
        t3 = time.perf_counter()
        for name, dt in (("submit", t1 - t0), ("gather", t2 - t1), ("join", t3 - t2)):
            clock[name] = clock.get(name, 0.0) + dt
        return vals

    def _join(self, buf: Hashable, fn: Any, parts: list[Any]) -> Any:
        """Output ``buf`` from its gathered ``parts``: the panels' rows copied once into
        an output of an earlier run that the caller has dropped, else a new one (a
        :class:`~thrifty.sparse.outputs.BufferPool` per output: a new output's pages are
        mapped and faulted on the copy, most of the join's time for large outputs). The
        handle keeps up to two outputs' memory per output between runs."""
        if fn is not assemble_dense or not parts or \
                not all(type(p) is np.ndarray for p in parts) or \
                len({(p.dtype, p.shape[1:]) for p in parts}) != 1 or parts[0].ndim == 0:
            return fn(*parts)
        shape = (sum(p.shape[0] for p in parts), *parts[0].shape[1:])
        pool = self._pools.get(buf)
        if pool is None or pool.shape != shape or pool.dtype != parts[0].dtype:
            pool = self._pools[buf] = BufferPool(shape, parts[0].dtype, min_bytes=1 << 17)
        return np.concatenate(parts, axis=0, out=pool.empty())

    def run(self, inputs: Mapping[str, Any]) -> Any:
        """The plan's outputs for ``inputs`` (as :meth:`RunnablePlan.run` returns them),
        computed on the cluster; inputs it holds already are not sent again."""
        return self.run_feed(self._feed(inputs))

    def run_feed(self, feed: Mapping[Any, Any]) -> Any:
        """:meth:`run` on the input buffers' values (checked inputs and constants)."""
        retry = _retry_errors()
        clock = {"stamp": 0.0, "scatter": 0.0, "compute": 0.0}
        for attempt in range(1, self.attempts + 1):
            try:
                clock["scatter"] += self._ensure(feed)
                clock["stamp"] += self._stamping
                t0 = time.perf_counter()
                vals = self._attempt(feed, clock)
                clock["compute"] += time.perf_counter() - t0
            except retry:
                if attempt == self.attempts:
                    raise
                self._wait_for_workers()
                continue
            self.timings = {**clock, "attempts": attempt}
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

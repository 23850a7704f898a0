"""Exact dynamic programming for forward/backward chains (after Rotor: Beaumont,
Eyraud-Dubois, Herrmann, Joly and Shilova, "Optimal checkpointing for heterogeneous chains",
ACM TOMS 2024).

A *chain* is the training graph of a sequential network::

    F_0 -> F_1 -> ... -> F_{n-1}            F_j writes the activation a_j
                            |
    B_jmin <- ...  <- B_{n-1}              B_j reads δ_j (from B_{j+1}), a subset of
                                           {a_{j-1}, a_j} and inputs; writes δ_{j-1}

(``jmin`` is 0 or 1; the Checkmate graphs have ``jmin = 1``, B_j reading a_{j-1}, a_j.)
The value ``C(s, t, h, e, m)`` is the least compute time to run B_t … B_s, starting with the
checkpoint a_{s-1}, δ_t and (if ``h``) a_t resident, and ending with δ_{s-1} (and a_{s-1}
if ``e``), within ``m`` bytes. Either ``s = t`` (recompute F_t if B_t reads a_t and it is
not held, then run B_t), or for a split ``k`` in ``[s, t)`` run F_s … F_k keeping only
a_k, solve ``[k+1, t]`` with a_k as checkpoint (ending with a_k kept or not: Rotor's
"F_all" choice), then ``[s, k]``. Memory is counted in slots of ``u`` bytes, ``u`` the gcd
of every size (exact), or, when that makes too many slots, of ``budget / slots`` bytes with
sizes rounded up (every plan still fits, but the DP may miss its best one). The tables
hold ``C`` for every ``m`` (numpy arrays over the memory slots); a kernel compiled by numba
(cached on disk; the first call in a process loads it) fills every ``(s, t)`` of one length
``t - s`` per call, about layers³ x slots scalar steps in all (the numpy code it replaces,
kept as :meth:`_ChainDP._split` and compared with it in the tests, cost about layers² Python
steps of array work).
The frees are written eagerly by :func:`~thrifty.memory.budget.sequence.plan_from_sequence`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from thrifty.errors import GraphError
from thrifty.graph.taskgraph import TaskGraph
from thrifty.memory.budget.sequence import plan_from_sequence
from thrifty.memory.model import Plan

__all__ = ["Chain", "ChainError", "as_chain", "chain_plan"]

_INF = math.inf


class ChainError(GraphError):
    """The graph is not a forward/backward chain (names what broke the shape)."""


@dataclass(frozen=True, slots=True)
class Chain:
    """A recognised chain: forward and backward task ids per layer, and the costs."""

    forward: tuple[Hashable, ...]          # F_0 .. F_{n-1}
    backward: tuple[Hashable | None, ...]  # B_0 .. B_{n-1} (None below jmin)
    jmin: int


def as_chain(g: TaskGraph) -> Chain:
    """Recognise ``g`` as a chain, or raise :class:`ChainError` saying why not.

    Example
    -------
    >>> from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
    >>> g = TaskGraph([Task("f0", writes=("a0",)), Task("f1", reads=("a0",), writes=("a1",)),
    ...                Task("b1", reads=("a0", "a1"), writes=("d0",))],
    ...               [Buffer("a0", 1, "f0"), Buffer("a1", 1, "f1"), Buffer("d0", 1, "b1")])
    >>> as_chain(g).backward
    (None, 'b1')
    """
    prod = {b: buf.producer for b, buf in g.buffers.items()}
    held = [b for b in g.results if g.readers[b]]
    if held:
        raise ChainError(f"result {held[0]!r} is read by a task; the chain DP frees what it "
                         "reads, so a chain's results are buffers nobody reads")

    def made(task_id: Hashable) -> list[Hashable]:
        return [b for b in g.tasks[task_id].reads if prod[b] is not None]

    def main_write(task_id: Hashable) -> Hashable:
        writes = g.tasks[task_id].writes
        w = [b for b in writes if b not in g.results or g.readers[b]]
        if not w and len(writes) == 1:
            w = list(writes)  # the last gradient: a result
        if len(w) != 1:
            raise ChainError(f"task {task_id!r} writes {len(w)} non-result buffers; a chain "
                             "task writes one (plus results)")
        return w[0]

    starts = [t for t in g.order if not made(t)]
    if len(starts) != 1:
        raise ChainError(f"a chain has one task reading only inputs; found {len(starts)}")
    fwd = [starts[0]]
    act = [main_write(starts[0])]
    while True:
        nxt = [s for s in g.successors(fwd[-1]) if made(s) == [act[-1]]]
        if len(nxt) != 1:
            break
        fwd.append(nxt[0])
        act.append(main_write(nxt[0]))
    n = len(fwd)
    layer_of = {a: j for j, a in enumerate(act)}
    bwd: list[Hashable | None] = [None] * n
    prev_out: Hashable | None = None
    rest = [t for t in g.order if t not in set(fwd)]
    expected = n - 1
    for t in rest:
        reads = made(t)
        layers = sorted(layer_of[b] for b in reads if b in layer_of)
        others = [b for b in reads if b not in layer_of]
        if not layers or layers[-1] != expected:
            raise ChainError(f"backward task {t!r} should read a_{expected} "
                             f"(forward {fwd[expected]!r}) as its last activation")
        if any(j not in (expected - 1, expected) for j in layers):
            raise ChainError(f"backward task {t!r} reads activations of layers {layers}; "
                             f"B_{expected} may read only a_{expected - 1} and a_{expected}")
        if others != ([prev_out] if prev_out is not None else []):
            raise ChainError(f"backward task {t!r} must read exactly the gradient of the "
                             "previous backward task and activations")
        bwd[expected] = t
        prev_out = main_write(t)
        expected -= 1
    if expected not in (0, -1) or not rest:
        raise ChainError(f"the backward tasks stop at layer {expected + 1}; a chain's "
                         "backward runs down to layer 1 or 0")
    return Chain(tuple(fwd), tuple(bwd), expected + 1)


def chain_plan(g: TaskGraph, budget: int, slots: int | None = 2000,
               time_limit: float | None = None) -> Plan:
    """The least-compute-time recompute plan of chain ``g`` within ``budget``, over the
    DP's plan space (see the module docstring).

    Memory is counted in slots of ``u`` bytes, ``u`` the gcd of every buffer size and
    workspace, with ``budget // u`` slots: exact. When that is more slots than
    ``max(slots, EXACT_CELLS / layers²)`` (``slots=None``: never), the slot is
    ``budget // slots`` bytes instead, sizes rounded up: every plan still fits, but a
    plan may be missed. Raises :class:`ChainError` when ``g`` is not a chain, no plan fits
    (in that accounting), ``slots=None`` would need more than ``16 x EXACT_CELLS`` table
    cells, or the DP runs past ``time_limit`` seconds (it costs about
    layers³ x slots). ``plan.info["dp_optimal"]`` is ``True`` when memory was counted
    exactly: the plan is then of least compute time among the DP's plans (Rotor's
    persistent schedules). That is not a claim over every plan: on small random chains
    an exhaustive search finds faster plans for a few budgets (workspaces, backward tasks
    that do not read ``a_{j-1}``, extra outputs), so ``plan.info["optimal"]`` is always
    ``False`` here (:func:`thrifty.memory.budget.plan` proves optimality by itself when
    nothing is recomputed).
    """
    ch = as_chain(g)
    deadline = None if time_limit is None else time.perf_counter() + time_limit
    n = len(ch.forward)
    sizes = [buf.size for buf in g.buffers.values()] + [t.workspace for t in g.tasks.values()]
    unit = math.gcd(*sizes) or 1
    cap = max(EXACT_CELLS // (n * n), 1)
    exact = slots is None or budget // unit <= max(slots, cap)
    if not exact:
        assert slots is not None
        unit = max(1, budget // slots)
        exact = all(s % unit == 0 for s in sizes)
    tb = _layer_tables(g, ch, unit)
    m0 = budget // unit - sum(-(-buf.size // unit) for buf in g.buffers.values()
                              if buf.producer is None)
    if m0 < 0:
        raise ChainError(f"no chain plan fits {budget} bytes: the inputs alone exceed it")
    if n * n * (m0 + 1) > 16 * EXACT_CELLS:
        raise ChainError(f"the chain DP would need {n} x {n} x {m0 + 1} table cells (about 80 "
                         f"bytes each; at most {16 * EXACT_CELLS} allowed): the gcd of the "
                         "sizes is too small for exact counting; give slots=N to round")
    dp = _ChainDP(tb, n, ch.jmin, m0, deadline, time_limit)
    value = float(dp.cost[0, 0][0, n - 1, dp.pad + m0])
    if value == _INF:
        raise ChainError(f"no chain plan fits {budget} bytes")
    seq = dp.sequence(ch)
    info = {"optimal": False, "dp_optimal": bool(exact), "objective": value,
            "slot_bytes": unit, "slots": m0}
    return plan_from_sequence(g, seq, budget=budget, method="chain", info=info)


#: The exact (gcd) slot count is used while layers² x slots is at most this (the DP's
#: tables hold about 80 bytes per cell); beyond, memory is rounded to ``slots`` slots.
EXACT_CELLS = 1_000_000


@dataclass(frozen=True, slots=True)
class _Layers:
    """Per layer ``j`` of a chain, sizes in slots: the forward output ``a``, workspace
    ``fws`` and time ``ft``; the backward task's gradient ``dout`` (read by ``B_{j-1}``),
    other outputs ``res`` (their prefix sums ``rpre``), workspace ``bws`` and time ``bt``;
    whether it reads ``a_{j-1}`` (``rprev``) and ``a_j`` (``rcur``)."""

    a: list[int]
    fws: list[int]
    ft: list[float]
    dout: list[int]
    res: list[int]
    bws: list[int]
    bt: list[float]
    rprev: list[int]
    rcur: list[int]
    rpre: list[int]


def _layer_tables(g: TaskGraph, ch: Chain, unit: int) -> _Layers:
    """The chain's sizes per layer, in slots of ``unit`` bytes (rounded up)."""
    n, jmin = len(ch.forward), ch.jmin
    tasks = g.tasks
    bsize = {b: buf.size for b, buf in g.buffers.items()}

    def sl(x: int) -> int:
        return -(-x // unit)

    a = [sl(bsize[tasks[f].writes[0]]) if len(tasks[f].writes) == 1 else
         sl(sum(bsize[w] for w in tasks[f].writes)) for f in ch.forward]
    fws = [sl(tasks[f].workspace) for f in ch.forward]
    ft = [tasks[f].time for f in ch.forward]
    act = [next(w for w in tasks[f].writes if w not in g.results or g.readers[w])
           for f in ch.forward]
    # δ_j: the gradient B_j reads (written by B_{j+1}); 0 for j = n-1.
    dout, res, bws, rprev, rcur = ([0] * n for _ in range(5))
    bt = [0.0] * n
    for j in range(jmin, n):
        b = tasks[ch.backward[j]]
        outs = [w for w in b.writes if w not in g.results or g.readers[w]]
        if not outs and len(b.writes) == 1:
            outs = list(b.writes)
        dout[j] = sl(sum(bsize[w] for w in outs))
        res[j] = sl(sum(bsize[w] for w in b.writes if w not in outs))
        bt[j], bws[j] = b.time, sl(b.workspace)
        rprev[j] = int(j >= 1 and act[j - 1] in b.reads)
        rcur[j] = int(act[j] in b.reads)
    rpre = [0]
    for r in res:
        rpre.append(rpre[-1] + r)
    return _Layers(a, fws, ft, dout, res, bws, bt, rprev, rcur, rpre)


class _ChainDP:
    """The DP's tables, filled by increasing ``t - s``: ``cost[h, e, s, t, pad + m]`` is
    ``C(s, t, h, e, m)`` for ``m`` in ``0..m0`` (the ``pad`` entries before hold its value
    at negative ``m``: 0 for a layer without backward task, else infinite), and
    ``choice[h, e, s, t, m]`` how it is reached (-1: directly, -2: drop ``a_t``, else
    ``2 k + e2``: split at ``k``). Each ``(s, t)`` is filled for every ``h``, ``e`` and
    ``m`` at once."""

    def __init__(self, tb: _Layers, n: int, jmin: int, m0: int, deadline: float | None,
                 time_limit: float | None) -> None:
        self.tb, self.n, self.jmin, self.m0 = tb, n, jmin, m0
        self.pad = m0 + 1
        self.cost = np.full((2, 2, n, n, self.pad + m0 + 1), _INF)
        self.choice = np.full((2, 2, n, n, m0 + 1), -1, dtype=np.int32)
        self.ms = np.arange(m0 + 1)
        self.a = np.asarray(tb.a, dtype=np.int64)
        self.rpre = np.asarray(tb.rpre, dtype=np.int64)
        for t in range(min(jmin, n)):
            self.cost[:, :, t, t, :] = 0.0
        for s in range(jmin, n):
            for h in (0, 1):
                for e in (0, 1):
                    self._leaf(s, h, e)
        fill = _split_kernel()
        fws = np.asarray(tb.fws, dtype=np.int64)
        ft = np.asarray(tb.ft, dtype=np.float64)
        dout = np.asarray(tb.dout, dtype=np.int64)
        for length in range(1, n):
            if deadline is not None and time.perf_counter() > deadline:
                raise ChainError(f"the chain DP ran past its time limit of {time_limit} s")
            if fill is None:
                for s in range(n - length):
                    self._split(s, s + length)
            else:
                fill(self.cost, self.choice, self.a, fws, ft, dout, self.rpre, length)

    def _a(self, j: int) -> int:
        return self.tb.a[j] if j >= 0 else 0

    def _din(self, t: int) -> int:
        return self.tb.dout[t + 1] if t + 1 < self.n else 0

    def _leaf(self, t: int, h: int, e: int) -> None:
        """``C(t, t, h, e, m)``: recompute ``F_t`` if needed, run ``B_t``."""
        tb, A, D = self.tb, self._a(t - 1), self._din(t)
        cost, need = tb.bt[t], 0
        hh = h
        if tb.rcur[t] and not h:
            cost, hh, need = tb.ft[t] + tb.bt[t], 1, A + D + tb.a[t] + tb.fws[t]
        T = tb.a[t] if (hh and tb.rcur[t]) else 0
        keep_a = A if (e or tb.rprev[t]) else 0
        need = max(need, keep_a + D + T + tb.dout[t] + tb.res[t] + tb.bws[t])
        self.cost[h, e, t, t, self.pad + max(need, 0):] = cost

    def _split(self, s: int, t: int) -> None:
        """``C(s, t, h, e, ·)`` for every ``h``, ``e``, ``m``: run ``F_s..F_k``, solve
        ``[k+1, t]`` then ``[s, k]``, at the best ``k`` and ``e2``; or, when ``h``, drop
        ``a_t`` (``C(s, t, 0, e, m)``)."""
        tb, pad, m0, ms = self.tb, self.pad, self.m0, self.ms
        A, D = self._a(s - 1), self._din(t)
        prev = np.concatenate(([0], self.a[s:t - 1]))
        base = np.maximum.accumulate(A + D + prev + self.a[s:t]
                                     + np.asarray(tb.fws[s:t], dtype=np.int64))
        blocked = np.stack([ms[None, :] < base[:, None],
                            ms[None, :] < base[:, None] + tb.a[t]])  # [h, k, m]
        run = np.cumsum(tb.ft[s:t])[:, None]
        rsum = self.rpre[t + 1] - self.rpre[s + 1:t + 1]
        lidx = (pad - np.minimum(rsum, pad))[:, None] + ms[None, :]
        rows = np.arange(t - s)[:, None]
        ra = pad - min(A, pad)
        best = np.full((2, 2, m0 + 1), _INF)
        pick = np.full((2, 2, m0 + 1), -1, dtype=np.int32)
        for e2 in (0, 1):
            right = np.where(blocked, _INF, run + self.cost[:, e2, s + 1:t + 1, t,
                                                            ra:ra + m0 + 1])  # [h, k, m]
            left = self.cost[e2, :, s, s:t][:, rows, lidx]                   # [e, k, m]
            total = right[:, None] + left[None, :]                           # [h, e, k, m]
            kbest = total.argmin(axis=2)
            val = np.take_along_axis(total, kbest[:, :, None], axis=2)[:, :, 0]
            better = val < best
            best = np.where(better, val, best)
            pick = np.where(better, 2 * (s + kbest) + e2, pick)
        drop = best[0] <= best[1]
        best[1] = np.where(drop, best[0], best[1])
        pick[1] = np.where(drop & (best[0] < _INF), -2, pick[1])
        self.cost[:, :, s, t, pad:] = best
        self.choice[:, :, s, t] = pick

    def sequence(self, ch: Chain) -> list[Hashable]:
        """The task sequence of the optimum (from the choices)."""
        seq: list[Hashable] = []
        tb = self.tb
        stack = [(0, self.n - 1, 0, 0, self.m0)]
        while stack:
            s, t, h, e, m = stack.pop()
            if s == t:
                if t >= self.jmin:
                    if tb.rcur[t] and not h:
                        seq.append(ch.forward[t])
                    seq.append(ch.backward[t])
                continue
            c = int(self.choice[h, e, s, t, m])
            if c == -2:
                stack.append((s, t, 0, e, m))
                continue
            k, e2 = divmod(c, 2)
            seq.extend(ch.forward[s:k + 1])
            rsum = tb.rpre[t + 1] - tb.rpre[k + 1]
            stack.append((s, k, e2, e, m - rsum))  # runs second
            stack.append((k + 1, t, h, e2, m - self._a(s - 1)))
        return seq


def _fill_splits(cost: np.ndarray, choice: np.ndarray, a: np.ndarray, fws: np.ndarray,
                 ft: np.ndarray, dout: np.ndarray, rpre: np.ndarray,
                 length: int) -> None:  # pragma: no cover - compiled by numba
    """:meth:`_ChainDP._split` for every ``(s, s + length)`` at once, as scalar loops (the
    same sums in the same order, the same ties broken the same way: the first ``(e2, k)``
    of least cost, then dropping ``a_t`` when that is no dearer)."""
    n = cost.shape[2]
    width = choice.shape[4]
    pad = width
    inf = np.inf
    for s in range(n - length):
        t = s + length
        A = a[s - 1] if s >= 1 else 0
        D = dout[t + 1] if t + 1 < n else 0
        base = np.empty(length, np.int64)
        run = np.empty(length, np.float64)
        rs = np.empty(length, np.int64)
        top = -(1 << 62)
        acc = 0.0
        for i in range(length):
            prev = a[s + i - 1] if i else 0
            top = max(top, A + D + prev + a[s + i] + fws[s + i])
            base[i] = top
            acc += ft[s + i]
            run[i] = acc
            rs[i] = min(rpre[t + 1] - rpre[s + 1 + i], pad)
        ra = pad - min(A, pad)
        best = np.full((2, 2, width), inf)
        pick = np.full((2, 2, width), -1, np.int32)
        for e2 in range(2):
            for h in range(2):
                lift = a[t] if h else 0
                for e in range(2):
                    row, got = best[h, e], pick[h, e]
                    for i in range(length):
                        k = s + i
                        code = 2 * k + e2
                        r = run[i]
                        right = cost[h, e2, k + 1, t, ra:]
                        left = cost[e2, e, s, k, pad - rs[i]:]
                        for m in range(max(0, base[i] + lift), width):
                            tot = (r + right[m]) + left[m]
                            if tot < row[m]:
                                row[m] = tot
                                got[m] = code
        for e in range(2):
            for m in range(width):
                if best[0, e, m] <= best[1, e, m]:
                    best[1, e, m] = best[0, e, m]
                    if best[0, e, m] < inf:
                        pick[1, e, m] = -2
        for h in range(2):
            for e in range(2):
                for m in range(width):
                    cost[h, e, s, t, pad + m] = best[h, e, m]
                    choice[h, e, s, t, m] = pick[h, e, m]


_KERNEL: list = []


def _split_kernel() -> Any:
    """:func:`_fill_splits` compiled by numba (cached on disk), or ``None`` where
    :data:`USE_NUMBA` is false (the numpy tables are then filled one split at a time)."""
    if not USE_NUMBA:
        return None
    if not _KERNEL:
        import numba

        _KERNEL.append(numba.njit(cache=True, nogil=True)(_fill_splits))
    return _KERNEL[0]


#: Fill the DP's tables with the compiled kernel (``False``: numpy, a split at a time; the
#: tests compare the two).
USE_NUMBA = True

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
"F_all" choice), then ``[s, k]``. Memory is counted in slots of ``budget / slots`` bytes,
sizes rounded up (so every plan fits in bytes); with ``slots=None`` it is exact in bytes.
The frees are written eagerly by :func:`~thrifty.memory.budget.sequence.plan_from_sequence`.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from functools import cache
from typing import Any

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
    """The least-compute-time recompute plan of chain ``g`` within ``budget``.

    Raises :class:`ChainError` when ``g`` is not a chain, no plan fits, or the DP runs past
    ``time_limit`` seconds (its cost grows as layers³ x slots).
    ``plan.info["optimal"]`` is ``True`` when memory was counted exactly (``slots=None`` or
    every size a multiple of the slot).
    """
    ch = as_chain(g)
    deadline: list[float | None] = [
        None if time_limit is None else time.perf_counter() + time_limit]
    bsize = {b: buf.size for b, buf in g.buffers.items()}
    unit = 1 if slots is None else max(1, budget // slots)
    exact = all(s % unit == 0 for s in bsize.values()) and all(
        t.workspace % unit == 0 for t in g.tasks.values())
    tb = _layer_tables(g, ch, unit)
    C = _chain_dp(tb, len(ch.forward), ch.jmin, deadline, time_limit)  # noqa: N806
    m0 = budget // unit - sum(-(-bsize[b] // unit) for b, buf in g.buffers.items()
                              if buf.producer is None)
    value = C(0, len(ch.forward) - 1, 0, 0, m0)
    if value[0] == _INF:
        raise ChainError(f"no chain plan fits {budget} bytes")
    deadline[0] = None
    seq = _chain_sequence(C, ch, tb.a, m0)
    info = {"optimal": bool(exact), "objective": value[0], "slot_bytes": unit,
            "states": C.cache_info().currsize}
    C.cache_clear()
    return plan_from_sequence(g, seq, budget=budget, method="chain", info=info)


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


_DP = Callable[[int, int, int, int, int], tuple[float, tuple]]


def _chain_dp(tb: _Layers, n: int, jmin: int, deadline: list[float | None],
              time_limit: float | None) -> Any:
    """The DP ``C(s, t, h, e, m) -> (cost, choice)`` over layers ``s..t`` within ``m``
    slots (cached; ``deadline[0]``, when set, stops it with a :class:`ChainError`)."""
    a, fws, ft, dout, res, bws = tb.a, tb.fws, tb.ft, tb.dout, tb.res, tb.bws
    bt, rprev, rcur, rpre = tb.bt, tb.rprev, tb.rcur, tb.rpre
    calls = [0]

    def asz(j: int) -> int:
        return a[j] if j >= 0 else 0

    def din(t: int) -> int:
        return dout[t + 1] if t + 1 < n else 0

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))

    @cache
    def C(s: int, t: int, h: int, e: int, m: int) -> tuple[float, tuple]:  # noqa: N802
        """(cost, choice) for B_t..B_s; choice reconstructs the sequence."""
        calls[0] += 1
        limit = deadline[0]
        if limit is not None and calls[0] % 4096 == 0 and time.perf_counter() > limit:
            raise ChainError(f"the chain DP ran past its time limit of {time_limit} s")
        A, D = asz(s - 1), din(t)
        best: tuple[float, tuple] = (_INF, ())
        if s == t and t < jmin:
            return (0.0, ())  # no backward task in this layer
        if s == t:
            cost, hh, pre = 0.0, h, tuple[tuple[str, int], ...]()
            if rcur[t] and not hh:
                if A + D + a[t] + fws[t] > m:
                    return best
                cost, hh, pre = ft[t], 1, (("F", t),)
            T = a[t] if (hh and rcur[t]) else 0
            keep_a = A if (e or rprev[t]) else 0
            if keep_a + D + T + dout[t] + res[t] + bws[t] > m:
                return best
            return (cost + bt[t], pre + (("B", t),))
        T = a[t] if h else 0
        if h:
            best = (C(s, t, 0, e, m)[0], ("drop",))
        run_t, peak_ok = 0.0, True
        for k in range(s, t):
            j = k
            prev = asz(j - 1) if j > s else 0
            if A + D + T + prev + a[j] + fws[j] > m:
                peak_ok = False
            if not peak_ok:
                break
            run_t += ft[j]
            for e2 in (0, 1):
                right = C(k + 1, t, h, e2, m - A)
                if right[0] >= best[0]:
                    continue
                rsum = rpre[t + 1] - rpre[k + 1]
                left = C(s, k, e2, e, m - rsum)
                total = run_t + right[0] + left[0]
                if total < best[0]:
                    best = (total, ("split", k, e2, rsum))
        return best

    return C


def _chain_sequence(C: _DP, ch: Chain, a: list[int], m0: int) -> list[Hashable]:  # noqa: N803
    """The task sequence of the DP's optimum (its choices, from the cache)."""
    seq: list[Hashable] = []

    def asz(j: int) -> int:
        return a[j] if j >= 0 else 0

    def emit(s: int, t: int, h: int, e: int, m: int) -> None:
        _, choice = C(s, t, h, e, m)
        if choice and choice[0] == "drop":
            emit(s, t, 0, e, m)
            return
        if s == t:
            for kind, j in choice or ():
                seq.append(ch.forward[j] if kind == "F" else ch.backward[j])
            return
        _, k, e2, rsum = choice
        seq.extend(ch.forward[s:k + 1])
        emit(k + 1, t, h, e2, m - asz(s - 1))
        emit(s, k, e2, e, m - rsum)

    emit(0, len(ch.forward) - 1, 0, 0, m0)
    return seq

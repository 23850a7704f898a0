"""Eviction planning: replay an order of tasks under a budget, evicting when memory runs out.

The policy follows Dynamic Tensor Rematerialization (Kirisame et al., ICLR 2021): when a
task needs room, evict the resident buffer with the least ``cost / (size * distance)``;
an evicted buffer is later rematerialised on demand, by recomputing its producer
(recursively, if that producer's inputs were evicted too) or, when it was offloaded, by a
prefetch. Unlike DTR, which only sees the past, the order of first computations is known
here, so ``distance`` is the compute time until the buffer's next use (Belady's rule,
weighted by cost), and the cost of each way to evict (recompute time, or the stall a
transfer cannot hide at the given bandwidth) is estimated with the copy-stream model of
:mod:`thrifty.memory.simulate`. ``lookahead=False`` gives the plain DTR baseline (staleness
instead of next use).

A :class:`Policy` also carries per-buffer overrides (``force``), used by the local search
of :mod:`thrifty.memory.budget.refine`, and a set of *checkpoints* for the √n baseline.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
import time
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from thrifty.graph.taskgraph import TaskGraph
from thrifty.memory.budget.passes import SESSION, TIMED_OUT, cpu_bound, passes_of, time_bound
from thrifty.memory.model import Plan, Step

__all__ = ["NoRoom", "Policy", "cpu_bound", "evict_plan", "passes_of", "time_bound"]

_EPS = 1e-9
_SCAN_LIMIT = 64
_HEAP_CANDIDATES = 64
_MEMO_SIZE = 8


class NoRoom(Exception):  # noqa: N818 - internal signal, never escapes plan()
    """Internal: the policy found nothing left to evict (the budget is too small for it)."""


@dataclass(frozen=True, slots=True)
class Policy:
    """How :func:`evict_plan` chooses what to evict.

    Attributes
    ----------
    lookahead:
        Rank by compute time to the next use (``True``) or by staleness, as DTR (``False``).
    recompute, offload:
        Which ways of evicting are allowed (offload also needs a bandwidth).
    force:
        Per-buffer override: ``"keep"`` (never evict), ``"free"`` (only by recompute),
        ``"offload"`` (only by offload), ``"drop"`` (freed after every task of the order
        that reads or writes it, and recomputed at its next use; a result is never dropped).
    checkpoints:
        When not ``None``: the √n policy. Buffers written by forward tasks that are not in
        this set are freed right after their last forward reader (and recomputed on demand).
    forward:
        The forward tasks, for ``checkpoints``.
    evict:
        ``False``: evict nothing but dead buffers (the √n policy alone decides what to drop).
    seed:
        Seeds the sampling of eviction candidates on large graphs.
    max_work:
        The pass gives up (:class:`NoRoom`) once it has issued more than ``max_work`` times
        as many computes (plus 64) as it has reached tasks of the order: near the smallest
        budget it can reach, eviction may thrash (each rematerialisation evicting what the
        next one needs), and its work would grow without bound; a plan that recomputes every
        task ``max_work`` times over is not worth finding. Counting against the tasks
        reached so far, not the whole order, stops a pass that starts to thrash early
        (recomputation mostly comes late, in backward passes). ``None``: no limit.
    """

    lookahead: bool = True
    recompute: bool = True
    offload: bool = True
    force: Mapping[Hashable, str] = field(default_factory=dict)
    checkpoints: frozenset[Hashable] | None = None
    forward: frozenset[Hashable] = frozenset()
    evict: bool = True
    seed: int = 0
    max_work: float | None = 3.0


def evict_plan(g: TaskGraph, order: Sequence[Hashable], budget: int,
               bandwidth: float | None, policy: Policy) -> Plan:
    """A plan computing ``order`` (first computations) within ``budget``, or raise NoRoom.

    Example
    -------
    >>> from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
    >>> g = TaskGraph([Task("a", writes=("x",), time=1.0),
    ...                Task("b", reads=("x",), writes=("y",), time=1.0)],
    ...               [Buffer("x", 8, "a"), Buffer("y", 4, "b")])
    >>> [s.op for s in evict_plan(g, ["a", "b"], 12, None, Policy()).steps]
    ['compute', 'compute', 'free']
    """
    s = SESSION.get()
    if s is None or s.graph is not g:
        return _Builder(g, order, budget, bandwidth, policy, None).build()
    key = (tuple(order), budget, bandwidth if policy.offload else None, _policy_key(policy))
    hit = s.memo.get(key)
    if hit is None:
        # Only passes that evict may run out of time (a plain replay always completes).
        bounded = policy.evict and (policy.recompute or policy.offload)
        deadline = s.deadline if bounded else None
        cpu_deadline = s.cpu_deadline if bounded else None
        try:
            hit = _Builder(g, order, budget, bandwidth, policy, deadline, cpu_deadline).build()
        except NoRoom as e:
            if str(e) == TIMED_OUT and (deadline is not None or cpu_deadline is not None):
                raise  # not a property of the pass: never remembered
            hit = e
        if len(s.memo) >= _MEMO_SIZE:
            del s.memo[next(iter(s.memo))]
        s.memo[key] = hit
    if isinstance(hit, NoRoom):
        raise NoRoom(str(hit))
    return hit


def _policy_key(p: Policy) -> tuple[object, ...]:
    return (p.lookahead, p.recompute, p.offload, frozenset(p.force.items()), p.checkpoints,
            p.forward, p.evict, p.seed, p.max_work)


class _Resident:
    """A set that also samples in O(k): its items in a list, each one's index in a dict
    (a removal moves the last item into the hole)."""

    __slots__ = ("items", "where")

    def __init__(self, items: Iterable[Hashable] = ()) -> None:
        self.items: list[Hashable] = []
        self.where: dict[Hashable, int] = {}
        for b in items:
            self.add(b)

    def __contains__(self, b: object) -> bool:
        return b in self.where

    def __iter__(self) -> Iterator[Hashable]:
        return iter(list(self.items))

    def __len__(self) -> int:
        return len(self.items)

    def add(self, b: Hashable) -> None:
        if b not in self.where:
            self.where[b] = len(self.items)
            self.items.append(b)

    def discard(self, b: Hashable) -> None:
        i = self.where.pop(b, None)
        if i is None:
            return
        last = self.items.pop()
        if i < len(self.items):
            self.items[i] = last
            self.where[last] = i

    def sample(self, rng: random.Random, k: int) -> list[Hashable]:
        """``rng.sample(self.items, k)``, the same draws, with the set-based branch of
        :meth:`random.Random.sample` (``n`` well above ``k``) written inline: it runs at
        every eviction of a large graph."""
        items = self.items
        n = len(items)
        if n <= 21 + 4 ** math.ceil(math.log(3 * k, 4)) or k <= 5:
            return rng.sample(items, k)
        bits, getrandbits = n.bit_length(), rng.getrandbits
        selected: set[int] = set()
        out = []
        for _ in range(k):
            j = getrandbits(bits)
            while j >= n or j in selected:
                j = getrandbits(bits)
            selected.add(j)
            out.append(items[j])
        return out


class _Pins:
    """A multiset of pinned buffers (never evicted while pinned): nested
    rematerialisations add their own pins and remove them when done."""

    __slots__ = ("count", "total")

    def __init__(self) -> None:
        self.count: dict[Hashable, int] = {}
        self.total = 0

    def add(self, bs: Sequence[Hashable]) -> list[Hashable]:
        c = self.count
        for b in bs:
            c[b] = c.get(b, 0) + 1
        self.total += len(bs)
        return list(bs)

    def remove(self, bs: list[Hashable]) -> None:
        c = self.count
        for b in bs:
            k = c[b] - 1
            if k:
                c[b] = k
            else:
                del c[b]
        self.total -= len(bs)


class _Builder:
    def __init__(self, g: TaskGraph, order: Sequence[Hashable], budget: int,
                 bandwidth: float | None, policy: Policy, deadline: float | None,
                 cpu_deadline: float | None = None) -> None:
        self.g, self.order, self.budget, self.policy = g, list(order), budget, policy
        self.deadline, self.cpu_deadline = deadline, cpu_deadline
        self.bw = bandwidth if (policy.offload and bandwidth is not None) else None
        self.size = {b: buf.size for b, buf in g.buffers.items()}
        self.prod = {b: buf.producer for b, buf in g.buffers.items()}
        self.results = g.results
        self.pos = {t: i for i, t in enumerate(self.order)}
        self.uses: dict[Hashable, list[int]] = {b: [] for b in g.buffers}
        for i, t in enumerate(self.order):
            for b in g.tasks[t].reads:
                self.uses[b].append(i)
        self.cum = [0.0]
        for t in self.order:
            self.cum.append(self.cum[-1] + g.tasks[t].time)
        self.finite = math.isfinite(self.cum[-1])  # choose()'s bounds assume finite costs
        self.fwd_last: dict[Hashable, int] = {}
        if policy.checkpoints is not None:
            for b in g.buffers:
                fw = [i for i in self.uses[b] if self.order[i] in policy.forward]
                if fw:
                    self.fwd_last[b] = fw[-1]
        self.input_until = self._input_horizon() if policy.recompute else {}
        self.resident = _Resident(b for b in g.buffers if self.prod[b] is None)
        self.mem = sum(self.size[b] for b in self.resident)
        self.host: set[Hashable] = set()
        self.steps: list[Step] = []
        self.cur = 0
        self.touch: dict[Hashable, int] = dict.fromkeys(self.resident, 0)
        self.computed: set[Hashable] = set()
        self.ready: dict[Hashable, float] = dict.fromkeys(self.resident, 0.0)
        self.host_at: dict[Hashable, float] = {}
        self.compute_end = self.copy_end = self.release_at = 0.0
        self.rng = random.Random(policy.seed)
        self.heap: list[tuple[int, int, Hashable]] = []
        self.heap_key: dict[Hashable, int] = {}
        self.tick = 0
        self.pins = _Pins()
        self.issued = 0
        self.work_cap = math.inf if policy.max_work is None else policy.max_work
        for b in self.resident:
            self.push(b)

    # -- the pass ---------------------------------------------------------------------------
    def build(self) -> Plan:
        if self.mem > self.budget:
            raise NoRoom(f"the inputs alone take {self.mem} bytes")
        for b in [b for b in self.resident if not self.uses[b] and b not in self.results]:
            self.emit_free(b)  # inputs nobody reads: dropped before the first compute
        for i, t in enumerate(self.order):
            self.cur = i
            self.run(t)
            self.release_dead(t)
        self.cur = len(self.order)
        back = [b for b in self.results if b in self.host]
        if back:  # offloaded results come back at the end; nothing else is needed then
            for b in [b for b in self.resident if b not in self.results]:
                self.emit_free(b)
            for b in back:
                if self.mem + self.size[b] > self.budget:
                    raise NoRoom("the results do not fit at the end")
                self.emit_prefetch(b)
        return Plan(tuple(self.steps), budget=self.budget,
                    info={"offload_bandwidth": self.bw} if self.bw is not None else {})

    def run(self, t: Hashable) -> None:
        task = self.g.tasks[t]
        reads = list(dict.fromkeys(task.reads))
        # Bring back what is missing, biggest recompute footprint first: a first pass pins
        # nothing it brought back, a second pins those, a third pins every read; each pass
        # brings back what an earlier one lost (reads used now rank last for eviction).
        # Recursive rematerialisations take one pass with everything pinned (more passes
        # there would multiply with the depth). Pins are counted (``self.pins``), so that a
        # nested rematerialisation costs its own reads and writes, not the depth so far.
        pins = self.pins
        first = 0 if not pins.total else 2
        for attempt in range(first, 3):
            missing = sorted((b for b in reads if b not in self.resident),
                             key=self.footprint, reverse=True)
            if not missing:
                break
            added = pins.add(task.writes)
            if attempt == 2:
                added += pins.add([b for b in reads if b in self.resident])
            for b in missing:
                if b not in self.resident:
                    self.materialize(b)
                if attempt:
                    added += pins.add((b,))
            pins.remove(added)
        if any(b not in self.resident for b in reads):
            raise NoRoom(f"cannot hold the reads of {t!r} together")
        added = pins.add((*reads, *task.writes))
        for w in task.writes:  # a recompute: drop stale copies first (they are rewritten)
            if w in self.resident and w not in self.results:
                self.emit_free(w)
        need = sum(self.size[w] for w in task.writes) + task.workspace
        self.make_room(need)
        self.emit_compute(t)
        pins.remove(added)

    def footprint(self, b: Hashable) -> int:
        """Bytes a rematerialisation of ``b`` touches (its producer's reads and writes)."""
        p = self.prod[b]
        if b in self.host or p is None:
            return self.size[b]
        task = self.g.tasks[p]
        return sum(self.size[r] for r in (*task.reads, *task.writes))

    def materialize(self, b: Hashable) -> None:
        if b in self.host:
            self.make_room(self.size[b])
            self.emit_prefetch(b)
            return
        p = self.prod[b]
        if p is None:
            raise NoRoom(f"input {b!r} was dropped")
        if not self.policy.recompute:
            raise NoRoom(f"{b!r} was dropped and recompute is not allowed")
        self.run(p)

    def release_dead(self, t: Hashable) -> None:
        task = self.g.tasks[t]
        ck = self.policy.checkpoints
        for b in (*task.reads, *task.writes):
            if b not in self.resident or b in self.results:
                continue
            if self.next_use(b) is None and self.dead_input_ok(b):
                self.emit_free(b)
            elif (ck is not None and t in self.policy.forward and b not in ck
                  and self.prod[b] in self.policy.forward
                  and self.fwd_last.get(b, -1) <= self.cur):
                self.emit_free(b)
            elif (self.policy.force.get(b) == "drop" and self.policy.recompute
                  and self.prod[b] is not None
                  and (self.next_use(b) or 0) > self.cur + 1):
                self.emit_free(b)  # recomputed at its next use

    def dead_input_ok(self, b: Hashable) -> bool:
        if self.prod[b] is not None:
            return True
        return self.input_until.get(b, -1) <= self.cur

    def _input_horizon(self) -> dict[Hashable, int]:
        """For each buffer: the last position where a recompute might still need it."""
        until: dict[Hashable, int] = {}
        for t in reversed(self.order):
            task = self.g.tasks[t]
            horizon = max((until.get(w, -1) for w in task.writes), default=-1)
            for w in task.writes:
                horizon = max(horizon, self.uses[w][-1] if self.uses[w] else -1)
            for b in task.reads:
                until[b] = max(until.get(b, -1), horizon,
                               self.uses[b][-1] if self.uses[b] else -1)
        return until

    # -- eviction ---------------------------------------------------------------------------
    def next_use(self, b: Hashable) -> int | None:
        u = self.uses[b]
        k = bisect.bisect_right(u, self.cur)
        return u[k] if k < len(u) else None

    def used_now(self, b: Hashable) -> bool:
        """Whether the task at the current position reads ``b``."""
        u = self.uses[b]
        k = bisect.bisect_left(u, self.cur)
        return k < len(u) and u[k] == self.cur

    def make_room(self, need: int) -> None:
        while self.mem + need > self.budget:
            choice = self.choose()
            if choice is None and len(self.resident) > _SCAN_LIMIT:  # sampled: try them all
                choice = self.choose(every=True)
            if choice is None:
                raise NoRoom(f"needs {self.mem + need} bytes at task "
                             f"{self.order[self.cur]!r}, nothing left to evict")
            b, how = choice
            if how == "free":
                self.emit_free(b)
            else:
                self.emit_offload(b)

    def candidates(self, every: bool = False) -> list[Hashable]:
        """Resident buffers that may be evicted: all of them when few (or ``every``); else a
        seeded sample (as DTR samples), plus, with look-ahead, those whose next use is
        farthest (a lazy max-heap on the next-use position: Belady's order)."""
        pinned = self.pins.count
        results = () if self.bw is not None else self.results  # results leave by offload
        if every or len(self.resident) <= _SCAN_LIMIT:
            return [b for b in self.resident.items if not pinned.get(b) and b not in results]
        out = [b for b in self.resident.sample(self.rng, _SCAN_LIMIT)
               if not pinned.get(b) and b not in results]
        if not self.policy.lookahead:
            return out
        seen = set(out)
        keep: list[tuple[int, int, Hashable]] = []
        heap, key, where = self.heap, self.heap_key, self.resident.where
        pop = heapq.heappop
        while heap and len(keep) < _HEAP_CANDIDATES:
            entry = pop(heap)
            b = entry[2]
            if b not in where or key.get(b) != entry[0]:
                continue  # stale
            keep.append(entry)
            if b not in seen and not pinned.get(b) and b not in results:
                out.append(b)
                seen.add(b)
        for entry in keep:
            heapq.heappush(heap, entry)
        return out

    def push(self, b: Hashable) -> None:
        """(Re)index a resident buffer by its next use (the farthest first)."""
        if not self.policy.lookahead:
            return
        nu = self.next_use(b)
        key = -(nu if nu is not None else len(self.order) + 1)
        self.heap_key[b] = key
        self.tick += 1
        heapq.heappush(self.heap, (key, self.tick, b))

    def choose(self, every: bool = False) -> tuple[Hashable, str] | None:
        """What to evict next: a dead buffer if a candidate is one (the first in candidate
        order), else the candidate of least ``(cost + ε) / (size * distance)``, ties to the
        first in candidate order; ``None`` when nothing may be evicted.

        The same choice as :meth:`choose_plain`, which scores every candidate in full, with
        less work: a first sweep takes each candidate's distance and a lower bound of its
        cost (the producer's time for a recompute, which only adds the times of evicted
        inputs; ``back + 0.01 x`` for an offload, which only adds a stall), then candidates
        are scored in order of their bound's score, and the sweep stops at the first bound
        above the best score found (ties by candidate order). Rounding is monotone, so a
        bound computed in floating point stays below the score it bounds.
        """
        if not self.finite:
            return self.choose_plain(every)
        pol = self.policy
        force, size, results, uses, cum = pol.force, self.size, self.results, self.uses, self.cum
        prod, tasks, until = self.prod, self.g.tasks, self.input_until
        cur, lookahead, recompute, bw, evict = (self.cur, pol.lookahead, pol.recompute,
                                                 self.bw, pol.evict)
        inf_bw = bw is not None and math.isinf(bw)
        left, right = bisect.bisect_left, bisect.bisect_right
        here = cum[cur + 1]
        rows: list[tuple[float, int, Hashable, float, bool, bool]] = []
        for idx, b in enumerate(self.candidates(every)):
            how = force.get(b)
            sb = size[b]
            if how == "keep" or sb == 0:
                continue
            u = uses[b]
            k = left(u, cur)
            now = k < len(u) and u[k] == cur
            if now:
                k = right(u, cur)
            nu = u[k] if k < len(u) else None
            p = prod[b]
            if (nu is None and not now and (p is not None or until.get(b, -1) <= cur)
                    and b not in results):
                return b, "free"
            if not evict:
                continue
            if lookahead:
                if now:
                    dist = _EPS
                elif nu is not None:
                    dist = cum[nu] - here + _EPS + (nu - cur) * _EPS
                else:
                    dist = cum[-1] - here + _EPS + len(self.order) * _EPS
            else:
                dist = float(cur - self.touch.get(b, 0) + 1)
            if b in results:
                how = "offload"
            lb = math.inf
            rc = recompute and how != "offload" and p is not None
            if rc:
                lb = tasks[p].time
            off = bw is not None and how != "free"
            if bw is not None and off:
                x = 0.0 if inf_bw else sb / bw
                low = (max(0.0, x - dist) if lookahead else x) + 0.01 * x
                if low < lb:
                    lb = low
            if rc or off:
                rows.append(((lb + _EPS) / (sb * dist), idx, b, dist, rc, off))
        rows.sort()  # (bound score, candidate index): the indices differ, so b is never compared
        best: tuple[float, int, Hashable, str] | None = None
        for low_score, idx, b, dist, rc, off in rows:
            if best is not None and (low_score > best[0]
                                     or (low_score == best[0] and idx > best[1])):
                break
            cost, kind = math.inf, ""
            if rc:
                cost, kind = self.recompute_cost(b), "free"
            if off:
                c = self.offload_cost(b, dist)
                if c < cost:
                    cost, kind = c, "offload"
            if not kind:
                continue
            score = (cost + _EPS) / (size[b] * dist)
            if best is None or score < best[0] or (score == best[0] and idx < best[1]):
                best = (score, idx, b, kind)
        return None if best is None else (best[2], best[3])

    def choose_plain(self, every: bool = False) -> tuple[Hashable, str] | None:
        """:meth:`choose` scoring every candidate in full: the definition :meth:`choose`
        must agree with (the tests compare their plans), and its fall-back when a task's
        time is not finite (its bounds assume finite costs)."""
        best: tuple[float, Hashable, str] | None = None
        pol = self.policy
        force, size, results, uses, cum = pol.force, self.size, self.results, self.uses, self.cum
        cur, lookahead, recompute, offload = self.cur, pol.lookahead, pol.recompute, self.bw
        left, right = bisect.bisect_left, bisect.bisect_right
        here = cum[cur + 1]
        for b in self.candidates(every):
            how = force.get(b)
            if how == "keep" or size[b] == 0:
                continue
            u = uses[b]  # the next use and whether the task made room for reads b
            k = left(u, cur)
            now = k < len(u) and u[k] == cur
            if now:
                k = right(u, cur)
            nu = u[k] if k < len(u) else None
            if nu is None and not now and self.dead_input_ok(b) and b not in results:
                return b, "free"
            if not pol.evict:
                continue
            if lookahead:
                if now:
                    dist = _EPS
                elif nu is not None:
                    dist = cum[nu] - here + _EPS + (nu - cur) * _EPS
                else:
                    dist = cum[-1] - here + _EPS + len(self.order) * _EPS
            else:
                dist = float(cur - self.touch.get(b, 0) + 1)
            if b in results:
                how = "offload"  # a result may leave the device, but only by offload
            cost, kind = math.inf, ""
            if recompute and how != "offload" and self.prod[b] is not None:
                cost, kind = self.recompute_cost(b), "free"
            if offload is not None and how != "free":
                c = self.offload_cost(b, dist)
                if c < cost:
                    cost, kind = c, "offload"
            if not kind:
                continue
            score = (cost + _EPS) / (size[b] * dist)
            if best is None or score < best[0]:
                best = (score, b, kind)
        return None if best is None else (best[1], best[2])

    def recompute_cost(self, b: Hashable) -> float:
        p = self.prod[b]
        task = self.g.tasks[p]
        cost = task.time
        resident = self.resident.where
        for r in task.reads:  # DTR's neighbourhood: evicted inputs must come back too
            if r not in resident:
                q = self.prod[r]
                if r in self.host:
                    cost += self.size[r] / self.bw if self.bw else 0.0
                elif q is not None:
                    cost += self.g.tasks[q].time
        return cost

    def offload_cost(self, b: Hashable, dist: float) -> float:
        x = self.xfer(b)
        start = max(self.copy_end, self.ready.get(b, 0.0))
        stall = max(0.0, start + x - max(self.compute_end, self.release_at))
        back = max(0.0, x - dist) if self.policy.lookahead else x
        return stall + back + 0.01 * x

    def xfer(self, b: Hashable) -> float:
        if self.bw is None or math.isinf(self.bw):
            return 0.0
        return self.size[b] / self.bw

    # -- emitting steps (tracking the copy-stream clocks for cost estimates) ----------------
    def emit_compute(self, t: Hashable) -> None:
        self.issued += 1
        if self.issued > self.work_cap * (self.cur + 1) + 64:
            raise NoRoom(f"more than {self.policy.max_work} computes per task: eviction "
                         "thrashes at this budget")
        if not self.issued & 255 and (
                (self.deadline is not None and time.perf_counter() > self.deadline)
                or (self.cpu_deadline is not None and time.process_time() > self.cpu_deadline)):
            raise NoRoom(TIMED_OUT)
        task = self.g.tasks[t]
        start = max([self.compute_end, self.release_at] + [self.ready[b] for b in task.reads])
        end = start + task.time
        for w in task.writes:
            if w not in self.resident:
                self.resident.add(w)
                self.mem += self.size[w]
            self.host.discard(w)
            self.ready[w] = end
            self.touch[w] = self.cur
        for b in task.reads:
            self.touch[b] = self.cur
        for b in (*task.reads, *task.writes):
            self.push(b)
        self.compute_end = end
        self.computed.add(t)
        self.steps.append(Step("compute", t))

    def emit_free(self, b: Hashable) -> None:
        self.resident.discard(b)
        self.mem -= self.size[b]
        self.steps.append(Step("free", b))

    def emit_offload(self, b: Hashable) -> None:
        start = max(self.copy_end, self.ready.get(b, 0.0))
        end = start + self.xfer(b)
        self.copy_end = end
        self.release_at = max(self.release_at, end)
        self.host_at[b] = end
        self.resident.discard(b)
        self.host.add(b)
        self.mem -= self.size[b]
        self.steps.append(Step("offload", b))

    def emit_prefetch(self, b: Hashable) -> None:
        start = max(self.copy_end, self.compute_end, self.host_at[b])
        end = start + self.xfer(b)
        self.copy_end = end
        self.ready[b] = end
        self.host.discard(b)
        self.resident.add(b)
        self.mem += self.size[b]
        self.touch[b] = self.cur
        self.push(b)
        self.steps.append(Step("prefetch", b))

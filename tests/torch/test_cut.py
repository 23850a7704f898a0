"""The minimum cut of thrifty.torch.cut against brute force over every recompute set.

Small random joint graphs (forward tasks over an input and each other, some random ops that
must run once, multi-output tasks, backward tasks reading forward values): for a price
``lam``, the cut's recompute set must be valid (every value the backward or a recomputed task
reads is saved or recomputed) and its cost (saved bytes plus the priced recomputation) the
least over all subsets of the forward tasks. The backward's order and modelled peak
(:func:`backward_order`, :func:`backward_peak`) against a step-by-step count of live bytes,
and :func:`lowest_peak_within` within the saved-bytes limit, never above the cut's peak.
"""

from __future__ import annotations

import itertools

import pytest

pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from thrifty.graph.taskgraph import Buffer, Task, TaskGraph  # noqa: E402
from thrifty.torch.cut import (  # noqa: E402
    MEMORY_BOUND_WEIGHT,
    TIE_BREAK,
    backward_order,
    backward_peak,
    cheapest_within,
    cut_at,
    lowest_peak_within,
    price,
    recompute_cost,
)
from thrifty.torch.joint import JointGraph  # noqa: E402


@st.composite
def joints(draw):
    n = draw(st.integers(1, 7))
    tasks, bufs = [], [Buffer("x", draw(st.sampled_from([0, 64])), None)]
    made = ["x"]
    for i in range(n):
        reads = draw(st.lists(st.sampled_from(made), min_size=1, max_size=3, unique=True))
        outs = tuple(f"f{i}.{k}" for k in range(draw(st.sampled_from([1, 1, 2]))))
        tasks.append(Task(f"f{i}", reads=tuple(reads), writes=outs,
                          time=draw(st.floats(1e-9, 1e-5)),
                          attrs={"backward": False,  # elementwise ops (0 flops) too
                                 "flops": draw(st.sampled_from([0, draw(st.integers(1, 10**6))])),
                                 "random": draw(st.booleans()) and draw(st.booleans())}))
        bufs += [Buffer(o, draw(st.integers(1, 4096)), f"f{i}") for o in outs]
        made += list(outs)
    for j in range(draw(st.integers(1, 3))):
        reads = draw(st.lists(st.sampled_from(made), min_size=1, max_size=3, unique=True))
        tasks.append(Task(f"b{j}", reads=tuple(reads), writes=(f"g{j}",), time=1e-6,
                          attrs={"backward": True, "flops": 0, "random": False}))
        bufs.append(Buffer(f"g{j}", 0, f"b{j}"))
    g = TaskGraph(tasks, bufs, results={f"g{j}" for j in range(len(tasks) - n)})
    return JointGraph(g, [t.id for t in tasks], {"x", *(f"f{i}" for i in range(n))})


def _needed(g: TaskGraph, recompute: set) -> set:
    need = set()
    for t in g.tasks.values():
        if t.attrs["backward"] or t.id in recompute:
            need.update(t.reads)
    return need


def _cost(g: TaskGraph, recompute: set, lam: float, first: bool = False) -> int | None:
    """Saved bytes plus the priced recomputation; ``None`` if the set recomputes an op
    that must run once."""
    if any(g.tasks[t].attrs["random"] for t in recompute):
        return None
    saved = sum(g.buffers[b].size for b in _needed(g, recompute)
                if g.buffers[b].producer not in recompute)
    fwd = [t for t in g.tasks if not g.tasks[t].attrs["backward"]]
    return saved + sum(price(g.tasks[t], lam, k / len(fwd), first)
                       for k, t in enumerate(fwd) if t in recompute)


@pytest.mark.parametrize("first", [False, True])
def test_price(first):
    """The priced recomputation: flops at ``lam``; without flops, a hundredth of the
    traffic when memory-bound ops go first."""
    mm = Task("mm", time=2e-6, attrs={"flops": 10**5})
    relu = Task("relu", time=1e-6, attrs={"flops": 0})
    lam = 1e9
    assert price(mm, lam, 0.5, first) == int(lam * recompute_cost(mm) * (1 + TIE_BREAK / 2)) + 1
    traffic = 1e-6 * 2e10
    want = (int(MEMORY_BOUND_WEIGHT * traffic) + 1 if first
            else int(lam * recompute_cost(relu)) + 1)
    assert price(relu, lam, 0.0, first) == want
    assert price(relu, 0.0, 0.0, first) == 0


@settings(max_examples=300, deadline=None, derandomize=True)
@given(jg=joints(), lam=st.sampled_from([1.0, 1e6, 1e9, 1e11, 0.0]), first=st.booleans())
def test_cut_is_the_cheapest_recompute_set(jg, lam, first):
    g = jg.graph
    fwd = [t for t in g.tasks if not g.tasks[t].attrs["backward"]]
    got = cut_at(jg, lam, first)
    assert got <= set(fwd)
    mine = _cost(g, got, lam, first)
    assert mine is not None
    best = min(c for r in range(len(fwd) + 1) for s in itertools.combinations(fwd, r)
               if (c := _cost(g, set(s), lam, first)) is not None)
    assert mine == best


@settings(max_examples=100, deadline=None, derandomize=True)
@given(jg=joints(), frac=st.floats(0.0, 1.0), first=st.booleans())
def test_cheapest_within_fits_the_limit(jg, frac, first):
    g = jg.graph

    def saved(r):
        return sum(g.buffers[b].size for b in _needed(g, r) if g.buffers[b].producer not in r)

    eager = saved(set())
    limit = int(frac * eager)
    got = cheapest_within(jg, limit, saved, memory_bound_first=first)
    # the least a valid recompute set can save: everything recomputable recomputed
    fwd = [t for t in g.tasks if not g.tasks[t].attrs["backward"]]
    least = min(saved(set(s)) for r in range(len(fwd) + 1)
                for s in itertools.combinations(fwd, r)
                if not any(g.tasks[t].attrs["random"] for t in s))
    assert (got is None) == (least > limit)
    if got is not None:
        assert saved(got) <= limit
        assert not any(g.tasks[t].attrs["random"] for t in got)


# -- the backward's peak ---------------------------------------------------------------------

@st.composite
def joints_with_backward(draw):
    """:func:`joints` whose backward tasks also read earlier backward values and an output
    gradient (``in:tangents_1``), write values of real sizes (``bwd_bytes``), some of them
    results (weight gradients) and some temporaries."""
    jg = draw(joints())
    g = jg.graph
    fwd = [t for t in jg.order if not g.tasks[t].attrs["backward"]]
    made = [b for t in fwd for b in g.tasks[t].writes] + ["x"]
    tasks = [g.tasks[t] for t in fwd]
    bufs = [g.buffers[b] for b in ["x", *made[:-1]]] + [Buffer("in:tangents_1", 0, None)]
    grads, results, sizes = ["in:tangents_1"], set(), {}
    for j in range(draw(st.integers(1, 5))):
        reads = draw(st.lists(st.sampled_from(made), min_size=0, max_size=2, unique=True))
        reads += draw(st.lists(st.sampled_from(grads), min_size=0, max_size=2, unique=True))
        tasks.append(Task(f"b{j}", reads=tuple(reads) or ("x",), writes=(f"g{j}",), time=1e-6,
                          attrs={"backward": True, "flops": 0, "random": False}))
        bufs.append(Buffer(f"g{j}", 0, f"b{j}"))
        sizes[f"g{j}"] = draw(st.integers(0, 4096))
        grads.append(f"g{j}")
        if draw(st.booleans()):
            results.add(f"g{j}")
    out = JointGraph(TaskGraph(tasks, bufs, results=results or {grads[-1]}),
                     [t.id for t in tasks], jg.forward)
    out.bwd_bytes.update(sizes)
    return out


def _live_peak(jg, order):
    """The peak of live bytes over ``order``, step by step: at each task, the saved values
    (read in the backward, not computed there) not yet past their last read, and the values
    computed so far that are results or not yet past their last read."""
    g = jg.graph
    ran = set(order)
    reads_at = {}
    for i, t in enumerate(order):
        for b in g.tasks[t].reads:
            reads_at.setdefault(b, []).append(i)
    saved = {b for b in reads_at if g.buffers[b].producer not in ran}
    made = {w: i for i, t in enumerate(order) for w in g.tasks[t].writes}
    peak = sum(g.buffers[b].size for b in saved)
    for i in range(len(order)):
        live = sum(g.buffers[b].size for b in saved if max(reads_at[b]) >= i)
        live += sum(jg.backward_bytes(w) for w, k in made.items() if k <= i and (
            w in g.results or k == i or max(reads_at.get(w, [k])) >= i))
        peak = max(peak, live)
    return peak


@settings(max_examples=300, deadline=None, derandomize=True)
@given(jg=joints_with_backward(), data=st.data())
def test_backward_order_and_peak(jg, data):
    g = jg.graph
    fwd = [t for t in jg.order if not g.tasks[t].attrs["backward"]]
    bwd = [t for t in jg.order if g.tasks[t].attrs["backward"]]
    recompute = set(data.draw(st.lists(st.sampled_from(fwd), unique=True)))
    order = backward_order(jg, recompute)
    pos = {t: i for i, t in enumerate(order)}
    # every backward task once; the recomputed tasks that run: those a backward task needs
    assert sorted(t for t in order if t in bwd) == sorted(bwd) and len(pos) == len(order)
    need, stack = set(), list(bwd)
    while stack:
        for b in g.tasks[stack.pop()].reads:
            p = g.buffers[b].producer
            if p in recompute and p not in need:
                need.add(p)
                stack.append(p)
    assert {t for t in order if t not in bwd} == need
    start = next((i for i, t in enumerate(bwd) if "in:tangents_1" in g.tasks[t].reads), 0)
    for i, t in enumerate(order):
        for b in g.tasks[t].reads:  # inputs computed before, if computed in the backward
            p = g.buffers[b].producer
            assert p not in pos or pos[p] < i
        if t in need:  # a recomputation runs just before its first reader (with the other
            # recomputations and the backward tasks before the first reader of a gradient,
            # which run when needed)
            first = min(pos[u] for u in order if set(g.tasks[t].writes) & set(g.tasks[u].reads))
            assert all(u in need or u in bwd[:start] for u in order[i:first])
    tail = [pos[t] for t in bwd[start:]]
    assert tail == sorted(tail)  # from the first reader of a gradient on, the joint order
    assert backward_peak(jg, recompute) == _live_peak(jg, order)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(jg=joints_with_backward(), frac=st.floats(0.0, 1.0), first=st.booleans(),
       weight=st.sampled_from([0.25, 1.0, 3.0, 1e6]))
def test_lowest_peak_within_fits_and_never_raises_the_peak(jg, frac, first, weight):
    g = jg.graph

    def saved(r):
        return sum(g.buffers[b].size for b in _needed(g, r) if g.buffers[b].producer not in r)

    limit = int(frac * saved(set()))
    cut = cheapest_within(jg, limit, saved, memory_bound_first=first)
    got = lowest_peak_within(jg, limit, saved, memory_bound_first=first, tries=3,
                             peak_weight=weight)
    assert (got is None) == (cut is None)
    if got is not None:
        assert saved(got) <= limit
        assert not any(g.tasks[t].attrs["random"] or g.tasks[t].attrs["backward"] for t in got)
        assert backward_peak(jg, got) <= backward_peak(jg, cut)

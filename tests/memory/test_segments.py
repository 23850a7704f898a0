"""Tests of the hill-valley segments kept by :class:`Seq` against the step-by-step reference.

A :class:`Seq` keeps its canonical segments as steps are pushed, orders are concatenated and
merged (pushing whole segments when that gives the same stack); :func:`segments` computes
them one step at a time from scratch. Liu's algorithm and the series-parallel algorithm are
checked against the same algorithms written on that reference alone (a segment list
recomputed step by step at every merge, as before the segments were kept).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from thrifty.memory.order import Compact, liu_in_tree, sp_order
from thrifty.memory.order.generate import random_in_tree, random_out_tree, series_parallel
from thrifty.memory.order.segments import (
    Seq,
    liu_merge,
    reversed_seq,
    segments,
    split_at_least,
)
from thrifty.memory.order.sp import sp_decompose

# -- the reference: plain step lists, segments recomputed step by step ----------------------

Steps = tuple[list[int], list[int], list[int], int]  # tasks, during, after, init


def ref_segments(q: Steps) -> list[tuple[int, int, int]]:
    return segments(Seq(list(q[0]), list(q[1]), list(q[2]), q[3]))


def ref_merge(parts: list[Steps]) -> Steps:
    """Liu's merge as written before the segments were kept (every part rescanned)."""
    keyed = []
    for i, q in enumerate(parts):
        begin = 0
        for h, v, end in ref_segments(q):
            keyed.append((-(h - v), i, begin, end))
            begin = end
    keyed.sort()
    contrib = [q[3] for q in parts]
    total = sum(contrib)
    tasks: list[int] = []
    during: list[int] = []
    after: list[int] = []
    init = total
    for _, i, begin, end in keyed:
        q = parts[i]
        shift = total - contrib[i]
        tasks += q[0][begin:end]
        during += [x + shift for x in q[1][begin:end]]
        after += [x + shift for x in q[2][begin:end]]
        contrib[i] = q[2][end - 1]
        total = shift + contrib[i]
    return tasks, during, after, init


def ref_final(q: Steps) -> int:
    return q[2][-1] if q[2] else q[3]


def ref_reversed(q: Steps) -> Steps:
    if not q[0]:
        return [], [], [], q[3]
    before = [q[3], *q[2][:-1]]
    return q[0][::-1], q[1][::-1], before[::-1], ref_final(q)


def ref_split(q: Steps) -> tuple[Steps, Steps]:
    k, low = 0, q[3]
    for j, r in enumerate(q[2]):
        if r < low:
            k, low = j + 1, r
    return (q[0][:k], q[1][:k], q[2][:k], q[3]), (q[0][k:], q[1][k:], q[2][k:], low)


def ref_liu(c: Compact) -> list[int]:
    """Liu's in-tree algorithm on the reference merge."""
    kids: list[list[int]] = [[] for _ in range(c.n)]
    roots = []
    for t in range(c.n):
        (kids[c.succs[t][0]] if c.succs[t] else roots).append(t)
    seqs: dict[int, Steps] = {}
    for t in range(c.n):
        parts = [seqs.pop(k) for k in kids[t]]
        q = ref_merge(parts) if len(parts) != 1 else parts[0]
        fin = ref_final(q)
        q = (q[0] + [t], q[1] + [fin + c.out[t] + c.ws[t]], q[2] + [c.kept[t]], q[3])
        seqs[t] = q
    return ref_merge([seqs[r] for r in roots])[0]


def ref_sp(c: Compact) -> list[int] | None:
    """The series-parallel algorithm on the reference merge."""
    dec = sp_decompose(c)
    if dec is None:
        return None
    nodes, root = dec

    def solve(i: int) -> Steps:
        nd = nodes[i]
        if type(nd).__name__ == "_Edge":
            return [], [], [], nd.weight  # type: ignore[union-attr]
        if type(nd).__name__ == "_Series":
            left, right = solve(nd.left), solve(nd.right)  # type: ignore[union-attr]
            m = nd.mid  # type: ignore[union-attr]
            return (left[0] + [m, *right[0]],
                    left[1] + [ref_final(left) + c.out[m] + c.ws[m], *right[1]],
                    left[2] + [right[3], *right[2]], left[3])
        parts = [solve(k) for k in nd.parts]  # type: ignore[union-attr]
        halves = [ref_split(q) for q in parts]
        head = ref_reversed(ref_merge([ref_reversed(a) for a, _ in halves]))
        tail = ref_merge([b for _, b in halves])
        return (head[0] + tail[0], head[1] + tail[1], head[2] + tail[2],
                sum(q[3] for q in parts))

    return solve(root)[0]


def as_steps(q: Seq) -> Steps:
    return list(q.tasks), list(q.during), list(q.after), q.init


def check_segments(q: Seq) -> None:
    """``q``'s kept segments are the reference's, with the least bytes resident of each."""
    if q.segs is None:
        return
    assert [s[:3] for s in q.segs] == segments(q)
    begin = 0
    for _, _, end, low in q.segs:
        assert low == min(q.after[begin:end])
        begin = end


# -- random sequences under every operation -------------------------------------------------

steps = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), max_size=12)
ops = st.lists(st.tuples(st.sampled_from(["push", "merge", "extend", "split", "reverse",
                                          "canonical"]),
                         st.integers(0, 7), st.integers(0, 7), st.integers(0, 6),
                         st.integers(0, 6)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(steps, st.integers(0, 4)), min_size=1, max_size=6), ops)
def test_kept_segments_are_the_reference_under_every_operation(
        starts: list[tuple[list[tuple[int, int]], int]],
        program: list[tuple[str, int, int, int, int]]) -> None:
    pool: list[Seq] = []
    ref: list[Steps] = []
    names = iter(range(10**6))
    for st_, init in starts:
        q = Seq([], [], [], init)  # built by pushes: segments kept from the start
        for d, a in st_:
            q.push(next(names), d, a)
        pool.append(q)
        ref.append(as_steps(q))
    for op, i, j, d, a in program:
        i, j = i % len(pool), j % len(pool)
        if op == "push":
            t = next(names)
            pool[i].push(t, d, a)
            r = ref[i]
            ref[i] = (r[0] + [t], r[1] + [d], r[2] + [a], r[3])
        elif op == "merge" and i != j:
            pool.append(liu_merge([pool[i], pool[j]]))
            ref.append(ref_merge([ref[i], ref[j]]))
        elif op == "extend":  # a copy of order j, moved to start where order i ends
            src, base = ref[j], pool[i].final()
            o = (list(src[0]), [x - src[3] + base for x in src[1]],
                 [x - src[3] + base for x in src[2]], base)
            if d % 2:  # segments not known yet
                other = Seq(list(o[0]), list(o[1]), list(o[2]), base)
            else:  # segments kept from the start
                other = Seq([], [], [], base)
                for step in zip(*o[:3]):
                    other.push(*step)
            r = ref[i]
            pool[i].extend(other)
            ref[i] = (r[0] + o[0], r[1] + o[1], r[2] + o[2], r[3])
        elif op == "split":
            pool.extend(split_at_least(pool[i]))
            ref.extend(ref_split(ref[i]))
        elif op == "reverse":
            pool.append(reversed_seq(pool[i]))
            ref.append(ref_reversed(ref[i]))
        elif op == "canonical":
            pool[i].canonical()
        for q, r in zip(pool, ref):
            assert as_steps(q) == r
            check_segments(q)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), max_size=10),
                min_size=1, max_size=5), st.lists(st.integers(0, 3), min_size=5, max_size=5))
def test_liu_merge_is_the_reference_merge(parts: list[list[tuple[int, int]]],
                                          inits: list[int]) -> None:
    seqs, refs = [], []
    t = 0
    for k, p in enumerate(parts):
        q = Seq([], [], [], inits[k])
        for d, a in p:
            q.push(t, max(d, a), a)
            t += 1
        seqs.append(q)
        refs.append(as_steps(q))
    out = liu_merge(seqs)
    assert as_steps(out) == ref_merge(refs)
    check_segments(out)


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 300), st.integers(0, 10**6), st.booleans(), st.sampled_from([1, 3, 1000]))
def test_liu_in_tree_is_the_reference_algorithm(n: int, seed: int, workspace: bool,
                                                max_size: int) -> None:
    c = Compact.of(random_in_tree(n, seed=seed, workspace=workspace, max_size=max_size))
    assert liu_in_tree(c) == ref_liu(c)


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 300), st.integers(0, 10**6), st.sampled_from([1, 3, 100]),
       st.floats(0.2, 0.9), st.booleans())
def test_sp_order_is_the_reference_algorithm(n: int, seed: int, max_size: int,
                                             branch_prob: float, out_tree: bool) -> None:
    g = (random_out_tree(n, seed=seed, max_size=max_size, edge_buffers=True) if out_tree
         else series_parallel(n, seed=seed, max_size=max_size, branch_prob=branch_prob))
    c = Compact.of(g)
    expected = ref_sp(c)
    assert expected is not None
    assert sp_order(c) == expected


def test_cycle_collection_is_restored_as_it_was() -> None:
    import gc

    c = Compact.of(random_in_tree(50, seed=3))
    assert gc.isenabled()
    order = liu_in_tree(c)
    assert gc.isenabled() and order == ref_liu(c)
    gc.disable()
    try:
        liu_in_tree(c)
        assert not gc.isenabled()
    finally:
        gc.enable()

"""How a plan's row panels are cut (``CostModel.n_tasks``) and run: on the pool, in the
calling thread one by one, or merged into one call when no core is idle. Every way gives
the dense product."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import thrifty as th
from thrifty.runtime import taskrun
from thrifty.runtime.sparse_run import specialize
from thrifty.sparse.builder import split_rows
from thrifty.sparse.cost import CostModel
from thrifty.sparse.tasks import SpmmPanel, SpmvPanel

costs = st.builds(CostModel, threads=st.integers(1, 4), tasks_per_thread=st.integers(1, 6),
                  min_task_seconds=st.floats(1e-7, 1e-2),
                  split_seconds=st.floats(1e-7, 1e-2))


@settings(max_examples=200, deadline=None)
@given(cm=costs, a=st.floats(0, 1.0), b=st.floats(0, 1.0))
def test_n_tasks_is_monotone_bounded_and_a_multiple_of_the_threads(cm, a, b):
    lo, hi = sorted((a, b))
    n_lo, n_hi = cm.n_tasks(lo), cm.n_tasks(hi)
    assert 1 <= n_lo <= n_hi <= max(1, cm.tasks_per_thread * cm.threads)
    if hi < 2 * cm.min_task_seconds or cm.threads == 1:
        assert n_hi == 1
    else:  # fewer tasks than threads only where the work holds no more
        assert n_hi < cm.threads or n_hi % cm.threads == 0
        each = min(cm.split_seconds, cm.min_task_seconds)
        assert hi / n_hi >= each * (1 - 1e-12)  # each task carries its least share


def test_default_and_finer_splits():
    cm = CostModel()
    assert [cm.n_tasks(s) for s in (0.0, 1.9e-3, 2e-3, 3e-3, 4e-3, 1.0)] == [1, 1, 2, 2, 4, 4]
    fine = CostModel(split_seconds=2.5e-4, tasks_per_thread=4)
    assert [fine.n_tasks(s) for s in (1.9e-3, 2e-3, 1.0)] == [1, 8, 8]
    assert CostModel(split_seconds=1e-3, threads=3).n_tasks(4e-3) == 3  # 4 -> the threads


@settings(max_examples=100, deadline=None)
@given(rows=st.lists(st.integers(0, 50), min_size=1, max_size=60), n=st.integers(1, 12))
def test_split_rows_covers_every_row_once(rows, n):
    cum = np.concatenate([[0], np.cumsum(rows)]).astype(np.float64)
    ranges = split_rows(cum, n)
    assert ranges[0][0] == 0 and ranges[-1][1] == len(rows)
    assert all(a < b for a, b in ranges) and len(ranges) <= max(1, n)
    assert all(r1 == r0 for (_, r1), (r0, _) in zip(ranges, ranges[1:]))


def _plan(prog, inputs, cost):
    tr = prog.traced(**inputs)
    return specialize(tr.graph, inputs, structure=tr.structure, cost=cost)


def _panel_rows(plan):
    return sorted(t.attrs["rows"] for t in plan.taskgraph.tasks.values() if "rows" in t.attrs)


PROGS = {"spmv": (th.program(lambda A, x: A @ x), lambda rng, m: rng.standard_normal(m)),
         "spmm": (th.program(lambda A, X: A @ X), lambda rng, m: rng.standard_normal((m, 5))),
         "relu-spmm": (th.program(lambda A, X: th.relu(A @ X)),
                       lambda rng, m: rng.standard_normal((m, 5)))}


@pytest.mark.parametrize("kind", list(PROGS))
@pytest.mark.parametrize("per_thread", [1, 2, 3, 4])
@pytest.mark.parametrize("threads", [2, 3])
def test_every_split_equals_the_dense_product_on_every_path(kind, per_thread, threads,
                                                            monkeypatch):
    prog, operand = PROGS[kind]
    rng = np.random.default_rng(per_thread * 10 + threads)
    A = sp.random_array((300, 200), density=0.03, format="csr", rng=rng)
    A.indptr[:] = np.minimum(A.indptr, A.indptr[150])  # empty rows in the second half
    A = sp.csr_array((A.data[:A.indptr[-1]], A.indices[:A.indptr[-1]], A.indptr),
                     shape=A.shape)
    name = "x" if kind == "spmv" else "X"
    b = operand(rng, A.shape[1])
    cost = CostModel(threads=threads, tasks_per_thread=per_thread, min_task_seconds=1e-9,
                     split_seconds=1e-9, parallel_seconds=0.0, idle_check=True)
    plan = _plan(prog, {"A": A, name: b}, cost)
    rows = _panel_rows(plan)
    assert len(rows) == threads * per_thread
    covered = np.zeros(A.shape[0], dtype=int)
    for r0, r1 in rows:
        covered[r0:r1] += 1
    assert (covered == 1).all()
    assert any(merged is not None for *_, merged in plan._compiled.levels)
    dense = A.toarray() @ b
    if kind == "relu-spmm":
        dense = np.maximum(dense, 0)
    for idle in (True, False):  # pool, or merged into one call in this thread
        monkeypatch.setattr(taskrun, "core_idle", lambda helpers, idle=idle: idle)
        np.testing.assert_allclose(plan(A=A, **{name: b}), dense, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(plan.run({"A": A, name: b}, scheduler="sync"), dense,
                               rtol=1e-12, atol=1e-12)


def test_the_merged_call_writes_what_the_panels_write():
    rng = np.random.default_rng(3)
    A = sp.random_array((90, 70), density=0.1, format="csr", rng=rng)
    x = rng.standard_normal(70)
    panels = [SpmvPanel(0, 30, "float64"), SpmvPanel(30, 31, "float64"),
              SpmvPanel(31, 90, "float64")]
    one, merged = np.empty(90), np.empty(90)
    for p in panels:
        p(one, A, x)
    views = SpmvPanel.merge(panels)(merged, A, x)
    assert [v.shape[0] for v in views] == [30, 1, 59]
    assert np.array_equal(one, merged) and all(v.base is merged for v in views)
    assert SpmvPanel.merge(panels[::-1]) is None  # not in row order
    assert SpmvPanel.merge([panels[0], panels[2]]) is None  # a gap
    assert SpmvPanel.merge([panels[0], SpmvPanel(30, 31, "float32")]) is None
    assert SpmmPanel.merge(panels) is None  # another class


def test_core_idle_reads_the_run_queue_or_says_idle(monkeypatch):
    assert taskrun.core_idle() in (True, False)
    monkeypatch.setattr(taskrun, "_CPUS", 10**6)
    assert taskrun.core_idle() is True and taskrun.core_idle(3) is True
    monkeypatch.setattr(taskrun, "_CPUS", 1)  # this thread runs: no core left
    assert taskrun.core_idle() is False
    monkeypatch.setattr(taskrun, "_LOADAVG", -1)
    assert taskrun.core_idle() is True

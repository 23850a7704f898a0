"""One scheduler vocabulary: sparse plans, memory plans and task graphs accept the same
names, refuse the same unknown ones, and the deprecated aliases still run (with a warning)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import thrifty as th
from thrifty import runtime
from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
from thrifty.memory.model import Plan
from thrifty.runtime.schedulers import resolve_scheduler
from thrifty.runtime.taskrun import run_taskgraph


def _chain() -> TaskGraph:
    tasks = [Task("a", ("x",), ("y",), 1.0, fn=lambda x: x + 1),
             Task("b", ("x",), ("z",), 1.0, fn=lambda x: 2 * x),
             Task("c", ("y", "z"), ("w",), 1.0, fn=lambda y, z: y * z)]
    bufs = [Buffer("x", 8), Buffer("y", 8, "a"), Buffer("z", 8, "b"), Buffer("w", 8, "c")]
    return TaskGraph(tasks, bufs)


@pytest.mark.parametrize("scheduler", [None, "sync", "threads"])
def test_every_named_scheduler_runs_a_taskgraph(scheduler):
    x = np.arange(4.0)
    (w,) = run_taskgraph(_chain(), {"x": x}, ["w"], scheduler)
    np.testing.assert_array_equal(w, (x + 1) * (2 * x))


@pytest.mark.parametrize("bad", ["gpu", "dask", 3, object()])
def test_unknown_schedulers_are_refused_alike_everywhere(bad):
    g = _chain()
    with pytest.raises(th.SpecError, match="valid: None .choose., 'sync', 'threads'"):
        resolve_scheduler(bad)
    with pytest.raises(th.SpecError, match="unknown scheduler"):
        run_taskgraph(g, {"x": np.ones(1)}, ["w"], bad)
    with pytest.raises(th.SpecError, match="unknown scheduler"):
        runtime.execute(g, Plan.from_order(g, g.order), {"x": np.ones(1)}, scheduler=bad)
    A = sp.random_array((20, 20), density=0.2, format="csr", rng=0)
    plan = th.program(lambda A, x: A @ x).specialize(A=A, x=np.ones(20))
    with pytest.raises(th.SpecError, match="unknown scheduler"):
        plan.run({"A": A, "x": np.ones(20)}, scheduler=bad)


@pytest.mark.parametrize("alias", ["inline", "synchronous"])
def test_deprecated_aliases_warn_and_run_in_order(alias):
    A = sp.random_array((30, 30), density=0.2, format="csr", rng=1)
    x = np.random.default_rng(1).standard_normal(30)
    plan = th.program(lambda A, x: A @ x).specialize(A=A, x=x)
    with pytest.warns(DeprecationWarning, match="use 'sync'"):
        got = plan.run({"A": A, "x": x}, scheduler=alias)
    np.testing.assert_allclose(got, A.toarray() @ x, rtol=1e-12)
    g = _chain()
    with pytest.warns(DeprecationWarning):
        r = runtime.execute(g, Plan.from_order(g, g.order), {"x": np.ones(1)},
                            scheduler=alias)
    np.testing.assert_array_equal(r.results["w"], [4.0])


def test_an_unreachable_address_fails_fast_with_a_clear_error():
    pytest.importorskip("distributed")
    with pytest.raises(th.ThriftyError, match="could not reach the Dask scheduler"):
        resolve_scheduler("tcp://127.0.0.1:9", timeout=0.5)


def test_runtime_execute_is_the_documented_function():
    g = _chain()
    r = runtime.execute(g, Plan.from_order(g, g.order), {"x": np.full(1, 3.0)})
    np.testing.assert_array_equal(r.results["w"], [24.0])
    assert r.peak_bytes > 0

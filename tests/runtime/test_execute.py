"""Plan-driven execution: results equal the unplanned run; measured peak within the plan's."""

from __future__ import annotations

import os

import numpy as np
import pytest

from thrifty.errors import PlanError, ThriftyError
from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
from thrifty.memory.model import Plan, Step
from thrifty.memory.simulate import simulate
from thrifty.runtime.execute import execute, nbytes

N = 64


def mlp_chain(depth: int = 6, seed: int = 0) -> tuple[TaskGraph, dict]:
    """x0 -> h1 -> ... -> h_depth, each h = tanh(W h_prev); a loss reads every h (a fan-in)

        x0 -> h1 -> h2 -> ... -> hd
               \\     \\          \\
                `----`-- ... --`--> loss
    """
    rng = np.random.default_rng(seed)
    ws = [rng.standard_normal((N, N)) / np.sqrt(N) for _ in range(depth)]
    tasks, bufs = [], [Buffer("x0", N * N * 8)]
    prev = "x0"
    for i in range(depth):
        h = f"h{i + 1}"
        tasks.append(Task(f"layer{i + 1}", reads=(prev,), writes=(h,), time=1.0,
                          fn=lambda x, W=ws[i]: np.tanh(W @ x)))
        bufs.append(Buffer(h, N * N * 8, f"layer{i + 1}"))
        prev = h
    hs = tuple(f"h{i + 1}" for i in range(depth))
    tasks.append(Task("loss", reads=hs, writes=("loss",), time=1.0,
                      fn=lambda *xs: np.array([sum(float(x.sum()) for x in xs)])))
    bufs.append(Buffer("loss", 8, "loss"))
    return TaskGraph(tasks, bufs, name="mlp"), {"x0": rng.standard_normal((N, N))}


def recompute_plan(depth: int) -> Plan:
    """Keep nothing but the newest activation; the loss needs all: recompute them in turn.

    A plan that recomputes every layer once more before the loss, freeing as it goes, is not
    possible (the loss reads all at once); instead: compute all, offload early ones, then
    prefetch them back before the loss.
    """
    steps = []
    for i in range(depth):
        steps.append(("compute", f"layer{i + 1}"))
        if i == 0:
            steps.append(("free", "x0"))
        if i >= 1:
            steps.append(("offload", f"h{i}"))
    for i in range(1, depth):
        steps.append(("prefetch", f"h{i}"))
    steps.append(("compute", "loss"))
    steps += [("free", f"h{i + 1}") for i in range(depth)]
    return Plan.from_steps(steps)


@pytest.mark.parametrize("scheduler", ["sync", "threads"])
def test_schedule_plan_equals_unplanned(scheduler):
    g, inputs = mlp_chain()
    plan = Plan.from_order(g, g.order)
    r = execute(g, plan, inputs, scheduler=scheduler)
    x = inputs["x0"]
    total = 0.0
    for t in g.order[:-1]:
        x = g.tasks[t].fn(x)
        total += float(x.sum())
    assert r.results["loss"][0] == total
    assert r.peak_bytes <= r.predicted_peak == simulate(g, g.order).peak


@pytest.mark.parametrize("offload_dir", [None, "disk"])
def test_offload_and_prefetch_round_trip(tmp_path, offload_dir):
    g, inputs = mlp_chain()
    ref = execute(g, Plan.from_order(g, g.order), inputs).results["loss"]
    plan = recompute_plan(6)
    d = tmp_path if offload_dir else None
    r = execute(g, plan, inputs, offload_dir=d)
    np.testing.assert_array_equal(r.results["loss"], ref)
    assert r.offloads == 5 and r.peak_bytes <= r.predicted_peak
    if d is not None:
        assert list(tmp_path.iterdir()) == []  # files removed after prefetch


def test_recompute_counts_and_result():
    # a -> x -> b -> y ; c reads x and y. Free x after b, recompute a before c.
    g = TaskGraph([Task("a", writes=("x",), fn=lambda: np.arange(4.0)),
                   Task("b", reads=("x",), writes=("y",), fn=lambda x: x * 2),
                   Task("c", reads=("x", "y"), writes=("z",), fn=lambda x, y: x + y)],
                  [Buffer("x", 32, "a"), Buffer("y", 32, "b"), Buffer("z", 32, "c")])
    plan = Plan.from_steps([("compute", "a"), ("compute", "b"), ("free", "x"),
                            ("compute", "a"), ("compute", "c"), ("free", "x"), ("free", "y")])
    r = execute(g, plan, {})
    np.testing.assert_array_equal(r.results["z"], np.arange(4.0) * 3)
    assert r.recomputes == 1 and r.peak_bytes == r.predicted_peak == 96


def test_invalid_plan_is_refused_before_running():
    g, inputs = mlp_chain(2)
    bad = Plan.from_steps([("compute", "layer2")])
    with pytest.raises(PlanError, match="step 0"):
        execute(g, bad, inputs)


def test_missing_input_and_missing_fn():
    g, _ = mlp_chain(2)
    with pytest.raises(PlanError, match="no value given for input"):
        execute(g, Plan.from_order(g, g.order), {})
    g2 = TaskGraph([Task("a", writes=("x",))], [Buffer("x", 8, "a")])
    with pytest.raises(PlanError, match="carry no function"):
        execute(g2, Plan.from_order(g2, g2.order), {})


def test_unknown_scheduler():
    g, inputs = mlp_chain(2)
    with pytest.raises(ThriftyError, match="unknown scheduler"):
        execute(g, Plan.from_order(g, g.order), inputs, scheduler="gpu")


def test_nbytes_of_sparse_and_tuples():
    import scipy.sparse as sp

    A = sp.random(10, 10, density=0.3, format="csr", random_state=0)
    assert nbytes(A) == A.data.nbytes + A.indices.nbytes + A.indptr.nbytes
    assert nbytes((np.ones(3), np.ones(2))) == 40 and nbytes(None) == 0


def test_plan_from_order_frees_inputs_and_keeps_results():
    g, _ = mlp_chain(3)
    plan = Plan.from_order(g, g.order)
    frees = [s.target for s in plan.steps if s.op == "free"]
    assert "x0" in frees and "loss" not in frees
    assert plan.steps[0] == Step("compute", "layer1")
    assert simulate(g, plan).peak == simulate(g, g.order).peak


def test_an_input_larger_than_its_declared_buffer_is_refused():
    g = TaskGraph([Task("double", reads=("x",), writes=("y",), fn=lambda x: 2 * x)],
                  [Buffer("x", 80), Buffer("y", 80, "double")])
    plan = Plan.from_order(g, g.order)
    np.testing.assert_array_equal(execute(g, plan, {"x": np.ones(10)}).results["y"], 2.0)
    with pytest.raises(PlanError, match=r"'x' .* declared as 80 bytes, but its value holds "
                                        r"8000 bytes"):
        execute(g, plan, {"x": np.ones(1000)})


def test_sparse_plan_feeds_fit_their_declared_buffers():
    import scipy.sparse as sp

    import thrifty as th

    for index_dtype in (np.int32, np.int64):
        A = sp.random_array((40, 40), density=0.1, format="csr", rng=0)
        A.indices, A.indptr = A.indices.astype(index_dtype), A.indptr.astype(index_dtype)
        x = np.ones(40)
        plan = th.program(lambda A, x: A @ x).specialize(A=A, x=x)
        tg = plan.taskgraph
        feed = plan.feed({"A": A, "x": x})
        r = execute(tg, Plan.from_order(tg, tg.order), feed)
        np.testing.assert_allclose(r.results[plan.output_buffers()[0]], A @ x, rtol=1e-12)
        assert nbytes(feed[plan.input_buffer("A")]) == tg.buffers[plan.input_buffer("A")].size


def test_offload_files_are_private_npy_without_pickle_and_removed(tmp_path):
    import stat

    import scipy.sparse as sp

    seen = []
    S = sp.csr_array(np.eye(4))

    def scaled(x):  # runs while y is offloaded: its file is there
        seen.extend((p, stat.S_IMODE(p.stat().st_mode), stat.S_IMODE(p.parent.stat().st_mode))
                    for p in tmp_path.rglob("*.npy"))
        return S * x[0]

    g = TaskGraph([Task("a", reads=("x",), writes=("y",), fn=lambda x: x + 1),
                   Task("s", reads=("x",), writes=("z",), fn=scaled),
                   Task("b", reads=("y", "z"), writes=("w",), fn=lambda y, z: y + z @ y)],
                  [Buffer("x", 32), Buffer("y", 32, "a"), Buffer("z", 100, "s"),
                   Buffer("w", 32, "b")])
    plan = Plan.from_steps([("compute", "a"), ("offload", "y"), ("compute", "s"),
                            ("offload", "z"), ("prefetch", "y"), ("prefetch", "z"),
                            ("compute", "b")])
    x = np.arange(4.0)
    r = execute(g, plan, {"x": x}, offload_dir=tmp_path / "off")
    np.testing.assert_array_equal(r.results["w"], (x + 1) + (x[0] * np.eye(4)) @ (x + 1))
    assert r.files_written == 2  # the array, and the sparse matrix as its three arrays
    ((path, mode, dir_mode),) = seen  # y is on disk while s runs
    assert mode == 0o600 and dir_mode == 0o700
    assert path.parent.parent == tmp_path / "off"
    assert not list((tmp_path / "off").iterdir())  # the private directory is gone
    assert not list(tmp_path.rglob("*.pkl"))


def test_offload_files_are_removed_when_a_task_fails(tmp_path):
    def boom(y):
        assert list(tmp_path.rglob("*.npy"))  # the offloaded value was on disk
        raise RuntimeError("task failed")

    g = TaskGraph([Task("a", reads=("x",), writes=("y",), fn=lambda x: x + 1),
                   Task("b", reads=("x",), writes=("z",), fn=lambda x: x),
                   Task("c", reads=("z",), writes=("w",), fn=boom)],
                  [Buffer("x", 8), Buffer("y", 8, "a"), Buffer("z", 8, "b"),
                   Buffer("w", 8, "c")], results=["y", "w"])
    plan = Plan.from_steps([("compute", "a"), ("offload", "y"), ("compute", "b"),
                            ("compute", "c"), ("prefetch", "y")])
    with pytest.raises(RuntimeError, match="task failed"):
        execute(g, plan, {"x": np.ones(1)}, offload_dir=tmp_path)
    assert not list(tmp_path.rglob("*")), list(tmp_path.rglob("*"))


def test_an_offload_dir_that_is_a_file_or_unwritable_is_refused(tmp_path):
    g = TaskGraph([Task("a", reads=("x",), writes=("y",), fn=lambda x: x)],
                  [Buffer("x", 8), Buffer("y", 8, "a")])
    plan = Plan.from_order(g, g.order)
    f = tmp_path / "a-file"
    f.write_text("")
    with pytest.raises(PlanError, match="is a file; give a directory"):
        execute(g, plan, {"x": np.ones(1)}, offload_dir=f)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("running as a user who can write anywhere")
        with pytest.raises(PlanError, match="not a writable directory"):
            execute(g, plan, {"x": np.ones(1)}, offload_dir=ro)
    finally:
        ro.chmod(0o700)

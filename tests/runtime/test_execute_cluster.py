"""Plan-driven execution on a real dask.distributed LocalCluster of 2 worker processes."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
from thrifty.memory.model import Plan
from thrifty.runtime.execute import execute

distributed = pytest.importorskip("distributed")


def _diamond(marker: Path | None = None) -> TaskGraph:
    """    src
          /   \\
        left  right     (left and right run at once on the cluster)
          \\   /
           sum
    """
    def source() -> np.ndarray:
        if marker is not None and not marker.exists():
            marker.write_text("killed once")
            os._exit(1)  # the worker process dies mid-run
        return np.arange(1000.0)

    return TaskGraph(
        [Task("src", writes=("s",), fn=source),
         Task("left", reads=("s",), writes=("l",), fn=lambda s: s * 2),
         Task("right", reads=("s",), writes=("r",), fn=lambda s: s + 1),
         Task("sum", reads=("l", "r"), writes=("out",), fn=lambda a, b: a + b)],
        [Buffer("s", 8000, "src"), Buffer("l", 8000, "left"), Buffer("r", 8000, "right"),
         Buffer("out", 8000, "sum")])


def test_cluster_matches_sync(client):
    g = _diamond()
    plan = Plan.from_order(g, g.order)
    sync = execute(g, plan, {})
    dist = execute(g, plan, {}, scheduler=client)
    np.testing.assert_array_equal(dist.results["out"], sync.results["out"])
    np.testing.assert_array_equal(dist.results["out"], np.arange(1000.0) * 3 + 1)
    assert dist.peak_bytes == sync.peak_bytes <= sync.predicted_peak


def test_offload_through_the_client(client):
    g = _diamond()
    plan = Plan.from_steps([("compute", "src"), ("compute", "left"), ("offload", "l"),
                            ("compute", "right"), ("free", "s"), ("prefetch", "l"),
                            ("compute", "sum"), ("free", "l"), ("free", "r")])
    r = execute(g, plan, {}, scheduler=client)
    np.testing.assert_array_equal(r.results["out"], np.arange(1000.0) * 3 + 1)
    assert r.offloads == 1 and r.peak_bytes <= r.predicted_peak


def test_worker_killed_mid_run_gives_the_right_result(client, tmp_path):
    g = _diamond(tmp_path / "marker")
    r = execute(g, Plan.from_order(g, g.order), {}, scheduler=client)
    assert (tmp_path / "marker").exists()  # a worker really died
    np.testing.assert_array_equal(r.results["out"], np.arange(1000.0) * 3 + 1)


def _die_once(marker: Path) -> None:
    if not marker.exists():
        marker.write_text("killed once")
        os._exit(1)  # the worker process dies mid-run


def _chain_with_input(marker: Path, where: str) -> TaskGraph:
    """x (an input, scattered to the cluster) -> y -> z -> w, each step reading x again; the
    worker running step ``where`` dies the first time."""
    def step(name: str, f):
        def run(*args):
            if name == where:
                _die_once(marker)
            return f(*args)
        return run

    return TaskGraph(
        [Task("t1", reads=("x",), writes=("y",), fn=step("t1", lambda x: x + 1)),
         Task("t2", reads=("y", "x"), writes=("z",), fn=step("t2", lambda y, x: y * x)),
         Task("t3", reads=("z", "x"), writes=("w",), fn=step("t3", lambda z, x: z - x))],
        [Buffer("x", 8000), Buffer("y", 8000, "t1"), Buffer("z", 8000, "t2"),
         Buffer("w", 8000, "t3")])


@pytest.fixture()
def fresh_client():
    """A cluster of its own: a worker of it dies in the test."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None, silence_logs=50) as cluster, \
            Client(cluster) as c:
        yield c


@pytest.mark.parametrize("where", ["t1", "t2", "t3"])
def test_worker_killed_with_scattered_inputs_gives_the_right_result(fresh_client, tmp_path,
                                                                     where):
    x = np.arange(1000.0)
    g = _chain_with_input(tmp_path / "marker", where)
    r = execute(g, Plan.from_order(g, g.order), {"x": x}, scheduler=fresh_client)
    assert (tmp_path / "marker").exists()  # a worker really died
    np.testing.assert_array_equal(r.results["w"], (x + 1) * x - x)

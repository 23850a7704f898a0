"""Sparse plans on a real LocalCluster of 2 worker processes: row panels placed by data,
inputs scattered once, and a worker killed mid-run."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
import scipy.sparse as sp

import thrifty as th
from thrifty.errors import ThriftyError
from thrifty.front.matrices import poisson2d
from thrifty.runtime.sparse_run import specialize
from thrifty.sparse.cost import CostModel
from thrifty.testing import assert_eq

distributed = pytest.importorskip("distributed")


def _matrix(n: int = 30000) -> sp.csr_array:
    """Random rows of 1 to 20 nonzeros (uneven, so the balance by nonzeros matters)."""
    rng = np.random.default_rng(1)
    counts = rng.integers(1, 21, n)
    indptr = np.concatenate([[0], np.cumsum(counts)])
    indices = rng.integers(0, n, indptr[-1])
    A = sp.csr_array((rng.standard_normal(indptr[-1]), indices, indptr), shape=(n, n))
    A.sum_duplicates()
    return A


def _scattered(client, prefix: str = "csr_array") -> set[str]:
    return {str(k) for keys in client.has_what().values() for k in keys
            if str(k).startswith(prefix)}


@pytest.mark.parametrize("k", [None, 16])
def test_spmv_and_spmm_on_the_cluster_equal_scipy_and_the_plan(client, k):
    A = _matrix()
    rng = np.random.default_rng(2)
    x = rng.standard_normal(A.shape[0] if k is None else (A.shape[0], k))
    plan = th.program(lambda A, x: A @ x).specialize(A=A, x=x)
    cluster_plan = plan.distribute(client)
    got = cluster_plan.run({"A": A, "x": x})
    assert_eq(got, A @ x, rtol=1e-12, atol=1e-12)            # scipy: an independent oracle
    assert_eq(got, plan.run({"A": A, "x": x}, scheduler="sync"), rtol=1e-12, atol=1e-12)
    # A went out by rows: each worker holds a contiguous block, none holds all of A
    where = cluster_plan.placement()["A"]
    assert len(where) == 2
    blocks = sorted(r for rows in where.values() for r in rows)
    assert blocks[0][0] == 0 and blocks[-1][1] == A.shape[0]
    assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))
    for rows in where.values():
        assert sum(r1 - r0 for r0, r1 in rows) < A.shape[0]
    # the blocks are balanced by nonzeros, to within one panel
    nnz = {w: sum(int(A.indptr[r1] - A.indptr[r0]) for r0, r1 in rows)
           for w, rows in where.items()}
    widest = max(int(A.indptr[r1] - A.indptr[r0]) for r0, r1 in blocks)
    assert max(nnz.values()) - min(nnz.values()) <= widest


def test_inputs_are_scattered_once_and_again_when_they_change(client):
    A = _matrix(20000)
    X = np.random.default_rng(3).standard_normal((A.shape[0], 8))
    plan = th.program(lambda A, X: A @ X).specialize(A=A, X=X)
    cluster_plan = plan.distribute(client, {"A": A})
    first = _scattered(client)
    assert first  # A's pieces are on the workers before any run
    for _ in range(2):
        assert_eq(cluster_plan.run({"A": A, "X": X}), A @ X, rtol=1e-12, atol=1e-12)
        assert _scattered(client) >= first  # the same pieces, not sent again
    # new values on the same pattern: sent again (the old pieces would give A @ X)
    A2 = A.copy()
    A2.data *= -2.0
    assert_eq(cluster_plan.run({"A": A2, "X": X}), A2 @ X, rtol=1e-12, atol=1e-12)
    # plan.run(scheduler=client) keeps its own handle: the second call sends nothing
    plan.run({"A": A, "X": X}, scheduler=client)
    held = _scattered(client)
    assert_eq(plan.run({"A": A, "X": X}, scheduler=client), A @ X, rtol=1e-12, atol=1e-12)
    assert _scattered(client) >= held
    # the same objects changed in place (one value, one entry of X): sent again, never stale
    A.data[A.nnz // 2 + 3] += 1.0
    X[5, 1] -= 2.0
    assert_eq(cluster_plan.run({"A": A, "X": X}), A @ X, rtol=1e-12, atol=1e-12)
    assert_eq(plan.run({"A": A, "X": X}, scheduler=client), A @ X, rtol=1e-12, atol=1e-12)


def test_joined_outputs_are_reused_only_once_dropped(client):
    """The panels are joined into an output of an earlier run once the caller has dropped
    it; an output the caller holds is never written again."""
    A = _matrix(20000)
    rng = np.random.default_rng(7)
    X1, X2 = rng.standard_normal((A.shape[0], 8)), rng.standard_normal((A.shape[0], 8))
    plan = th.program(lambda A, X: A @ X).specialize(A=A, X=X1)
    cluster_plan = plan.distribute(client, {"A": A})
    first = cluster_plan.run({"A": A, "X": X1})
    second = cluster_plan.run({"A": A, "X": X2})          # first is held: a new output
    assert not np.shares_memory(first, second)
    assert_eq(first, A @ X1, rtol=1e-12, atol=1e-12)      # not overwritten by the second run
    assert_eq(second, A @ X2, rtol=1e-12, atol=1e-12)
    where = {first.ctypes.data, second.ctypes.data}
    del first
    third = cluster_plan.run({"A": A, "X": X1})           # into the dropped output
    assert third.ctypes.data in where
    assert not np.shares_memory(third, second)
    assert_eq(third, A @ X1, rtol=1e-12, atol=1e-12)
    assert_eq(second, A @ X2, rtol=1e-12, atol=1e-12)


def test_a_gcn_on_the_cluster_equals_the_dense_reference(client):
    A = poisson2d(60)  # 3600 rows: small enough for a dense oracle
    n = A.shape[0]
    rng = np.random.default_rng(4)
    X, W1, W2 = (rng.standard_normal((n, 16)), rng.standard_normal((16, 16)),
                 rng.standard_normal((16, 4)))
    gcn = th.program(lambda A, X, W1, W2: A @ (th.relu(A @ (X @ W1)) @ W2))
    plan = gcn.specialize(A=A, X=X, W1=W1, W2=W2)
    inputs = {"A": A, "X": X, "W1": W1, "W2": W2}
    D = A.toarray()
    want = D @ (np.maximum(D @ (X @ W1), 0) @ W2)
    got = plan.run(inputs, scheduler=client)
    assert_eq(got, want, rtol=1e-10, atol=1e-12)
    assert_eq(got, plan.run(inputs, scheduler="sync"), rtol=1e-12, atol=1e-12)


def test_distribute_refuses_what_is_not_a_cluster(client):
    A = _matrix(1000)
    plan = th.program(lambda A, x: A @ x).specialize(A=A, x=np.ones(1000))
    with pytest.raises(ThriftyError, match="Client"):
        plan.distribute("threads")
    with pytest.raises(ThriftyError, match="unknown input"):
        plan.distribute(client, {"B": A})


def _kill(client, address: str) -> None:
    try:
        client.run(os._exit, 1, workers=[address])
    except (OSError, distributed.comm.core.CommClosedError):
        pass  # the worker died before it could answer


def _wait_for(client, n: int) -> None:
    client.wait_for_workers(n, timeout=60)


def test_a_worker_killed_before_a_run_loses_its_rows_and_they_are_sent_again(client):
    _wait_for(client, 2)
    A = _matrix(20000)
    x = np.random.default_rng(5).standard_normal(A.shape[0])
    cluster_plan = th.program(lambda A, x: A @ x).specialize(A=A, x=x).distribute(client)
    assert_eq(cluster_plan.run({"A": A, "x": x}), A @ x, rtol=1e-12, atol=1e-12)
    victim = sorted(cluster_plan.placement()["A"])[0]
    _kill(client, victim)
    deadline = time.monotonic() + 30
    while victim in client.scheduler_info()["workers"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert victim not in client.scheduler_info()["workers"]
    assert_eq(cluster_plan.run({"A": A, "x": x}), A @ x, rtol=1e-12, atol=1e-12)
    assert victim not in cluster_plan.placement()["A"]


def test_a_worker_killed_mid_run_still_gives_the_right_result(client):
    """The product ``X @ W`` (2.4 GFLOP) runs on one worker; that worker is killed while it
    runs (with the only copy of ``X``), and the run still returns the right values."""
    _wait_for(client, 2)
    A = poisson2d(90)
    n = A.shape[0]
    rng = np.random.default_rng(6)
    X, W = rng.standard_normal((n, 384)), rng.standard_normal((384, 384))
    # association as written (no fused chain), so that ``X @ W`` is one slow task
    prog = th.program(lambda A, X, W: th.relu(A @ (X @ W)))
    tr = prog.traced(A=A, X=X, W=W)
    plan = specialize(tr.graph, {"A": A, "X": X, "W": W}, structure=tr.structure,
                      cost=CostModel(chains=False))
    cluster_plan = plan.distribute(client, {"A": A, "X": X, "W": W})
    want = np.maximum(A @ (X @ W), 0)
    result: dict[str, object] = {}

    def run() -> None:
        try:
            result["got"] = cluster_plan.run({"A": A, "X": X, "W": W})
        except BaseException as e:  # reported by the assertion below
            result["error"] = e

    runner = threading.Thread(target=run)
    runner.start()
    victim = None
    deadline = time.monotonic() + 30
    while victim is None and time.monotonic() < deadline:
        for worker, keys in client.processing().items():
            if any(str(k).startswith("v3@") for k in keys):  # the X @ W task is running
                victim = worker
        time.sleep(0.01)
    assert victim is not None, "the slow task was never seen running"
    assert runner.is_alive()  # mid-run
    _kill(client, victim)
    runner.join(120)
    assert not runner.is_alive()
    assert victim not in client.scheduler_info()["workers"]
    assert "error" not in result, repr(result.get("error"))
    assert_eq(result["got"], want, rtol=1e-10, atol=1e-12)
    assert_eq(result["got"], plan.run({"A": A, "X": X, "W": W}, scheduler="sync"),
              rtol=1e-12, atol=1e-12)

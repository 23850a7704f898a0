"""Plans run on a dask.distributed cluster of 2 worker processes agree with sync and threads."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import thrifty as th
from thrifty.front.matrices import poisson2d
from thrifty.testing import assert_eq


@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, silence_logs=40) as cluster, \
            distributed.Client(cluster) as c:
        yield c


def _cases():
    A = poisson2d(150)  # 22500 rows: the cost model splits it into several panels
    n = A.shape[0]
    rng = np.random.default_rng(0)
    return [
        (th.program(lambda A, X, W: th.relu(A @ (X @ W))),
         {"A": A, "X": rng.standard_normal((n, 16)), "W": rng.standard_normal((16, 16))}),
        (th.program(lambda X, Y, S: (X @ Y.T) * S),
         {"X": rng.standard_normal((n, 32)), "Y": rng.standard_normal((n, 32)), "S": A}),
        (th.program(lambda Q, K, V, S: th.softmax(Q @ K.T, mask=S) @ V),
         {"Q": rng.standard_normal((n, 8)), "K": rng.standard_normal((n, 8)),
          "V": rng.standard_normal((n, 8)), "S": A}),
        (th.program(lambda L: (L @ L) * L), {"L": sp.csr_array(sp.tril(A, -1))}),
    ]


def _same(a, b) -> None:
    """Equal results without densifying large sparse ones."""
    assert sp.issparse(a) == sp.issparse(b)
    if sp.issparse(a):
        assert a.shape == b.shape
        np.testing.assert_array_equal(a.indptr, b.indptr)
        np.testing.assert_array_equal(a.indices, b.indices)
        assert_eq(a.data, b.data, rtol=1e-12)
    else:
        assert_eq(a, b, rtol=1e-12)


def test_cluster_threads_and_sync_agree(client):
    for prog, inputs in _cases():
        plan = prog.specialize(**inputs)
        on_cluster = plan.run(inputs, scheduler=client)
        _same(on_cluster, plan.run(inputs, scheduler="sync"))
        _same(on_cluster, plan.run(inputs, scheduler="threads"))


def test_an_address_string_runs_on_that_cluster(client):
    prog, inputs = _cases()[0]
    plan = prog.specialize(**inputs)
    address = client.scheduler.address
    assert address.startswith("tcp://")
    _same(plan.run(inputs, scheduler=address), plan.run(inputs, scheduler="sync"))

"""Fixtures of the runtime tests: a real dask.distributed cluster."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def client():
    """A client of a real LocalCluster of 2 worker processes with one thread each, new for
    each test module (tests that kill a worker leave the next module a whole cluster)."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, silence_logs=50) as cluster, \
            distributed.Client(cluster) as c:
        yield c

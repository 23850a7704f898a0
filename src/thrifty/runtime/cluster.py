"""Connecting to Dask: an existing distributed scheduler, or a local cluster of processes."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from thrifty.errors import ThriftyError


@contextlib.contextmanager
def connect(address: str | None = None, local_workers: int | None = None,
            timeout: float = 5.0) -> Iterator[Any]:
    """A ``dask.distributed.Client`` for ``address`` (``tcp://HOST:PORT``) or for a new
    ``LocalCluster`` of ``local_workers`` worker processes; ``None`` when neither is given.

    An unreachable address raises :class:`ThriftyError` within ``timeout`` seconds.

    Example
    -------
    >>> with connect() as client:
    ...     client is None
    True
    """
    if address is not None and local_workers is not None:
        raise ThriftyError("give either a scheduler address or a number of local workers, "
                           "not both")
    if address is None and local_workers is None:
        yield None
        return
    from distributed import Client, LocalCluster

    if address is not None:
        try:
            client = Client(address, timeout=f"{timeout}s")
        except (OSError, TimeoutError) as e:
            raise ThriftyError(f"could not reach the Dask scheduler at {address!r} within "
                               f"{timeout:g} s ({type(e).__name__}: {e}); start one with "
                               "`dask scheduler` or use --local-cluster N") from None
        try:
            yield client
        finally:
            client.close()
        return
    assert local_workers is not None
    if local_workers < 1:
        raise ThriftyError(f"--local-cluster needs at least 1 worker, got {local_workers}")
    with LocalCluster(n_workers=local_workers, threads_per_worker=1, processes=True,
                      dashboard_address=None, silence_logs=40) as cluster, \
            Client(cluster) as client:
        yield client

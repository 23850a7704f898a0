"""One scheduler vocabulary for every run of a TaskGraph (sparse plans, memory plans, CLI).

===========================  ===========================================================
``scheduler``                what runs the tasks
===========================  ===========================================================
``None``                     choose: in this process for small plans (a compiled loop,
                             independent tasks of a level on pooled threads), Dask's
                             threaded scheduler for large ones
``"sync"``                   in this process, one task after the other, in order
``"threads"``                Dask's threaded scheduler
a ``dask.distributed.Client``  that cluster
``"tcp://HOST:PORT"``        the Dask scheduler at that address (one client per address
                             and process, connected on first use)
===========================  ===========================================================

``"inline"`` and ``"synchronous"`` are deprecated aliases of ``"sync"``.

Example
-------
>>> resolve_scheduler(None), resolve_scheduler("sync"), resolve_scheduler("threads")
('auto', 'sync', 'threads')
>>> resolve_scheduler("fast")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
thrifty.errors.SpecError: unknown scheduler 'fast'; valid: None (choose), 'sync', ...
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

from thrifty.errors import SpecError, ThriftyError

__all__ = ["SCHEDULERS", "is_client", "resolve_scheduler"]

#: The named schedulers (besides a Client or an address).
SCHEDULERS = (None, "sync", "threads")
_DEPRECATED = {"inline": "sync", "synchronous": "sync"}
_CLIENTS: dict[str, Any] = {}
_CLIENTS_LOCK = threading.Lock()


def is_client(x: Any) -> bool:
    """Whether ``x`` is a ``dask.distributed.Client`` (or quacks like one)."""
    return hasattr(x, "submit") and hasattr(x, "scatter") and hasattr(x, "get")


def resolve_scheduler(scheduler: Any, timeout: float = 5.0) -> Any:
    """``"auto"``, ``"sync"``, ``"threads"`` or a ``dask.distributed.Client`` for
    ``scheduler``; raises :class:`SpecError` for anything else (with the valid names)."""
    if scheduler is None:
        return "auto"
    if isinstance(scheduler, str):
        if scheduler in ("sync", "threads"):
            return scheduler
        if scheduler in _DEPRECATED:
            new = _DEPRECATED[scheduler]
            warnings.warn(f"scheduler {scheduler!r} is deprecated; use {new!r}",
                          DeprecationWarning, stacklevel=3)
            return new
        if "://" in scheduler:
            return _client_for(scheduler, timeout)
    elif is_client(scheduler):
        return scheduler
    raise SpecError(f"unknown scheduler {scheduler!r}; valid: None (choose), 'sync', "
                    "'threads', a dask.distributed.Client, or an address 'tcp://HOST:PORT'")


def _client_for(address: str, timeout: float) -> Any:
    """The process's client of the scheduler at ``address``, connected on first use."""
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(address)
        if client is not None and client.status == "running":
            return client
        from distributed import Client

        try:
            client = Client(address, timeout=f"{timeout}s", set_as_default=False)
        except (OSError, TimeoutError) as e:
            raise ThriftyError(f"could not reach the Dask scheduler at {address!r} within "
                               f"{timeout:g} s ({type(e).__name__}: {e}); start one with "
                               "`dask scheduler` or pass a dask.distributed.Client") from None
        _CLIENTS[address] = client
        return client

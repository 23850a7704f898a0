"""Offloading saved activations to disk: written in the forward, read back in the backward.

With ``backend(..., offload_to="disk")`` the tensors a plan offloads leave memory for a
file and come back just before the backward first reads them (:func:`to_disk`):

* in the forward graph, a ``store`` node is inserted after the saved tensor's last forward
  use: it writes the tensor's bytes to a file of a :class:`DiskStore` and returns a *token*
  (a 2-element int64 tensor naming the store and the file), which the forward returns in
  the tensor's place; FX frees the tensor after its last use, the ``store``;
* in the backward graph, a ``load`` node is inserted before the first node that reads the
  saved tensor: it allocates a tensor of the same shape, strides and dtype, reads the file
  into it (the same bytes: bitwise equal) and removes the file; every reader reads the
  loaded tensor, which the backward frees after its last use.

Files live in a temporary directory (under ``offload_dir``, default the system's temporary
directory) removed when the store is garbage collected or the interpreter exits; a token
that dies unread (a forward without its backward) removes its file. A write goes through
the operating system's page cache: the bytes leave the process's memory, and the kernel
writes them back to disk as it sees fit. The tokens stay in memory (16 bytes each, counted
in the saved bytes; the plan does not count them against the budget).
"""

from __future__ import annotations

import functools
import itertools
import operator
import os
import shutil
import tempfile
import time
import weakref
from collections.abc import Hashable
from typing import Any

from thrifty.errors import PlanError

__all__ = ["DiskStore", "disk_bandwidth", "load", "store", "to_disk"]

_STORES: dict[int, DiskStore] = {}
_IDS = itertools.count(1)


class DiskStore:
    """Files of offloaded tensors in one temporary directory (see the module docstring)."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        if directory is not None and not os.path.isdir(directory):
            raise PlanError(f"offload_dir {str(directory)!r} is not an existing directory; "
                            "give one, or None for the system's temporary directory")
        self.path = tempfile.mkdtemp(prefix="thrifty-offload-", dir=directory)
        self.id = next(_IDS)
        self.meta: dict[int, tuple[Any, ...]] = {}
        self._keys = itertools.count()
        self.written = 0          # bytes written since the last reset
        _STORES[self.id] = self
        self._finalizer = weakref.finalize(self, _remove, self.id, self.path)

    def close(self) -> None:
        """Remove the directory and every file in it."""
        self._finalizer()

    def files(self) -> list[str]:
        return sorted(os.listdir(self.path)) if os.path.isdir(self.path) else []

    def file(self, key: int) -> str:
        return os.path.join(self.path, f"{key}.bin")

    def put(self, t: Any) -> Any:
        import torch

        key = next(self._keys)
        dense = _dense(t)
        src = t if dense else t.contiguous()
        isz = src.element_size()
        storage = src.untyped_storage()
        start = src.storage_offset() * isz
        raw = _bytes_of(storage)[start:start + src.numel() * isz]
        with open(self.file(key), "wb") as f:
            f.write(memoryview(raw.numpy()))
        self.written += raw.numel()
        self.meta[key] = (tuple(t.shape), tuple(t.stride()) if dense else None, t.dtype,
                          t.device, raw.numel())
        token = torch.tensor([self.id, key], dtype=torch.int64)
        weakref.finalize(token, _drop, self.id, key)
        return token

    def take(self, key: int) -> Any:
        import torch

        shape, stride, dtype, device, nbytes = self.meta.pop(key)
        if stride is not None:
            out = torch.empty_strided(shape, stride, dtype=dtype, device="cpu")
        else:
            out = torch.empty(shape, dtype=dtype, device="cpu")
        raw = _bytes_of(out.untyped_storage())
        path = self.file(key)
        with open(path, "rb") as f:
            got = f.readinto(memoryview(raw.numpy()))
        os.remove(path)
        if got != nbytes:
            raise PlanError(f"offloaded tensor file {path} held {got} bytes, {nbytes} "
                            "expected: it was changed outside thrifty")
        return out.to(device) if device.type != "cpu" else out


def _dense(t: Any) -> bool:
    """Whether ``t``'s elements fill ``numel`` consecutive storage elements (each once), in
    some order of its dimensions: then those elements are its bytes, strides and all."""
    expected = 1
    for stride, size in sorted((st, s) for s, st in zip(t.shape, t.stride()) if s != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _bytes_of(storage: Any) -> Any:
    """A uint8 tensor over the whole of ``storage`` (no copy)."""
    import torch

    return torch.empty(0, dtype=torch.uint8).set_(storage)


def _remove(store_id: int, path: str) -> None:
    _STORES.pop(store_id, None)
    shutil.rmtree(path, ignore_errors=True)


def _drop(store_id: int, key: int) -> None:
    s = _STORES.get(store_id)
    if s is not None and s.meta.pop(key, None) is not None:
        with _suppress():
            os.remove(s.file(key))


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        return exc[0] is not None and issubclass(exc[0], OSError)


def store(t: Any, store_id: int) -> Any:
    """Write ``t`` to a file of the store ``store_id``; returns its token."""
    return _STORES[store_id].put(t)


def load(token: Any) -> Any:
    """The tensor whose token is ``token``, read back from its file (which is removed)."""
    store_id, key = (int(v) for v in token.tolist())
    s = _STORES.get(store_id)
    if s is None:
        raise PlanError("an offloaded tensor's store was closed before the backward read it")
    return s.take(key)


def disk_bandwidth(directory: str, nbytes: int = 16 << 20) -> float:
    """Bytes per second of writing ``nbytes`` to a file in ``directory`` and reading them
    back (``fsync`` after the write), the slower of the two."""
    data = os.urandom(nbytes)
    path = os.path.join(directory, "bandwidth-probe.bin")
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    t1 = time.perf_counter()
    with open(path, "rb") as f:
        f.read()
    t2 = time.perf_counter()
    os.remove(path)
    return nbytes / max(t1 - t0, t2 - t1, 1e-9)


def to_disk(fw: Any, bw: Any, num_fwd_outputs: int, names: set[str], store_id: int) -> list[str]:
    """Rewrite the forward and backward graphs so that the saved tensors named ``names``
    go to disk (see the module docstring). Returns the names offloaded."""
    import torch

    out = fw.graph.find_nodes(op="output")[0]
    outs = list(out.args[0])
    done: list[str] = []
    for i in range(num_fwd_outputs, len(outs)):
        n = outs[i]
        if getattr(n, "name", None) not in names or n.op == "placeholder" or \
                not isinstance(n.meta.get("val"), torch.Tensor):
            continue
        users = [u for u in n.users if u is not out]
        last = max(users, key=_position(fw.graph)) if users else n
        with fw.graph.inserting_after(last):
            tok = fw.graph.call_function(store, (n, store_id))
        fake = n.meta["val"]
        with fake.fake_mode:
            tok.meta["val"] = torch.empty(2, dtype=torch.int64)
        outs[i] = tok
        done.append(n.name)
    out.args = (tuple(outs),)
    order = _position(bw.graph)
    for p in bw.graph.find_nodes(op="placeholder"):
        if p.name not in done or not p.users:
            continue
        first = min(p.users, key=order)
        with bw.graph.inserting_before(first):
            got = bw.graph.call_function(load, (p,))
        got.meta = dict(p.meta)
        p.replace_all_uses_with(got, delete_user_cb=functools.partial(operator.is_not, got))
    fw.recompile()
    bw.recompile()
    return done


def _position(graph: Any) -> Any:
    index: dict[Hashable, int] = {n: i for i, n in enumerate(graph.nodes)}
    return index.__getitem__

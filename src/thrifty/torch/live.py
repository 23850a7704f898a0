"""Live bytes of a PyTorch computation: the storages ATen ops allocate and that are alive
at once, on any device (the CPU allocator keeps no peak statistics).

:class:`LiveBytes` is a ``TorchDispatchMode``: entered around a step, or inside compiled
graphs only (``thrifty.torch.Backend.around``), it counts each storage an op makes from
that op until its last tensor dies, and keeps the peak. The benchmark
``benchmarks/memory_torch.py`` and the tests measure steps with it.

Example
-------
>>> import torch
>>> with LiveBytes() as live:
...     y = torch.ones(256) * 2   # two 1 KiB storages alive at once, then the ones freed
...     del y
...     z = torch.ones(128)       # 512 B, while nothing else is alive
>>> live.peak, live.cur
(2048, 512)
"""

from __future__ import annotations

import weakref
from typing import Any

from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import torch

__all__ = ["LiveBytes"]


class LiveBytes(TorchDispatchMode):
    """Peak bytes of the storages ATen ops allocate and that are alive at once.

    Every allocation and release is logged, so that :meth:`peak_without` replays the step
    leaving some storages out (the weight gradients, alive at the step's end)."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: dict[int, int] = {}
        self.size: dict[int, int] = {}
        self.ident: dict[int, int] = {}           # storage address -> allocation number
        self.events: list[tuple[int, int]] = []   # (allocation number, +bytes or -bytes)
        self.storage: dict[int, Any] = {}         # allocation number -> its storage, weakly
        self.cur = self.peak = 0

    def _drop(self, key: int) -> None:
        self.refs[key] -= 1
        if self.refs[key] == 0:
            del self.refs[key]
            size = self.size.pop(key)
            self.events.append((self.ident.pop(key), -size))
            self.cur -= size

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
        out = func(*args, **(kwargs or {}))
        # an output on an input's storage that is not tracked (a view of a parameter, of
        # the batch, of a gradient buffer made outside the step) allocated nothing
        old = {a.untyped_storage().data_ptr() for a in tree_leaves((args, kwargs))
               if isinstance(a, torch.Tensor)}
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                s = t.untyped_storage()
                key = s.data_ptr()
                if key == 0 or (key in old and key not in self.refs):
                    continue
                if key not in self.refs:
                    self.refs[key] = 0
                    self.size[key] = s.nbytes()
                    self.ident[key] = len(self.events)
                    self.storage[len(self.events)] = StorageWeakRef(s)
                    self.events.append((self.ident[key], s.nbytes()))
                    self.cur += s.nbytes()
                    self.peak = max(self.peak, self.cur)
                self.refs[key] += 1
                weakref.finalize(t, self._drop, key)
        return out

    def peak_without(self, tensors: Any) -> int:
        """The peak had the storages of ``tensors`` (alive now) never been allocated.

        Matched by storage, not by tensor: a compiled graph's outputs (the gradients) live
        on in autograd after the Python tensors the mode saw are gone."""
        mine = {StorageWeakRef(t.untyped_storage()).cdata for t in tensors}
        leave = {i for i, ref in self.storage.items() if not ref.expired() and ref.cdata in mine}
        cur = peak = 0
        for ident, delta in self.events:
            if ident not in leave:
                cur += delta
                peak = max(peak, cur)
        return peak

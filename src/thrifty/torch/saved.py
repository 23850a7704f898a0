"""The activation bytes a compiled forward saves for backward, counted at little cost per call.

:class:`thrifty.torch.compile.Backend` measures, on every run of a compiled forward, the
bytes of the storages among the tensors it returns for backward (each storage once, those of
the inputs that are no activations left out: parameters, buffers, the data). Comparing every
saved tensor's storage with every such input's on each call cost milliseconds per step (a
weak reference per parameter). Which saved outputs share a storage with such an input, or
with an earlier saved output, is a property of the graph: :func:`saved_counter` reads it
once from the forward graph's fake tensors (a view keeps its base's storage there as it does
at run time), and each call then sums the storages of the remaining outputs only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["saved_counter"]


def saved_counter(fw: Any, n_out: int,
                  free: Sequence[bool]) -> Callable[[Sequence[Any], Sequence[Any]], int]:
    """A function ``count(args, out)`` giving the bytes of the storages of the forward
    graph ``fw``'s saved outputs (``out[n_out:]``) in one run, each storage once, those of
    the inputs ``args[i]`` with ``free[i]`` left out.

    The storages shared with free inputs, or among the saved outputs, are found once on the
    graph's fake tensors (``meta["val"]``); where one is missing (an input or a saved output
    without a fake tensor), every call compares the real storages instead."""
    from torch.multiprocessing.reductions import StorageWeakRef

    import torch

    def fake_storage(node: Any) -> Any:
        val = getattr(node, "meta", {}).get("val")
        if not isinstance(val, torch.Tensor):
            return None
        try:
            return StorageWeakRef(val.untyped_storage())
        except NotImplementedError:
            return None

    holders = fw.graph.find_nodes(op="placeholder")
    saved = list(fw.graph.find_nodes(op="output")[0].args[0][n_out:])
    ins = [fake_storage(p) for p, f in zip(holders, free) if f]
    outs = [fake_storage(n) if isinstance(getattr(n, "meta", {}).get("val"), torch.Tensor)
            else False for n in saved]  # False: no tensor (a saved size), nothing to count
    if len(holders) != len(free) or any(r is None for r in [*ins, *outs]):
        return _compare_at_run_time(n_out, free)
    skip = set(ins)
    count: list[int] = []  # positions in out of the first saved output of each storage
    for i, ref in enumerate(outs):
        if ref is not False and ref not in skip:
            skip.add(ref)
            count.append(n_out + i)

    def counted(_args: Sequence[Any], out: Sequence[Any]) -> int:
        seen: dict[int, int] = {}
        for i in count:
            s = out[i].untyped_storage()
            seen[s.data_ptr()] = s.nbytes()
        return sum(seen.values())
    return counted


def _compare_at_run_time(n_out: int, free: Sequence[bool]) -> Callable[
        [Sequence[Any], Sequence[Any]], int]:
    """The count by comparing the real storages of the saved outputs and the free inputs
    on each call (:func:`saved_counter` where the graph's fake tensors do not tell)."""
    from torch.multiprocessing.reductions import StorageWeakRef

    import torch

    def counted(args: Sequence[Any], out: Sequence[Any]) -> int:
        skip = {StorageWeakRef(a.untyped_storage()) for a, f in zip(args, free)
                if f and isinstance(a, torch.Tensor)}
        seen: dict[Any, int] = {}
        for t in out[n_out:]:
            if isinstance(t, torch.Tensor):
                ref = StorageWeakRef(t.untyped_storage())
                if ref not in skip:
                    seen[ref] = t.untyped_storage().nbytes()
        return sum(seen.values())
    return counted

"""The forward and backward graph of a PyTorch model as a TaskGraph.

The model is traced by AOTAutograd (``torch._functorch.aot_autograd.aot_module``), whose
default partitioner splits the joint forward+backward graph into a forward graph (returning
the outputs and the tensors saved for backward) and a backward graph (taking the saved
tensors and the output gradients). Every ATen call becomes a :class:`Task`; every tensor it
allocates a :class:`Buffer` sized from the shape propagation AOTAutograd already did
(``node.meta["val"]``: shape and dtype, ``numel * itemsize`` bytes). View-like ops
(``view``, ``t``, ``transpose``, ``expand``, ``detach``, …) and tuple ``getitem`` allocate
nothing: they alias the buffer they read. Placeholders (parameters, buffers, the example
inputs, the output gradients) are input buffers; the model's outputs and the gradients the
backward returns are results.

Times are in seconds on a nominal machine (roofline: ``flops / 1e11 + bytes / 2e10``, flops
from :mod:`torch.utils.flop_counter`'s formulas), or measured per node with
``profile=True`` (median of a few runs of that node alone on the real tensors).
Tasks carry ``attrs["backward"]`` (bool) and ``attrs["op"]`` (the ATen op).
"""

from __future__ import annotations

import operator
import statistics
import time
from collections.abc import Hashable
from typing import Any

from thrifty.errors import GraphError
from thrifty.graph.taskgraph import Buffer, Task, TaskGraph

__all__ = ["NOMINAL_BYTES_PER_S", "NOMINAL_FLOPS", "from_torch"]

NOMINAL_FLOPS = 1e11
"""Floating-point operations per second of the nominal machine."""
NOMINAL_BYTES_PER_S = 2e10
"""Memory bandwidth (bytes per second) of the nominal machine."""

_VIEW_OPS = frozenset({
    "view", "_unsafe_view", "t", "transpose", "permute", "expand", "detach", "alias",
    "unsqueeze", "squeeze", "slice", "select", "as_strided", "reshape", "unflatten",
    "split", "split_with_sizes", "unbind", "chunk", "narrow", "view_as", "expand_as",
    "lift_fresh", "_reshape_alias", "diagonal", "unsafe_split", "flatten", "movedim",
})


def _nbytes(val: Any) -> int:
    try:
        return int(val.numel()) * int(val.element_size())
    except (AttributeError, TypeError, RuntimeError):
        return 0


def _op_name(target: Any) -> str:
    packet = getattr(target, "overloadpacket", None)
    name = getattr(packet, "__name__", None) or getattr(target, "__name__", str(target))
    return str(name).split(".")[-1]


def _flops(node: Any) -> int:
    from torch.utils._pytree import tree_map
    from torch.utils.flop_counter import flop_registry

    packet = getattr(node.target, "overloadpacket", None)
    if packet not in flop_registry:
        return 0

    def val(a: Any) -> Any:
        return a.meta.get("val") if hasattr(a, "meta") else a

    args, kwargs = tree_map(val, (node.args, node.kwargs))
    try:
        return int(flop_registry[packet](*args, **kwargs, out_val=node.meta.get("val")))
    except Exception:  # noqa: BLE001 - a formula that cannot take these args: count 0 flops
        return 0


def from_torch(model: Any, *example_inputs: Any, training: bool = True,
               profile: bool = False, name: str | None = None) -> TaskGraph:
    """The TaskGraph of ``model(*example_inputs)`` (and, with ``training``, its backward).

    Parameters
    ----------
    model:
        A ``torch.nn.Module``.
    example_inputs:
        Tensors to trace with (and to time with, when ``profile``).
    training:
        Include the backward pass (gradients of the parameters and of inputs that require
        grad; the output gradient is an input buffer, as when ``backward`` is called on the
        output with a given gradient).
    profile:
        Measure each node's time on the real tensors instead of the nominal roofline.
    name:
        The graph's name (default: the model's class name).

    Example
    -------
    >>> import torch
    >>> g = from_torch(torch.nn.Linear(4, 2), torch.randn(3, 4))
    >>> sorted(t.attrs["op"] for t in g.tasks.values())[:2]
    ['addmm', 'mm']
    """
    from functorch.compile import make_boxed_func
    from torch._functorch.aot_autograd import aot_module
    from torch._functorch.partitioners import default_partition

    import torch

    if not isinstance(model, torch.nn.Module):
        raise GraphError(f"from_torch expects a torch.nn.Module, got {type(model).__name__}")
    if not example_inputs or not all(isinstance(x, torch.Tensor) for x in example_inputs):
        raise GraphError("from_torch needs example inputs, all torch.Tensor")
    captured: dict[str, Any] = {}

    def compiler(kind: str):
        def comp(gm: Any, _example: Any) -> Any:
            captured[kind] = gm

            def run(*args: Any) -> Any:
                captured[kind + "_args"] = list(args)
                return gm(*args)
            return make_boxed_func(run)
        return comp

    inputs = [x.detach().clone() for x in example_inputs]
    with torch.set_grad_enabled(training):
        aot = aot_module(model, fw_compiler=compiler("fw"), bw_compiler=compiler("bw"),
                         partition_fn=default_partition)
        out = aot(*inputs)
        outs = [o for o in (out if isinstance(out, (tuple, list)) else (out,))
                if isinstance(o, torch.Tensor)]
        if training:
            live = [o for o in outs if o.requires_grad]
            if not live:
                raise GraphError("training=True, but no output of the model requires grad "
                                 "(no parameters? call with training=False)")
            torch.autograd.backward(live, [torch.ones_like(o) for o in live])
    if "fw" not in captured:
        raise GraphError("AOTAutograd produced no forward graph for this model")
    b = _Builder(profile)
    fw = captured["fw"]
    fw_outputs = b.add_graph(fw, "fw", captured.get("fw_args"), backward=False)
    n_user = len(outs)
    results: list[Hashable] = [x for x in fw_outputs[:n_user] if x is not None]
    if training and "bw" in captured:
        saved = fw_outputs[n_user:]
        bw = captured["bw"]
        bw_outputs = b.add_graph(bw, "bw", captured.get("bw_args"), backward=True,
                                 placeholders=saved)
        results += [x for x in bw_outputs if x is not None]
    return TaskGraph(b.tasks, b.buffers.values(), results=set(results),
                     name=name or type(model).__name__)


class _Builder:
    def __init__(self, profile: bool) -> None:
        self.profile = profile
        self.tasks: list[Task] = []
        self.buffers: dict[Hashable, Buffer] = {}

    def add_graph(self, gm: Any, prefix: str, args: list | None, backward: bool,
                  placeholders: list | None = None) -> list[Hashable | None]:
        """Add one fx graph; returns the buffer of each output (None for non-tensors)."""
        times = self._measure(gm, args) if self.profile and args is not None else {}
        where: dict[Any, Any] = {}   # fx node -> buffer id, or tuple of buffer ids
        ph = 0
        outputs: list[Hashable | None] = []
        for node in gm.graph.nodes:
            val = node.meta.get("val")
            if node.op == "placeholder":
                if placeholders is not None and ph < len(placeholders) and \
                        placeholders[ph] is not None:
                    where[node] = placeholders[ph]
                else:
                    bid = f"{prefix}:{node.name}"
                    self.buffers[bid] = Buffer(bid, _nbytes(val), None)
                    where[node] = bid
                ph += 1
            elif node.op == "call_function":
                reads = self._reads(node, where)
                op = _op_name(node.target)
                if node.target is operator.getitem:
                    parent = where.get(node.args[0])
                    where[node] = parent[node.args[1]] if isinstance(parent, tuple) else parent
                    continue
                if op in _VIEW_OPS and len(reads) >= 1:
                    where[node] = reads[0] if not isinstance(val, (tuple, list)) else \
                        tuple(reads[0] for _ in val)
                    continue
                tid = f"{prefix}:{node.name}"
                if isinstance(val, (tuple, list)):
                    writes = tuple(f"{tid}.{k}" for k in range(len(val)))
                    for w, v in zip(writes, val):
                        self.buffers[w] = Buffer(w, _nbytes(v), tid)
                    where[node] = writes
                else:
                    writes = (tid,)
                    self.buffers[tid] = Buffer(tid, _nbytes(val), tid)
                    where[node] = tid
                if node.name in times:
                    t = times[node.name]
                else:
                    moved = sum(self.buffers[r].size for r in reads) + sum(
                        self.buffers[w].size for w in writes)
                    t = _flops(node) / NOMINAL_FLOPS + moved / NOMINAL_BYTES_PER_S
                self.tasks.append(Task(tid, reads=tuple(dict.fromkeys(reads)), writes=writes,
                                       time=float(t), attrs={"backward": backward, "op": op}))
            elif node.op == "output":
                for a in node.args[0]:
                    x = where.get(a) if a is not None and hasattr(a, "op") else None
                    outputs.append(x if not isinstance(x, tuple) else None)
        return outputs

    @staticmethod
    def _reads(node: Any, where: dict) -> list[Hashable]:
        from torch.utils._pytree import tree_leaves

        out: list[Hashable] = []
        for a in tree_leaves((node.args, node.kwargs)):
            if hasattr(a, "op") and a in where:
                x = where[a]
                if isinstance(x, tuple):
                    out.extend(x)
                elif x is not None:
                    out.append(x)
        return out

    def _measure(self, gm: Any, args: list) -> dict[Hashable, float]:
        """Seconds per node: each node run alone on the real tensors, median of 3."""
        import torch.fx

        times: dict[Hashable, float] = {}

        class Timer(torch.fx.Interpreter):
            def run_node(self, n: Any) -> Any:
                if n.op != "call_function":
                    return super().run_node(n)
                runs = []
                result = None
                for _ in range(3):
                    t0 = time.perf_counter()
                    result = super().run_node(n)
                    runs.append(time.perf_counter() - t0)
                times[n.name] = statistics.median(runs)
                return result

        Timer(gm).run(*args)
        return times

"""The joint forward/backward FX graph of AOTAutograd as a TaskGraph of activation memory.

AOTAutograd traces a training step into one *joint* graph: placeholders ``primals_*``
(parameters, buffers, inputs) and ``tangents_*`` (output gradients), the forward ops, the
backward ops, and one output: the forward outputs followed by the gradients. A partitioner
splits it into a forward graph (which also returns the tensors saved for backward) and a
backward graph (which recomputes whatever forward value it needs and was not saved).

:func:`joint_taskgraph` turns the joint graph into a :class:`~thrifty.graph.taskgraph.TaskGraph`
whose memory is exactly the *activation* memory the partition decides about:

* every ATen call is a :class:`Task` (``attrs``: ``op``, ``flops``, ``backward``,
  ``random``: a forward op never to recompute: see :func:`_is_pinned`, and an op reading an
  input the step overwrites, see :func:`mutated_inputs`), except a training batch norm,
  which is two: its statistics (pinned: it updates the running statistics) and its output
  (``<name>:apply``, which may be recomputed: see :func:`splits_batch_norm`); view ops (by
  name, or by their schema's alias annotations) and tuple ``getitem`` allocate nothing and
  alias the buffer they read;
* a forward op's outputs are buffers of their real size (``numel * itemsize`` from the
  tensor metadata AOTAutograd propagated), and so are the inputs named ``active``
  (activations made by an earlier graph); other placeholders (alive anyway: parameters,
  data, output gradients) and backward outputs (gradients, backward scratch) have size 0;
* times are the nominal roofline ``flops / NOMINAL_FLOPS + bytes / NOMINAL_BYTES_PER_S``.

The tasks' order (:attr:`JointGraph.order`) is the joint graph's own: the forward, then the
backward. A plan of this graph under a budget of ``B`` bytes keeps at most ``B`` bytes of
forward values resident at any time; the forward values resident when the backward starts
are the ones to save, and a forward task the plan computes again in the backward is one to
recompute (see :mod:`thrifty.torch.compile`).
"""

from __future__ import annotations

import operator
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
from thrifty.torch.importer import (
    _VIEW_OPS,
    NOMINAL_BYTES_PER_S,
    NOMINAL_FLOPS,
    _flops,
    _nbytes,
    _op_name,
)

__all__ = ["JointGraph", "forward_node_names", "joint_taskgraph"]


@dataclass
class JointGraph:
    """A joint graph's TaskGraph and the maps between its FX nodes and tasks/buffers."""

    graph: TaskGraph
    order: list[Hashable]
    forward: set[str]                        # names of the forward nodes (placeholders too)
    task_of: dict[str, str] = field(default_factory=dict)      # node name -> task id
    buffers_of: dict[str, tuple[Hashable, ...]] = field(default_factory=dict)  # node -> bufs
    #: a training batch norm's node name -> the task writing its output (:func:`_add_op`)
    bn_apply: dict[str, str] = field(default_factory=dict)
    #: the real bytes of the buffers backward tasks write (the TaskGraph sizes them 0: they
    #: are no activations), for the model of the backward's peak (:mod:`thrifty.torch.cut`)
    bwd_bytes: dict[Hashable, int] = field(default_factory=dict)

    def output_task(self, name: str) -> str:
        """The task writing the (first) output of the node ``name``."""
        return self.bn_apply.get(name) or self.task_of[name]

    def forward_tasks(self) -> list[Hashable]:
        return [t for t in self.order if not self.graph.tasks[t].attrs["backward"]]

    def backward_bytes(self, b: Hashable) -> int:
        """The bytes buffer ``b`` takes when it is allocated in the backward: a backward
        value's real size (:attr:`bwd_bytes`; 0 when unknown), a forward value's size
        (a recomputation)."""
        buf = self.graph.buffers[b]
        if buf.producer is not None and self.graph.tasks[buf.producer].attrs["backward"]:
            return self.bwd_bytes.get(b, buf.size)
        return buf.size

    def position(self) -> dict[Hashable, int]:
        """Each task's index in :attr:`order` (the joint graph's order)."""
        return {t: i for i, t in enumerate(self.order)}


def forward_node_names(joint: Any) -> set[str]:
    """The forward nodes of a joint graph, by the placement rule of PyTorch's default
    partitioner: every node up to the last one tagged forward (or the last primal), except
    the tangents."""
    from torch._functorch.partitioners import (
        _has_tag_is_forward,
        _is_fwd_seed_offset,
        _is_primal,
        _is_tangent,
    )

    last = None
    for node in joint.graph.nodes:
        if _has_tag_is_forward(node) or _is_primal(node) or _is_fwd_seed_offset(node):
            last = node
    names: set[str] = set()
    for node in joint.graph.nodes:
        if node.op != "output" and not _is_tangent(node):
            names.add(node.name)
        if node is last:
            break
    return names


def _is_pinned(node: Any) -> bool:
    """Whether a forward op must run once only: a random op (its draw would differ) unless
    this call draws nothing (:func:`_draws_nothing`), or a functionalized in-place op such
    as batch norm's running-statistics update (its inputs are overwritten after the
    forward)."""
    import torch

    if _op_name(node.target).endswith("_functional"):
        return True
    return (torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ())
            and not _draws_nothing(node))


def _draws_nothing(node: Any) -> bool:
    """Whether a seeded op draws no random number in this call: its schema has a
    ``dropout_p`` argument (scaled dot-product attention's kernels) and the call passes 0
    (the default included). Such a call is a deterministic function of its inputs, so a
    recomputation gives the same bits. Any other seeded op counts as drawing."""
    schema = getattr(node.target, "_schema", None)
    for i, arg in enumerate(getattr(schema, "arguments", ())):
        if arg.name == "dropout_p":
            if arg.name in node.kwargs:
                value = node.kwargs[arg.name]
            elif i < len(node.args):
                value = node.args[i]
            else:
                value = arg.default_value
            return isinstance(value, (int, float)) and not isinstance(value, bool) \
                and value == 0
    return False


def _is_view(node: Any) -> bool:
    """Whether an op's outputs alias its first input: a view op by name, or any op whose
    schema marks every return as an alias that is not written (``unfold``,
    ``view_as_complex``, ``view_as_real``, ...). A view allocates nothing, and a view of an
    input the step overwrites reads what the input holds when it is used: a task reading it
    reads the input (see :func:`mutated_inputs`)."""
    if _op_name(node.target) in _VIEW_OPS:
        return True
    returns = getattr(getattr(node.target, "_schema", None), "returns", ())
    return bool(returns) and all(r.alias_info is not None and not r.alias_info.is_write
                                 for r in returns)


def mutated_inputs(joint: Any) -> set[str]:
    """Names of the placeholders a training step overwrites (a buffer updated in place, such
    as batch norm's running statistics): AOTAutograd copies the new values into them after
    the forward, so a forward op that reads one must not run again in the backward (it
    would read the new values, and autograd rejects the saved input as modified). Found
    from the descriptors AOTAutograd puts on the joint graph's output and placeholders."""
    out = joint.graph.find_nodes(op="output")
    descs = out[0].meta.get("desc") if out else None
    wanted = [getattr(d, "mutated_input", None) for d in descs or ()]
    wanted = [d for d in wanted if d is not None]
    return {n.name for n in joint.graph.find_nodes(op="placeholder")
            if n.meta.get("desc") is not None and n.meta.get("desc") in wanted}


def joint_taskgraph(joint: Any, name: str = "joint", active: Any = ()) -> JointGraph:
    """The activation-memory TaskGraph of an AOTAutograd joint graph (see the module doc).

    ``active``: indices of the primal inputs that are activations (sized as such)."""
    from torch._functorch.partitioners import _is_primal

    fwd = forward_node_names(joint)
    primals = [n for n in joint.graph.nodes if n.op == "placeholder" and _is_primal(n)]
    sized = {primals[i] for i in active if i < len(primals)}
    mutated = {f"in:{n}" for n in mutated_inputs(joint)}
    tasks: list[Task] = []
    buffers: dict[Hashable, Buffer] = {}
    jg = JointGraph(TaskGraph([], []), [], fwd)
    where: dict[Any, Any] = {}   # node -> buffer id, or a tuple of them
    results: list[Hashable] = []
    for node in joint.graph.nodes:
        val = node.meta.get("val")
        if node.op == "placeholder":
            bid = f"in:{node.name}"
            buffers[bid] = Buffer(bid, _nbytes(val) if node in sized else 0, None)
            where[node] = bid
        elif node.op == "call_function":
            reads = _reads(node, where)
            if node.target is operator.getitem:
                parent = where.get(node.args[0])
                where[node] = parent[node.args[1]] if isinstance(parent, tuple) else parent
            elif _is_view(node) and reads:
                where[node] = reads[0] if not isinstance(val, (tuple, list)) else \
                    tuple(reads[0] for _ in val)
            else:
                _add_op(jg, node, tasks, buffers, where, reads, mutated)
        elif node.op == "output":
            results += [b for b in _reads(node, where) if b in buffers]
        x = where.get(node)
        if x is not None:
            jg.buffers_of[node.name] = x if isinstance(x, tuple) else (x,)
    jg.graph = TaskGraph(tasks, buffers.values(), results=set(results), name=name)
    return jg


def _add_op(jg: JointGraph, node: Any, tasks: list[Task], buffers: dict[Hashable, Buffer],
            where: dict[Any, Any], reads: list[Hashable], mutated: set[str]) -> None:
    """The task(s) of one ATen call: one task writing a buffer per output, except a
    training batch norm of the forward that updates running statistics
    (:func:`splits_batch_norm`): a pinned task writing its statistics, and a task
    ``<name>:apply`` writing its output that may be recomputed. A forward task reading an
    input the step overwrites is pinned (``random``: never recomputed)."""
    val = node.meta.get("val")
    backward = node.name not in jg.forward
    tid = node.name
    vals = list(val) if isinstance(val, (tuple, list)) else [val]
    writes = tuple(f"{tid}.{k}" for k in range(len(vals))) \
        if isinstance(val, (tuple, list)) else (tid,)
    for w, v in zip(writes, vals):
        buffers[w] = Buffer(w, 0 if backward else _nbytes(v), tid)
        if backward:
            jg.bwd_bytes[w] = _nbytes(v)
    where[node] = writes if isinstance(val, (tuple, list)) else tid
    moved = sum(_nbytes(a.meta.get("val")) for a in node.all_input_nodes) + sum(
        _nbytes(v) for v in vals)
    flops = _flops(node)
    split = not backward and splits_batch_norm(node)
    if split:  # the output: from the input, weight and bias, statistics computed again
        apply = f"{tid}:apply"
        buffers[writes[0]] = Buffer(writes[0], _nbytes(vals[0]), apply)
        x = _nbytes(node.args[0].meta.get("val"))
        inputs = tuple(dict.fromkeys(_reads(node, where, 3)))
        tasks.append(Task(apply, reads=inputs, writes=writes[:1],
                          time=(2 * x + _nbytes(vals[0])) / NOMINAL_BYTES_PER_S,
                          attrs={"backward": False, "op": "batch_norm_apply", "flops": 0,
                                 "random": bool(mutated & set(inputs))}))
        jg.bn_apply[node.name] = apply
        jg.order.append(apply)
        writes = writes[1:]
    tasks.append(Task(tid, reads=tuple(dict.fromkeys(reads)), writes=writes,
                      time=flops / NOMINAL_FLOPS + moved / NOMINAL_BYTES_PER_S,
                      attrs={"backward": backward, "op": _op_name(node.target),
                             "flops": flops, "random": _is_pinned(node) or (
                                 not backward and bool(mutated & set(reads)))}))
    jg.task_of[node.name] = tid
    jg.order.insert(len(jg.order) - split, tid)  # the statistics first


def splits_batch_norm(node: Any) -> bool:
    """Whether ``node`` is a training batch norm that updates running statistics
    (``_native_batch_norm_legit_functional``, training): the op must run once (its running
    statistics are overwritten after the forward), but its output is recomputed exactly by
    ``_native_batch_norm_legit.no_stats`` on the same input, weight and bias (the same CPU
    kernel computes the same batch statistics and the same normalization, without the
    running statistics), so the output is a value that may be recomputed
    (:func:`thrifty.torch.compile.batch_norm_without_stats` rewrites the backward)."""
    import torch

    return (node.op == "call_function"
            and node.target is torch.ops.aten._native_batch_norm_legit_functional.default
            and len(node.args) == 8 and node.args[5] is True and not node.kwargs
            and all(hasattr(a, "meta") for a in node.args[:1]))


def _reads(node: Any, where: dict, count: int | None = None) -> list[Hashable]:
    from torch.utils._pytree import tree_leaves

    out: list[Hashable] = []
    args = (node.args, node.kwargs) if count is None else node.args[:count]
    for a in tree_leaves(args):
        if hasattr(a, "op") and a in where:
            x = where[a]
            out.extend(x if isinstance(x, tuple) else (x,))
    return out

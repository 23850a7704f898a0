"""A ``torch.compile`` backend whose forward/backward split is a thrifty memory plan.

``torch.compile(model, backend=backend(budget=0.5))`` captures each graph of the model with
TorchDynamo (a graph break gives several graphs), traces each one's forward and backward
into one joint graph with AOTAutograd, and calls :meth:`Backend.partition` to split it:

1. the activation bytes plain eager training saves for backward in this graph are measured
   with ``torch.autograd.graph.saved_tensors_hooks`` on a run of the graph on fake tensors
   (no real computation). Parameters, buffers and inputs that do not require grad (the
   data) are not activations; an input that requires grad and is no parameter is one (the
   output of the graph before a graph break), as it is for eager training;
   the budget is a fraction of them (a float) or a number of bytes per graph (an int);
2. the joint graph becomes a TaskGraph of activation memory (:mod:`thrifty.torch.joint`)
   and the forward tasks to *recompute* are chosen by a parametric minimum cut
   (:mod:`thrifty.torch.cut`): the least recomputation (flops, and a tenth of the traffic)
   among the cuts whose saved bytes fit the budget, then more recomputation where it lowers
   the modelled peak of the backward by more than its price
   (:func:`~thrifty.torch.cut.lowest_peak_within`); every other forward value the backward
   (or a recomputation) reads is *saved*. With ``offload_bandwidth`` (or when no cut fits),
   :func:`thrifty.memory.plan` plans the whole graph with a boundary task
   (:func:`with_boundary`), and a plan that offloads is taken over the cut when its
   recomputations and copies cost less nominal time (``offload_to="disk"``: files, see
   :mod:`thrifty.torch.offload`);
3. the recompute decisions become the ``recompute`` tags of PyTorch's selective activation
   checkpointing (``CheckpointPolicy.MUST_RECOMPUTE``), and PyTorch's own partitioner
   extracts the forward graph (returning the saved tensors) and the backward graph (with the
   recomputations placed where the autograd engine would run them). A recomputed batch
   norm runs without its running statistics in the backward
   (:func:`batch_norm_without_stats`). PyTorch runs both; the backward takes its inputs
   boxed, so that each saved tensor is freed after its last use.

With ``offload_bandwidth`` the plan may also offload: a forward value that is on the host
when the backward starts is tagged ``should_offload`` and PyTorch's activation offloading
(``torch._functorch.config.enable_activation_offloading``) moves it to the host in the
forward graph and back in the backward graph. That pass skips ``getitem`` outputs of
multi-output ops, so those are never offloaded by the plan either (``no_offload``).

The plan's peak counts the forward values resident at any time; a boundary task between the
forward and the backward needs ``room`` bytes of workspace (:func:`with_boundary`), so a
plan under ``budget + room`` bytes holds at most ``budget`` bytes of forward values when the
backward starts: those are the saved bytes. ``room`` is the larger of the eager saved bytes
and the largest op's working set. When neither a cut nor a plan fits, every forward op is
recomputed except the random ones (dropout masks must not be drawn twice) and the graph
reports ``fallback``.

Every compiled graph appends a :class:`GraphReport` to :attr:`Backend.reports`;
:attr:`Backend.last_saved` holds the bytes the compiled forwards saved in the last step,
measured on the real tensors the forward returns for backward (their storages, each once;
which of them share a storage with a parameter, a buffer or the data is read once off the
graph: :mod:`thrifty.torch.saved`).
"""

from __future__ import annotations

import contextlib
import functools
import math
import operator
import time
import warnings
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from thrifty.errors import BudgetNotMet, InfeasibleBudget, PlanError
from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
from thrifty.torch.joint import JointGraph, joint_taskgraph
from thrifty.torch.saved import saved_counter

__all__ = ["BOUNDARY", "PARTITIONERS", "Backend", "GraphReport", "backend",
           "batch_norm_without_stats", "eager_saved_bytes", "with_boundary"]

#: ``thrifty``: the plan; ``min_cut``: PyTorch's min-cut partitioner with its
#: ``activation_memory_budget`` set to the budget fraction; ``default``: PyTorch's default
#: partitioner (saves what eager saves, recomputes nothing).
PARTITIONERS = ("thrifty", "min_cut", "default")


@dataclass
class GraphReport:
    """What the partition of one compiled graph decided."""

    eager_saved: int          # activation bytes eager training saves in this graph
    budget: int               # bytes the saved activations may take
    saved: int = 0            # bytes the compiled forward saves (activations only)
    recomputed: list[str] = field(default_factory=list)   # forward ops the backward re-runs
    recomputed_flops: int = 0
    offloaded: int = 0        # bytes of saved tensors the forward moves to host memory
    plan_peak: int | None = None
    backward_peak: int | None = None  # the modelled backward peak (thrifty.torch.cut)
    planner: str = ""
    fallback: bool = False
    seconds: float = 0.0


def backend(budget: float | int = 1.0, offload_bandwidth: float | None = None, *,
            partitioner: str = "thrifty", time_limit: float = 2.0,
            method: str = "auto", offload_to: str | None = None,
            offload_dir: str | None = None, peak_weight: float = 1.0) -> Backend:
    """A ``torch.compile`` backend that saves at most ``budget`` activation bytes.

    Parameters
    ----------
    budget:
        A float: the fraction of the activation bytes plain eager training saves for
        backward (in each compiled graph); an int: bytes per compiled graph.
    offload_bandwidth:
        Bytes per second of the copy to host memory (or to disk); when given, the planner
        may also offload (see the module docstring).
    partitioner:
        One of :data:`PARTITIONERS` (the other two are PyTorch's, for comparison).
    time_limit:
        Seconds for each of thrifty's planners.
    method:
        ``"auto"``: the minimum cut, and :func:`thrifty.memory.plan` where offloading is
        allowed or no cut fits; ``"cut"``: the cut only; a method of
        :func:`thrifty.memory.plan`: that planner only.
    offload_to:
        ``"host"`` (the default when ``offload_bandwidth`` is given): PyTorch's activation
        offloading; ``"disk"``: files in a temporary directory
        (:mod:`thrifty.torch.offload`), planned at ``offload_bandwidth`` or, when it is
        ``None``, at the disk bandwidth measured in that directory.
    offload_dir:
        With ``offload_to="disk"``: the directory the temporary directory is made in
        (default: the system's temporary directory).
    peak_weight:
        How much the modelled peak of the backward counts against the priced recomputation
        when the cut is refined (:func:`thrifty.torch.cut.lowest_peak_within`): larger
        values buy a lower step peak with more recomputation (time).

    Example
    -------
    >>> import torch
    >>> m = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    >>> be = backend(budget=0.5)
    >>> step = torch.compile(m, backend=be)
    >>> step(torch.randn(16, 8)).sum().backward()
    >>> be.last_saved <= 0.5 * be.reports[0].eager_saved
    True
    """
    return Backend(budget, offload_bandwidth, partitioner=partitioner,
                   time_limit=time_limit, method=method, offload_to=offload_to,
                   offload_dir=offload_dir, peak_weight=peak_weight)


class Backend:
    """The callable ``torch.compile`` calls once per captured graph (see :func:`backend`)."""

    def __init__(self, budget: float | int, offload_bandwidth: float | None = None, *,
                 partitioner: str = "thrifty", time_limit: float = 2.0,
                 method: str = "auto", offload_to: str | None = None,
                 offload_dir: str | None = None, peak_weight: float = 1.0) -> None:
        if isinstance(budget, bool) or not isinstance(budget, (int, float)) or budget < 0:
            raise PlanError(f"budget is {budget!r}; give a fraction >= 0 (a float, of the "
                            "activation bytes eager training saves) or a number of bytes "
                            "(an int)")
        if partitioner not in PARTITIONERS:
            raise PlanError(f"unknown partitioner {partitioner!r}; valid: "
                            + ", ".join(PARTITIONERS))
        if offload_bandwidth is not None and not offload_bandwidth > 0:
            raise PlanError(f"offload_bandwidth is {offload_bandwidth!r}; give bytes per "
                            "second > 0, or None to forbid offloading")
        if not time_limit > 0:
            raise PlanError(f"time_limit is {time_limit!r}; it must be seconds > 0")
        if isinstance(peak_weight, bool) or not isinstance(peak_weight, (int, float)) or \
                not 0 < peak_weight < math.inf:
            raise PlanError(f"peak_weight is {peak_weight!r}; give a finite number > 0 (1: "
                            "the default; larger: a lower peak for more recomputation)")
        if offload_to not in (None, "host", "disk"):
            raise PlanError(f"offload_to is {offload_to!r}; valid: 'host', 'disk', or None")
        if offload_dir is not None and offload_to != "disk":
            raise PlanError("offload_dir is given but offload_to is not 'disk'; pass "
                            "offload_to='disk' to offload to files in it")
        self.budget = budget
        #: the files of offloaded tensors (``offload_to="disk"``), else ``None``
        self.disk: Any = None
        if offload_to == "disk":
            from thrifty.torch.offload import DiskStore, disk_bandwidth

            self.disk = DiskStore(offload_dir)
            if offload_bandwidth is None:
                offload_bandwidth = disk_bandwidth(self.disk.path)
        self.offload_bandwidth = offload_bandwidth
        self.partitioner = partitioner
        self.time_limit = float(time_limit)
        self.method = method
        self.peak_weight = float(peak_weight)
        self.reports: list[GraphReport] = []
        #: Context managers entered around every run of a compiled forward or backward
        #: graph (e.g. a ``TorchDispatchMode`` that measures memory inside them only).
        self.around: list[Any] = []
        self._saved_now: dict[int, int] = {}

    @property
    def last_saved(self) -> int:
        """Activation bytes the compiled forwards saved for backward in their last runs."""
        return sum(self._saved_now.values())

    def _limit(self, eager: int) -> int:
        if isinstance(self.budget, float):
            return int(self.budget * eager)
        return int(self.budget)

    def __call__(self, gm: Any, example_inputs: list[Any]) -> Any:
        from torch._dynamo.backends.common import aot_autograd

        import torch

        active = [i for i, x in enumerate(example_inputs) if isinstance(x, torch.Tensor)
                  and x.requires_grad and not isinstance(x, torch.nn.Parameter)]
        eager = eager_saved_bytes(gm, example_inputs, active)
        report = GraphReport(eager, self._limit(eager))
        index = len(self.reports)
        self.reports.append(report)
        state: dict[str, Any] = {"active": active}

        def fw_compiler(fw: Any, _inputs: Any) -> Any:
            n_out = state.get("num_fwd_outputs", 0)
            jg: JointGraph = state["joint"]
            names = [n.name for n in fw.graph.find_nodes(op="placeholder")]
            free = [not any(jg.graph.buffers[b].size for b in jg.buffers_of.get(n, ()))
                    for n in names]
            count = saved_counter(fw, n_out, free)

            def run(args: list[Any]) -> Any:
                with contextlib.ExitStack() as stack:
                    for cm in self.around:
                        stack.enter_context(cm)
                    out = fw(*args)
                self._saved_now[index] = count(args, out)
                return out
            run._boxed_call = True  # type: ignore[attr-defined]
            return run

        def bw_compiler(bw: Any, _inputs: Any) -> Any:
            _boxed(bw)

            def run(args: list[Any]) -> Any:
                with contextlib.ExitStack() as stack:
                    for cm in self.around:
                        stack.enter_context(cm)
                    return bw(args)  # the graph empties the list: saved tensors die early
            run._boxed_call = True  # type: ignore[attr-defined]
            return run

        partition = functools.partial(self.partition, report=report, state=state)
        return aot_autograd(fw_compiler=fw_compiler, bw_compiler=bw_compiler,
                            partition_fn=partition)(gm, example_inputs)

    # -- the partition ---------------------------------------------------------------------
    def partition(self, joint: Any, joint_inputs: Any, *, report: GraphReport,
                  state: dict[str, Any], num_fwd_outputs: int, **kw: Any) -> Any:
        """Split ``joint`` into forward and backward graphs (AOTAutograd's partition_fn)."""
        from torch._functorch import config
        from torch._functorch.partitioners import (
            default_partition,
            min_cut_rematerialization_partition,
        )

        import torch

        t0 = time.perf_counter()
        state["num_fwd_outputs"] = num_fwd_outputs
        if self.partitioner != "default":
            _dedup(joint)
        jg = joint_taskgraph(joint, active=state.get("active", ()))
        state["joint"] = jg
        if self.partitioner == "default":
            fw, bw = default_partition(joint, joint_inputs, num_fwd_outputs=num_fwd_outputs,
                                       **kw)
        elif self.partitioner == "min_cut":
            frac = (self.budget if isinstance(self.budget, float) else
                    min(1.0, report.budget / max(1, report.eager_saved)))
            with config.patch(activation_memory_budget=float(frac)):
                fw, bw = min_cut_rematerialization_partition(
                    joint, joint_inputs, num_fwd_outputs=num_fwd_outputs, **kw)
        else:
            recompute, offload = self._choose(jg, report)
            if not offload:
                from thrifty.torch.cut import backward_peak

                report.backward_peak = backward_peak(jg, recompute)
            host = offload if self.disk is None else set()
            for node in joint.graph.nodes:
                for key in ("recompute", "ac_graph_id", "should_offload"):
                    node.meta.pop(key, None)
                if _recomputes(node, jg, recompute):
                    node.meta["recompute"] = torch.utils.checkpoint.CheckpointPolicy \
                        .MUST_RECOMPUTE
                elif node.name in jg.task_of and set(jg.buffers_of[node.name]) & host:
                    node.meta["should_offload"] = True
            with config.patch(enable_activation_offloading=bool(host),
                              activation_offload_separate_stream=False):
                fw, bw = default_partition(joint, joint_inputs,
                                           num_fwd_outputs=num_fwd_outputs, **kw)
            report.offloaded = sum(
                sum(jg.graph.buffers[b].size for b in jg.buffers_of.get(n.name, ()))
                for n in fw.graph.nodes if n.meta.get("saved_for_offloading"))
        report.recomputed = [n.name for n in bw.graph.nodes
                             if n.op == "call_function" and n.name in jg.forward
                             and n.name in jg.task_of]
        report.recomputed_flops = sum(jg.graph.tasks[jg.output_task(n)].attrs["flops"]
                                      for n in report.recomputed)
        if self.partitioner == "thrifty":
            batch_norm_without_stats(fw, bw, num_fwd_outputs)
            if self.disk is not None and offload:
                report.offloaded = self._to_disk(jg, fw, bw, num_fwd_outputs, offload)
        report.saved = _graph_saved(jg, fw, num_fwd_outputs)
        report.seconds = time.perf_counter() - t0
        return fw, bw

    def _to_disk(self, jg: JointGraph, fw: Any, bw: Any, num_fwd_outputs: int,
                 offload: set[Hashable]) -> int:
        """Send the saved tensors whose buffers the plan offloads to disk
        (:func:`thrifty.torch.offload.to_disk`); returns their bytes."""
        from thrifty.torch.offload import to_disk

        assert self.disk is not None
        names = {n for n, bufs in jg.buffers_of.items()
                 if n in jg.forward and bufs and set(bufs) <= offload}
        done = to_disk(fw, bw, num_fwd_outputs, names, self.disk.id)
        return sum(jg.graph.buffers[b].size for b in {b for n in done
                                                       for b in jg.buffers_of[n]})

    def _choose(self, jg: JointGraph,
                report: GraphReport) -> tuple[set[Hashable], set[Hashable]]:
        """The forward tasks to recompute and the forward buffers to offload.

        Recomputation alone: the minimum cut of :mod:`thrifty.torch.cut` (method ``auto``
        or ``cut``). With ``offload_bandwidth``, or when no cut fits, a plan of the whole
        joint graph that holds at most the budget of forward values on the device when the
        backward starts (:func:`with_boundary`), taken over the cut when it offloads and its
        recomputations and copies cost less nominal time than the cut's recomputations
        (:meth:`_cost`)."""
        from thrifty.torch.cut import lowest_peak_within

        g, limit = jg.graph, report.budget
        cut = None
        if self.method in ("auto", "cut"):
            cut = lowest_peak_within(jg, limit, lambda r: _saved_bytes(jg, r),
                                     memory_bound_first=limit < report.eager_saved,
                                     peak_weight=self.peak_weight)
        if self.method != "cut" and (cut is None or self.offload_bandwidth is not None):
            if _saved_bytes(jg, set()) <= limit and cut is None:
                report.planner = "none needed"
                return set(), set()
            planned = self._plan(jg, report)
            if planned is not None and (cut is None or planned[1] and self._cost(
                    jg, *planned) < self._cost(jg, cut, set())):
                return planned
        if cut is not None:
            report.planner = "cut"
            return cut, set()
        report.fallback = True
        report.planner = "recompute all"
        everything = {t for t in jg.forward_tasks() if not g.tasks[t].attrs["random"]}
        least = _saved_bytes(jg, everything)
        if least > limit:
            warnings.warn(BudgetNotMet(
                f"thrifty.torch: a compiled graph saves {least} activation bytes for backward "
                f"even with every forward op recomputed that may be (not random ops, not ops "
                f"reading a buffer the step overwrites); its budget is {limit} bytes "
                f"({limit / max(1, report.eager_saved):.2f} of eager's {report.eager_saved}). "
                "Raise the budget, or pass offload_bandwidth to offload"), stacklevel=2)
        return everything, set()

    def _cost(self, jg: JointGraph, recompute: set[Hashable],
              offload: set[Hashable]) -> float:
        """Nominal seconds a partition adds to the step: its recomputations
        (:func:`thrifty.torch.cut.recompute_cost`) and, for each offloaded byte, a copy out
        and a copy back at ``offload_bandwidth``."""
        from thrifty.torch.cut import recompute_cost

        g = jg.graph
        moved = sum(g.buffers[b].size for b in offload)
        return sum(recompute_cost(g.tasks[t]) for t in recompute) + (
            2 * moved / self.offload_bandwidth if moved and self.offload_bandwidth else 0.0)

    def _plan(self, jg: JointGraph,
              report: GraphReport) -> tuple[set[Hashable], set[Hashable]] | None:
        """Recompute and offload sets from :func:`thrifty.memory.plan` on the joint graph
        with a boundary task, or ``None`` when no plan fits."""
        from thrifty.memory import plan

        g, limit = jg.graph, report.budget
        room = max([report.eager_saved] + [sum(g.buffers[b].size for b in set(
            t.reads) | set(t.writes)) for t in g.tasks.values()])
        g2, order = with_boundary(jg, room)
        pinned = sum(g.buffers[b].size for b in g.results)  # the forward's outputs
        try:
            p = plan(g2, limit + room + pinned, offload_bandwidth=self.offload_bandwidth,
                     order=order, time_limit=self.time_limit,
                     method="auto" if self.method == "cut" else self.method,
                     no_offload=_no_offload(g, disk=self.disk is not None))
        except InfeasibleBudget:
            return None
        recompute = _plan_recomputes(g2, p.steps)
        offload = {b for b in _plan_offloads(g2, p.steps) - {
            b for t in recompute for b in g.tasks[t].writes}
            if b in g.buffers and (self.disk is not None
                                   or len(g.tasks[g.buffers[b].producer].writes) == 1)}
        if _saved_bytes(jg, recompute, offload) > limit:
            return None
        report.plan_peak = int(p.info.get("peak", 0))
        report.planner = p.method
        return recompute, offload


#: The id of the boundary task :func:`with_boundary` adds.
BOUNDARY = "forward/backward boundary"


def with_boundary(jg: JointGraph, room: int) -> tuple[TaskGraph, list[Hashable]]:
    """The joint TaskGraph with a task between the forward and the backward that needs
    ``room`` bytes of workspace: a plan under ``limit + room`` bytes holds at most ``limit``
    bytes of forward values when the backward starts, and ``room`` more bytes of working
    memory elsewhere. Returns the graph and its order (the forward, the boundary, the
    backward)."""
    g = jg.graph
    mark = Task(BOUNDARY, writes=(BOUNDARY,), workspace=int(room),
                attrs={"backward": False, "boundary": True, "random": False, "flops": 0})
    # what a forward op that must not run twice writes is saved: resident to the end
    pinned = {b for t in g.tasks.values() if t.attrs["random"] and not t.attrs["backward"]
              for b in t.writes}
    g2 = TaskGraph([*g.tasks.values(), mark], [*g.buffers.values(), Buffer(BOUNDARY, 0, BOUNDARY)],
                   results=set(g.results) | pinned, name=g.name)
    fwd = [t for t in jg.order if not g.tasks[t].attrs["backward"]]
    bwd = [t for t in jg.order if g.tasks[t].attrs["backward"]]
    return g2, [*fwd, BOUNDARY, *bwd]


def _plan_recomputes(g: TaskGraph, steps: Any) -> set[Hashable]:
    """Forward tasks computed again after the boundary (random ops excepted)."""
    started = False
    out: set[Hashable] = set()
    for s in steps:
        if s.op != "compute":
            continue
        attrs = g.tasks[s.target].attrs
        if attrs["backward"] or s.target == BOUNDARY:
            started = True
        elif started and not attrs["random"]:
            out.add(s.target)
    return out


def _no_offload(g: TaskGraph, disk: bool = False) -> set[Hashable]:
    """Buffers PyTorch's activation offloading cannot move: all but the single outputs of
    forward ops (it skips ``getitem`` values of multi-output ops); to disk, any output of
    a forward op may go (inputs stay: the graph's caller holds them)."""
    if disk:
        return {b for t in g.tasks.values() if t.attrs["backward"] for b in t.writes} | {
            b for b, buf in g.buffers.items() if buf.producer is None}
    return {b for t in g.tasks.values() if t.attrs["backward"] or len(t.writes) != 1
            for b in t.writes}


def _plan_offloads(g: TaskGraph, steps: Any) -> set[Hashable]:
    """Buffers on the host when the boundary task runs (offloaded, not yet prefetched)."""
    away: set[Hashable] = set()
    for s in steps:
        if s.op == "compute" and s.target == BOUNDARY:
            return away
        if s.op == "offload":
            away.add(s.target)
        elif s.op in ("prefetch", "free") or (s.op == "compute" and s.target in away):
            away.discard(s.target)
    return away


def _saved_bytes(jg: JointGraph, recompute: set[Hashable],
                 offload: set[Hashable] = frozenset()) -> int:  # type: ignore[assignment]
    """Bytes of the forward values the backward (with these recomputations) reads, those
    offloaded to the host excepted."""
    g = jg.graph
    need: set[Hashable] = set()
    for t in g.tasks.values():
        if t.attrs["backward"] or t.id in recompute:
            for b in t.reads:
                p = g.buffers[b].producer
                if p is None or (not g.tasks[p].attrs["backward"] and p not in recompute):
                    need.add(b)  # an input: size 0 unless it is an activation
    return sum(g.buffers[b].size for b in need - offload)


def _recomputes(node: Any, jg: JointGraph, recompute: set[Hashable]) -> bool:
    """Whether a forward FX node is tagged to be recomputed: its task is (a ``getitem``: its
    op is), or it is a view (free to recompute) of something computed in the forward."""
    if node.name not in jg.forward or node.op != "call_function":
        return False
    task = jg.task_of.get(node.name)
    if task is not None:
        return jg.output_task(node.name) in recompute
    parent = getattr(node.args[0], "name", "") if node.target is operator.getitem else ""
    if parent in jg.bn_apply:  # a batch norm's output is recomputed, its statistics saved
        return node.args[1] == 0 and jg.bn_apply[parent] in recompute
    if parent in jg.task_of:  # a multi-output op's outputs go with the op
        return jg.task_of[parent] in recompute
    producers = {jg.graph.buffers[b].producer for b in jg.buffers_of.get(node.name, ())}
    producers.discard(None)
    # a view of a saved value is recomputed from it; of a recomputed one, recomputed too
    return bool(producers)


def batch_norm_without_stats(fw: Any, bw: Any, num_fwd_outputs: int) -> None:
    """Recompute training batch norms in the backward without their running statistics.

    A batch norm's output tagged for recomputation (:func:`thrifty.torch.joint.splits_batch_norm`)
    makes PyTorch's partitioner copy ``_native_batch_norm_legit_functional`` into the
    backward graph, reading the running statistics: inputs the step overwrites after the
    forward (autograd would reject the saved input as modified). Each such call becomes
    ``_native_batch_norm_legit.no_stats`` on the same input, weight and bias (its output and
    batch statistics are bitwise the same; only the output is used, the statistics the
    backward reads are the forward's, saved), and the running statistics it no longer reads
    stop being saved: removed from the forward graph's saved outputs and from the backward
    graph's inputs."""
    import torch

    functional = torch.ops.aten._native_batch_norm_legit_functional.default
    freed: set[Any] = set()
    for node in list(bw.graph.nodes):
        if node.op != "call_function" or node.target is not functional:
            continue
        if any(u.target is not operator.getitem or u.args[1] >= 3 for u in node.users):
            raise PlanError(f"a recomputed batch norm ({node.name}) has a running statistic "
                            "read in the backward; it cannot be recomputed without them")
        x, w, b, mean, var, training, momentum, eps = node.args
        with bw.graph.inserting_before(node):
            new = bw.graph.call_function(torch.ops.aten._native_batch_norm_legit.no_stats,
                                         (x, w, b, training, momentum, eps))
        new.meta = {**node.meta, "val": tuple(node.meta["val"][:3])}
        node.replace_all_uses_with(new)
        bw.graph.erase_node(node)
        freed |= {mean, var}
    unused = {p.name for p in freed if p.op == "placeholder" and not p.users}
    if not freed:
        return
    for p in list(bw.graph.find_nodes(op="placeholder")):
        if p.name in unused:
            bw.graph.erase_node(p)
    out = fw.graph.find_nodes(op="output")[0]
    outs = list(out.args[0])
    out.args = (tuple(outs[:num_fwd_outputs] + [
        n for n in outs[num_fwd_outputs:] if getattr(n, "name", None) not in unused]),)
    fw.recompile()
    bw.recompile()


def _graph_saved(jg: JointGraph, fw: Any, num_fwd_outputs: int) -> int:
    """Activation bytes among the forward graph's saved outputs, each storage once, those
    moved to the host by PyTorch's activation offloading excepted."""
    from thrifty.torch.importer import _nbytes

    out = fw.graph.find_nodes(op="output")[0].args[0]
    seen: dict[Hashable, int] = {}
    for n in out[num_fwd_outputs:]:
        if not hasattr(n, "name") or "device_put" in str(getattr(n, "target", "")):
            continue  # moved to the host by PyTorch's activation offloading
        bufs = jg.buffers_of.get(n.name)
        if bufs is None:
            seen[("node", n.name)] = _nbytes(n.meta.get("val"))
            continue
        for b in bufs:
            seen[b] = jg.graph.buffers[b].size
    return sum(seen.values())


def _dedup(joint: Any) -> None:
    """Remove the joint graph's dead code and merge its common subexpressions, in place:
    what PyTorch's min-cut partitioner does to it before partitioning
    (``fx_graph_cse`` when ``torch._functorch.config.cse``, the default; random ops are
    never merged), so that thrifty's forward and backward graphs run the ops min-cut's run
    and a value computed twice is neither computed nor saved twice."""
    from torch._functorch import config
    from torch._functorch.compile_utils import fx_graph_cse

    joint.graph.eliminate_dead_code()
    if config.cse:
        joint.graph = fx_graph_cse(joint.graph)
    joint.recompile()


def _boxed(gm: Any) -> None:
    """Make the FX graph module take its inputs as one list, which it empties once it holds
    them (PyTorch's boxed calling convention): each saved tensor is then freed after its last
    use in the backward, as eager autograd frees it, instead of at the end of the backward."""
    from torch.fx.graph import _BoxedCodeGen

    gm.graph.set_codegen(_BoxedCodeGen())
    gm.recompile()


def _storages(tensors: Any) -> set[Any]:
    from torch.multiprocessing.reductions import StorageWeakRef

    import torch

    return {StorageWeakRef(t.untyped_storage()) for t in tensors if isinstance(t, torch.Tensor)}


def eager_saved_bytes(gm: Any, example_inputs: list[Any], active: Any = ()) -> int:
    """Activation bytes eager autograd saves for backward running ``gm(*example_inputs)``:
    the storages ``saved_tensors_hooks`` sees, each once, except the inputs' (parameters,
    buffers, data) other than those at the indices ``active`` (activations from an earlier
    graph). Runs on fake tensors: nothing is computed or mutated."""
    from torch._guards import detect_fake_mode
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    from torch.multiprocessing.reductions import StorageWeakRef

    import torch

    mode = detect_fake_mode(example_inputs) or FakeTensorMode()
    with mode:  # fresh leaves: the run must not touch the caller's tensors
        args = [(x if isinstance(x, FakeTensor) else mode.from_tensor(x)).detach().clone()
                .requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x
                for x in example_inputs]
    keep = set(active)
    skip = _storages([a for i, a in enumerate(args) if i not in keep])
    seen: dict[Any, int] = {}

    def pack(t: Any) -> Any:
        ref = StorageWeakRef(t.untyped_storage())
        if ref not in skip:
            seen[ref] = t.untyped_storage().nbytes()
        return t

    with contextlib.ExitStack() as stack:
        stack.enter_context(mode)
        stack.enter_context(torch.enable_grad())
        stack.enter_context(torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t))
        gm(*args)
    return sum(seen.values())

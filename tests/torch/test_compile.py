"""torch.compile with thrifty's backend: saved activations within the budget, training exact.

The oracle is plain eager training of the same model from the same weights: the loss, every
gradient and the weights after an optimizer step must be bitwise equal (CPU kernels are
deterministic and recomputation re-runs the same kernels on the same values); the saved bytes
are measured independently of the backend, with ``saved_tensors_hooks`` on both steps.
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

import torch_models as tm  # noqa: E402
from torch.multiprocessing.reductions import StorageWeakRef  # noqa: E402
from training import WithLoss, train  # noqa: E402

import thrifty.torch as tt  # noqa: E402
from thrifty.errors import BudgetNotMet, PlanError  # noqa: E402

CASES = [("mlp", 1.0), ("mlp", 0.5), ("mlp", 0.3), ("residual", 1.0), ("residual", 0.5),
         ("residual", 0.3), ("resnet", 0.3),
         ("attention", 1.0), ("attention", 0.5), ("attention", 0.3), ("graph_break", 0.5),
         ("gpt2", 0.5), ("gpt2", 0.3)]


@pytest.fixture(scope="module")
def eager():
    cache = {}

    def get(name):
        if name not in cache:
            model, x = tm.build(name)
            start = copy.deepcopy(model)
            m = WithLoss(model)
            cache[name] = (start, x, train(m, m, x))
        return cache[name]
    return get


@pytest.mark.parametrize(("name", "budget"), CASES)
def test_compiled_training_is_exact_within_budget(eager, name, budget):
    start, x, (ref_steps, ref_weights) = eager(name)
    m = WithLoss(copy.deepcopy(start))
    be = tt.backend(budget=budget, time_limit=1.0)
    compiled = torch.compile(m, backend=be)
    steps, weights = train(m, compiled, x)
    torch._dynamo.reset()
    for (loss, nbytes, grads), (rloss, rbytes, rgrads) in zip(steps, ref_steps):
        assert torch.equal(loss, rloss)
        assert grads.keys() == rgrads.keys()
        for k in grads:
            assert torch.equal(grads[k], rgrads[k]), k
        assert nbytes <= budget * rbytes, (nbytes, rbytes)
        assert nbytes == be.last_saved  # the backend's own count agrees with the hooks'
    for k in weights:
        assert torch.equal(weights[k], ref_weights[k]), k
    assert sum(r.eager_saved for r in be.reports) == ref_steps[0][1]
    if name == "graph_break":
        # the model's two halves, and the loss (whose one saved tensor is its input: an
        # activation of the graph before, which no plan of this graph can recompute)
        assert len(be.reports) == 3
        assert be.reports[2].saved == be.reports[2].eager_saved
        reports = be.reports[:2]
    else:
        assert len(be.reports) == 1
        reports = be.reports
    for r in reports:
        assert not r.fallback and r.saved <= r.budget
        if r.planner == "none needed":
            assert r.recomputed == []
        if budget < 1.0:  # eager's saved bytes do not fit: something is recomputed
            assert r.recomputed and r.planner == "cut"


def test_pinned_ops_are_saved_and_the_miss_is_reported(eager):
    """Batch norm's functionalized op runs once (its running statistics are overwritten
    after the forward): its output is recomputed from its input without them, its batch
    statistics are saved. Below their bytes no plan fits, and the backend says so
    (``fallback``, a warning) while training stays exact."""
    start, x, (ref_steps, _) = eager("residual")
    m = WithLoss(copy.deepcopy(start))
    be = tt.backend(budget=0.0, time_limit=1.0)
    with pytest.warns(BudgetNotMet, match="even with every forward op recomputed"):
        steps, _ = train(m, torch.compile(m, backend=be), x, steps=1)
    torch._dynamo.reset()
    (r,) = be.reports
    assert r.fallback and r.saved > r.budget
    assert sum("batch_norm" in n for n in r.recomputed) == 4  # every output, from its input
    for k, g in steps[0][2].items():
        assert torch.equal(g, ref_steps[0][2][k]), k


class SdpaNet(torch.nn.Module):
    """Attention through ``F.scaled_dot_product_attention`` (a seeded op: it takes a
    dropout probability), with dropout probability ``p``."""

    def __init__(self, p):
        super().__init__()
        torch.manual_seed(0)
        self.p = p
        self.qkv = torch.nn.Linear(32, 96)
        self.out = torch.nn.Linear(32, 32)

    def forward(self, x):
        q, k, v = (t.unflatten(-1, (2, 16)).transpose(1, 2)
                   for t in self.qkv(x).chunk(3, dim=-1))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=self.p)
        return self.out(torch.relu(a.transpose(1, 2).flatten(2))) + x


def test_attention_without_dropout_is_recomputed():
    """Scaled dot-product attention with ``dropout_p=0`` draws nothing: it may be
    recomputed (here at budget 0, where everything must be), bitwise; with dropout it stays
    pinned, and budget 0 is out of reach (the backend says so)."""
    x = torch.randn(2, 24, 32)
    start = SdpaNet(0.0)
    m0 = WithLoss(copy.deepcopy(start))
    ref_steps, _ = train(m0, m0, x, steps=1)
    m = WithLoss(copy.deepcopy(start))
    be = tt.backend(budget=0.0, time_limit=1.0)
    steps, _ = train(m, torch.compile(m, backend=be), x, steps=1)
    torch._dynamo.reset()
    (r,) = be.reports
    # every forward op recomputed, the attention kernel included (pinned, it would hold
    # its outputs: 6,528 bytes here, and a fallback)
    assert not r.fallback and r.saved <= r.budget == 0 and r.recomputed
    assert torch.equal(steps[0][0], ref_steps[0][0])
    for k, g in steps[0][2].items():
        assert torch.equal(g, ref_steps[0][2][k]), k

    m = WithLoss(SdpaNet(0.5))
    be = tt.backend(budget=0.0, time_limit=1.0)
    with pytest.warns(BudgetNotMet, match="even with every forward op recomputed"):
        train(m, torch.compile(m, backend=be), x, steps=1)
    torch._dynamo.reset()
    (r,) = be.reports
    assert r.fallback and r.saved > 0


class ShiftedByBuffer(torch.nn.Module):
    """Reads a buffer, then overwrites it in place (legal in eager: ``add`` saves nothing of
    it); AOTAutograd copies the new value into the buffer after the compiled forward."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 32)
        self.register_buffer("shift", torch.randn(32))

    reader = "add"  # the op reading the buffer

    def forward(self, x):
        h = torch.sin(self.lin(x) + self.shift)
        self.shift.mul_(0.5)
        return torch.cos(2.0 * h) * torch.tanh(h)


class ShiftedByAView(ShiftedByBuffer):
    """Reads the buffer through views PyTorch's schemas declare (``unfold``,
    ``view_as_complex`` / ``view_as_real``), then overwrites it in place. A recomputed op
    reading such a view reads the buffer: the saved view holds the new values once the
    forward has copied them in."""

    reader = "mul"  # u's product: the op reading the buffer through the views

    def forward(self, x):
        u = torch.view_as_complex(self.shift.unfold(0, 2, 2)) * 2.0
        h = torch.sin(self.lin(x) + torch.view_as_real(u).reshape(1, 32))
        self.shift.mul_(0.5)
        return torch.cos(2.0 * h) * torch.tanh(h)


@pytest.mark.parametrize("budget", [0.0, 0.3])
@pytest.mark.parametrize("model", [ShiftedByBuffer, ShiftedByAView])
def test_ops_reading_an_overwritten_buffer_are_not_recomputed(budget, model):
    """A recomputation of ``lin(x) + shift`` in the backward would read the buffer after the
    forward overwrote it: wrong values, and autograd rejects the saved buffer as modified.
    The op is saved instead, and training stays exact over steps that each update it."""
    torch.manual_seed(0)
    start, x = model(), torch.randn(8, 16)
    ref = WithLoss(copy.deepcopy(start))
    ref_steps, ref_weights = train(ref, ref, x)
    m = WithLoss(copy.deepcopy(start))
    be = tt.backend(budget=budget, time_limit=1.0)
    steps, weights = train(m, torch.compile(m, backend=be), x)
    torch._dynamo.reset()
    (r,) = be.reports
    assert r.recomputed and model.reader not in r.recomputed  # something else is
    for (loss, _, grads), (rloss, _, rgrads) in zip(steps, ref_steps):
        assert torch.equal(loss, rloss)
        for k in rgrads:
            assert torch.equal(grads[k], rgrads[k]), k
    for k in ref_weights:
        assert torch.equal(weights[k], ref_weights[k]), k
    assert torch.equal(m.model.shift, ref.model.shift)


@pytest.mark.parametrize("partitioner", ["default", "min_cut"])
def test_pytorch_partitioners_through_the_same_backend(eager, partitioner):
    start, x, (ref_steps, _) = eager("attention")
    m = WithLoss(copy.deepcopy(start))
    be = tt.backend(budget=0.5, partitioner=partitioner)
    steps, _ = train(m, torch.compile(m, backend=be), x, steps=1)
    torch._dynamo.reset()
    assert steps[0][1] == be.last_saved
    if partitioner == "default":
        assert be.reports[0].recomputed == []
    for k, g in steps[0][2].items():
        assert torch.equal(g, ref_steps[0][2][k]), k


def test_offload_plan_runs_through_pytorch_activation_offloading(eager):
    """With a fast copy stream the plan offloads instead of recomputing; the offloaded
    tensors go through PyTorch's activation offloading (``device_put`` to the host in the
    forward graph, back in the backward graph) and the training stays exact. On a CPU-only
    machine the host is the device: the bytes move nowhere, so only the plan's accounting
    (``saved`` on the device, ``offloaded`` on the host) is checked here."""
    r = _offloading_step(eager, 0.3)
    assert not r.fallback and r.offloaded > 0 and r.saved <= r.budget
    assert r.saved + r.offloaded >= 0.3 * r.eager_saved


def _offloading_step(eager, budget):
    """One training step of the attention model at ``budget`` with a fast copy stream: its
    gradients checked against eager's, its one graph's report returned."""
    start, x, (ref_steps, _) = eager("attention")
    m = WithLoss(copy.deepcopy(start))
    be = tt.backend(budget=budget, offload_bandwidth=1e12, time_limit=1.0)
    steps, _ = train(m, torch.compile(m, backend=be), x, steps=1)
    torch._dynamo.reset()
    for k, g in steps[0][2].items():
        assert torch.equal(g, ref_steps[0][2][k]), k
    (r,) = be.reports
    return r


def test_offload_plan_at_budget_zero_saves_nothing_on_the_device(eager):
    """At budget 0 with a copy stream, everything the backward needs is offloaded or
    recomputed (layer norm's statistics are outputs of a multi-output op, never offloaded:
    they are recomputed), instead of the fallback that recomputes the whole forward at the
    backward's start."""
    r = _offloading_step(eager, 0.0)
    assert not r.fallback and r.planner != "cut" and r.saved == 0 and r.offloaded > 0


def test_integer_budget_is_bytes(eager):
    start, x, (ref_steps, _) = eager("mlp")
    m = WithLoss(copy.deepcopy(start))
    be = tt.backend(budget=70_000, time_limit=1.0)
    steps, _ = train(m, torch.compile(m, backend=be), x, steps=1)
    torch._dynamo.reset()
    assert be.reports[0].budget == 70_000
    assert 0 < steps[0][1] <= 70_000 < ref_steps[0][1]


def test_joint_taskgraph_sizes():
    """Forward values are sized from the tensor metadata; everything else is free."""
    from torch._functorch.aot_autograd import aot_module

    seen = {}

    def partition(joint, inputs, *, num_fwd_outputs, **kw):
        from torch._functorch.partitioners import default_partition

        seen["jg"] = tt.joint_taskgraph(joint)
        return default_partition(joint, inputs, num_fwd_outputs=num_fwd_outputs, **kw)

    lin = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())
    out = aot_module(lin, fw_compiler=lambda g, _: g, bw_compiler=lambda g, _: g,
                     partition_fn=partition)(torch.randn(3, 4))
    out.sum().backward()
    jg = seen["jg"]
    sizes = {jg.graph.tasks[t].attrs["op"]: jg.graph.buffers[jg.graph.tasks[t].writes[0]].size
             for t in jg.order}
    assert sizes["addmm"] == sizes["relu"] == 3 * 8 * 4
    assert all(b.size == 0 for b in jg.graph.buffers.values() if b.producer is None)
    assert all(jg.graph.buffers[w].size == 0 for t in jg.graph.tasks.values()
               if t.attrs["backward"] for w in t.writes)


@pytest.mark.parametrize("bad", [dict(budget=-0.5), dict(budget="half"),
                                 dict(budget=0.5, partitioner="greedy"),
                                 dict(budget=0.5, offload_bandwidth=0),
                                 dict(budget=0.5, time_limit=0),
                                 dict(budget=0.5, peak_weight=0),
                                 dict(budget=0.5, peak_weight=float("inf")),
                                 dict(budget=0.5, peak_weight="high")])
def test_bad_arguments(bad):
    with pytest.raises(PlanError):
        tt.backend(**bad)


def test_backward_frees_each_saved_tensor_after_its_last_use():
    """The compiled backward empties its boxed argument list, so a saved tensor dies once
    its last backward op has run (as in eager autograd), not when the backward returns:
    the last layer's saved ``tanh`` output is gone while the first layer's gradients are
    still being computed."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Probe(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.calls, self.saved, self.dead = 0, [], []

        def __enter__(self):
            self.calls += 1
            return super().__enter__()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if self.calls == 1 and func is torch.ops.aten.tanh.default:
                self.saved.append(StorageWeakRef(out.untyped_storage()))
            elif self.calls == 2:
                self.dead.append(sum(r.expired() for r in self.saved))
            return out

    torch.manual_seed(0)
    layers = [m for _ in range(3) for m in (torch.nn.Linear(64, 64), torch.nn.Tanh())]
    model = WithLoss(torch.nn.Sequential(*layers, torch.nn.Linear(64, 1)))
    be = tt.backend(budget=1.0, partitioner="default")
    step = torch.compile(model, backend=be)
    step(torch.randn(32, 64)).backward()
    probe = Probe()
    be.around = [probe]
    step(torch.randn(32, 64)).backward()
    torch._dynamo.reset()
    assert probe.calls == 2 and len(probe.saved) == 3
    assert probe.dead[0] == 0 and probe.dead[-1] >= 2  # freed one by one, during the backward


# -- offload to disk -----------------------------------------------------------------------
@pytest.mark.parametrize(("name", "budget"), [("attention", 0.02), ("mlp", 0.05),
                                              ("residual", 0.05), ("gpt2", 0.1)])
def test_disk_offload_training_is_exact(eager, name, budget, tmp_path):
    """Saved tensors the plan offloads go to files in the forward and come back before
    their first use in the backward: loss, gradients and weights after two SGD steps are
    bitwise eager's, the bytes left in memory are within the budget, the bytes on disk
    are the plan's, and no file outlives its backward."""
    start, x, (ref_steps, ref_weights) = eager(name)
    m = WithLoss(copy.deepcopy(start))
    be = tt.backend(budget=budget, offload_bandwidth=1e12, offload_to="disk",
                    offload_dir=str(tmp_path), time_limit=1.0)
    written = []

    class Count:
        def __enter__(self):
            written.append(be.disk.written)

        def __exit__(self, *exc):
            written.append(be.disk.written)

    be.around = [Count()]
    steps, weights = train(m, torch.compile(m, backend=be), x)
    torch._dynamo.reset()
    (r,) = be.reports
    assert not r.fallback and r.offloaded > 0 and r.saved <= r.budget
    assert written[-1] - written[0] == 2 * r.offloaded  # two steps, each writes the plan's
    for (loss, nbytes, grads), (rloss, rbytes, rgrads) in zip(steps, ref_steps):
        assert torch.equal(loss, rloss)
        assert grads.keys() == rgrads.keys()
        for k in grads:
            assert torch.equal(grads[k], rgrads[k]), k
        assert nbytes <= budget * rbytes, (nbytes, rbytes)  # the files' tokens included
        assert nbytes == be.last_saved
    for k in weights:
        assert torch.equal(weights[k], ref_weights[k]), k
    assert be.disk.files() == [] and be.disk.meta == {}
    path = be.disk.path
    assert path.startswith(str(tmp_path))
    be.disk.close()
    import os
    assert not os.path.exists(path)


def test_disk_files_of_a_forward_without_backward_are_removed(eager, tmp_path):
    """A forward whose backward never runs leaves no file once its graph is dropped; the
    store's directory is removed when the interpreter exits."""
    import gc
    import os

    start, x, _ = eager("attention")
    m = WithLoss(copy.deepcopy(start))
    be = tt.backend(budget=0.02, offload_bandwidth=1e12, offload_to="disk",
                    offload_dir=str(tmp_path), time_limit=1.0)
    step = torch.compile(m, backend=be)
    loss = step(x)
    assert be.disk.files()  # written, waiting for the backward
    del loss
    gc.collect()
    assert be.disk.files() == []
    torch._dynamo.reset()
    import subprocess
    import sys

    code = ("import thrifty.torch as tt; be = tt.backend(0.1, offload_to='disk', "
            f"offload_dir={str(tmp_path)!r}); print(be.disk.path, be.offload_bandwidth > 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    path, positive = out.stdout.split()
    assert positive == "True" and path.startswith(str(tmp_path)) and not os.path.exists(path)


@pytest.mark.parametrize(("make", "same_strides"), [
    (lambda: torch.randn(5, 7), True),
    (lambda: torch.randn(7, 5).t(), True),                  # permuted: strides kept
    (lambda: torch.randn(4, 6, 8).permute(2, 0, 1), True),
    (lambda: torch.randn(10, 10)[2:7], True),               # an offset into the storage
    (lambda: torch.randn(10, 10)[2:7, 1:9], False),         # a window: read back contiguous
    (lambda: torch.randn(3, 4).to(torch.bfloat16), True),
    (lambda: torch.randn(6).expand(3, 6), False),           # overlapping
    (lambda: torch.randint(0, 9, (0, 3)), True),
])
def test_disk_store_round_trip_is_bitwise(make, same_strides, tmp_path):
    from thrifty.torch.offload import DiskStore, load, store

    s = DiskStore(tmp_path)
    t = make()
    token = store(t, s.id)
    assert len(s.files()) == 1 and s.written == t.numel() * t.element_size()
    back = load(token)
    assert back.dtype == t.dtype and back.shape == t.shape and torch.equal(back, t)
    assert back.untyped_storage().data_ptr() != t.untyped_storage().data_ptr() or not t.numel()
    assert (back.stride() == t.stride()) == same_strides or t.dim() < 2
    assert s.files() == []
    s.close()


@pytest.mark.parametrize("bad", [dict(offload_to="tape"),
                                 dict(offload_dir="/tmp"),
                                 dict(offload_to="disk", offload_dir="/no/such/dir"),
                                 dict(offload_to="disk", offload_bandwidth=-1.0)])
def test_bad_disk_offload_arguments(bad):
    with pytest.raises(PlanError, match="offload"):
        tt.backend(budget=0.1, **bad)


class Twice(torch.nn.Module):
    """``tanh(h)`` computed twice (``dup``) or once and read twice: the same forward."""

    def __init__(self, dup):
        super().__init__()
        self.lin, self.out, self.dup = torch.nn.Linear(16, 64), torch.nn.Linear(64, 1), dup

    def forward(self, x):
        h = self.lin(x)
        a = torch.tanh(h)
        b = torch.tanh(h) if self.dup else a
        return self.out(a * b + torch.sigmoid(h))


@pytest.mark.parametrize("frac", [0.7, 0.5, 0.0])
def test_a_duplicated_subexpression_partitions_as_computed_once(frac):
    """The joint graph's common subexpressions are merged before the partition (as PyTorch's
    min-cut partitioner merges them): a forward computing ``tanh(h)`` twice runs, saves and
    recomputes what the one computing it once does, and trains bitwise as its eager run."""
    torch.manual_seed(0)
    start, x = Twice(dup=False), torch.randn(32, 16)
    limit = None
    seen = {}
    for dup in (False, True):
        model = copy.deepcopy(start)
        model.dup = dup
        m = WithLoss(copy.deepcopy(model))
        ref_steps, _ = train(m, m, x)
        if limit is None:
            # bytes, below eager's saved bytes in both (eager saves tanh twice with dup)
            limit = int(frac * ref_steps[0][1])
        be = tt.backend(budget=limit, time_limit=1.0)
        graphs = []
        partition = be.partition

        def record(*args, partition=partition, graphs=graphs, **kw):
            fw, bw = partition(*args, **kw)
            graphs.append([str(n.target) for n in fw.graph.nodes if n.op == "call_function"])
            return fw, bw
        be.partition = record
        m = WithLoss(copy.deepcopy(model))
        steps, _ = train(m, torch.compile(m, backend=be), x)
        torch._dynamo.reset()
        for (loss, nbytes, grads), (rloss, _, rgrads) in zip(steps, ref_steps):
            assert torch.equal(loss, rloss)
            assert all(torch.equal(grads[k], rgrads[k]) for k in rgrads)
            assert nbytes == be.last_saved <= limit
        (report,) = be.reports
        seen[dup] = (graphs, report.saved, sorted(report.recomputed))
    assert seen[True] == seen[False]
    assert seen[True][0][0].count("aten.tanh.default") == 1

"""PyTorch: the AOTAutograd import, and real training steps that follow a plan."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch_models import resnet_like, transformer_like  # noqa: E402

from thrifty.errors import GraphError, PlanError  # noqa: E402
from thrifty.memory.budget import plan  # noqa: E402
from thrifty.memory.model import Plan  # noqa: E402
from thrifty.memory.schedule import schedule  # noqa: E402
from thrifty.memory.simulate import simulate  # noqa: E402
from thrifty.torch import block_graph, from_torch, reference_step, train_step  # noqa: E402


def mse(y):
    return y.square().mean()


# -- from_torch ---------------------------------------------------------------------------------
def test_from_torch_mlp_sizes_and_results():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    g = from_torch(m, torch.randn(5, 8))
    ops = {t.attrs["op"]: t for t in g.tasks.values()}
    assert {"addmm", "relu", "threshold_backward", "mm"} <= set(ops)
    relu = ops["relu"]
    assert g.buffers[relu.writes[0]].size == 5 * 16 * 4      # float32 [5, 16]
    assert not relu.attrs["backward"] and ops["threshold_backward"].attrs["backward"]
    grads = [b for b in g.results if b.startswith("bw:")]
    assert sorted(g.buffers[b].size for b in grads) == sorted(
        p.numel() * 4 for p in m.parameters())
    assert ops["addmm"].time > 0
    s = schedule(g)
    assert simulate(g, s.order).peak == s.peak


def test_from_torch_profiled_and_inference():
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU())
    g = from_torch(m, torch.randn(3, 4), profile=True)
    assert all(t.time > 0 for t in g.tasks.values())
    inf = from_torch(m, torch.randn(3, 4), training=False)
    assert not any(t.attrs["backward"] for t in inf.tasks.values())
    assert len(inf.results) == 1


def test_from_torch_transformer_plans_and_fits():
    m = transformer_like(dim=16, heads=2, layers=2, dropout=0.0)
    g = from_torch(m, torch.randn(16, 32, 16))  # activations outweigh the parameters
    assert len(g.tasks) > 50
    pk = schedule(g, time_limit=1).peak
    b = int(0.6 * pk)
    p = plan(g, b, time_limit=1)
    r = simulate(g, p)
    assert r.peak <= b and r.recomputed


@pytest.mark.parametrize("bad", [lambda: from_torch(lambda x: x, torch.randn(2)),
                                 lambda: from_torch(torch.nn.Linear(2, 2)),
                                 lambda: from_torch(torch.nn.ReLU(), torch.randn(2))])
def test_from_torch_bad_input(bad):
    with pytest.raises(GraphError):
        bad()


# -- real training following a plan ------------------------------------------------------------
MODELS = {
    "resnet": (lambda: resnet_like(channels=8, blocks=3), (4, 3, 16, 16)),
    "transformer": (lambda: transformer_like(dim=16, heads=2, layers=3), (4, 16, 16)),
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def setup(request):
    make, shape = MODELS[request.param]
    torch.manual_seed(0)
    x = torch.randn(*shape)
    m = make()
    g = block_graph(m, x, mse, repeats=1)
    torch.manual_seed(1)
    ref = reference_step(m, x, mse)
    return m, x, g, ref


@pytest.mark.parametrize("bw", [None, 1e9])
@pytest.mark.parametrize("frac", [1.0, 0.6, 0.4])
def test_training_follows_the_plan(setup, frac, bw):
    """Gradients are bitwise those of the unplanned step (the same kernels on the same
    values: recomputation replays the RNG and module state); the measured peak of
    activation bytes is within the plan's prediction."""
    m, x, g, ref = setup
    b = int(frac * schedule(g).peak)
    p = plan(g, b, offload_bandwidth=bw, time_limit=1,
             no_offload=[k for k in g.buffers if not str(k).startswith("s")])
    sim = simulate(g, p, offload_bandwidth=bw)
    pred = sim.peak
    assert pred <= b
    torch.manual_seed(1)
    run = train_step(m, x, mse, p, g)
    assert run.loss == ref.loss
    assert set(run.grads) == set(ref.grads)
    for name, grad in ref.grads.items():
        assert torch.equal(run.grads[name], grad), name
    assert 0 < run.peak <= pred
    if frac < 1.0:  # the budget forces recomputation or offloading
        assert sim.recomputed or sim.offloaded


def test_training_rejects_a_bad_plan(setup):
    m, x, g, _ = setup
    with pytest.raises(PlanError, match="B0"):
        train_step(m, x, mse, Plan.from_steps([("compute", "B0")]), g)
    with pytest.raises(PlanError):
        train_step(m, x, mse, Plan.from_steps([("compute", "Q7")]), g)


def test_public_module_from_torch():
    import thrifty.torch as tt

    g = tt.from_torch(torch.nn.Linear(3, 2), torch.randn(4, 3), training=False)
    assert [t.attrs["op"] for t in g.tasks.values()] == ["addmm"]

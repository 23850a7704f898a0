"""The block executor's measured peak never exceeds the plan's predicted peak.

Small ``nn.Sequential`` models are generated from blocks that stress the accounting: saved
tensors shared between two ops (a ReLU's output saved by the ReLU and the next linear
layer), saved views of an intermediate, blocks that save their own output or a view of
their input, module state (batch norm), RNG (dropout). Each is planned at a random budget,
between the proven lower bound and the best schedule's peak, with or without offload,
and trained by :func:`thrifty.torch.train_step`; the measured
peak of resident activation bytes is compared with the simulator's replay of the plan, and
the gradients with an ordinary training step's.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

torch = pytest.importorskip("torch")

from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from thrifty.errors import InfeasibleBudget  # noqa: E402
from thrifty.graph.taskgraph import TaskGraph  # noqa: E402
from thrifty.memory.budget import lower_bound, plan  # noqa: E402
from thrifty.memory.schedule import schedule  # noqa: E402
from thrifty.memory.simulate import simulate  # noqa: E402
from thrifty.torch import block_graph, reference_step, train_step  # noqa: E402
from torch import nn  # noqa: E402

D = 8


class Fn(nn.Module):
    def __init__(self, fn, *mods: nn.Module) -> None:
        super().__init__()
        self.mods = nn.ModuleList(mods)
        self.fn = fn

    def forward(self, x):
        return self.fn(x, *self.mods)


def _halves(x, lin):
    h = lin(x)
    return torch.cat([h[:, : D // 2] * h[:, D // 2:], h[:, D // 2:]], dim=1)  # saves views


BLOCKS = {
    "linear": lambda: nn.Linear(D, D),
    "linear_relu_linear": lambda: nn.Sequential(nn.Linear(D, D), nn.ReLU(), nn.Linear(D, D)),
    "residual": lambda: Fn(lambda x, a: x + torch.tanh(a(x)), nn.Linear(D, D)),
    "exp_saves_output": lambda: Fn(lambda x: torch.exp(x.clamp(max=3))),
    "input_view": lambda: Fn(lambda x: x[:, 1:].sigmoid().repeat(1, 2)[:, :D] * x[:, :1]),
    "views_of_intermediate": lambda: Fn(_halves, nn.Linear(D, D)),
    "batch_norm": lambda: nn.Sequential(nn.BatchNorm1d(D), nn.ReLU()),
    "layer_norm": lambda: nn.LayerNorm(D),
    "dropout": lambda: nn.Sequential(nn.Linear(D, D), nn.Dropout(0.3)),
}


def mse(y):
    return y.square().mean()


def _fixed_times(g: TaskGraph) -> TaskGraph:
    """``g`` with times from its sizes instead of the clock, so that an example's plan does
    not change from one run to the next (backward twice forward, as on real models)."""
    def t(task):
        work = 1e-6 * (1 + sum(g.buffers[b].size for b in task.writes + task.reads))
        return dataclasses.replace(task, time=work * (2 if task.attrs["backward"] else 1))

    return TaskGraph([t(k) for k in g.tasks.values()], g.buffers.values(), g.results, g.name)


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(kinds=st.lists(st.sampled_from(sorted(BLOCKS)), min_size=1, max_size=5),
       batch=st.integers(2, 16), frac=st.floats(0.3, 1.0),
       bw=st.sampled_from([None, 1e6, 1e9, math.inf]), seed=st.integers(0, 3))
def test_measured_peak_within_prediction(kinds, batch, frac, bw, seed):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(D, D), *[BLOCKS[k]() for k in kinds])  # has parameters
    x = torch.randn(batch, D)
    g = _fixed_times(block_graph(model, x, mse, repeats=1))
    torch.manual_seed(seed + 1)
    ref = reference_step(model, x, mse)
    try:
        lb, peak = lower_bound(g, offload=bw is not None), schedule(g).peak
        p = plan(g, int(lb + frac * (peak - lb)), offload_bandwidth=bw,
                 time_limit=0.2, no_offload=[k for k in g.buffers if not str(k).startswith("s")])
    except InfeasibleBudget:
        event("infeasible budget")
        return
    pred = simulate(g, p, offload_bandwidth=bw).peak
    torch.manual_seed(seed + 1)
    run = train_step(model, x, mse, p, g)
    event("offloaded" if any(s.op == "offload" for s in p.steps) else "no offload")
    assert run.peak <= pred, (kinds, run.peak, pred)
    assert run.loss == ref.loss
    assert set(run.grads) == set(ref.grads)
    for name, grad in ref.grads.items():
        assert torch.equal(run.grads[name], grad), name

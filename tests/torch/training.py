"""Training steps measured for the thrifty.torch tests: the model with its loss as one
module, and SGD steps (momentum) recording per step the loss, the activation bytes autograd
saves for backward (``saved_tensors_hooks``; parameters, buffers and the data excluded) and
the gradients. Eager training through these is the oracle of the compiled runs. Peaks of
live bytes inside compiled graphs: :class:`GraphPeaks`."""

from __future__ import annotations

from torch.multiprocessing.reductions import StorageWeakRef

import torch
from thrifty.torch.live import LiveBytes


class WithLoss(torch.nn.Module):
    """The model and its loss in one module, so the whole step is one compiled program."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x).float().square().mean()


def saved_bytes(module, x, fn):
    """Loss, and the activation bytes autograd saves for backward running ``fn(x)`` (storages
    seen by ``saved_tensors_hooks``, each once; parameters, buffers and the data excluded)."""
    skip = {StorageWeakRef(t.untyped_storage()) for t in [*module.parameters(),
                                                          *module.buffers(), x]}
    seen = {}

    def pack(t):
        ref = StorageWeakRef(t.untyped_storage())
        if ref not in skip:
            seen[ref] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = fn(x)
    return loss, sum(seen.values())


def train(module, fn, x, steps=2):
    """``steps`` SGD steps; per step the loss, saved bytes and gradients; then the weights."""
    opt = torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9)
    out = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss, nbytes = saved_bytes(module, x, fn)
        loss.backward()
        out.append((loss.detach(), nbytes, {n: p.grad.clone() for n, p in
                                            module.named_parameters()}))
        opt.step()
    return out, {n: p.detach().clone() for n, p in module.named_parameters()}


class GraphPeaks:
    """For ``Backend.around``: tracks live bytes (:class:`LiveBytes`) inside every run of a
    compiled graph and appends each run's peak to :attr:`peaks` (values made by an earlier
    run and still alive count: a backward's peak includes the saved tensors)."""

    def __init__(self):
        self.live = LiveBytes()
        self.peaks = []

    def __enter__(self):
        self.live.peak = self.live.cur
        return self.live.__enter__()

    def __exit__(self, *exc):
        out = self.live.__exit__(*exc)
        self.peaks.append(self.live.peak)
        return out

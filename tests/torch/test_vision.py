"""thrifty.torch on torchvision's ResNet and timm's ViT: within the budget, training exact.

torchvision and timm do not import with the PyTorch that ``make test`` pins (2.13.0, CPU);
these tests run where they do (``make bench-vision``'s environment, .venv-vision, has
torch 2.14.1, torchvision 0.29.1 and timm) and are skipped, saying why, elsewhere. The
oracle is eager training of the same weights on the same batch: the loss, every gradient
and the weights after an SGD step with momentum are bitwise equal, and the activation
bytes autograd saves (``saved_tensors_hooks``, parameters, buffers and the batch excluded)
are at most the budget times eager's.
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

import torch_models as tm  # noqa: E402
from training import WithLoss, train  # noqa: E402

import thrifty.torch as tt  # noqa: E402

MISSING = tm.vision_libraries()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=str(MISSING))


def build(name):
    torch.manual_seed(0)
    if name == "resnet18":  # torchvision's, with batch norm and residuals
        model = tm.torchvision_resnet("resnet18", classes=10)
    else:  # timm's ViT layout, 2 blocks, 32x32 images (4 patches and the class token)
        model = tm.timm_vit("vit_tiny_patch16_224", image=32, depth=2, num_classes=10)
    torch.manual_seed(1)
    return model, torch.randn(2, 3, 32, 32)


@pytest.mark.parametrize("name", ["resnet18", "vit_tiny"])
@pytest.mark.parametrize("budget", [0.5, 0.3])
def test_vision_model_trains_exactly_within_budget(name, budget):
    model, x = build(name)
    start = copy.deepcopy(model)
    m = WithLoss(model)
    ref_steps, ref_weights = train(m, m, x)
    m = WithLoss(start)
    be = tt.backend(budget=budget, time_limit=1.0)
    steps, weights = train(m, torch.compile(m, backend=be), x)
    torch._dynamo.reset()
    for (loss, nbytes, grads), (rloss, rbytes, rgrads) in zip(steps, ref_steps):
        assert torch.equal(loss, rloss)
        assert grads.keys() == rgrads.keys()
        for k in grads:
            assert torch.equal(grads[k], rgrads[k]), k
        assert 0 < nbytes <= budget * rbytes, (nbytes, rbytes)
        assert nbytes == be.last_saved
    for k in weights:
        assert torch.equal(weights[k], ref_weights[k]), k
    assert len(be.reports) == 1
    r = be.reports[0]
    assert r.eager_saved == ref_steps[0][1]
    assert not r.fallback and r.saved <= r.budget and r.recomputed

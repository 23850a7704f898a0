"""thrifty.torch.saved: the saved bytes of a forward graph's run, counted from the storages
found on the graph's fake tensors, against a count comparing the real storages (each
storage once, the free inputs' left out)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402
from torch.multiprocessing.reductions import StorageWeakRef  # noqa: E402

from thrifty.torch.saved import saved_counter  # noqa: E402


def forward(w, x, a):
    """Returns one output, then the values saved: the weight (a free input), its transpose
    (a view of it), an activation and a view of it (one storage), the activation input ``a``
    (not free), and a fresh value."""
    h = x @ w
    t = torch.tanh(h)
    return h.sum(), w, w.t(), t, t[1:], a, h * 2


def real_count(args, out, free):
    skip = {StorageWeakRef(t.untyped_storage()) for t, f in zip(args, free) if f}
    seen = {StorageWeakRef(t.untyped_storage()): t.untyped_storage().nbytes()
            for t in out[1:]}
    return sum(n for ref, n in seen.items() if ref not in skip)


@pytest.mark.parametrize("traced", ["make_fx", "symbolic_trace"])
def test_saved_bytes_match_a_count_of_the_real_storages(traced):
    """``make_fx`` gives fake tensors (the count is read off the graph once);
    ``symbolic_trace`` gives none (every call compares the real storages)."""
    args = [torch.randn(8, 16), torch.randn(4, 8), torch.randn(3, 5)]
    gm = (make_fx(forward, tracing_mode="fake")(*args) if traced == "make_fx"
          else torch.fx.symbolic_trace(forward))
    free = [True, True, False]
    count = saved_counter(gm, 1, free)
    assert ("_compare_at_run_time" in count.__qualname__) == (traced == "symbolic_trace")
    for _ in range(2):
        args = [torch.randn(8, 16), torch.randn(4, 8), torch.randn(3, 5)]
        out = gm(*args)
        expect = real_count(args, out, free)
        assert expect == 4 * (4 * 16 + 3 * 5 + 4 * 16)  # t, a, h * 2
        assert count(args, out) == expect

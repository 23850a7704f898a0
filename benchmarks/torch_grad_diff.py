"""Where compiled training's weight gradients differ from eager's, and by how much.

For one model of ``memory_torch.models(quick=True)`` (default ``resnet50``) this script
runs one training step (forward, loss, backward) per variant on the same weights and input:

* ``eager`` and ``eager_again`` (a second copy of the model: is eager itself repeatable?);
* ``aot_eager`` (AOTAutograd's default partitioner, no recomputation), ``min_cut``
  (PyTorch's min-cut partitioner at ``activation_memory_budget`` 1.0) and ``thrifty``
  (``thrifty.torch.backend(budget=1.0)``); ``thrifty@0.3``: a partitioner at another
  budget;
* ``float64``: eager in double precision, the reference of every variant's error.

Per variant: whether every gradient is ``torch.equal`` to eager's; the parameter with the
largest difference relative to the largest entry of eager's gradient (its name, that
difference, the gradient's largest entry); and each variant's largest error against the
float64 step, relative in the same way, so that a difference from eager can be read as
"another rounding of the same sum" (its error near eager's) or as a wrong gradient.
Compiled variants are also compared with ``aot_eager`` (``equal_aot_eager``): the
partitioners choose what to save and recompute, not how each op computes.
``--deterministic`` first calls ``torch.use_deterministic_algorithms(True)`` (and
``cudnn.benchmark = False``); ``--no-tf32`` turns TF32 off for cuDNN and cuBLAS.

    python benchmarks/torch_grad_diff.py --device cuda --deterministic --out diff.json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import memory_torch as mt  # noqa: E402
import thrifty.torch as tt  # noqa: E402


def step_grads(fn: Any, module: Any, x: torch.Tensor, steps: int = 2) -> dict[str, Any]:
    """The weight gradients of the ``steps``-th step (earlier steps compile and warm up)."""
    for _ in range(steps):
        module.zero_grad(set_to_none=True)
        fn(x).backward()
    return {n: p.grad.detach().clone() for n, p in module.named_parameters()
            if p.grad is not None}


def worst(grads: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The parameter whose gradient differs most from ``ref``'s, relative to ``ref``'s
    largest entry, with the number of parameters that differ at all."""
    rows = []
    for k, r in ref.items():
        g = grads[k].to(r.dtype)
        scale = float(r.abs().max())
        diff = float((g - r).abs().max())
        rows.append((diff / max(scale, 1e-300), k, diff, scale))
    rel, name, diff, scale = max(rows)
    return {"rel": rel, "param": name, "abs": diff, "ref_max": scale,
            "n_differ": sum(1 for k in ref if not torch.equal(grads[k].to(ref[k].dtype),
                                                                  ref[k])),
            "n_params": len(ref)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--deterministic", action="store_true")
    ap.add_argument("--variants", nargs="*",
                    default=["eager_again", "aot_eager", "min_cut", "thrifty"])
    ap.add_argument("--no-tf32", action="store_true",
                    help="torch.backends.cudnn.allow_tf32 = False (PyTorch's default lets "
                         "cuDNN's convolutions round their inputs to TF32)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if a.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False
    if a.no_tf32:
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device(a.device)
    spec = mt.models(quick=True)[a.model]
    torch.manual_seed(0)
    base = spec["build"]().to(dev)
    torch.manual_seed(1)
    x = spec["input"]().to(dev)
    out: dict[str, Any] = {"model": a.model, "source": spec["source"],
                           "torch": torch.__version__, "device": str(dev),
                           "deterministic": a.deterministic, "tf32": not a.no_tf32,
                           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                           "variants": {}}
    m = mt.WithLoss(copy.deepcopy(base))
    ref = step_grads(m, m, x)
    m64 = mt.WithLoss(copy.deepcopy(base).double())
    ref64 = step_grads(m64, m64, x.double() if x.is_floating_point() else x)
    out["eager_vs_float64"] = worst(ref, ref64)
    print(f"eager vs float64: {out['eager_vs_float64']}", flush=True)
    aot = None
    for v in a.variants:
        mod = mt.WithLoss(copy.deepcopy(base))
        try:
            if v == "eager_again":
                fn: Any = mod
            elif v == "aot_eager":
                fn = torch.compile(mod, backend="aot_eager")
            else:  # "thrifty", "min_cut" or "thrifty@0.3": a partitioner at a budget
                part, _, budget = v.partition("@")
                fn = torch.compile(mod, backend=tt.backend(budget=float(budget or 1.0),
                                                           partitioner=part))
            g = step_grads(fn, mod, x)
            row = {"equal": all(torch.equal(g[k], ref[k]) for k in ref),
                   "vs_eager": worst(g, ref), "vs_float64": worst(g, ref64)}
            if v == "aot_eager":
                aot = g
            elif v != "eager_again" and aot is not None:
                row["equal_aot_eager"] = all(torch.equal(g[k], aot[k]) for k in aot)
        except Exception as err:  # noqa: BLE001 - a row that says why it failed
            row = {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"}
        out["variants"][v] = row
        print(f"{v}: {row}", flush=True)
        torch._dynamo.reset()
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

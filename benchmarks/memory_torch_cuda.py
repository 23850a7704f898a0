"""Benchmark: thrifty.torch on a GPU: the step's peak by ``torch.cuda.max_memory_allocated``.

The CPU benchmark (``memory_torch.py``) counts live storages with a dispatch mode, and its
host offload moves nothing (the host is the device). On a CUDA device this script measures
what a GPU user sees, per model of ``memory_torch.models(quick=True)`` (on the device,
model, input and gradients), one training step (forward, loss, backward) per method:

* ``eager``; ``checkpoint`` (``torch.utils.checkpoint`` on each block);
* ``thrifty`` and ``min_cut`` (PyTorch's min-cut partitioner with
  ``activation_memory_budget``) at the budgets of ``--budgets``;
* ``thrifty_host``: ``thrifty.torch.backend(budget, offload_bandwidth=BW)`` at the
  budgets of ``--offload-budgets``: the plan may offload saved tensors to host memory
  (PyTorch's activation offloading), planned at each bandwidth of ``--bandwidth``
  (bytes/s; the plan offloads where copies cost less nominal time than recomputation).

Measured: ``peak``: ``max_memory_allocated`` during the step minus what was allocated
before it (weights, input), over eager's; ``grads``: the weight gradients' bytes over
eager's peak (they are in every method's peak); ``saved``: bytes saved for backward
(``saved_tensors_hooks`` for eager and checkpoint, the backend's count for compiled rows)
over eager's; ``time``: median of ``--steps`` synchronised steps over eager's median;
``equal``: every weight gradient ``torch.equal`` to eager's, else the largest difference
relative to the gradient's largest entry. Rows are written to ``--out`` (JSON) as they come,
so a run stopped at ``--deadline`` seconds keeps what it measured.

    python benchmarks/memory_torch_cuda.py --out results/memory_torch_cuda.json
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import memory_torch as mt  # noqa: E402
import thrifty.torch as tt  # noqa: E402


def _saved_hook_bytes(module: Any, fn: Any, x: torch.Tensor) -> int:
    pack, seen = mt.saved_counter(module, x)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = fn(x)
    loss.backward()
    module.zero_grad(set_to_none=True)
    return sum(seen.values())


def measure(module: Any, fn: Any, x: torch.Tensor, steps: int,
            be: Any = None) -> dict[str, Any]:
    """Peak, saved bytes, median step seconds and gradients of ``fn`` on ``x``."""
    def step() -> None:
        module.zero_grad(set_to_none=True)
        fn(x).backward()

    step()  # warm-up (compiles)
    step()
    module.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn(x).backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    grads = {n: p.grad.detach().clone() for n, p in module.named_parameters()
             if p.grad is not None}
    saved = be.last_saved if be is not None else _saved_hook_bytes(module, fn, x)
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    module.zero_grad(set_to_none=True)
    return {"peak": peak, "saved": saved, "seconds": statistics.median(times),
            "grads": grads}


def compare(grads: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]) -> Any:
    if grads.keys() != ref.keys():
        return "different parameters"
    if all(torch.equal(grads[k], ref[k]) for k in ref):
        return True
    return max(float((grads[k] - ref[k]).abs().max() / ref[k].abs().max().clamp_min(1e-30))
               for k in ref)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="*", default=None)
    ap.add_argument("--budgets", type=float, nargs="*", default=[1.0, 0.5, 0.3, 0.1, 0.0])
    ap.add_argument("--offload-budgets", type=float, nargs="*", default=[0.1, 0.0])
    ap.add_argument("--bandwidth", type=float, nargs="+", default=[5.0e10, 1.0e12],
                    help="bytes/s the host-offload plans assume (a row per value)")
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # tests: "cpu"
    ap.add_argument("--deadline", type=float, default=1e9,
                    help="seconds after which no new row is started")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" /
                                         "memory_torch_cuda.json"))
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("memory_torch_cuda.py needs a CUDA device; none is available")
    t_start = time.perf_counter()
    dev = torch.device(a.device)
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    out: dict[str, Any] = {"torch": torch.__version__, "device": torch.cuda.get_device_name(),
                           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                           "rows": []}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)

    def write() -> None:
        Path(a.out).write_text(json.dumps(out, indent=1, default=str))

    for name, spec in mt.models(quick=True).items():
        if a.models and name not in a.models:
            continue
        torch.manual_seed(0)
        base = spec["build"]().to(dev)
        torch.manual_seed(1)
        x = spec["input"]().to(dev)
        m = mt.WithLoss(copy.deepcopy(base))
        ref = measure(m, m, x, a.steps)
        grad_bytes = sum(g.numel() * g.element_size() for g in ref["grads"].values())
        out.setdefault("models", {})[name] = {"source": spec["source"],
                                              "eager_peak": ref["peak"],
                                              "eager_saved": ref["saved"],
                                              "grad_bytes": grad_bytes}
        print(f"{name}: eager peak {ref['peak'] / 2**20:.1f} MiB, saved "
              f"{ref['saved'] / 2**20:.1f} MiB, gradients {grad_bytes / 2**20:.1f} MiB",
              flush=True)
        runs: list[tuple[str, float | None, float | None]] = [("checkpoint", None, None)]
        runs += [(p, f, None) for f in a.budgets for p in ("thrifty", "min_cut")]
        runs += [("thrifty_host", f, bw) for f in a.offload_budgets for bw in a.bandwidth]
        for method, f, bw in runs:
            if time.perf_counter() - t_start > a.deadline:
                break
            row: dict[str, Any] = {"model": name, "method": method, "budget": f}
            if bw is not None:
                row["bandwidth"] = bw
            try:
                be = None
                if method == "checkpoint":
                    mod = mt.WithLoss(mt.checkpointed(name, copy.deepcopy(base)))
                    fn = mod
                else:
                    mod = mt.WithLoss(copy.deepcopy(base))
                    kw: dict[str, Any] = {"partitioner": "min_cut" if method == "min_cut"
                                          else "thrifty"}
                    if method == "thrifty_host":
                        kw["offload_bandwidth"] = bw
                    be = tt.backend(budget=f, time_limit=1.0, **kw)
                    fn = torch.compile(mod, backend=be)
                r = measure(mod, fn, x, a.steps, be)
                row.update(peak=r["peak"] / ref["peak"], saved=r["saved"] / ref["saved"],
                           time=r["seconds"] / ref["seconds"],
                           equal=compare(r["grads"], ref["grads"]))
                if be is not None:
                    row.update(offloaded=sum(g.offloaded for g in be.reports) / ref["saved"],
                               fallback=any(g.fallback for g in be.reports),
                               partition_s=sum(g.seconds for g in be.reports))
            except Exception as err:  # noqa: BLE001 - a row that says why it failed
                row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
            out["rows"].append(row)
            write()
            print("  " + " ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                  for k, v in row.items() if k != "model"), flush=True)
            torch.cuda.empty_cache()
        torch._dynamo.reset()
    out["seconds"] = time.perf_counter() - t_start
    write()


if __name__ == "__main__":
    main()

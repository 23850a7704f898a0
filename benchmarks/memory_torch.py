"""Benchmark: training PyTorch models within an activation budget, thrifty against PyTorch.

Per model and budget fraction ``f`` (1.0, 0.7, 0.5, 0.3), one training step (forward, loss,
backward; the loss inside the compiled module) with:

* ``thrifty``: ``torch.compile(model, backend=thrifty.torch.backend(budget=f))``;
* ``min_cut``: PyTorch's min-cut partitioner with
  ``torch._functorch.config.activation_memory_budget = f`` (through the same backend with
  ``partitioner="min_cut"``, so both run their graphs the same way: eager ATen calls, no
  Inductor);
* ``checkpoint``: ``torch.utils.checkpoint`` (non-reentrant) on each block, eager (no budget:
  one row);
* ``eager``: plain training (the reference);
* at the budgets of ``OFFLOAD_BUDGETS`` (below the others), ``thrifty`` (recomputation
  only), ``thrifty_disk`` (``offload_to="disk"``, at ``--disk-bandwidth`` or the bandwidth
  the backend measures) and ``min_cut`` (:func:`disk_rows`); the ``disk`` column is the
  bytes written to files per step over eager's saved bytes.

Measured per step (after a warm-up step that compiles):

* ``saved``: activation bytes saved for backward, as ``saved_tensors_hooks`` sees them
  (storages once; parameters, buffers and the batch excluded), as a fraction of eager's;
* ``peak``: the peak of bytes in storages allocated during the step and alive at once
  (every ATen op's outputs tracked by a ``TorchDispatchMode``, freed when their last tensor
  dies: the CPU allocator's view, minus what the step did not allocate), as a fraction of
  eager's peak. A dispatch mode around a compiled call makes TorchDynamo run the model
  eagerly, so for the compiled rows the mode is entered inside the compiled forward and
  backward graphs only (``Backend.around``; the whole step is compiled, loss included);
* ``time``: median seconds of a few steps, as a ratio to eager's (noisy on a shared machine;
  ratios within one run only);
* ``+flops``: flops recomputed, as a fraction of eager's step flops (both by
  ``torch.utils.flop_counter``'s formulas): for the compiled rows the forward ops the
  backward graph runs again (``GraphReport.recomputed_flops``), for ``checkpoint`` the
  step's flops beyond eager's;
* ``grads``: whether every gradient is bitwise equal to eager's.

Models (random weights; torchvision and timm do not import with the pinned CPU PyTorch, so
the ResNet and the ViT are ``transformers``' ``ResNetConfig`` / ``ViTConfig`` models):
``attention6`` (6 attention blocks, a ``forward`` of its own), ``gpt2`` (``GPT2Config``, 4
layers 128 wide, 512 tokens), ``resnet50`` (torchvision's ResNet-50 layout and parameter
count, 64x64 images in the quick mode), ``vit_b16`` (ViT-B/16: 768 wide, 12 heads, patches
of 16, 12 layers; 4 layers and 64x64 images in the quick mode).

Usage::

    python benchmarks/memory_torch.py --quick   # a few minutes on 2 idle cores
    python benchmarks/memory_torch.py --quick --models resnet50 --threads 1
    python benchmarks/memory_torch.py           # larger inputs
    python benchmarks/memory_torch.py --quick --models gpt2 --budgets --disk-bandwidth 1e12

Writes ``benchmarks/results/memory_torch.json``.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import platform
import statistics
import sys
import time
import weakref
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import torch_models as tm  # noqa: E402

import thrifty.torch as tt  # noqa: E402

BUDGETS = (1.0, 0.7, 0.5, 0.3)
#: Budgets of the disk-offload rows: below what PyTorch's min-cut partitioner reaches.
OFFLOAD_BUDGETS = (0.1, 0.0)


class LiveBytes(TorchDispatchMode):
    """Peak bytes of the storages ATen ops allocate and that are alive at once."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: dict[int, int] = {}
        self.size: dict[int, int] = {}
        self.cur = self.peak = 0

    def _drop(self, key: int) -> None:
        self.refs[key] -= 1
        if self.refs[key] == 0:
            del self.refs[key]
            self.cur -= self.size.pop(key)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
        out = func(*args, **(kwargs or {}))
        # an output on an input's storage that is not tracked (a view of a parameter, of
        # the batch, of a gradient buffer made outside the step) allocated nothing
        old = {a.untyped_storage().data_ptr() for a in tree_leaves((args, kwargs))
               if isinstance(a, torch.Tensor)}
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                s = t.untyped_storage()
                key = s.data_ptr()
                if key == 0 or (key in old and key not in self.refs):
                    continue
                if key not in self.refs:
                    self.refs[key] = 0
                    self.size[key] = s.nbytes()
                    self.cur += s.nbytes()
                    self.peak = max(self.peak, self.cur)
                self.refs[key] += 1
                weakref.finalize(t, self._drop, key)
        return out


class WithLoss(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x).float().square().mean()


def blocks_of(name: str, model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated blocks ``torch.utils.checkpoint`` wraps."""
    if name.startswith("attention"):
        return list(model.blocks)
    inner = model.inner
    if name == "gpt2":
        return list(inner.transformer.h)
    if name.startswith("vit"):
        return list(inner.vit.layers)
    return [layer for stage in inner.resnet.encoder.stages for layer in stage.layers]


def checkpointed(name: str, model: torch.nn.Module) -> torch.nn.Module:
    from torch.utils.checkpoint import checkpoint

    for blk in blocks_of(name, model):
        blk.forward = functools.partial(checkpoint, blk.forward, use_reentrant=False)
    return model


def measure(module: WithLoss, fn: Any, x: torch.Tensor, repeats: int,
            be: Any = None) -> dict[str, Any]:
    skip = {StorageWeakRef(t.untyped_storage()) for t in [*module.parameters(),
                                                          *module.buffers(), x]}
    seen: dict[Any, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ref = StorageWeakRef(t.untyped_storage())
        if ref not in skip:
            seen[ref] = t.untyped_storage().nbytes()
        return t

    def step() -> None:
        module.zero_grad(set_to_none=True)
        fn(x).backward()

    step()  # warm-up (compiles)
    module.zero_grad(set_to_none=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = fn(x)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}
    module.zero_grad(set_to_none=True)
    live = LiveBytes()
    flops = 0
    if be is None:
        with live:
            fn(x).backward()
        module.zero_grad(set_to_none=True)
        with FlopCounterMode(display=False) as fc:
            fn(x).backward()
        flops = fc.get_total_flops()
    else:
        be.around = [live]
        fn(x).backward()
        be.around = []
        flops = sum(r.recomputed_flops for r in be.reports)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return {"saved": sum(seen.values()), "peak": live.peak, "flops": flops,
            "time": statistics.median(times), "grads": grads}


def run_model(name: str, build: Any, make_input: Any, repeats: int,
              time_limit: float, disk: dict[str, Any] | None = None,
              budgets: Any = BUDGETS) -> list[dict[str, Any]]:
    torch.manual_seed(0)
    base = build()
    torch.manual_seed(1)
    x = make_input()
    rows = []

    def fresh() -> WithLoss:
        return WithLoss(copy.deepcopy(base))

    m = fresh()
    ref = measure(m, m, x, repeats)
    rows.append({"model": name, "method": "eager", "budget": None, **_row(ref, ref)})
    m = WithLoss(checkpointed(name, copy.deepcopy(base)))
    rows.append({"model": name, "method": "checkpoint", "budget": None,
                 **_row(measure(m, m, x, repeats), ref)})
    print(f"  {name} checkpoint: saved {rows[-1]['saved']:.2f} peak {rows[-1]['peak']:.2f} "
          f"time {rows[-1]['time']:.2f} +flops {rows[-1]['extra_flops']:.3f}", flush=True)
    for f in budgets:
        for part in ("thrifty", "min_cut"):
            m = fresh()
            be = tt.backend(budget=f, partitioner=part, time_limit=time_limit)
            t0 = time.perf_counter()
            try:
                r = measure(m, torch.compile(m, backend=be), x, repeats, be)
            except RuntimeError as e:  # a partition that fails in training: a row saying so
                torch._dynamo.reset()
                rows.append({"model": name, "method": part, "budget": f,
                             "error": str(e).split("\n")[0][:200]})
                continue
            r["flops"] += ref["flops"]
            wall = time.perf_counter() - t0
            torch._dynamo.reset()
            rows.append({"model": name, "method": part, "budget": f, **_row(r, ref),
                         "fallback": any(g.fallback for g in be.reports),
                         "compile_and_measure_s": wall,
                         "partition_s": sum(g.seconds for g in be.reports)})
        for r in rows[-2:]:
            if "error" in r:
                print(f"  {name} {r['method']} {f}: FAILED: {r['error']}", flush=True)
                continue
            print(f"  {name} {r['method']} {f}: saved {r['saved']:.2f} peak {r['peak']:.2f} "
                  f"time {r['time']:.2f} +flops {r['extra_flops']:.3f} "
                  f"grads {'equal' if r['grads_equal'] else 'DIFF'}", flush=True)
    if disk:
        rows += disk_rows(name, fresh, x, repeats, time_limit, ref, disk)
    return rows


def disk_rows(name: str, fresh: Any, x: torch.Tensor, repeats: int, time_limit: float,
              ref: dict[str, Any], disk: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows at the budgets of ``OFFLOAD_BUDGETS``: thrifty's cut (recomputation only),
    thrifty with offloading to disk (``offload_to="disk"``, files in a temporary
    directory, at ``disk["bandwidth"]`` or the bandwidth the backend measures), and
    PyTorch's min-cut partitioner at the same fraction. ``disk``: the bytes the compiled
    forwards wrote to files per step, as a fraction of eager's saved bytes."""
    rows = []
    for f in OFFLOAD_BUDGETS:
        for method in ("thrifty", "thrifty_disk", "min_cut"):
            m = fresh()
            kw: dict[str, Any] = {"partitioner": "min_cut" if method == "min_cut"
                                  else "thrifty"}
            if method == "thrifty_disk":
                kw.update(offload_to="disk", offload_bandwidth=disk["bandwidth"])
            be = tt.backend(budget=f, time_limit=time_limit, **kw)
            try:
                r = measure(m, torch.compile(m, backend=be), x, repeats, be)
            except RuntimeError as e:
                torch._dynamo.reset()
                rows.append({"model": name, "method": method, "budget": f,
                             "error": str(e).split("\n")[0][:200]})
                print(f"  {name} {method} {f}: FAILED: {rows[-1]['error']}", flush=True)
                continue
            r["flops"] += ref["flops"]
            torch._dynamo.reset()
            row = {"model": name, "method": method, "budget": f, **_row(r, ref),
                   "fallback": any(g.fallback for g in be.reports),
                   "disk_bytes": sum(g.offloaded for g in be.reports) if be.disk else 0,
                   "offload_bandwidth": be.offload_bandwidth}
            row["disk"] = row["disk_bytes"] / ref["saved"]
            if be.disk is not None:
                row["files_left"] = len(be.disk.files())
                be.disk.close()
            rows.append(row)
            print(f"  {name} {method} {f}: saved {row['saved']:.3f} disk {row['disk']:.3f} "
                  f"peak {row['peak']:.2f} time {row['time']:.2f} "
                  f"+flops {row['extra_flops']:.3f} "
                  f"grads {'equal' if row['grads_equal'] else 'DIFF'}", flush=True)
    return rows


def _row(r: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    return {"saved_bytes": r["saved"], "saved": r["saved"] / ref["saved"],
            "peak_bytes": r["peak"], "peak": r["peak"] / ref["peak"],
            "time_s": r["time"], "time": r["time"] / ref["time"],
            "extra_flops": (r["flops"] - ref["flops"]) / ref["flops"],
            "grads_equal": all(torch.equal(r["grads"][k], g) for k, g in ref["grads"].items())
            and r["grads"].keys() == ref["grads"].keys()}


def models(quick: bool) -> dict[str, tuple[Any, Any]]:
    s = 1 if quick else 2
    return {
        "attention6": (lambda: tm.AttentionNet(dim=64, heads=4, blocks=6, vocab=256),
                       lambda: torch.randint(0, 256, (4 * s, 128))),
        "gpt2": (lambda: tm.gpt2(layers=4, dim=128, heads=4, vocab=1024, positions=512),
                 lambda: torch.randint(0, 1024, (s, 512))),
        "resnet50": (lambda: tm.resnet50(), lambda: torch.randn(2, 3, 64 * s, 64 * s)),
        "vit_b16": (lambda: tm.vit(layers=12 if s > 1 else 4, dim=768, heads=12, image=64 * s,
                                   patch=16),
                    lambda: torch.randn(2, 3, 64 * s, 64 * s)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--models", nargs="*", default=None)
    ap.add_argument("--threads", type=int, default=2,
                    help="intra-op threads (1 on a loaded machine: with more threads than "
                         "free cores, every parallel op waits a time slice for a descheduled "
                         "thread, and step times count op calls, not work)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" /
                                         "memory_torch.json"))
    ap.add_argument("--no-disk", action="store_true",
                    help=f"skip the disk-offload rows (budgets {OFFLOAD_BUDGETS})")
    ap.add_argument("--budgets", type=float, nargs="*", default=list(BUDGETS),
                    help="budget fractions of the thrifty / min_cut rows (none: only the "
                         "eager, checkpoint and disk-offload rows)")
    ap.add_argument("--disk-bandwidth", type=float, default=None,
                    help="bytes/s the disk-offload plan assumes (default: measured by the "
                         "backend in its temporary directory)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    disk = None if a.no_disk else {"bandwidth": a.disk_bandwidth}
    rows: list[dict[str, Any]] = []
    for name, (build, inp) in models(a.quick).items():
        if a.models and name not in a.models:
            continue
        print(f"{name} ...", flush=True)
        rows += run_model(name, build, inp, repeats=2 if a.quick else 5,
                          time_limit=1.0 if a.quick else 5.0, disk=disk,
                          budgets=a.budgets)
    table = Table(title="Training within an activation budget (CPU; ratios to eager)")
    for c in ("model", "method", "budget", "saved", "disk", "peak", "time", "+flops", "grads"):
        table.add_column(c, justify="left" if c in ("model", "method") else "right")
    for r in rows:
        if "error" in r:
            table.add_row(r["model"], r["method"], f"{r['budget']:.1f}", "failed", "", "", "",
                          "", "")
            continue
        table.add_row(r["model"], r["method"] + (" (fallback)" if r.get("fallback") else ""),
                      "-" if r["budget"] is None else f"{r['budget']:.1f}",
                      f"{r['saved']:.2f}", f"{r.get('disk', 0.0):.2f}", f"{r['peak']:.2f}",
                      f"{r['time']:.2f}",
                      f"{r['extra_flops']:.2f}", "equal" if r["grads_equal"] else "DIFF")
    Console().print(table)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    meta = {"torch": torch.__version__, "python": platform.python_version(),
            "machine": platform.machine(), "threads": torch.get_num_threads(),
            "quick": a.quick}
    Path(a.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()

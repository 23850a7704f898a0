"""Benchmark: training PyTorch models within an activation budget, thrifty against PyTorch.

Per model and budget fraction ``f`` (1.0, 0.7, 0.5, 0.3), one training step (forward, loss,
backward; the loss inside the compiled module) with:

* ``thrifty``: ``torch.compile(model, backend=thrifty.torch.backend(budget=f))``;
* ``min_cut``: PyTorch's min-cut partitioner with
  ``torch._functorch.config.activation_memory_budget = f`` (through the same backend with
  ``partitioner="min_cut"``, so both run their graphs the same way: eager ATen calls, no
  Inductor);
* ``thrifty_matched`` (``--matched``): thrifty with a budget of the bytes ``min_cut`` saved
  at that fraction (one-graph models), to time the two at (nearly) equal saved bytes;
* ``checkpoint``: ``torch.utils.checkpoint`` (non-reentrant) on each block, eager (no budget:
  one row);
* ``eager``: plain training (the reference);
* at the budgets of ``OFFLOAD_BUDGETS`` (below the others), ``thrifty`` (recomputation
  only), ``thrifty_disk`` (``offload_to="disk"``, at ``--disk-bandwidth`` or the bandwidth
  the backend measures) and ``min_cut``; the ``disk`` column is the bytes written to files
  per step over eager's saved bytes.

Measured per step (after a warm-up step that compiles):

* ``saved``: activation bytes saved for backward, as ``saved_tensors_hooks`` sees them
  (storages once; parameters, buffers and the batch excluded), as a fraction of eager's;
* ``peak``: the peak of bytes in storages allocated during the step and alive at once
  (every ATen op's outputs tracked by a ``TorchDispatchMode``, freed when their last tensor
  dies: the CPU allocator's view, minus what the step did not allocate), as a fraction of
  eager's peak. ``act peak``: the same without the weight gradients' storages (those alive
  as ``.grad`` at the step's end; for ResNet-50 and ViT-B/16 they are 102 MB and 346 MB).
  A dispatch mode around a compiled call makes TorchDynamo run the model
  eagerly, so for the compiled rows the mode is entered inside the compiled forward and
  backward graphs only (``Backend.around``; the whole step is compiled, loss included);
* ``time``: step time as a ratio to eager's. Every method of a model is compiled and
  measured first, then all are timed together in rounds (``--rounds``; 15 per model in
  ``--quick``, 7 for the ``transformers`` builds of ResNet-50 and ViT-B/16, 3 for
  torchvision's and timm's): each round runs every method's step once, in a shuffled
  order, and each step's wall time is divided by eager's in the same round; ``time`` is
  the median of these per-round ratios, ``time IQR`` their quartiles (the spread to read
  a difference against), ``cpu`` the same for CPU time (``time.process_time``, all
  threads), and ``vs min_cut`` (``thrifty`` rows) the median and quartiles of the
  per-round ratios of thrifty's step time to ``min_cut``'s at the same budget. The JSON
  has every round's seconds;
* ``+flops``: flops recomputed, as a fraction of eager's step flops (both by
  ``torch.utils.flop_counter``'s formulas): for the compiled rows the forward ops the
  backward graph runs again (``GraphReport.recomputed_flops``), for ``checkpoint`` the
  step's flops beyond eager's;
* ``grads``: whether every gradient is bitwise equal to eager's.

Models (random weights, no downloads): ``attention6`` (6 attention blocks, a ``forward``
of its own), ``gpt2`` (``GPT2Config``, 4 layers 128 wide, 512 tokens), ``resnet50``
(``torchvision.models.resnet50(weights=None)``) and ``vit_b16`` (timm's
``vit_base_patch16_224``, ``pretrained=False``, all 12 layers) where torchvision and timm
import; they do not with the project's pinned CPU PyTorch (``make bench-vision`` runs these
rows in a separate environment that has them), and then ResNet-50 and ViT-B/16 are built
from ``transformers``' ``ResNetConfig`` / ``ViTConfig`` (the table's caption says
``FALLBACK`` and why). Sizes: see :func:`models`.

Usage::

    python benchmarks/memory_torch.py --quick   # a few minutes on 2 idle cores
    python benchmarks/memory_torch.py --quick --models resnet50 --threads 1
    make bench-vision    # resnet50 and vit_b16 from torchvision and timm (.venv-vision)
    python benchmarks/memory_torch.py           # larger inputs
    python benchmarks/memory_torch.py --quick --models gpt2 --budgets --disk-bandwidth 1e12

Writes ``benchmarks/results/memory_torch.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import gc
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils.flop_counter import FlopCounterMode

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import torch_models as tm  # noqa: E402

import thrifty.torch as tt  # noqa: E402
from thrifty.torch.live import LiveBytes  # noqa: E402

BUDGETS = (1.0, 0.7, 0.5, 0.3)
#: Budgets of the disk-offload rows: below what PyTorch's min-cut partitioner reaches.
OFFLOAD_BUDGETS = (0.1, 0.0)


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
    if hasattr(model, "layer4"):  # torchvision's ResNet: four stages of blocks
        return [b for st in (model.layer1, model.layer2, model.layer3, model.layer4)
                for b in st]
    if hasattr(model, "blocks"):  # timm's VisionTransformer
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


def saved_counter(module: torch.nn.Module, x: torch.Tensor) -> tuple[Any, dict[Any, int]]:
    """``(pack, seen)``: a ``saved_tensors_hooks`` pack hook recording in ``seen`` the bytes
    of each storage saved for backward, once, except the parameters', buffers' and ``x``'s
    (no activations)."""
    skip = {StorageWeakRef(t.untyped_storage()) for t in [*module.parameters(),
                                                          *module.buffers(), x]}
    seen: dict[Any, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ref = StorageWeakRef(t.untyped_storage())
        if ref not in skip:
            seen[ref] = t.untyped_storage().nbytes()
        return t
    return pack, seen


def measure(module: WithLoss, fn: Any, x: torch.Tensor, be: Any = None) -> dict[str, Any]:
    """Saved bytes, peaks, flops and gradients of one step of ``fn`` (after a warm-up
    step), and ``step``: a callable that runs one more (for :func:`time_rounds`)."""
    pack, seen = saved_counter(module, x)

    def step() -> None:
        module.zero_grad(set_to_none=True)
        fn(x).backward()

    step()  # warm-up (compiles)
    module.zero_grad(set_to_none=True)
    live = LiveBytes()
    # one measured step: saved bytes (hooks) and live bytes (the dispatch mode; around the
    # whole step for eager, inside the compiled graphs only for compiled rows)
    with contextlib.ExitStack() as stack:
        if be is None:
            stack.enter_context(live)
        else:
            be.around = [live]
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = fn(x)
        loss.backward()
    if be is not None:
        be.around = []
    del loss
    grads = {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}
    act_peak = live.peak_without([p.grad for p in module.parameters() if p.grad is not None])
    module.zero_grad(set_to_none=True)
    flops = 0
    if be is None:
        with FlopCounterMode(display=False) as fc:
            fn(x).backward()
        flops = fc.get_total_flops()
    else:
        flops = sum(r.recomputed_flops for r in be.reports)
    module.zero_grad(set_to_none=True)
    return {"saved": sum(seen.values()), "peak": live.peak, "act_peak": act_peak,
            "flops": flops, "grads": grads, "step": step}


def time_rounds(steps: dict[Any, Any], rounds: int, seed: int = 0) -> dict[Any, Any]:
    """Step times in ``rounds`` rounds: each round runs every step once, in a shuffled
    order, so that a change of the machine's load hits every method alike. Per step:
    ``wall`` and ``cpu`` (``time.process_time``: CPU seconds of every thread of the
    process) lists, one value per round."""
    rng = random.Random(seed)
    out: dict[Any, Any] = {k: {"wall": [], "cpu": []} for k in steps}
    keys = list(steps)
    for _ in range(rounds):
        rng.shuffle(keys)
        gc.collect()  # not inside a timed step, where it would land by chance
        for k in keys:
            c0, t0 = time.process_time(), time.perf_counter()
            steps[k]()
            t1, c1 = time.perf_counter(), time.process_time()
            out[k]["wall"].append(t1 - t0)
            out[k]["cpu"].append(c1 - c0)
    return out


def spread(values: list[float]) -> dict[str, float]:
    """Median and interquartile range (quartiles of the values; one value: itself)."""
    if len(values) < 2:
        return {"median": values[0], "q1": values[0], "q3": values[0]}
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return {"median": statistics.median(values), "q1": q1, "q3": q3}


def add_times(rows: list[dict[str, Any]], times: dict[Any, Any]) -> None:
    """Fill each row's time columns from :func:`time_rounds`: ``time``, the median over the
    rounds of the row's step time over eager's in the same round (``time_q1``, ``time_q3``:
    the quartiles of those ratios), ``cpu`` the same of CPU time, ``time_s`` / ``cpu_s``
    the median seconds, and for ``thrifty`` rows ``vs_min_cut``: the median of the per-round
    ratios of thrifty's step time to ``min_cut``'s at the same budget (quartiles too)."""
    by_key = {(r["model"], r["method"], r["budget"]): r for r in rows}
    for key, r in by_key.items():
        if key not in times:
            continue
        mine, eager = times[key], times[(key[0], "eager", None)]
        for kind, col in (("wall", "time"), ("cpu", "cpu")):
            ratio = spread([a / b for a, b in zip(mine[kind], eager[kind])])
            r[col], r[f"{col}_q1"], r[f"{col}_q3"] = ratio["median"], ratio["q1"], ratio["q3"]
            r[f"{col}_s"] = statistics.median(mine[kind])
            r[f"{col}_rounds_s"] = mine[kind]
        peer = (key[0], "min_cut", key[2])
        if key[1] in ("thrifty", "thrifty_matched") and peer in times:
            vs = spread([a / b for a, b in zip(mine["wall"], times[peer]["wall"])])
            r["vs_min_cut"], r["vs_min_cut_q1"], r["vs_min_cut_q3"] = (
                vs["median"], vs["q1"], vs["q3"])


def run_model(name: str, build: Any, make_input: Any, rounds: int,
              time_limit: float, disk: dict[str, Any] | None = None,
              budgets: Any = BUDGETS, matched: bool = False) -> list[dict[str, Any]]:
    """The rows of one model: every method measured (memory, flops, gradients) and kept
    compiled, then all of them timed together in shuffled rounds (:func:`time_rounds`).
    ``matched``: at each budget also ``thrifty_matched``, thrifty with a budget of the bytes
    ``min_cut`` saved at that fraction (models of one compiled graph only), so that the two
    are timed at (nearly) the same saved bytes."""
    torch.manual_seed(0)
    base = build()
    torch.manual_seed(1)
    x = make_input()
    rows: list[dict[str, Any]] = []
    steps: dict[Any, Any] = {}
    backends: dict[Any, Any] = {}

    def fresh() -> WithLoss:
        return WithLoss(copy.deepcopy(base))

    m = fresh()
    ref = measure(m, m, x)
    steps[(name, "eager", None)] = ref.pop("step")
    rows.append({"model": name, "method": "eager", "budget": None, **_row(ref, ref)})
    m = WithLoss(checkpointed(name, copy.deepcopy(base)))
    r = measure(m, m, x)
    steps[(name, "checkpoint", None)] = r.pop("step")
    rows.append({"model": name, "method": "checkpoint", "budget": None, **_row(r, ref)})
    e = rows[0]
    print(f"  {name} eager: saved {e['saved_bytes'] / 2**20:.1f} MiB, peak "
          f"{e['peak_bytes'] / 2**20:.1f} MiB, without weight gradients "
          f"{e['act_peak_bytes'] / 2**20:.1f} MiB", flush=True)
    methods = [(part, f) for f in budgets for part in ("thrifty", "min_cut")
               + (("thrifty_matched",) if matched else ())]
    if disk:
        methods += [(part, f) for f in OFFLOAD_BUDGETS
                    for part in ("thrifty", "thrifty_disk", "min_cut")]
    for part, f in methods:
        m = fresh()
        kw: dict[str, Any] = {"partitioner": "min_cut" if part == "min_cut" else "thrifty"}
        if part == "thrifty_disk":
            assert disk is not None
            kw.update(offload_to="disk", offload_bandwidth=disk["bandwidth"])
        limit: float | int = f
        if part == "thrifty_matched":
            peer = backends.get((name, "min_cut", f))
            if peer is None or len(peer.reports) != 1:
                continue  # min_cut failed, or several graphs: no one number to match
            limit = peer.reports[0].saved
        be = tt.backend(budget=limit, time_limit=time_limit, **kw)
        t0 = time.perf_counter()
        try:
            r = measure(m, torch.compile(m, backend=be), x, be)
        except RuntimeError as err:  # a partition that fails in training: a row saying so
            rows.append({"model": name, "method": part, "budget": f,
                         "error": str(err).split("\n")[0][:200]})
            print(f"  {name} {part} {f}: FAILED: {rows[-1]['error']}", flush=True)
            continue
        r["flops"] += ref["flops"]
        key = (name, part, f)
        steps[key], backends[key] = r.pop("step"), be
        row = {"model": name, "method": part, "budget": f, **_row(r, ref),
               "fallback": any(g.fallback for g in be.reports),
               "compile_and_measure_s": time.perf_counter() - t0,
               "partition_s": sum(g.seconds for g in be.reports),
               "budget_bytes": sum(g.budget for g in be.reports)}
        if f in OFFLOAD_BUDGETS:
            row["disk_bytes"] = sum(g.offloaded for g in be.reports) if be.disk else 0
            row["disk"] = row["disk_bytes"] / ref["saved"]
            row["offload_bandwidth"] = be.offload_bandwidth
        rows.append(row)
        print(f"  {name} {part} {f}: saved {row['saved']:.3f} disk {row.get('disk', 0):.3f} "
              f"peak {row['peak']:.2f} act peak {row['act_peak']:.2f} "
              f"+flops {row['extra_flops']:.3f} "
              f"grads {'equal' if row['grads_equal'] else 'DIFF'}", flush=True)
    compiled = {k: len(be.reports) for k, be in backends.items()}
    times = time_rounds(steps, rounds)
    add_times(rows, times)
    for row in rows:
        key = (row["model"], row["method"], row["budget"])
        be = backends.get(key)
        if be is None:
            continue
        # a graph compiled while timing (a recompilation) would count in a round's time
        row["recompiled_while_timing"] = len(be.reports) != compiled[key]
        if be.disk is not None:
            row["files_left"] = len(be.disk.files())
            be.disk.close()
    torch._dynamo.reset()
    for row in rows:
        if "time" in row:
            vs = f" vs min_cut {row['vs_min_cut']:.2f}" if "vs_min_cut" in row else ""
            print(f"  {name} {row['method']} {row['budget']}: time {row['time']:.2f} "
                  f"[{row['time_q1']:.2f}, {row['time_q3']:.2f}] cpu {row['cpu']:.2f}{vs}"
                  + (" RECOMPILED" if row.get("recompiled_while_timing") else ""),
                  flush=True)
    return rows


def _row(r: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    return {"saved_bytes": r["saved"], "saved": r["saved"] / ref["saved"],
            "peak_bytes": r["peak"], "peak": r["peak"] / ref["peak"],
            "act_peak_bytes": r["act_peak"], "act_peak": r["act_peak"] / ref["act_peak"],
            "extra_flops": (r["flops"] - ref["flops"]) / ref["flops"],
            "grads_equal": all(torch.equal(r["grads"][k], g) for k, g in ref["grads"].items())
            and r["grads"].keys() == ref["grads"].keys()}


#: Why torchvision/timm cannot be used (then ResNet-50 and ViT-B/16 are built from
#: ``transformers`` configurations), or ``None``.
VISION_MISSING = tm.vision_libraries()


def models(quick: bool) -> dict[str, dict[str, Any]]:
    """Per model: ``build``, ``input`` (callables), ``source`` (what builds it, and on what
    input) and ``rounds`` (timing rounds, :func:`time_rounds`: 15 for the small models, 7
    for the ``transformers`` builds of ResNet-50 and ViT-B/16, 3 for torchvision's and
    timm's, whose steps take seconds).

    With torchvision and timm: ``torchvision.models.resnet50()`` on 2 images of 192x192 (4
    of 224x224 without ``--quick``) and timm's ``vit_base_patch16_224``, all 12 layers, on 1
    image of 224x224 (197 tokens; 4 images without ``--quick``). At these sizes eager
    ResNet-50 saves about 120 MB of activations against its 102 MB of weight gradients (at
    2x64x64: 15 MB), so the budgets move the step's peak; ViT-B/16 saves 112 MB per image
    against 346 MB of weight gradients (its activations per token are small: they pass the
    gradients only from 3 images, 300 GFLOP a step), so its ``peak`` stays the gradients'
    and ``act peak`` (the peak without the weight gradients) shows what the budgets do.
    Without them: the ``transformers`` builds (:data:`VISION_MISSING` says why) at the
    earlier sizes (2 images of 64x64; ViT with 4 of its 12 layers in the quick mode)."""
    s = 1 if quick else 2
    out: dict[str, dict[str, Any]] = {
        "attention6": {"build": lambda: tm.AttentionNet(dim=64, heads=4, blocks=6, vocab=256),
                       "input": lambda: torch.randint(0, 256, (4 * s, 128)),
                       "source": f"examples AttentionNet, {4 * s}x128 tokens"},
        "gpt2": {"build": lambda: tm.gpt2(layers=4, dim=128, heads=4, vocab=1024,
                                          positions=512),
                 "input": lambda: torch.randint(0, 1024, (s, 512)),
                 "source": f"transformers GPT2Config 4x128, {s}x512 tokens"},
    }
    if VISION_MISSING is None:
        n_res, side, n_vit = (2, 192, 1) if quick else (4, 224, 4)
        out["resnet50"] = {"build": lambda: tm.torchvision_resnet("resnet50"),
                           "input": lambda: torch.randn(n_res, 3, side, side),
                           "source": f"torchvision resnet50, {n_res}x3x{side}x{side}",
                           "rounds": 3}
        out["vit_b16"] = {"build": lambda: tm.timm_vit("vit_base_patch16_224"),
                          "input": lambda: torch.randn(n_vit, 3, 224, 224),
                          "source": f"timm vit_base_patch16_224 (12 layers), {n_vit}x3x224x224",
                          "rounds": 3}
    else:
        layers = 12 if s > 1 else 4
        out["resnet50"] = {"build": lambda: tm.resnet50(),
                           "input": lambda: torch.randn(2, 3, 64 * s, 64 * s),
                           "source": "FALLBACK transformers ResNetConfig (torchvision's "
                                     f"layout), 2x3x{64 * s}x{64 * s}"}
        out["vit_b16"] = {"build": lambda: tm.vit(layers=layers, dim=768, heads=12,
                                                  image=64 * s, patch=16),
                          "input": lambda: torch.randn(2, 3, 64 * s, 64 * s),
                          "source": f"FALLBACK transformers ViTConfig ({layers} of 12 "
                                    f"layers), 2x3x{64 * s}x{64 * s}"}
    for spec in out.values():
        spec.setdefault("rounds", 7 if "FALLBACK" in spec["source"] else 15)
    return out


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
    ap.add_argument("--rounds", type=int, default=None,
                    help="timing rounds per model (each runs every method's step once, in "
                         "a shuffled order; default: 15, 7 for the transformers builds of "
                         "resnet50 and vit_b16, 3 for torchvision's and timm's)")
    ap.add_argument("--matched", action="store_true",
                    help="add thrifty_matched rows: thrifty at the bytes min_cut saved at each "
                         "budget (one-graph models), timed against min_cut (vs min_cut)")
    a = ap.parse_args()
    load_start = list(os.getloadavg())
    if a.rounds is not None and a.rounds < 1:
        ap.error(f"--rounds is {a.rounds}; give 1 or more")
    # every method's compiled step stays compiled until the model's timing rounds are done
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    torch.set_num_threads(a.threads)
    disk = None if a.no_disk else {"bandwidth": a.disk_bandwidth}
    rows: list[dict[str, Any]] = []
    specs = models(a.quick)
    for name, spec in specs.items():
        if a.models and name not in a.models:
            continue
        print(f"{name} ({spec['source']}) ...", flush=True)
        rows += run_model(name, spec["build"], spec["input"], matched=a.matched,
                          rounds=a.rounds or spec["rounds"],
                          time_limit=1.0 if a.quick else 5.0, disk=disk,
                          budgets=a.budgets)
    caption = "; ".join(f"{n}: {sp['source']}" for n, sp in specs.items()
                        if not a.models or n in a.models)
    if VISION_MISSING is not None:
        caption += f" ({VISION_MISSING})"
    table = Table(title="Training within an activation budget (CPU; ratios to eager)",
                  caption=caption)
    cols = ("model", "method", "budget", "saved", "disk", "peak", "act peak", "time",
            "time IQR", "cpu", "vs min_cut", "+flops", "grads")
    for c in cols:
        table.add_column(c, justify="left" if c in ("model", "method") else "right")
    for r in rows:
        if "error" in r:
            table.add_row(r["model"], r["method"], f"{r['budget']:.1f}", "failed",
                          *[""] * (len(cols) - 4))
            continue
        vs = (f"{r['vs_min_cut']:.2f} ({r['vs_min_cut_q1']:.2f}-{r['vs_min_cut_q3']:.2f})"
              if "vs_min_cut" in r else "")
        table.add_row(r["model"], r["method"] + (" (fallback)" if r.get("fallback") else ""),
                      "-" if r["budget"] is None else f"{r['budget']:.1f}",
                      f"{r['saved']:.2f}", f"{r.get('disk', 0.0):.2f}", f"{r['peak']:.2f}",
                      f"{r['act_peak']:.2f}", f"{r['time']:.2f}",
                      f"{r['time_q1']:.2f}-{r['time_q3']:.2f}", f"{r['cpu']:.2f}", vs,
                      f"{r['extra_flops']:.2f}", "equal" if r["grads_equal"] else "DIFF")
    Console(width=max(170, Console().width)).print(table)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    meta = {"torch": torch.__version__, "python": platform.python_version(),
            "machine": platform.machine(), "threads": torch.get_num_threads(),
            "quick": a.quick, "vision_missing": VISION_MISSING,
            "rounds": {n: a.rounds or sp["rounds"] for n, sp in specs.items()
                       if not a.models or n in a.models},
            "load_average_start": load_start, "load_average_end": list(os.getloadavg()),
            "models": {n: sp["source"] for n, sp in specs.items()
                       if not a.models or n in a.models}}
    Path(a.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()

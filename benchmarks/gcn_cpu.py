"""Benchmark: GCN plans against their peers in CPU time of one thread, and the association
across layers against the plan that does each layer alone.

On a shared machine wall-clock medians swing by 2x and more with the other jobs' load (the
peers' multi-threaded BLAS loses most), so ``sparse_bench.py --kernel gcn --kernel gcn2``
ratios move with the load average. This script times, per instance and for the one- and
two-layer GCN of ``sparse_bench.py`` (``X`` 64 wide, ``W1`` and ``W2`` 64 x 64), in shuffled
rounds in one process, the CPU time of the calling thread with everything on one thread
(``CostModel(threads=1)``, BLAS limited to one thread):

- ``plan``: the plan of the default cost model;
- ``layerwise``: the plan of ``CostModel(panel_call=0)``, which at equal widths keeps each
  layer a fused ``(A @ H) @ W`` pass (the next layer's ``H @ W2`` not run in the
  previous layer's panels): the plans thrifty made before the association across layers;
- the peers of ``sparse_bench.py`` (scipy, MKL, torch), each layer ``relu(A @ (X @ W))``.

It prints each peer's median over the plan's (above 1: the plan is faster) and their
geometric means. Every implementation's result is checked against the plan's first.

Usage::

    PYTHONPATH=src python benchmarks/gcn_cpu.py [INSTANCE ...] [--rounds 7]

Instances are named as in ``sparse_bench.py``; the default is its quick set. Writes
``benchmarks/results/gcn_cpu.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sparse_bench import instance_names, load, make_inputs, programs  # noqa: E402
from sparse_peers import gcn_layers, set_threads  # noqa: E402


def _medians(fns: dict[str, Any], rounds: int) -> dict[str, float]:
    keys = list(fns)
    ts: dict[str, list[float]] = {k: [] for k in keys}
    rng = np.random.default_rng(1)
    for f in fns.values():
        f()
    for _ in range(rounds):
        for i in rng.permutation(len(keys)):
            t0 = time.thread_time()
            fns[keys[i]]()
            ts[keys[i]].append(time.thread_time() - t0)
    return {k: float(np.median(v)) for k, v in ts.items()}


def case(name: str, kernel: str, rounds: int) -> dict[str, Any]:
    """One instance and kernel: medians of CPU time and ratios to the plan."""
    from thrifty.runtime.sparse_run import specialize
    from thrifty.sparse.cost import CostModel

    A = load(name)
    inp = make_inputs(kernel, A, np.random.default_rng(0), 64)
    tr = programs()[kernel].traced(**inp)
    plan = specialize(tr.graph, inp, structure=tr.structure, cost=CostModel(threads=1))
    layerwise = specialize(tr.graph, inp, structure=tr.structure,
                           cost=CostModel(threads=1, panel_call=0.0))
    X, W, W2 = inp["X"], inp["W"], inp.get("W2")
    fns: dict[str, Any] = {"plan": lambda: plan.run(inp), "layerwise": lambda: layerwise.run(inp)}
    for p, f in gcn_layers(A).items():
        fns[p] = (lambda layer: (lambda: layer(X, W)) if W2 is None else
                  (lambda: layer(layer(X, W), W2)))(f)
    want = np.asarray(plan.run(inp))
    for k, f in fns.items():
        got = f()
        got = got.numpy() if hasattr(got, "numpy") else np.asarray(got)
        if not np.allclose(got, want, rtol=1e-9, atol=1e-9):
            raise AssertionError(f"{k} differs from the plan on {name} {kernel}")
    med = _medians(fns, rounds)
    return {"instance": name, "kernel": kernel, "load_average": os.getloadavg(),
            "cpu_s": med, "kernels": plan.report()["kernels"],
            "vs": {k: v / med["plan"] for k, v in med.items() if k != "plan"}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("instances", nargs="*", default=None)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" /
                                         "gcn_cpu.json"))
    args = ap.parse_args()
    set_threads(1)
    rows = []
    for name in args.instances or instance_names(False):
        for kernel in ("gcn", "gcn2"):
            r = case(name, kernel, args.rounds)
            rows.append(r)
            print(f"{name:32s} {kernel:5s} load {r['load_average'][0]:5.1f}  plan "
                  f"{r['cpu_s']['plan'] * 1e3:8.2f} ms  " +
                  "  ".join(f"{k} {v:.2f}" for k, v in r["vs"].items()), flush=True)
    summary = {}
    for kernel in ("gcn", "gcn2"):
        rs = [r for r in rows if r["kernel"] == kernel]
        peers = sorted({k for r in rs for k in r["vs"]})
        summary[kernel] = {k: float(np.exp(np.mean([np.log(r["vs"][k]) for r in rs])))
                           for k in peers}
        summary[kernel]["best_peer"] = float(np.exp(np.mean([np.log(min(
            v for k, v in r["vs"].items() if k != "layerwise")) for r in rs])))
        print(f"geometric mean, {kernel}: " +
              "  ".join(f"{k} {v:.2f}" for k, v in summary[kernel].items()))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()

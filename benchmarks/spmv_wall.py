"""Benchmark: where an SpMV plan's wall-clock time against scipy's goes, sample by sample.

``sparse_bench.py`` compares wall-clock medians; on a shared machine those move with the
other jobs' load. This script times the same calls the same way (the plan specialized
with the benchmark's thread count, called as ``plan.run(inputs)``, and scipy's ``A @ x``,
in shuffled rounds with the multi-threaded peers and the triad between them, as
``sparse_bench.py`` runs them) and records per sample, besides the wall-clock time: the
calling thread's CPU time, its minor page faults and involuntary context switches, and the
CPU time the process's other threads (the peers' OpenMP workers) burnt meanwhile. It
prints, per implementation, the median wall and CPU times, the share of the wall time the
thread ran (CPU / wall), the faults and switches per call, and scipy's time over the
plan's by wall-clock median, by CPU-time median and over the samples that ran
undisturbed (CPU at least 90 % of wall).

Usage::

    PYTHONPATH=src python benchmarks/spmv_wall.py [INSTANCE ...] [--rounds 15] [--no-peers]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sparse_bench import load, triad_fn  # noqa: E402
from sparse_peers import product_peers, set_threads  # noqa: E402


def _others_ns(me: int) -> int:
    """CPU nanoseconds run so far by this process's threads other than ``me``."""
    total = 0
    for t in os.listdir("/proc/self/task"):
        if int(t) != me:
            try:
                with open(f"/proc/self/task/{t}/schedstat") as f:
                    total += int(f.read().split()[0])
            except OSError:
                pass
    return total


def main() -> None:
    import thrifty as th
    from thrifty.runtime.sparse_run import specialize
    from thrifty.sparse.cost import CostModel

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("instances", nargs="*", default=["poisson2d-300", "random-50000-16"])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-peers", action="store_true")
    args = ap.parse_args()
    set_threads(args.threads)
    me = threading.get_native_id()
    for name in args.instances:
        A = load(name)
        x = np.random.default_rng(0).standard_normal(A.shape[1])
        inp = {"A": A, "x": x}
        tr = th.program(lambda A, x: A @ x).traced(**inp)
        plan = specialize(tr.graph, inp, structure=tr.structure,
                          cost=CostModel(threads=args.threads))
        fns = {"scipy": lambda A=A, x=x: A @ x, "thrifty": lambda p=plan, i=inp: p.run(i)}
        if not args.no_peers:
            fns.update({k: f for k, f in product_peers(A, x).items() if k != "pydata"})
            fns["triad"] = triad_fn()
        for f in fns.values():
            f()
        inner = max(1, int(5e-3 / max(1e-7, min(_once(fns["scipy"]), _once(fns["thrifty"])))))
        keys = list(fns)
        rec: dict[str, list[tuple[float, ...]]] = {k: [] for k in ("scipy", "thrifty")}
        rng = np.random.default_rng(0)
        for _ in range(args.rounds):
            for i in rng.permutation(len(keys)):
                k = keys[i]
                f = fns[k]
                r0, o0 = resource.getrusage(resource.RUSAGE_THREAD), _others_ns(me)
                c0, w0 = time.thread_time(), time.perf_counter()
                for _ in range(inner):
                    f()
                w, c = time.perf_counter() - w0, time.thread_time() - c0
                r1, o1 = resource.getrusage(resource.RUSAGE_THREAD), _others_ns(me)
                if k in rec:
                    rec[k].append((w / inner, c / inner, (o1 - o0) / 1e9 / inner,
                                   (r1.ru_minflt - r0.ru_minflt) / inner,
                                   (r1.ru_nivcsw - r0.ru_nivcsw) / inner))
        print(f"{name} ({A.nnz} nnz, kernels {plan.report()['kernels']}), {inner} calls a "
              f"sample, load {os.getloadavg()[0]:.1f}")
        arr = {k: np.array(v) for k, v in rec.items()}
        for k, v in arr.items():
            print(f"  {k:8s} wall {np.median(v[:, 0]) * 1e6:8.1f} µs  cpu "
                  f"{np.median(v[:, 1]) * 1e6:8.1f} µs  ran {np.median(v[:, 1] / v[:, 0]):.2f}"
                  f" of the wall  other threads {np.median(v[:, 2]) * 1e6:7.1f} µs  faults "
                  f"{np.median(v[:, 3]):.1f}  switches {np.median(v[:, 4]):.2f} a call")
        s, t = arr["scipy"], arr["thrifty"]
        calm_s, calm_t = s[s[:, 1] >= 0.9 * s[:, 0]], t[t[:, 1] >= 0.9 * t[:, 0]]
        calm = (f"{np.median(calm_s[:, 0]) / np.median(calm_t[:, 0]):.3f} ({len(calm_s)} and "
                f"{len(calm_t)} samples)" if len(calm_s) and len(calm_t) else "no such samples")
        print(f"  scipy / thrifty: wall median {np.median(s[:, 0]) / np.median(t[:, 0]):.3f}, "
              f"CPU median {np.median(s[:, 1]) / np.median(t[:, 1]):.3f}, undisturbed "
              f"samples' wall median {calm}", flush=True)


def _once(f) -> float:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()

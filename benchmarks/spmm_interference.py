"""How another library's threads change a plan's time: poisson2d-300's SpMM at k = 16 (a
plan of four row tasks on two threads) timed alternately with MKL and scipy, 30 calls each
(minimum and median ms, minor page faults per call), fresh, after the plans of two large
instances, and again. Run it as it is, then with OpenMP workers sleeping after each call
and compare the medians; see the README, "Run-to-run spread". (It loads
``sparse_bench``, which sets ``KMP_BLOCKTIME=0`` unless the environment sets it: pass
``KMP_BLOCKTIME=200``, Intel OpenMP's default, for spinning MKL workers.)

    KMP_BLOCKTIME=200 PYTHONPATH=src python benchmarks/spmm_interference.py
    KMP_BLOCKTIME=0 OMP_WAIT_POLICY=PASSIVE PYTHONPATH=src python benchmarks/spmm_interference.py
"""

from __future__ import annotations

import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sparse_bench as sb  # noqa: E402
from sparse_peers import PeerForms, product_peers, set_threads  # noqa: E402


def timeit(fns: dict[str, Callable[[], Any]], n: int = 30) -> dict[str, tuple[float, ...]]:
    """Per implementation: minimum and median ms of ``n`` calls, and minor faults a call;
    the calls alternate between the implementations, in both orders."""
    order = list(fns)
    ts: dict[str, list[float]] = {k: [] for k in order}
    faults = dict.fromkeys(order, 0)
    for i in range(n):
        for k in order if i % 2 else order[::-1]:
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t0 = time.perf_counter()
            fns[k]()
            ts[k].append(time.perf_counter() - t0)
            faults[k] += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
    return {k: (round(min(v) * 1e3, 3), round(statistics.median(v) * 1e3, 3),
                round(faults[k] / n, 1)) for k, v in ts.items()}


def case(name: str, k: int) -> dict[str, Callable[[], Any]]:
    A = sb.load(name)
    inp = sb.make_inputs("spmm", A, np.random.default_rng(0), k)
    plan, _ = sb._inspect("spmm", inp, 2, None)
    peers = product_peers(A, inp["X"], PeerForms(A))
    fns = {"thrifty": lambda: plan.run(inp), "mkl": peers["mkl"], "scipy": peers["scipy"]}
    for f in fns.values():
        f()
    return fns


def main() -> None:
    set_threads(2)
    small = case("poisson2d-300", 16)
    print("fresh ", timeit(small), flush=True)
    for big in ("poisson3d-64", "random-200000-16"):
        fns = case(big, 64)
        for _ in range(3):
            fns["thrifty"]()
            fns["mkl"]()
    print("after ", timeit(small), flush=True)
    print("again ", timeit(small), flush=True)


if __name__ == "__main__":
    main()

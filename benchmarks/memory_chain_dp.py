"""Benchmark: the chain DP's compiled kernel against the numpy code it replaced, and `plan`.

On the chains of ``memory_plan.py`` (chain_n12: 23 tasks, chain_n30: 59 tasks), at 0.9 …
0.5 of the best schedule's peak, in one process: ``chain_plan`` with the numpy tables
(``USE_NUMBA = False``), with the compiled kernel (after one call that loads it), and
``plan(method="auto")`` without the MILP, as in ``memory_plan.py``. The two DPs' plans are
checked to be identical. Times in milliseconds.

Usage::

    python benchmarks/memory_chain_dp.py
"""

from __future__ import annotations

import time

from memory_plan import chain
from thrifty.memory.budget import chain as chain_module
from thrifty.memory.budget import plan
from thrifty.memory.schedule import schedule


def timed(fn, *args, **kw):  # noqa: ANN001, ANN002, ANN003, ANN201 - a stopwatch
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return out, (time.perf_counter() - t0) * 1000


def main() -> None:
    _, load = timed(chain_module.chain_plan, chain(3, 0), 2**40)
    print(f"kernel load (numba import and disk cache, once per process): {load:.0f} ms")
    print("chain   fraction  numpy_ms  compiled_ms  ratio  plan_ms  plan_by")
    for n in (12, 30):
        g = chain(n, n)
        s = schedule(g, time_limit=2.0)
        for frac in (0.9, 0.8, 0.7, 0.6, 0.5):
            b = int(frac * s.peak)
            chain_module.USE_NUMBA = False
            try:
                p0, t0 = timed(chain_module.chain_plan, g, b, slots=None)
            finally:
                chain_module.USE_NUMBA = True
            p1, t1 = timed(chain_module.chain_plan, g, b, slots=None)
            assert p0.steps == p1.steps
            p, t2 = timed(plan, g, b, order=tuple(s.order), use_milp=False, time_limit=1.0)
            print(f"n{n:<6} {frac:8.1f} {t0:9.1f} {t1:12.1f} {t0 / t1:6.1f} {t2:8.1f}  "
                  f"{p.method}")


if __name__ == "__main__":
    main()

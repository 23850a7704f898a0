"""How finely to split a plan's row tasks when the second core may be busy.

A plan's row tasks run on two threads taking tasks from one queue (the calling thread and
a pooled one). With two coarse tasks, a thread that waits for a core another job holds
finishes its task late and the call waits for it; with finer tasks the other thread takes
the work the late one has not started; with no core idle, one thread does all the work
anyway. This script times, in shuffled interleaved rounds, the same product by plans that
differ only in their task split and where the tasks run:

- ``one``: one task in the calling thread (``CostModel(threads=1)``);
- ``coarse``: the default split (tasks of at least 1 ms, at most two per thread), always
  on the pool (``idle_check=False``), as plans ran before the idle check;
- ``fine``: tasks of at least 0.25 ms, at most four per thread
  (``split_seconds=2.5e-4, tasks_per_thread=4``), always on the pool;
- ``auto``: the default plan: the default split on the pool when a core is idle, else its
  panels merged into one call in the calling thread (``CostModel.idle_check``);
- ``scipy``: ``A @ x`` (one thread).

One call per sample. On a loaded machine a call's time is bimodal (it ran through, or its
thread lost its core for a scheduler time slice), so the median flips between the modes
from run to run; the script prints, per implementation, the median and the mean, and the
ratios fine/coarse, fine/one, auto/one, auto/coarse and each plan over scipy by both,
with the load average before and after, each plan's task count and the share of rounds
in which a core was idle (``auto`` then ran on two threads). ``--hog N`` keeps N extra
processes spinning meanwhile (a busy second core), ended when it returns.

    PYTHONPATH=src python benchmarks/task_split.py [--rounds 41] [--hog 1]
    PYTHONPATH=src taskset -c 0,1 python benchmarks/task_split.py --cpus 2 --hog 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sparse_bench as sb  # noqa: E402  (sets KMP_BLOCKTIME before MKL loads)
from sparse_peers import set_threads  # noqa: E402

CASES = (("poisson3d-64", "spmv", 1), ("random-200000-16", "spmv", 1),
         ("poisson2d-300", "spmm", 16))


def _plan(kernel: str, inp: dict[str, Any], cost: Any) -> Any:
    from thrifty.runtime.sparse_run import specialize

    tr = sb.programs()[kernel].traced(**inp)
    return specialize(tr.graph, inp, structure=tr.structure, cost=cost)


def _n_tasks(plan: Any) -> int:
    return sum(t.time > 0 for t in plan.taskgraph.tasks.values())


@contextmanager
def hogs(n: int) -> Iterator[None]:
    """``n`` processes spinning (each keeps a core busy) while the block runs."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def case(name: str, kernel: str, k: int) -> tuple[dict[str, Callable[[], Any]], dict[str, int]]:
    from thrifty.sparse.cost import CostModel

    A = sb.load(name)
    inp = sb.make_inputs(kernel, A, np.random.default_rng(0), k)
    plans = {"one": _plan(kernel, inp, CostModel(threads=1)),
             "coarse": _plan(kernel, inp, CostModel(threads=2, idle_check=False)),
             "fine": _plan(kernel, inp, CostModel(threads=2, idle_check=False,
                                                   split_seconds=2.5e-4, tasks_per_thread=4)),
             "auto": _plan(kernel, inp, CostModel(threads=2))}
    ref = A @ (inp["x"] if kernel == "spmv" else inp["X"])
    for p in plans.values():
        np.testing.assert_allclose(p.run(inp), ref, rtol=1e-10, atol=1e-10)
    fns: dict[str, Callable[[], Any]] = {k_: (lambda p=p: p.run(inp)) for k_, p in plans.items()}
    b = inp["x"] if kernel == "spmv" else inp["X"]
    fns["scipy"] = lambda: A @ b
    return fns, {k_: _n_tasks(p) for k_, p in plans.items()}


def timed(fns: dict[str, Callable[[], Any]], rounds: int, seed: int
          ) -> tuple[dict[str, list[float]], float]:
    """Seconds of each call, ``rounds`` rounds, each in a new (seeded) random order, and
    the share of rounds that began with a core idle."""
    from thrifty.runtime.taskrun import core_idle

    keys = list(fns)
    ts: dict[str, list[float]] = {k: [] for k in keys}
    rng = np.random.default_rng(seed)
    idle = 0
    for _ in range(rounds):
        idle += core_idle()
        for i in rng.permutation(len(keys)):
            f = fns[keys[i]]
            t0 = time.perf_counter()
            f()
            ts[keys[i]].append(time.perf_counter() - t0)
    return ts, idle / max(1, rounds)


def _ratios(stat: dict[str, float]) -> dict[str, float]:
    r = {"fine/coarse": stat["fine"] / stat["coarse"], "fine/one": stat["fine"] / stat["one"],
         "auto/one": stat["auto"] / stat["one"], "auto/coarse": stat["auto"] / stat["coarse"]}
    r.update({f"{n}/scipy": stat[n] / stat["scipy"] for n in stat if n != "scipy"})
    return {a: round(v, 3) for a, v in r.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=41)
    ap.add_argument("--hog", type=int, default=0, help="spinning processes meanwhile")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cpus", type=int, default=0,
                    help="count the machine's cores as this many (run under taskset with as "
                         "many cores, on an otherwise idle machine)")
    args = ap.parse_args()
    if args.cpus:
        from thrifty.runtime import taskrun

        taskrun._CPUS = args.cpus
    set_threads(2)
    built = [(c, *case(*c)) for c in CASES]
    rows = []
    load0 = os.getloadavg()
    t0 = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    with hogs(args.hog):
        for (name, kernel, k), fns, tasks in built:
            ts, idle = timed(fns, args.rounds, args.seed)
            med = {n: statistics.median(v) for n, v in ts.items()}
            mean = {n: statistics.fmean(v) for n, v in ts.items()}
            r = {"instance": name, "kernel": kernel, "k": k, "tasks": tasks,
                 "core idle": round(idle, 2),
                 "median ms": {n: round(v * 1e3, 3) for n, v in med.items()},
                 "mean ms": {n: round(v * 1e3, 3) for n, v in mean.items()},
                 "by median": _ratios(med), "by mean": _ratios(mean)}
            rows.append(r)
            print(json.dumps(r), flush=True)
    load1 = os.getloadavg()
    keys = ("fine/coarse", "fine/one", "auto/one", "auto/coarse", "auto/scipy",
            "one/scipy", "coarse/scipy")
    summary = {by: {key: round(statistics.median(r[by][key] for r in rows), 3)
                    for key in keys} for by in ("by median", "by mean")}
    print(json.dumps({"when": t0, "hog": args.hog, "rounds": args.rounds,
                      "load_before": [round(x, 2) for x in load0],
                      "load_after": [round(x, 2) for x in load1],
                      "median over the cases": summary}))

if __name__ == "__main__":
    main()

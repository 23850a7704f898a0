"""Benchmark: per-call time of small SpMV plans, two source trees side by side in one run.

For the 16 smallest real matrices of ``../shared/data/matrices`` (by stored entries), a
plan of ``A @ x`` is specialized once and then called many times, through the plan
(``plan(A=A, x=x)``) and through the program (``spmv(A=A, x=x)``, whose plan cache finds
the last plan). Each source tree runs in its own worker process (``PYTHONPATH`` set to the
tree's ``src``); the parent asks the workers in alternation for rounds of timings, so both
see the same machine load, and keeps each case's best round. scipy's own ``A @ x`` and the
bare kernel (scipy's ``csr_matvec`` into a fresh zeroed output, no checks, no dispatch) are
timed in the same workers: the plan's per-call overhead is its time minus the bare
kernel's.

Usage::

    python benchmarks/percall_overhead.py --before /path/to/old/src --after src
    python benchmarks/percall_overhead.py            # this tree only

Prints µs per call, the after/before ratio and the overhead over the bare kernel; writes
``benchmarks/results/percall_overhead.json``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "matrices"


def smallest(n: int, data: Path = DATA) -> list[str]:
    """The files of the ``n`` matrices with the fewest stored entries (INDEX.tsv order)."""
    with open(data / "INDEX.tsv") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    rows.sort(key=lambda r: (int(r["nnz"]), r["file"]))
    return [str(data / r["file"]) for r in rows[:n]]


# -- the worker: runs in a subprocess with PYTHONPATH set to one tree ------------------------
def worker(files: list[str], calls: int) -> None:
    import timeit

    import numpy as np
    import scipy.sparse as sp
    from scipy.sparse import _sparsetools

    import thrifty as th
    from thrifty.front.matrices import load_matrix

    spmv = th.program(lambda A, x: A @ x)
    cases = []
    for f in files:
        try:
            A = sp.csr_array(load_matrix(f))
        except th.ThriftyError:
            continue
        if not np.issubdtype(A.dtype, np.floating):
            A = A.astype(np.float64)
        x = np.random.default_rng(0).standard_normal(A.shape[1]).astype(A.dtype)
        plan = spmv.specialize(A=A, x=x)
        plan(A=A, x=x)
        spmv(A=A, x=x)
        cases.append((str(Path(f).relative_to(Path(f).parents[1])), A, x, plan))
    print(json.dumps({"cases": [[c[0], int(c[1].nnz)] for c in cases]}), flush=True)
    for line in sys.stdin:
        if not line.startswith("case "):
            break
        name, A, x, plan = cases[int(line.split()[1])]
        n, m = A.shape
        ip, ix, d = A.indptr, A.indices, A.data

        def bare(n=n, m=m, ip=ip, ix=ix, d=d, x=x):  # type: ignore[no-untyped-def]
            out = np.zeros(n, dtype=d.dtype)
            _sparsetools.csr_matvec(n, m, ip, ix, d, x, out)
            return out

        times = [timeit.timeit(f, number=calls) / calls for f in
                 (lambda p=plan, A=A, x=x: p(A=A, x=x), lambda A=A, x=x: spmv(A=A, x=x),
                  lambda A=A, x=x: A @ x, bare)]
        print(json.dumps({name: times}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", default=None,
                    help="src directory of the old tree (default: this tree only)")
    ap.add_argument("--after", default=str(Path(__file__).resolve().parents[1] / "src"))
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" /
                                         "percall_overhead.json"))
    args = ap.parse_args()
    files = smallest(args.n)
    procs = {}
    trees = [("after", args.after)] if args.before is None else \
        [("before", args.before), ("after", args.after)]
    for label, src in trees:
        env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
        procs[label] = subprocess.Popen(
            [sys.executable, __file__, "--worker", str(args.calls), *files], env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    cases = {k: json.loads(p.stdout.readline())["cases"] for k, p in procs.items()}
    assert all(c == cases["after"] for c in cases.values()), cases
    best: dict[str, dict[str, list[float]]] = {k: {} for k in procs}
    t0 = time.perf_counter()
    for r in range(args.rounds):
        for i in range(len(cases["after"])):
            order = list(procs.items())
            for label, p in (order if (r + i) % 2 == 0 else order[::-1]):
                p.stdin.write(f"case {i}\n")
                p.stdin.flush()
                got = json.loads(p.stdout.readline())
                for name, ts in got.items():
                    old = best[label].get(name)
                    best[label][name] = ts if old is None else \
                        [min(a, b) for a, b in zip(old, ts)]
    for p in procs.values():
        p.stdin.write("stop\n")
        p.stdin.close()
        p.wait()
    rows = []
    print(f"{'matrix':26s} {'nnz':>7s} {'plan µs before':>15s} {'after':>7s} {'ratio':>6s}"
          f" {'program µs before':>18s} {'after':>7s} {'ratio':>6s} {'scipy µs':>9s}"
          f" {'bare µs':>8s} {'plan-bare':>9s} {'plan/scipy':>10s}")
    for name, nnz in cases["after"]:
        a = best["after"][name]
        b = best["before"][name] if "before" in best else a
        row = {"matrix": name, "nnz": nnz,
               "plan_us_before": b[0] * 1e6, "plan_us_after": a[0] * 1e6,
               "plan_ratio": a[0] / b[0], "program_us_before": b[1] * 1e6,
               "program_us_after": a[1] * 1e6, "program_ratio": a[1] / b[1],
               "scipy_us": min(a[2], b[2]) * 1e6, "bare_us": min(a[3], b[3]) * 1e6}
        row["plan_overhead_us"] = row["plan_us_after"] - row["bare_us"]
        row["program_overhead_us"] = row["program_us_after"] - row["bare_us"]
        row["scipy_over_plan"] = row["scipy_us"] / row["plan_us_after"]
        rows.append(row)
        print(f"{name:26s} {nnz:7d} {row['plan_us_before']:15.2f} {row['plan_us_after']:7.2f}"
              f" {row['plan_ratio']:6.3f} {row['program_us_before']:18.2f}"
              f" {row['program_us_after']:7.2f} {row['program_ratio']:6.3f}"
              f" {row['scipy_us']:9.2f} {row['bare_us']:8.2f}"
              f" {row['plan_overhead_us']:9.2f} {row['scipy_over_plan']:10.3f}")
    import statistics

    summary = {"plan_ratio_median": statistics.median(r["plan_ratio"] for r in rows),
               "program_ratio_median": statistics.median(r["program_ratio"] for r in rows),
               "plan_ratio_max": max(r["plan_ratio"] for r in rows),
               "program_ratio_max": max(r["program_ratio"] for r in rows),
               "plan_overhead_us_median": statistics.median(r["plan_overhead_us"]
                                                            for r in rows),
               "program_overhead_us_median": statistics.median(r["program_overhead_us"]
                                                               for r in rows),
               "scipy_over_plan_min": min(r["scipy_over_plan"] for r in rows),
               "seconds": time.perf_counter() - t0, "rounds": args.rounds,
               "calls": args.calls, "load_average": os.getloadavg()}
    print(json.dumps(summary))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"rows": rows, "summary": summary}, indent=2))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[3:], int(sys.argv[2]))
    else:
        main()

"""A sparse plan's row panels on a dask.distributed cluster: 1 worker process against 2.

Instances (float64, int32 indices; ``--rows N --per-row P``, default 640000 x 16: 1.02e7
nonzeros):

* ``random``: ``P`` uniformly random columns a row. Each worker's rows read nearly every
  row of the dense operand, so each worker gets all of it.
* ``band``: ``P`` random columns within ``--band`` of the diagonal (a mesh-like matrix
  after a bandwidth-reducing ordering). Each worker gets the rows of the operand its rows
  read: about half of it with 2 workers.

Kernels: SpMV and SpMM with ``k = 16`` and ``64``. Both clusters (``LocalCluster`` of 1 and
of 2 worker processes, one thread each) are up at once and are measured in alternating
rounds (``--rounds``, the first one of each kernel a warm-up), so that a change of the
machine's load hits both alike; every figure is a median over rounds with its spread
(min-max), and each ratio the median of the rounds' paired ratios.

Per call, with the operand already on the workers (``same``) and with a new operand each
call (``new``: what an iterative method pays):

* ``wall``: the call, as the caller sees it;
* the caller's parts (``DistributedPlan.timings``): ``stamp`` (the CRC-32 of each input),
  ``send`` (scattering a new operand), ``submit``, ``gather`` (waiting for the tasks and
  receiving the results), ``join`` (the panels copied once into the output);
* the workers' parts: ``task`` (the longest worker's sum of its panels' task times, from
  Dask's task stream: wall time inside the tasks), and ``cpu`` (each worker process's CPU
  seconds over the call: the panels, deserialising, sending; CPU time is not stretched by
  other processes sharing the cores, so the split of the work shows under load too).

The CPU ratio ``cpu(1 worker) / max over workers cpu(2 workers)`` is the speed-up the two
workers would give with a core each and no transfer; the wall ratio is what this machine
gave. Writes ``benchmarks/results/sparse_distributed[_quick].json`` and prints the tables.

Re-run at low load (2 rounds took 6 minutes at load 5; 7 rounds take longer; 3 GB of memory)::

    PYTHONPATH=src python benchmarks/sparse_distributed.py --rounds 7
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy
import scipy.sparse as sp

import thrifty as th

KERNELS = {"spmv": 0, "spmm16": 16, "spmm64": 64}
PARTS = ("stamp", "send", "submit", "gather", "join", "task", "cpu")


def instance(n: int, per: int, band: int | None = None) -> sp.csr_array:
    """``n`` x ``n``, ``per`` random columns a row (duplicates summed), seeded; within
    ``band`` of the diagonal when given."""
    rng = np.random.default_rng(0)
    if band is None:
        cols = rng.integers(0, n, size=n * per, dtype=np.int64)
    else:
        rows = np.repeat(np.arange(n, dtype=np.int64), per)
        cols = (rows + rng.integers(-band, band + 1, size=n * per)).clip(0, n - 1)
    indptr = np.arange(0, n * per + 1, per, dtype=np.int64)
    A = sp.csr_array((rng.standard_normal(n * per), cols.astype(np.int32), indptr),
                     shape=(n, n))
    A.sum_duplicates()  # sorts the columns of each row, sums the repeats
    A.indptr = A.indptr.astype(np.int32)
    A.indices = A.indices.astype(np.int32)
    return A


def operand(n: int, k: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n) if k == 0 else rng.standard_normal((n, k))


def _cpu(client: Any) -> dict[str, float]:
    """Each worker process's CPU seconds so far."""
    return dict(client.run(time.process_time))


def one_call(client: Any, handle: Any, inputs: dict[str, Any]) -> dict[str, float]:
    """One call of ``handle.run(inputs)`` and its parts (seconds)."""
    from distributed import get_task_stream

    cpu0 = _cpu(client)
    with get_task_stream(client=client) as stream:
        t0 = time.perf_counter()
        handle.run(inputs)
        wall = time.perf_counter() - t0
    cpu1 = _cpu(client)
    tm = handle.timings
    busy: dict[str, float] = {}
    for task in stream.data:
        for ss in task.get("startstops", ()):
            if ss["action"] == "compute":
                w = task.get("worker", "?")
                busy[w] = busy.get(w, 0.0) + ss["stop"] - ss["start"]
    cpus = [cpu1[w] - cpu0[w] for w in cpu1 if w in cpu0]
    return {"wall": wall, "stamp": tm["stamp"], "send": tm["scatter"] - tm["stamp"],
            "submit": tm["submit"], "gather": tm["gather"], "join": tm["join"],
            "task": max(busy.values(), default=0.0), "cpu": max(cpus, default=0.0),
            "cpu_sum": sum(cpus), "workers_busy": len(busy)}


def _stats(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def bench_kernel(clients: dict[int, Any], plan: Any, A: sp.csr_array, k: int, rounds: int
                 ) -> dict[str, Any]:
    """One kernel on every cluster, rounds alternating between the clusters."""
    x = operand(A.shape[0], k, 1)
    want = plan.run({"A": A, "x": x})
    handles, scatter_a, held = {}, {}, {}
    for w, client in clients.items():
        t0 = time.perf_counter()
        handles[w] = plan.distribute(client, {"A": A})
        scatter_a[w] = time.perf_counter() - t0
        got = handles[w].run({"A": A, "x": x})  # the operand goes out; a warm-up
        assert np.allclose(got, want, rtol=1e-10, atol=1e-12)
        held[w] = handles[w].operand_rows().get("x", {})
    del got, want
    calls: dict[int, dict[str, list[dict[str, float]]]] = {
        w: {"same": [], "new": []} for w in clients}
    for r in range(rounds + 1):
        order = list(clients) if r % 2 == 0 else list(clients)[::-1]
        fresh = operand(A.shape[0], k, 2 + r)
        for w in order:
            new = one_call(clients[w], handles[w], {"A": A, "x": fresh})  # sent first
            same = one_call(clients[w], handles[w], {"A": A, "x": fresh})  # already there
            if r > 0:  # round 0: a warm-up of both kinds of call
                calls[w]["same"].append(same)
                calls[w]["new"].append(new)
    pieces = {w: sum(len(v) for v in h.placement()["A"].values())
              for w, h in handles.items()}
    for h in handles.values():
        h.forget()
    del fresh
    out: dict[str, Any] = {"k": k, "scatter_A_s": scatter_a, "pieces": pieces,
                           "operand_rows_held": {w: sorted(v.values()) for w, v in held.items()}}
    for kind in ("same", "new"):
        out[kind] = {w: {p: _stats([c[p] for c in calls[w][kind]]) for p in
                         ("wall", *PARTS, "cpu_sum")} for w in clients}
        if 1 in clients and 2 in clients:
            one, two = calls[1][kind], calls[2][kind]
            out[kind]["ratio_wall"] = _stats([a["wall"] / b["wall"] for a, b in zip(one, two)])
            out[kind]["ratio_cpu"] = _stats([a["cpu"] / b["cpu"] for a, b in zip(one, two)
                                             if b["cpu"] > 0])
            out[kind]["ratio_task"] = _stats([a["task"] / b["task"] for a, b in zip(one, two)
                                              if b["task"] > 0])
    return out


def in_process(plan: Any, A: sp.csr_array, k: int, rounds: int) -> dict[str, float]:
    x = operand(A.shape[0], k, 1)
    plan.run({"A": A, "x": x})
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        plan.run({"A": A, "x": x})
        times.append(time.perf_counter() - t0)
    return _stats(times)


def run(n: int, per: int, band: int | None, rounds: int,
        kernels: list[str] | None = None) -> dict[str, Any]:
    from distributed import Client, LocalCluster

    logging.getLogger("distributed").setLevel(logging.ERROR)
    A = instance(n, per, band)
    prog = th.program(lambda A, x: A @ x)
    plans = {name: prog.specialize(A=A, x=operand(n, k, 1)) for name, k in KERNELS.items()
             if kernels is None or name in kernels}
    inproc = {name: in_process(plan, A, KERNELS[name], rounds) for name, plan in plans.items()}
    clusters = {w: LocalCluster(n_workers=w, threads_per_worker=1, processes=True,
                                dashboard_address=None, silence_logs=50, memory_limit=0)
                for w in (1, 2)}
    clients = {w: Client(c) for w, c in clusters.items()}
    try:
        for w, client in clients.items():
            client.wait_for_workers(w, timeout=60)
        results = {}
        for name, plan in plans.items():
            results[name] = bench_kernel(clients, plan, A, KERNELS[name], rounds)
            results[name]["in_process_s"] = inproc[name]
            results[name]["panels"] = sum(1 for t in plan.taskgraph.tasks.values()
                                          if "rows" in (t.attrs or {})) or 1
    finally:
        for c in (*clients.values(), *clusters.values()):
            c.close()
    kind = "random" if band is None else f"band{band}"
    return {"instance": f"{kind}-{n}-{per}", "rows_n": n, "nnz": int(A.nnz),
            "matrix_bytes": int(A.data.nbytes + A.indices.nbytes + A.indptr.nbytes),
            "rounds": rounds, "machine": _machine(), "results": results}


def _machine() -> dict[str, Any]:
    import dask
    import distributed

    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "cpus": os.cpu_count(), "load_average": os.getloadavg(),
            "platform": platform.platform(), "python": sys.version.split()[0],
            "numpy": np.__version__, "scipy": scipy.__version__,
            "dask": dask.__version__, "distributed": distributed.__version__}


def _ms(s: dict[str, float]) -> str:
    return f"{s['median'] * 1e3:.0f}"


def _spread(s: dict[str, float], unit: float = 1e3) -> str:
    return f"{s['median'] * unit:.0f} ({s['min'] * unit:.0f}-{s['max'] * unit:.0f})"


def print_table(result: dict[str, Any]) -> None:
    print(f"{result['instance']}: {result['nnz']:.3g} nonzeros, "
          f"{result['matrix_bytes'] / 1e6:.0f} MB of CSR; medians of {result['rounds']} "
          f"rounds (min-max); load average {result['machine']['load_average']}")
    print("\n| kernel | call | in process ms | wall ms, 1 worker | wall ms, 2 workers "
          "| ratio wall | ratio CPU | ratio task |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in result["results"].items():
        for kind in ("same", "new"):
            print(f"| {name} | {kind} operand | {_ms(r['in_process_s'])} "
                  f"| {_spread(r[kind][1]['wall'])} | {_spread(r[kind][2]['wall'])} "
                  f"| {_ratio_text(r[kind]['ratio_wall'])} "
                  f"| {_ratio_text(r[kind]['ratio_cpu'])} "
                  f"| {_ratio_text(r[kind]['ratio_task'])} |")
    print("\nWhere a call's time goes (medians, ms; task and cpu: the busiest worker):")
    print("\n| kernel | call | workers | wall | stamp | send | submit | gather | join "
          "| task | cpu | operand rows a worker holds |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, r in result["results"].items():
        for kind in ("same", "new"):
            for w in (1, 2):
                s = r[kind][w]
                held = r["operand_rows_held"][w]
                print(f"| {name} | {kind} | {w} | {_ms(s['wall'])} | " +
                      " | ".join(_ms(s[p]) for p in PARTS) + f" | {held} |")


def _ratio_text(s: dict[str, float]) -> str:
    return f"{s['median']:.2f}x ({s['min']:.2f}-{s['max']:.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="160000 x 16 (2.6e6 nonzeros)")
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--per-row", type=int, default=16)
    ap.add_argument("--band", type=int, default=None,
                    help="columns within this distance of the diagonal (default: anywhere)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--kernels", nargs="*", choices=sorted(KERNELS), default=None,
                    help="only these kernels (default: all)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    n = args.rows or (160_000 if args.quick else 640_000)
    result = run(n, args.per_row, args.band, args.rounds, args.kernels)
    result["load_average_after"] = os.getloadavg()
    tag = "" if args.band is None else "_band"
    path = Path(args.out) if args.out else Path(__file__).resolve().parent / "results" / (
        f"sparse_distributed{tag}_quick.json" if args.quick else
        f"sparse_distributed{tag}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, default=str))
    print_table(result)
    print(f"\nload average after: {result['load_average_after']}")
    print(f"JSON written to {path}")


if __name__ == "__main__":
    main()

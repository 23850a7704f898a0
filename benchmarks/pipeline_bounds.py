"""Emulated precision through a whole program, on the real matrices of ../shared/data.

For every square real matrix of the shared collection (up to ``--max-rows`` rows), a GCN
layer ``relu(A @ (X @ W))`` is specialized to the matrix's pattern by the sparse engine and
its plan's kernels (gemm, CSR row segments skipping all-zero chunks, gathered dense block
panels) run on a unit model (inputs in the unit's input format, fp32 accumulation), and in
float64. Reported per matrix and unit: the observed max |error|, the certified
componentwise bound, the a priori bound from the inputs' ranges, and bound / observed.
Target: no bound ever below the observed error.

Usage: ``python benchmarks/pipeline_bounds.py [--quick] [--max-rows N]``; writes
``benchmarks/results/pipeline_bounds.json``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import time
from pathlib import Path

import numpy as np
import scipy
import scipy.sparse as sp
from rich.console import Console
from rich.table import Table

import thrifty as th
from thrifty.numerics import unit
from thrifty.runtime.emulate import emulate
from thrifty.testing import shared_data_dir

UNITS = [("h100", "bf16"), ("v100", "fp16"), ("ada", "e4m3")]


def matrices(root: Path, max_rows: int, quick: bool) -> list[tuple[str, sp.csr_array]]:
    out = []
    with open(root / "matrices" / "INDEX.tsv") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            rows, cols = int(row["rows"]), int(row["cols"])
            if rows != cols or rows > max_rows or "complex" in row["symmetric/kind"]:
                continue
            A = th.load_matrix(root / "matrices" / row["file"])
            if np.iscomplexobj(A.data) or A.nnz == 0:
                continue
            out.append((f"{row['group']}/{row['name']}", sp.csr_array(A, dtype=np.float64)))
    out.sort(key=lambda t: t[1].nnz)
    return out[:: max(1, len(out) // 5)] if quick else out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="five matrices, two units")
    ap.add_argument("--max-rows", type=int, default=6000)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/pipeline_bounds.json"))
    args = ap.parse_args()
    root = shared_data_dir()
    if root is None:
        raise SystemExit("../shared/data is absent: this benchmark needs the real matrices")
    machine = {"platform": platform.platform(), "cpus": os.cpu_count(),
               "python": platform.python_version(), "numpy": np.__version__,
               "scipy": scipy.__version__}
    console = Console()
    console.print(f"machine: {machine}")
    layer = th.program(lambda A, X, W: th.relu(A @ (X @ W)))
    rng = np.random.default_rng(0)
    rows = []
    units = UNITS[:2] if args.quick else UNITS
    for name, A in matrices(root, args.max_rows, args.quick):
        n = A.shape[0]
        X = rng.standard_normal((n, 16))
        W = rng.standard_normal((16, 8)) / 4
        # scale A so that its rows sum to at most 1 in magnitude (as a GCN normalises)
        rs = np.asarray(abs(A).sum(axis=1)).ravel()
        A = sp.csr_array(sp.diags_array(1.0 / np.maximum(rs, 1e-300)) @ A)
        inputs = {"A": A, "X": X, "W": W}
        plan = layer.specialize(**inputs)
        for uname, fin in units:
            t0 = time.perf_counter()
            r = emulate(plan.graph, inputs, unit(uname, input=fin, output="fp32"), plan=plan)
            rows.append({"matrix": name, "n": n, "nnz": int(A.nnz), "unit": f"{uname}-{fin}",
                         "observed": r.observed[0], "certified": r.certified[0],
                         "a_priori": r.bounds[0], "within": r.within_bounds(),
                         "kernels": dict(r.kernels), "seconds": time.perf_counter() - t0})
            console.print(f"{name:28s} {uname}-{fin:5s} observed {r.observed[0]:.3g} "
                          f"certified {r.certified[0]:.3g} a priori {r.bounds[0]:.3g}")
    t = Table(title="GCN layer in emulated precision on real matrices")
    for c in ("matrix", "n", "nnz", "unit", "observed", "certified", "cert/obs", "a priori",
              "a priori/obs", "within", "kernels on the unit"):
        t.add_column(c)
    for r in rows:
        obs = r["observed"]
        t.add_row(r["matrix"], str(r["n"]), str(r["nnz"]), r["unit"], f"{obs:.3g}",
                  f"{r['certified']:.3g}", f"{r['certified'] / obs:.3g}" if obs else "-",
                  f"{r['a_priori']:.3g}", f"{r['a_priori'] / obs:.3g}" if obs else "-",
                  "yes" if r["within"] else "NO",
                  ", ".join(f"{k} {v}" for k, v in r["kernels"].items()))
    console.print(t)
    summary = {}
    for u in sorted({r["unit"] for r in rows}):
        ratios = [r["certified"] / r["observed"] for r in rows if r["unit"] == u and r["observed"]]
        summary[u] = {"cases": sum(r["unit"] == u for r in rows),
                      "violations": sum(not r["within"] for r in rows if r["unit"] == u),
                      "certified_over_observed_median": float(np.median(ratios)) if ratios
                      else None,
                      "certified_over_observed_max": float(np.max(ratios)) if ratios else None}
    console.print(summary)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": machine, "quick": args.quick, "rows": rows,
                                    "summary": summary}, indent=1))


if __name__ == "__main__":
    main()

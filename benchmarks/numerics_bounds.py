"""Error-bound benchmark: is any bound ever violated, and how tight is it?

For each unit configuration, N dot products of length k (half random normal inputs, half
adversarial: a large addend with small one-signed products whose significands are all
ones, so that every truncation loses almost a window ulp, and pairwise cancellation) are
computed by the emulated unit and compared with the exact result (``math.fsum`` of the
exact float64 products: the exact sum correctly rounded to float64, its own error counted
against the bound). Reported side by side, relative to ``mu = |c| + sum |a_i b_i|``:

* the model's a priori bound (``bounds.a_priori_bound``): violations (must be 0) and
  tightness = bound / worst observed error;
* the classical ``gamma_{k+1}`` and block-FMA bounds (Blanchard et al. 2020) with the
  unit's own final rounding: how often they fail on truncating hardware;
* the Higham-Mary probabilistic bound (failure 1e-6) where the unit is unbiased, else the
  refusal;
* the certified a posteriori bound on a subsample: median bound / actual error.

N = 10^6 per configuration in full mode (2 x 10^4 with --quick).

Usage: ``python benchmarks/numerics_bounds.py [--quick] [--only h100-bf16-fp32,...]``; writes
``benchmarks/results/numerics_bounds.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
import zlib
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import scipy
from rich.console import Console
from rich.table import Table

from thrifty.errors import FormatError
from thrifty.numerics.bounds import (
    a_posteriori_bound,
    a_priori_bound,
    block_fma_bound,
    dot_magnitude,
    exact_dot,
    gamma_bound,
    probabilistic_bound,
)
from thrifty.numerics.formats import get_format
from thrifty.numerics.units import preset, unit

CONFIGS = [("v100", "fp16", "fp32"), ("v100", "fp16", "fp16"), ("a100", "bf16", "fp32"),
           ("a100", "tf32", "fp32"), ("ada", "e4m3", "fp32"), ("ada", "e5m2", "fp16"),
           ("h100", "bf16", "fp32"), ("h100", "e4m3", "fp32"), ("b200", "fp16", "fp32"),
           ("cdna1", "fp16", "fp32"), ("cdna2", "bf16", "fp32"), ("cdna3", "bf16", "fp32"),
           ("amx", "bf16", "fp32")]
SHORT = {"binary16": "fp16", "binary32": "fp32", "bfloat16": "bf16", "tensorfloat32": "tf32",
         "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}
DTYPES = {"binary16": np.float16, "bfloat16": ml_dtypes.bfloat16,
          "float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}


def machine() -> dict[str, object]:
    return {"platform": platform.platform(), "processor": platform.processor(),
            "python": platform.python_version(), "cpus": os.cpu_count(),
            "numpy": np.__version__, "scipy": scipy.__version__,
            "ml_dtypes": ml_dtypes.__version__}


def to_format(x: np.ndarray, fmt: str) -> np.ndarray:
    if fmt == "tensorfloat32":
        bits = x.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
        return bits.view(np.float32).astype(np.float64)
    with np.errstate(over="ignore"):
        v = x.astype(DTYPES[fmt]).astype(np.float64)
    return np.where(np.isfinite(v), v, 0.0)


def cases(fin: str, fout: str, n: int, k: int, rng: np.random.Generator):
    """Half random, a quarter one-signed truncation-heavy, a quarter cancelling."""
    a = to_format(rng.standard_normal((n, k)), fin)
    b = to_format(rng.standard_normal((n, k)), fin)
    c = rng.standard_normal(n)
    q = n // 4
    p = get_format(fin).precision
    ones = 2.0 - 2.0 ** (1 - p)
    spread = rng.integers(4, 15, (q, k)).astype(float)
    a[n // 2:n // 2 + q] = to_format(ones * np.exp2(-spread), fin)
    b[n // 2:n // 2 + q] = to_format(np.full((q, k), ones), fin)
    c[n // 2:n // 2 + q] = 256.0 * np.where(rng.random(q) < 0.5, 1, -1)
    a[n // 2:n // 2 + q] *= np.sign(c[n // 2:n // 2 + q])[:, None]
    lo = n // 2 + q
    a[lo:, 1::2] = -a[lo:, 0::2][:, :a[lo:, 1::2].shape[1]]
    b[lo:, 1::2] = b[lo:, 0::2][:, :b[lo:, 1::2].shape[1]]
    a[lo:, -1] = to_format(rng.standard_normal(n - lo) * 2.0**-12, fin)
    c[lo:] = rng.standard_normal(n - lo) * 2.0**-20
    c_dt = np.float16 if fout == "binary16" else np.float32
    return a, b, c.astype(c_dt).astype(np.float64)


def run_config(name: str, fin: str, fout: str, n: int, k: int, n_post: int,
               chunk: int) -> dict[str, object]:
    model = preset(name, fin, fout)
    u = unit(model)
    prior = a_priori_bound(model, k)
    gam = gamma_bound(k, model.output, model.rounding)
    bfma = block_fma_bound(k, model.fma, model.output, model.rounding)
    try:
        prob = probabilistic_bound(model, k)
        refusal = None
    except FormatError as e:
        prob, refusal = None, str(e).split(";")[0]
    rng = np.random.default_rng(zlib.crc32(f"{name}-{fin}-{fout}".encode()))
    worst = 0.0
    viol = {"a_priori": 0, "gamma": 0, "block_fma": 0, "probabilistic": 0}
    t0 = time.perf_counter()
    kept = None
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        a, b, c = cases(model.input, model.output, m, k, rng)
        d = u.dot(a, b, c)
        terms = np.concatenate([c[:, None], a * b], axis=1)  # exact in float64
        fs = np.array([math.fsum(r) for r in terms.tolist()])
        err = np.abs(d - fs) + 2.0**-52 * np.abs(fs)  # >= |d - exact|
        mu = dot_magnitude(model, a, b, c)
        viol["a_priori"] += int(np.sum(err > prior.relative * mu + prior.absolute))
        viol["gamma"] += int(np.sum(err > gam.relative * mu))
        viol["block_fma"] += int(np.sum(err > bfma.relative * mu))
        if prob is not None:
            viol["probabilistic"] += int(np.sum(err > prob.relative * mu))
        worst = max(worst, float((err / mu).max()))
        if kept is None:
            kept = (a[:n_post // 2], b[:n_post // 2], c[:n_post // 2],
                    a[m // 2:m // 2 + n_post // 2], b[m // 2:m // 2 + n_post // 2],
                    c[m // 2:m // 2 + n_post // 2])
    seconds = time.perf_counter() - t0
    ratios = []
    a1, b1, c1, a2, b2, c2 = kept
    for A, B, C in ((a1, b1, c1), (a2, b2, c2)):
        for i in range(len(C)):
            post = a_posteriori_bound(model, A[i], B[i], C[i])
            e = abs(Fraction(post.magnitude) - exact_dot(A[i], B[i], C[i]))
            if Fraction(post.value) < e:
                viol.setdefault("a_posteriori", 0)
                viol["a_posteriori"] = viol.get("a_posteriori", 0) + 1
            if e > 0:
                ratios.append(post.value / float(e))
    return {"unit": name, "input": model.input, "output": model.output, "k": k, "cases": n,
            "a_priori_rel": prior.relative, "worst_err_over_mu": worst,
            "tightness": prior.relative / worst if worst else math.inf,
            "violations": viol, "gamma_rel": gam.relative, "block_fma_rel": bfma.relative,
            "probabilistic_rel": prob.relative if prob else None,
            "probabilistic_refused": refusal,
            "a_posteriori_median_ratio": float(np.median(ratios)) if ratios else None,
            "a_posteriori_cases": 2 * (n_post // 2), "seconds": seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 x 10^4 cases per configuration")
    ap.add_argument("--only", default=None,
                    help="comma-separated unit-input-output triples, e.g. h100-bf16-fp32")
    args = ap.parse_args()
    n, n_post = (20_000, 40) if args.quick else (1_000_000, 400)
    configs = CONFIGS if args.only is None else [tuple(x.split("-"))
                                                 for x in args.only.split(",")]
    k = 64
    console = Console(width=160)
    info = machine()
    console.print(f"[bold]numerics_bounds[/bold] ({'quick' if args.quick else 'full'}) on "
                  f"{info['platform']}, {info['cpus']} CPUs, numpy {info['numpy']}, "
                  f"scipy {info['scipy']}; {n} cases per configuration, k={k}")
    rows = [run_config(*cfg, n=n, k=k, n_post=n_post, chunk=20_000) for cfg in configs]
    t = Table(title="Bounds relative to |c| + sum|a_i b_i| (violations / cases)")
    for col in ("unit", "in", "out", "a priori", "worst seen", "tightness", "viol.",
                "gamma viol.", "bFMA viol.", "prob. (viol.)", "a post. ratio"):
        t.add_column(col)
    for r in rows:
        v = r["violations"]
        prob = ("refused" if r["probabilistic_rel"] is None else
                f"{r['probabilistic_rel']:.2g} ({v['probabilistic']})")
        post = r["a_posteriori_median_ratio"]
        t.add_row(r["unit"], SHORT.get(r["input"], r["input"]), SHORT.get(r["output"], ""),
                  f"{r['a_priori_rel']:.3g}",
                  f"{r['worst_err_over_mu']:.3g}", f"{r['tightness']:.3g}",
                  str(v["a_priori"] + v.get("a_posteriori", 0)), str(v["gamma"]),
                  str(v["block_fma"]), prob, "-" if post is None else f"{post:.3g}")
    console.print(t)
    name = "numerics_bounds" if args.only is None else "numerics_bounds_subset"
    out = Path(__file__).parent / "results" / f"{name}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"machine": info, "mode": "quick" if args.quick else "full",
                               "k": k, "rows": rows}, indent=2))
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()

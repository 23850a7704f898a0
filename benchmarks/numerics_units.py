"""Matrix-unit emulation benchmark: bit-exactness on measured GPUs, and throughput.

1. Bit-exactness: every file of ../shared/data/tensorcore (V100, A100, Ada; fp16, bf16,
   tf32, E4M3, E5M2 inputs; fp32 and fp16 outputs) against the preset model of its GPU.
2. Throughput of ``Unit.dot`` in dot products/s at k=64: the numpy engine (vectorised
   exact integers) and the compiled engine (numba loops) side by side with the
   exact-rational scalar reference (``reference_dot``, the specification) and with numpy's
   float32 ``einsum`` (no emulation: the speed of light). All engines agree bit for bit.
3. A bf16 GEMM under the H100 model (compiled engine 1024^3 and numpy engine 256^3 in
   full mode; both 128^3 in --quick): seconds, products/s, ratio to numpy float32 matmul,
   and its error against float64 within the a priori bound.
4. The compiled GEMM kernels side by side on the same inputs (1024^3, or 128^3 in
   --quick; bf16 and E4M3 on H100 and B200, bf16 on A100): the tiled kernel that
   ``matmul`` runs against the per-entry kernel, equal bits and the time ratio.

Usage: ``python benchmarks/numerics_units.py [--quick]``; writes
``benchmarks/results/numerics_units.json``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import ml_dtypes
import numpy as np
import scipy
from rich.console import Console
from rich.table import Table

from thrifty.numerics.bounds import a_priori_bound, dot_magnitude
from thrifty.numerics.formats import get_format
from thrifty.numerics.units import (
    _compiled_eligible,
    decompose,
    load_validation_set,
    reference_dot,
    unit,
    validate,
)
from thrifty.numerics.units.kernels import compiled_kernels, kernel_params
from thrifty.testing import shared_data_dir

DTYPES = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "e4m3": ml_dtypes.float8_e4m3fn,
          "e5m2": ml_dtypes.float8_e5m2}


def machine() -> dict[str, object]:
    return {"platform": platform.platform(), "processor": platform.processor(),
            "python": platform.python_version(), "cpus": os.cpu_count(),
            "numpy": np.__version__, "scipy": scipy.__version__,
            "ml_dtypes": ml_dtypes.__version__}


def native_dots(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", a, b) + c


def best_of(repeats: int, f: Callable[[], object]) -> float:
    """The shortest of ``repeats`` timings of ``f()`` after one warm-up call."""
    f()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return max(min(times), 1e-9)


def values(rng: np.random.Generator, shape: tuple[int, ...], fmt: str) -> np.ndarray:
    if fmt == "tf32":
        bits = rng.standard_normal(shape).astype(np.float32).view(np.uint32)
        return (bits & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    return rng.standard_normal(shape).astype(DTYPES[fmt]).astype(np.float64)


def bench_validation() -> list[dict[str, object]]:
    root = shared_data_dir()
    rows: list[dict[str, object]] = []
    if root is None:
        return rows
    unit("a100", input="bf16").dot(np.ones((2, 8)), np.ones((2, 8)))  # compile / load cache
    for folder in sorted((root / "tensorcore").glob("*/*")):
        ds = load_validation_set(folder)
        for out in ds.d:
            u = unit(folder.parent.name.lower(), input=ds.input, output=out)
            t = time.perf_counter()
            r = validate(u, ds)
            dt = time.perf_counter() - t
            rows.append({"gpu": folder.parent.name, "input": ds.input, "output": out,
                         "k": int(ds.a.shape[1]), "cases": r.cases, "matched": r.matched,
                         "cases_per_s": r.cases / dt})
    return rows


def bench_throughput(n: int, n_ref: int, k: int) -> list[dict[str, object]]:
    rows = []
    rng = np.random.default_rng(1)
    for name, fin in [("v100", "fp16"), ("a100", "bf16"), ("a100", "tf32"), ("h100", "bf16"),
                      ("ada", "e4m3"), ("h100", "e5m2"), ("cdna3", "bf16"), ("cdna1", "fp16"),
                      ("amx", "bf16")]:
        u = unit(name, input=fin, output="fp32")
        a, b = values(rng, (n, k), fin), values(rng, (n, k), fin)
        c = rng.standard_normal(n).astype(np.float32).astype(np.float64)
        t = time.perf_counter()
        d = u.dot(a, b, c, engine="numpy")
        fast = n / (time.perf_counter() - t)
        compiled = None
        if _compiled_eligible(u.model):
            u.dot(a[:8], b[:8], c[:8], engine="compiled")  # compile (or load the cache)
            t = time.perf_counter()
            dc = u.dot(a, b, c, engine="compiled")
            compiled = n / (time.perf_counter() - t)
            assert np.array_equal(dc, d), f"{name} {fin}: compiled != numpy engine"
        t = time.perf_counter()
        ref = np.array([reference_dot(u.model, list(a[i]), list(b[i]), c[i])
                        for i in range(n_ref)])
        slow = n_ref / (time.perf_counter() - t)
        assert np.array_equal(ref, d[:n_ref]), f"{name} {fin}: fast path != reference"
        a32, b32, c32 = a.astype(np.float32), b.astype(np.float32), c.astype(np.float32)
        native = n / best_of(3, functools.partial(native_dots, a32, b32, c32))
        best = max(fast, compiled or 0.0)
        rows.append({"unit": name, "input": fin, "k": k, "fma": u.model.fma,
                     "numpy_engine_dots_per_s": fast, "compiled_engine_dots_per_s": compiled,
                     "reference_dots_per_s": slow, "best_vs_reference": best / slow,
                     "numpy_fp32_dots_per_s": native, "numpy_fp32_over_best": native / best})
    return rows


def bench_gemm(size: int, engine: str) -> dict[str, object]:
    rng = np.random.default_rng(2)
    u = unit("h100", input="bf16", output="fp32")
    A, B = values(rng, (size, size), "bf16"), values(rng, (size, size), "bf16")
    u.matmul(A[:4, :32], B[:32, :4], engine=engine)  # compile (or load the cache)
    t = time.perf_counter()
    D = u.matmul(A, B, engine=engine)
    dt = time.perf_counter() - t
    A32, B32 = A.astype(np.float32), B.astype(np.float32)
    dt_np = best_of(3, lambda: A32 @ B32)
    exact = A @ B  # float64; its own error (<= k 2^-53 mu) is allowed for below
    mu = np.abs(A) @ np.abs(B)
    bnd = a_priori_bound(u.model, size)
    err = np.abs(D - exact)
    rows = slice(0, min(size, 8))
    mu_check = dot_magnitude(u.model, A[rows, None, :], B.T[None, :, :], 0.0)
    return {"engine": engine, "m=n=k": size, "seconds": dt, "products_per_s": size**3 / dt,
            "numpy_fp32_seconds": dt_np, "slowdown_vs_numpy_fp32": dt / dt_np,
            "max_error_over_magnitude": float((err / mu).max()),
            "a_priori_relative_bound": bnd.relative,
            "within_bound": bool(np.all(err <= bnd.relative * mu * (1 + 2.0**-40)
                                        + bnd.absolute + size * 2.0**-52 * mu)),
            "magnitude_check": bool(np.allclose(mu_check, mu[rows], rtol=1e-12))}


def bench_gemm_kernels(size: int) -> list[dict[str, object]]:
    """The compiled GEMM kernels on the same inputs: the tiled kernel (``matmul``'s compiled
    engine) against the per-entry kernel (one chain of steps per ``(i, j)``, the engine
    before the tiled one): equal bits, and the time ratio."""
    rows = []
    rng = np.random.default_rng(3)
    _, _, per_entry = compiled_kernels()
    for name, fin in [("h100", "bf16"), ("h100", "e4m3"), ("b200", "bf16"), ("b200", "e4m3"),
                      ("a100", "bf16")]:
        u = unit(name, input=fin, output="fp32")
        A, B = values(rng, (size, size), fin), values(rng, (size, size), fin)
        C = rng.standard_normal((size, size)).astype(np.float32).astype(np.float64)
        u.matmul(A[:4, :64], B[:64, :4], C[:4, :4], engine="compiled")  # compile / load
        t = time.perf_counter()
        D = u.matmul(A, B, C, engine="compiled")
        t_tiled = time.perf_counter() - t
        fmt = get_format(u.model.input)
        pa = decompose(A, fmt, u.model.subnormals_in, "A")
        pb = tuple(np.ascontiguousarray(x.T) for x in decompose(B, fmt, True, "B"))
        ip, maxfin = kernel_params(u.model)
        out = np.empty((size, size))
        small = [np.ascontiguousarray(x[:4, :64]) for x in pa + pb]
        per_entry(*small, C[:4, :4].copy(), np.empty((4, 4)), ip, maxfin)  # compile / load
        t = time.perf_counter()
        per_entry(*pa, *pb, C, out, ip, maxfin)
        t_entry = time.perf_counter() - t
        rows.append({"unit": name, "input": fin, "m=n=k": size, "tiled_seconds": t_tiled,
                     "per_entry_seconds": t_entry, "speedup": t_entry / t_tiled,
                     "equal_bits": bool(np.array_equal(D.view(np.uint64),
                                                       out.view(np.uint64)))})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (a minute or so)")
    args = ap.parse_args()
    n, n_ref, size, size_numpy = ((20_000, 100, 128, 128) if args.quick
                                  else (200_000, 1_000, 1024, 256))
    console = Console(width=160)
    info = machine()
    console.print(f"[bold]numerics_units[/bold] ({'quick' if args.quick else 'full'}) on "
                  f"{info['platform']}, {info['cpus']} CPUs, numpy {info['numpy']}, "
                  f"scipy {info['scipy']}")
    val = bench_validation()
    t = Table(title="Bit-exactness on measured tensor cores (shared/data/tensorcore)")
    for col in ("gpu", "input", "output", "k", "cases", "matched", "cases/s"):
        t.add_column(col)
    for r in val:
        t.add_row(str(r["gpu"]), str(r["input"]), str(r["output"]), str(r["k"]),
                  str(r["cases"]), str(r["matched"]), f"{r['cases_per_s']:.3g}")
    console.print(t)
    thr = bench_throughput(n, n_ref, 64)
    t = Table(title=f"Dot products/s at k=64 ({n} cases; reference on {n_ref})")
    for col in ("unit", "input", "fma", "numpy engine", "compiled engine", "reference",
                "best / reference", "numpy fp32 (no emulation)", "numpy fp32 / best"):
        t.add_column(col)
    for r in thr:
        comp = r["compiled_engine_dots_per_s"]
        t.add_row(str(r["unit"]), str(r["input"]), str(r["fma"]),
                  f"{r['numpy_engine_dots_per_s']:.3g}", "-" if comp is None else f"{comp:.3g}",
                  f"{r['reference_dots_per_s']:.3g}", f"{r['best_vs_reference']:.0f}",
                  f"{r['numpy_fp32_dots_per_s']:.3g}", f"{r['numpy_fp32_over_best']:.0f}")
    console.print(t)
    gemm = [bench_gemm(size, "compiled"), bench_gemm(size_numpy, "numpy")]
    t = Table(title="bf16 GEMM under the H100 model (binary32 output)")
    keys = list(gemm[0])
    for key in keys:
        t.add_column(key)
    for g in gemm:
        t.add_row(*[f"{g[key]:.4g}" if isinstance(g[key], float) else str(g[key])
                    for key in keys])
    console.print(t)
    kern = bench_gemm_kernels(size)
    t = Table(title=f"Compiled GEMM kernels, {size}^3, binary32 output, same inputs")
    for key in kern[0]:
        t.add_column(key)
    for r in kern:
        t.add_row(*[f"{v:.3g}" if isinstance(v, float) else str(v) for v in r.values()])
    console.print(t)
    out = Path(__file__).parent / "results" / "numerics_units.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"machine": info, "mode": "quick" if args.quick else "full",
                               "validation": val, "throughput": thr, "gemm": gemm,
                               "gemm_kernels": kern},
                              indent=2))
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()

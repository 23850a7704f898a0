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
4. GEMM speed (1024^3, or 128^3 in --quick; binary32 output): bf16, E4M3 and E5M2 on the
   H100 and B200 presets, ``mma.sync`` (Khattak-Mikaitis) and ``wgmma`` / ``tcgen05.mma``
   (MMA-Sim) rows: wall and CPU seconds of the compiled engine, the former integer tiled
   kernel on the same inputs (equal bits, time ratio) and MMA-Sim (``mmasim``) on the same
   inputs where it models the instruction: equal bits at 256^3 (64^3 in --quick) and its
   time there, extrapolated to the full size by the cube of the size ratio (measured at
   half that size too, to check the scaling).

Usage: ``python benchmarks/numerics_units.py [--quick] [--speed-only]``; writes
``benchmarks/results/numerics_units.json`` (``numerics_units_speed.json`` with
``--speed-only``: section 4 alone).
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
import numba
import numpy as np
import scipy
from rich.console import Console
from rich.table import Table

from thrifty.numerics import crosscheck as xc
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
            "ml_dtypes": ml_dtypes.__version__, "numba": numba.__version__,
            "mmasim": _version("mmasim"), "torch": _version("torch"),
            "load_average": os.getloadavg()}


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


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


SPEED_CONFIGS = [("h100", "bf16", "mma.sync"), ("h100", "e4m3", "mma.sync"),
                 ("h100", "e5m2", "mma.sync"), ("b200", "bf16", "mma.sync"),
                 ("b200", "e4m3", "mma.sync"), ("b200", "e5m2", "mma.sync"),
                 ("h100", "bf16", "wgmma"), ("h100", "e4m3", "wgmma"), ("h100", "e5m2", "wgmma"),
                 ("b200", "bf16", "tcgen05.mma"), ("b200", "e4m3", "tcgen05.mma"),
                 ("b200", "e5m2", "tcgen05.mma")]


def _timed(f: Callable[..., np.ndarray], *args: object,
           **kw: object) -> tuple[np.ndarray, float, float]:
    """``(f(*args, **kw), wall seconds, CPU seconds of all threads)`` of one call."""
    c, t = time.process_time(), time.perf_counter()
    out = f(*args, **kw)
    return out, time.perf_counter() - t, time.process_time() - c


def _integer_tiled(u: object, A: np.ndarray, B: np.ndarray, C: np.ndarray) -> np.ndarray:
    """The former compiled GEMM (integer significands, tiled) on the same inputs."""
    from thrifty.numerics.units.engine import _packed_columns, _signed

    md = u.model  # type: ignore[attr-defined]
    fmt = get_format(md.input)
    pa, pb = decompose(A, fmt, md.subnormals_in, "A"), decompose(B, fmt, md.subnormals_in, "B")
    ip, maxfin = kernel_params(md)
    out = np.empty(C.shape)
    sbp, ebp = _packed_columns(_signed(pb), pb[1])
    compiled_kernels()[1](_signed(pa), np.ascontiguousarray(pa[1]), sbp, ebp, C, out, ip,
                          maxfin)
    return out


def _mmasim_gemm(key: str, A: np.ndarray, B: np.ndarray, C: np.ndarray) -> np.ndarray:
    """MMA-Sim's model of the instruction (``op(A, B, C)``: the whole GEMM, its chain of
    steps over k), as float64."""
    from mmasim import nv_ptx

    import torch

    cfg = xc.CONFIGS[key]
    op = getattr(nv_ptx, cfg.sim)(cfg.sim_arch, cfg.shape)
    with torch.no_grad():
        D = op(*(torch.from_numpy(np.ascontiguousarray(x)).to(t)
                 for x, t in ((A, op.a_type), (B, op.b_type), (C, op.c_type))))
    return D.double().numpy()


def bench_gemm_speed(size: int, sim_size: int) -> list[dict[str, object]]:
    """``D = C + A @ B`` (binary32 output) on the Hopper and Blackwell presets at ``size``^3:
    the compiled engine (binary64-lane kernel) against the former integer tiled kernel on
    the same inputs (equal bits, time ratio), and against MMA-Sim where it models the
    instruction: equal bits at ``sim_size``^3 on the leading blocks of the same inputs,
    MMA-Sim's time measured at ``sim_size`` and ``sim_size / 2`` and extrapolated to
    ``size`` by the cube of the size ratio (its cost is per product)."""
    rows = []
    have_sim = xc.mmasim_available() is None
    if have_sim:
        import torch
        torch.set_num_threads(os.cpu_count() or 1)
    for name, fin, instr in SPEED_CONFIGS:
        rng = np.random.default_rng(4)
        u = unit(name, input=fin, output="fp32", instruction=instr)
        A, B = values(rng, (size, size), fin), values(rng, (size, size), fin)
        C = rng.standard_normal((size, size)).astype(np.float32).astype(np.float64)
        u.matmul(A[:4, :64], B[:64, :4], C[:4, :4])  # compile / load the cache
        _integer_tiled(u, A[:4, :64], B[:64, :4], C[:4, :4].copy())
        D, wall, cpu = _timed(u.matmul, A, B, C, progress=False)
        old, old_wall, old_cpu = _timed(_integer_tiled, u, A, B, C)
        row: dict[str, object] = {
            "unit": name, "input": fin, "instruction": instr, "m=n=k": size,
            "seconds": wall, "cpu_seconds": cpu, "former_kernel_seconds": old_wall,
            "former_kernel_cpu_seconds": old_cpu, "speedup_vs_former_cpu": old_cpu / cpu,
            "equal_bits_former": bool(np.array_equal(D.view(np.uint64), old.view(np.uint64)))}
        key = f"{name}/{fin}/fp32" + ("" if instr == "mma.sync" else f"/{instr}")
        if have_sim and key in xc.CONFIGS:
            s, h = sim_size, sim_size // 2
            _, t_half, _ = _timed(_mmasim_gemm, key, A[:h, :h], B[:h, :h], C[:h, :h])
            S, t_sim, c_sim = _timed(_mmasim_gemm, key, A[:s, :s], B[:s, :s], C[:s, :s])
            ours = u.matmul(A[:s, :s], B[:s, :s], C[:s, :s])
            scale = (size / s) ** 3
            row.update({"mmasim_size": s, "mmasim_seconds": t_sim, "mmasim_cpu_seconds": c_sim,
                        "mmasim_half_size_seconds": t_half,
                        "mmasim_seconds_extrapolated": t_sim * scale,
                        "mmasim_over_thrifty_wall": t_sim * scale / wall,
                        "mmasim_over_thrifty_cpu": c_sim * scale / cpu,
                        "equal_bits_mmasim": bool(xc.same_bits(ours, S, "binary32").all())})
        rows.append(row)
    return rows


def speed_table(rows: list[dict[str, object]]) -> Table:
    t = Table(title=f"Unit GEMM, {rows[0]['m=n=k']}^3, binary32 output (wall / CPU seconds)")
    for col in ("unit", "input", "instruction", "thrifty s", "thrifty CPU s", "former CPU s",
                "former / thrifty", "equal", "MMA-Sim s (at size)", "MMA-Sim s extrap.",
                "MMA-Sim / thrifty", "equal (MMA-Sim)"):
        t.add_column(col)
    for r in rows:
        sim = "mmasim_seconds" in r
        t.add_row(str(r["unit"]), str(r["input"]), str(r["instruction"]),
                  f"{r['seconds']:.2f}", f"{r['cpu_seconds']:.2f}",
                  f"{r['former_kernel_cpu_seconds']:.2f}", f"{r['speedup_vs_former_cpu']:.1f}",
                  str(r["equal_bits_former"]),
                  f"{r['mmasim_seconds']:.1f} ({r['mmasim_size']}^3)" if sim else "-",
                  f"{r['mmasim_seconds_extrapolated']:.0f}" if sim else "-",
                  f"{r['mmasim_over_thrifty_wall']:.0f}" if sim else "-",
                  str(r["equal_bits_mmasim"]) if sim else "-")
    return t


def speed_only(size: int, sim_size: int) -> None:
    """Section 4 alone, with the load average before and after."""
    console = Console(width=160)
    before = os.getloadavg()
    speed = bench_gemm_speed(size, sim_size)
    console.print(speed_table(speed))
    out = Path(__file__).parent / "results" / "numerics_units_speed.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"machine": machine(), "gemm_speed": speed,
                               "load_average_before": before,
                               "load_average_after": os.getloadavg()}, indent=2))
    console.print(f"load average before {before}, after {os.getloadavg()}; wrote {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (a minute or so)")
    ap.add_argument("--speed-only", action="store_true",
                    help="only the GEMM speed table (section 4); writes numerics_units_speed.json")
    ap.add_argument("--sim-size", type=int, default=None,
                    help="size of MMA-Sim's GEMMs (default 256, 64 with --quick); at 256^3 its "
                         "fixed costs still weigh, so x64 overestimates its 1024^3 time")
    args = ap.parse_args()
    sim_size = args.sim_size or (64 if args.quick else 256)
    if args.speed_only:
        speed_only(128 if args.quick else 1024, sim_size)
        return
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
    speed = bench_gemm_speed(size, sim_size)
    console.print(speed_table(speed))
    out = Path(__file__).parent / "results" / "numerics_units.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"machine": info, "mode": "quick" if args.quick else "full",
                               "validation": val, "throughput": thr, "gemm": gemm,
                               "gemm_speed": speed,
                               "load_average": os.getloadavg()},
                              indent=2))
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()

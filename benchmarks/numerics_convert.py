"""Conversion benchmark: bit-exactness and throughput of thrifty.numerics.round / encode.

Exactness: identical to ml_dtypes on all 2**16 binary16 and bfloat16 inputs and on random
binary32 bit patterns (10**7 in full mode) with every special value and every rounding
boundary of the 8-bit formats, for every format ml_dtypes has (values and codes); identical
to gfloat's round_ndarray for the P3109 and MX formats under its five deterministic
roundings.

Throughput (values/s, float32 input, best of 3 or 5, peers interleaved): ml_dtypes
``astype`` (C++, codes) and its round trip ``astype(fmt).astype(float64)`` (values),
thrifty ``encode`` (codes) and ``round`` (float64 values) with the compiled engine,
thrifty's numpy reference engine, gfloat ``round_ndarray`` and pychop ``Chop`` (pychop on
a tenth of the values; its E4M3/E5M2 are IEEE-like, not OCP's). Ratios: encode against
astype, round against the round trip and against gfloat.

Usage: ``python benchmarks/numerics_convert.py [--quick]``; writes
``benchmarks/results/numerics_convert.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path

import gfloat
import gfloat.formats as gf
import ml_dtypes
import numpy as np
import scipy
from rich.console import Console
from rich.table import Table

from thrifty.numerics import FORMATS, decode, encode, get_format, round
from thrifty.numerics.formats import all_codes

warnings.simplefilter("ignore", RuntimeWarning)

GFLOAT = {
    "float8_e4m3fn": gf.format_info_ocp_e4m3, "float8_e5m2": gf.format_info_ocp_e5m2,
    "float6_e3m2fn": gf.format_info_ocp_e3m2, "float6_e2m3fn": gf.format_info_ocp_e2m3,
    "float4_e2m1fn": gf.format_info_ocp_e2m1, "mx_int8": gf.format_info_ocp_int8,
    "bfloat16": gf.format_info_bfloat16, "binary16": gf.format_info_binary16,
    **{f.name.replace("p3109_k", "binary"): f for f in gf.sample_formats
       if f.name.startswith("p3109")},
}
MODES = {"nearest_even": gfloat.RoundMode.TiesToEven,
         "nearest_away": gfloat.RoundMode.TiesToAway,
         "toward_zero": gfloat.RoundMode.TowardZero,
         "up": gfloat.RoundMode.TowardPositive, "down": gfloat.RoundMode.TowardNegative}


def machine() -> dict[str, object]:
    import numba

    return {"platform": platform.platform(), "processor": platform.processor(),
            "python": platform.python_version(), "cpus": os.cpu_count(),
            "numpy": np.__version__, "scipy": scipy.__version__,
            "ml_dtypes": ml_dtypes.__version__, "numba": numba.__version__}


def same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return ((a == b) & (np.signbit(a) == np.signbit(b))) | (np.isnan(a) & np.isnan(b))


def binary32_inputs(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rand = rng.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan,
                         np.finfo(np.float32).max, np.finfo(np.float32).tiny,
                         np.finfo(np.float32).smallest_subnormal], np.float32)
    mids = []
    for f in FORMATS.values():
        if f.bits <= 8 and f.numpy_dtype:
            v = np.unique(decode(all_codes(f), f))
            v = v[np.isfinite(v)]
            mids += [(v[1:] + v[:-1]) / 2, v]
    m = np.concatenate(mids).astype(np.float32)
    m = np.concatenate([m, -m])
    near = np.concatenate([m, np.nextafter(m, np.float32(np.inf)),
                           np.nextafter(m, np.float32(-np.inf))])
    return np.concatenate([rand, specials, near])


def exactness(n32: int) -> list[dict[str, object]]:
    sources = {
        "binary16 (all 2^16)": np.arange(2**16, dtype=np.uint16).view(np.float16),
        "bfloat16 (all 2^16)": np.arange(2**16, dtype=np.uint16).view(ml_dtypes.bfloat16),
        f"binary32 ({n32:.0e} random + boundaries)": binary32_inputs(n32, seed=0),
    }
    rows = []
    for f in FORMATS.values():
        if f.numpy_dtype is None or f.bits > 16:
            continue
        dt = np.dtype(getattr(ml_dtypes, f.numpy_dtype, f.numpy_dtype))
        for label, x in sources.items():
            if not f.has_nan:
                x = x[~np.isnan(x.astype(np.float32))]
            ref = x.astype(dt)
            refv = ref.astype(np.float64)
            got = round(x, f)
            codes = encode(x, f)
            refc = ref.view(np.uint8 if f.bits <= 8 else np.uint16)
            nan = np.isnan(refv)
            bad_v = int((~same(got, refv)).sum())
            bad_c = int((codes[~nan] != refc[~nan]).sum())
            rows.append({"oracle": "ml_dtypes", "format": f.name, "inputs": label,
                         "cases": int(x.size), "value_mismatches": bad_v,
                         "code_mismatches": bad_c})
    rng = np.random.default_rng(1)
    n = max(10**5, n32 // 20)
    base = rng.standard_normal(n) * np.exp2(rng.integers(-40, 40, n))
    for name, gi in GFLOAT.items():
        f = get_format(name)
        grid = decode(all_codes(f), f) if f.bits <= 16 else np.array([1.0])
        grid = np.unique(grid[np.isfinite(grid)])
        x = np.concatenate([base, grid, (grid[1:] + grid[:-1]) / 2])
        if not f.signed:
            x = np.abs(x)
        for mode, gm in MODES.items():
            for sat in (False, True):
                xs = x if (sat or f.has_nan or f.has_inf) else x[np.abs(x) <= f.max_finite]
                ref = gfloat.round_ndarray(gi, xs, gm, sat)
                got = round(xs, f, mode, "finite" if sat else "none")
                rows.append({"oracle": "gfloat", "format": name,
                             "inputs": f"{mode}, sat={sat}", "cases": int(xs.size),
                             "value_mismatches": int((~same(got, ref)).sum()),
                             "code_mismatches": None})
    return rows


def best_rates(calls: dict[str, tuple[Callable[[], object], int]],
               repeat: int) -> dict[str, float]:
    """Values/s of each call, best of ``repeat``; the calls are interleaved round by round
    so that a change in the machine's load hits every peer alike."""
    best = {k: float("inf") for k in calls}
    for fn, _ in calls.values():
        fn()                                             # warm up (and compile)
    for _ in range(repeat):
        for k, (fn, _) in calls.items():
            t0 = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - t0)
    return {k: n / best[k] for k, (_, n) in calls.items()}


def _round_trip(x: np.ndarray, dt: type) -> np.ndarray:
    """ml_dtypes' equivalent of ``round``: to the format and back to float64 values."""
    return x.astype(dt).astype(np.float64)


def throughput(n: int, n_slow: int, repeat: int) -> list[dict[str, object]]:
    import pychop

    rng = np.random.default_rng(2)
    x = (rng.standard_normal(n) * np.exp2(rng.integers(-10, 10, n))).astype(np.float32)
    xs = x[:n_slow]
    small = xs[: max(1, n_slow // 10)]
    cases = [("float8_e4m3fn", (4, 3)), ("float8_e5m2", (5, 2)), ("bfloat16", (8, 7)),
             ("float4_e2m1fn", None), ("binary8p3se", None), ("tensorfloat32", (8, 10))]
    names = ["ml_dtypes astype", "ml_dtypes round trip", "thrifty encode", "thrifty round",
             "thrifty round (numpy engine)", "gfloat round_ndarray", "pychop Chop"]
    rows = []
    for name, chop in cases:
        f = get_format(name)
        calls: dict[str, tuple[Callable[[], object], int]] = {}
        if f.numpy_dtype:
            dt = getattr(ml_dtypes, f.numpy_dtype)
            calls["ml_dtypes astype"] = (partial(x.astype, dt), n)
            calls["ml_dtypes round trip"] = (partial(_round_trip, x, dt), n)
        calls["thrifty encode"] = (partial(encode, x, f), n)
        calls["thrifty round"] = (partial(round, x, f), n)
        calls["thrifty round (numpy engine)"] = (partial(round, xs, f, engine="numpy"), n_slow)
        if name in GFLOAT:
            sat = not (f.has_nan or f.has_inf)   # gfloat refuses overflow with nowhere to go
            calls["gfloat round_ndarray"] = (partial(gfloat.round_ndarray, GFLOAT[name], xs,
                                                     sat=sat), n_slow)
        if chop is not None:
            ch = pychop.Chop(exp_bits=chop[0], sig_bits=chop[1], rmode=1)
            calls["pychop Chop"] = (partial(ch, small), small.size)
        rates = best_rates(calls, repeat)
        row: dict[str, object] = {"format": name, **{k: rates.get(k) for k in names}}
        ml, gfl = rates.get("ml_dtypes astype"), rates.get("gfloat round_ndarray")
        trip = rates.get("ml_dtypes round trip")
        row["encode / ml_dtypes astype"] = rates["thrifty encode"] / ml if ml else None
        row["round / ml_dtypes round trip"] = rates["thrifty round"] / trip if trip else None
        row["round / gfloat"] = rates["thrifty round"] / gfl if gfl else None
        rows.append(row)
    return rows


def fmt_rate(v: object) -> str:
    return "-" if v is None else f"{v / 1e6:,.1f}M"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="10^6 exactness cases, 2*10^6 "
                    "timing values (default: 10^7 and 10^7)")
    args = ap.parse_args()
    n32 = 10**6 if args.quick else 10**7
    n_fast = 2 * 10**6 if args.quick else 10**7
    n_slow = 10**6 if args.quick else 2 * 10**6
    repeat = 3 if args.quick else 5
    console = Console(width=150)
    info = machine()
    console.print(f"[bold]numerics_convert[/bold] ({'quick' if args.quick else 'full'}) "
                  + ", ".join(f"{k}={v}" for k, v in info.items()))
    t0 = time.perf_counter()
    exact = exactness(n32)
    t_exact = time.perf_counter() - t0
    table = Table(title=f"Bit-exactness ({t_exact:.0f} s)")
    for c in ("oracle", "format", "inputs", "cases", "value mismatches", "code mismatches"):
        table.add_column(c)
    for r in exact:
        if r["oracle"] == "ml_dtypes" or r["value_mismatches"]:
            table.add_row(str(r["oracle"]), str(r["format"]), str(r["inputs"]),
                          f"{r['cases']:,}", str(r["value_mismatches"]),
                          str(r["code_mismatches"]))
    g = [r for r in exact if r["oracle"] == "gfloat"]
    table.add_row("gfloat", f"{len({r['format'] for r in g})} P3109/MX formats",
                  "5 roundings x sat on/off", f"{sum(r['cases'] for r in g):,}",
                  str(sum(r["value_mismatches"] for r in g)), "-")
    console.print(table)
    thr = throughput(n_fast, n_slow, repeat)
    t2 = Table(title="Throughput, float32 input (values/s)")
    cols = list(thr[0])
    for c in cols:
        t2.add_column(c, justify="left" if c == "format" else "right")
    for r in thr:
        t2.add_row(*[str(r[c]) if c == "format" else
                     (fmt_rate(r[c]) if "/" not in c else
                      ("-" if r[c] is None else f"{r[c]:.2f}x")) for c in cols])
    console.print(t2)
    out = Path(__file__).parent / "results" / "numerics_convert.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"machine": info, "quick": args.quick,
                               "exactness": exact, "throughput": thr}, indent=1))
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()

"""thrifty's unit presets against MMA-Sim (arXiv 2511.10909), bit for bit.

For every configuration both model (:data:`thrifty.numerics.crosscheck.CONFIGS`: NVIDIA
``mma.sync`` Volta to Blackwell, Hopper ``wgmma``, Blackwell ``tcgen05.mma`` including
FP6/FP4 and the block-scaled MX/NVFP4 kinds, AMD CDNA1-3 ``mfma``), runs ``--cases``
random and adversarial dot products (cancellation, exponent spread beyond the alignment
window, subnormals, signed zeros, Inf/NaN, overflow, underflow; equal shares) of length
twice the instruction's k (one step for the block-scaled kinds) through both models
and counts bit-equal results. The first differing case of each configuration is kept as
evidence (inputs, both results).

Usage: ``python benchmarks/numerics_mmasim.py [--cases N] [--only SUBSTRING]``; writes
``benchmarks/results/numerics_mmasim.json`` and prints the agreement table (Markdown).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from thrifty.numerics import crosscheck as xc


def _evidence(cfg: xc.Config, n: int, idx: int) -> dict[str, object]:
    a, b, c, fam = xc.cases(cfg, n)
    a, b, c = a[idx:idx + 1], b[idx:idx + 1], c[idx:idx + 1]
    ours = xc.run_thrifty(cfg, a, b, c)[0]
    theirs = xc.run_mmasim(cfg, a, b, c)[0]
    return {"case": idx, "family": xc.FAMILIES[int(fam[idx])], "a": a[0].tolist(),
            "b": b[0].tolist(), "c": float(c[0]), "thrifty": float(ours).hex(),
            "mmasim": float(theirs).hex()}


#: MMA-Sim's e_zero for mma.sync (nv_ptx/sim.py), (binary32 result, binary16 result).
MMA_E_ZERO = {"v100": (-131, -19), "a100": (-132, -20), "ada": (-132, -20),
              "h100": (-133, -21), "b200": (-133, -21)}


def _swapped_agreement(cfg: xc.Config, n: int) -> float:
    """Agreement of an mma.sync preset with MMA-Sim's zero and addend alignment swapped in."""
    from dataclasses import replace

    from thrifty.numerics.units import unit
    a, b, c, _ = xc.cases(cfg, n)
    model = unit(cfg.unit, cfg.input, cfg.output).model
    fp16 = cfg.output == "binary16"
    m = replace(model, zero_exp=MMA_E_ZERO[cfg.unit][int(fp16)])
    if fp16 and model.window_bits is not None:
        m = replace(m, accumulator="binary16", align_bits=model.window_bits - 10)
    ours = unit(m).dot(a, b, c, engine="numpy")
    return float(xc.same_bits(ours, xc.run_mmasim(cfg, a, b, c), cfg.output).mean())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=100_000)
    ap.add_argument("--only", default="", help="run configurations whose key contains this")
    ap.add_argument("--explain", action="store_true",
                    help="for mma.sync rows with differences, also run the preset with "
                         "MMA-Sim's e_zero and binary16 addend reading swapped in")
    ap.add_argument("--out", type=Path,
                    default=Path(__file__).parent / "results" / "numerics_mmasim.json")
    args = ap.parse_args(argv)
    reason = xc.mmasim_available()
    if reason is not None:
        print(f"numerics_mmasim: SKIPPED ({reason})")
        return 0
    rows, results = [], []
    for key, cfg in xc.CONFIGS.items():
        if args.only not in key:
            continue
        t0 = time.perf_counter()
        try:
            agr = xc.compare(cfg, args.cases)
        except Exception as e:  # noqa: BLE001 - a refusal is reported in the table
            results.append({"config": key, "error": f"{type(e).__name__}: {e}"})
            rows.append(f"| {key} | {cfg.instruction} | - | error: {e} |")
            continue
        res = agr.to_json()
        res["seconds"] = round(time.perf_counter() - t0, 1)
        if agr.first:
            res["evidence"] = _evidence(cfg, args.cases, agr.first[0])
            if args.explain and cfg.instruction == "mma.sync":
                res["with_mmasim_zero_alignment"] = _swapped_agreement(cfg, args.cases)
                print(f"  {key}: with MMA-Sim's e_zero/addend reading: "
                      f"{100 * res['with_mmasim_zero_alignment']:.3f}%", flush=True)
        results.append(res)
        worst = ", ".join(f"{k} {e}/{n}" for k, (e, n) in agr.per_family.items() if e < n)
        rows.append(f"| {key} | {cfg.instruction} | {agr.cases} | "
                    f"{100.0 * agr.equal / agr.cases:.3f}% | {worst or '-'} |")
        print(rows[-1], flush=True)
    for key, scfg in xc.SCALED_CONFIGS.items():
        if args.only not in key:
            continue
        t0 = time.perf_counter()
        agr = xc.compare_scaled(scfg, args.cases)
        res = agr.to_json()
        res["config"] = key
        res["seconds"] = round(time.perf_counter() - t0, 1)
        results.append(res)
        worst = ", ".join(f"{k} {e}/{n}" for k, (e, n) in agr.per_family.items() if e < n)
        rows.append(f"| {key} | tcgen05.mma (block-scaled) | {agr.cases} | "
                    f"{100.0 * agr.equal / agr.cases:.3f}% | {worst or '-'} |")
        print(rows[-1], flush=True)
    table = ["| configuration | instruction | cases | bit-equal | families with differences |",
             "|---|---|---|---|---|", *rows]
    print("\n".join(table))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"cases_per_config": args.cases, "results": results,
                                    "numpy": np.__version__}, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

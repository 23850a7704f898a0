"""thrifty's unit presets against MMA-Sim (arXiv 2511.10909), bit for bit.

For every configuration both model (:data:`thrifty.numerics.crosscheck.CONFIGS`: NVIDIA
``mma.sync`` Volta to Blackwell, Hopper ``wgmma``, Blackwell ``tcgen05.mma`` including
FP6/FP4, AMD CDNA1-3 ``mfma``), runs ``--cases`` random and adversarial dot products
(cancellation, exponent spread beyond the alignment window, subnormals, signed zeros,
Inf/NaN, overflow; equal shares) of length twice the instruction's k through both models
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=100_000)
    ap.add_argument("--only", default="", help="run configurations whose key contains this")
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
        results.append(res)
        worst = ", ".join(f"{k} {e}/{n}" for k, (e, n) in agr.per_family.items() if e < n)
        rows.append(f"| {key} | {cfg.instruction} | {agr.cases} | "
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

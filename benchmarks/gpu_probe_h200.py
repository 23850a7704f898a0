"""Probe a real GPU's tensor cores for every input format and compare with the ``h200`` preset.

On a machine with an NVIDIA GPU (written for the H200) and PyTorch with CUDA, runs the
feature tests of ``thrifty fp probe --device cuda`` (:func:`thrifty.numerics.probe.probe`
on :func:`~thrifty.numerics.probe.torch_black_box`) for fp16, bf16, tf32, E4M3 and E5M2
inputs with binary32 output, and fp16/E4M3/E5M2 with binary16 output, then compares the
inferred parameters with the ``h200`` preset of each instruction thrifty models
(``mma.sync`` and ``wgmma``: cuBLAS picks the kernel, on Hopper usually a ``wgmma`` one).
Each format pair gets a time budget; one that fails or runs out is reported, not fatal.

Writes ``gpu_probe_h200.json`` and ``gpu_probe_h200.md`` into ``--out`` (default
``benchmarks/results``). Without PyTorch or without a CUDA device it writes a result that
says ``skipped`` and why, and exits 0.

Usage: ``python benchmarks/gpu_probe_h200.py [--out DIR] [--budget SECONDS]``;
``--emulate h200`` runs the same script on the emulated preset (a dry run without a GPU).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from thrifty.errors import ThriftyError

#: (input, output) pairs probed, in order.
PAIRS = [("bf16", "fp32"), ("fp16", "fp32"), ("tf32", "fp32"), ("e4m3", "fp32"),
         ("e5m2", "fp32"), ("fp16", "fp16"), ("e4m3", "fp16"), ("e5m2", "fp16")]
INSTRUCTIONS = ("mma.sync", "wgmma")


def _device() -> tuple[str | None, str]:
    """``(device name, reason)``: the CUDA device, or ``None`` and why there is none."""
    try:
        import torch
    except ImportError:
        return None, "PyTorch is not installed"
    if not torch.cuda.is_available():
        return None, f"no CUDA device (torch {torch.__version__}, CUDA build " \
                     f"{torch.version.cuda})"
    return torch.cuda.get_device_name(0), ""


def _probe_pair(fin: str, fout: str, emulate: str | None = None) -> dict[str, object]:
    from thrifty.numerics.probe import (
        compare,
        emulated_black_box,
        probe,
        report,
        torch_black_box,
    )
    from thrifty.numerics.units import preset, unit
    t0 = time.perf_counter()
    box = (torch_black_box(fin, fout, "cuda") if emulate is None else
           emulated_black_box(unit(emulate, fin, fout)))
    result = probe(box, fin, fout)
    row: dict[str, object] = {"input": fin, "output": fout, "seconds": 0.0,
                              "inferred": result.params, "evidence": result.evidence,
                              "calls": result.calls, "comparisons": {}, "markdown": ""}
    md = [report(result)]
    for instr in INSTRUCTIONS:
        try:
            model = preset("h200", fin, fout, instruction=instr)
        except ThriftyError as e:
            row["comparisons"][instr] = {"refused": str(e)}  # type: ignore[index]
            continue
        cmp = compare(result, model)
        row["comparisons"][instr] = {  # type: ignore[index]
            "agree": all(ok for _, _, ok in cmp.values()),
            "parameters": {k: {"preset": a, "inferred": b, "agree": ok}
                           for k, (a, b, ok) in cmp.items()}}
        md.append("## " + report(result, model).split("## ", 1)[-1])
    row["seconds"] = round(time.perf_counter() - t0, 2)
    row["markdown"] = "\n".join(md)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    ap.add_argument("--budget", type=float, default=240.0,
                    help="total seconds for all pairs (default 240: under 5 minutes)")
    ap.add_argument("--emulate", default=None,
                    help="dry run without a GPU: probe this emulated preset instead")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    name, reason = _device()
    if args.emulate is not None:
        name, reason = f"emulated {args.emulate} (dry run)", ""
    doc: dict[str, object] = {"host": platform.node(), "device": name, "pairs": []}
    lines = ["# Tensor-core probe vs the h200 preset", ""]
    if name is None:
        doc["skipped"] = reason
        lines.append(f"SKIPPED: {reason}. Run this on a machine with an NVIDIA GPU.")
        print(f"gpu_probe_h200: SKIPPED ({reason})")
    else:
        lines += [f"Device: {name}", "", "| input | output | seconds | agrees with "
                  "mma.sync preset | agrees with wgmma preset |", "|---|---|---|---|---|"]
        t_end = time.perf_counter() + args.budget
        details = []
        for fin, fout in PAIRS:
            if time.perf_counter() > t_end:
                doc["pairs"].append({"input": fin, "output": fout,  # type: ignore[union-attr]
                                     "error": "time budget spent"})
                lines.append(f"| {fin} | {fout} | - | not run (budget) | |")
                continue
            try:
                row = _probe_pair(fin, fout, args.emulate)
            except Exception as e:  # noqa: BLE001 - one pair's failure is reported
                doc["pairs"].append({"input": fin, "output": fout,  # type: ignore[union-attr]
                                     "error": f"{type(e).__name__}: {e}"})
                lines.append(f"| {fin} | {fout} | - | error: {type(e).__name__}: {e} | |")
                continue
            details.append(str(row.pop("markdown")))
            doc["pairs"].append(row)  # type: ignore[union-attr]
            cmps = row["comparisons"]
            cells = [("refused" if "refused" in cmps[i] else  # type: ignore[index]
                      ("yes" if cmps[i]["agree"] else "NO"))  # type: ignore[index]
                     for i in INSTRUCTIONS]
            lines.append(f"| {fin} | {fout} | {row['seconds']} | {cells[0]} | {cells[1]} |")
            print(f"{fin}->{fout}: {row['seconds']} s, mma.sync {cells[0]}, wgmma {cells[1]}",
                  flush=True)
        lines += ["", *details]
    (args.out / "gpu_probe_h200.json").write_text(json.dumps(doc, indent=1, default=str))
    (args.out / "gpu_probe_h200.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out / 'gpu_probe_h200.json'} and {args.out / 'gpu_probe_h200.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

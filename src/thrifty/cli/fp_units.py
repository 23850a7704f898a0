"""``thrifty fp validate-unit | probe | bound | export-rocq``: matrix-unit models.

Examples::

    thrifty fp validate-unit --unit a100 --output fp32 --data ../shared/data/tensorcore/A100/bf16
    thrifty fp probe --unit h100 --input bf16 --output fp32 --json
    thrifty fp probe --device cuda --input bf16 --output fp32 --compare h200 --report probe.md
    thrifty fp bound --unit h100 --input bf16 --output fp32 --k 1024
    thrifty fp export-rocq --unit a100 --input bf16 --output fp32 --k 64 -o a100.v --check
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from thrifty.cli.common import emit_json, kv_table, table
from thrifty.errors import FormatError, ThriftyError

_UNIT = click.option("--unit", "unit_name", required=True,
                     help="Preset unit: v100 a100 a2 ada l40s h100 h200 b200 cdna1 cdna2 "
                          "cdna3 amx.")
_OUTPUT = click.option("--output", "fout", default="fp32", show_default=True,
                       help="Output (accumulator) format: fp32 or fp16.")
_JSON = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
_INSTR = click.option("--instruction", "instruction", default=None,
                      help="Instruction modelled where a GPU has several: h100/h200 mma.sync "
                           "(default) or wgmma; b200 mma.sync (default) or tcgen05.mma.")


def _fail(e: ThriftyError) -> click.ClickException:
    return click.ClickException(str(e))


@click.command("validate-unit")
@_UNIT
@click.option("--input", "fin", default=None,
              help="Input format (default: read from the a_<gpu>_<fmt>.txt file name).")
@_OUTPUT
@click.option("--data", "data", required=True, type=click.Path(path_type=Path),
              help="Folder with the a_*, b_*, c_* and d_*_{fp32,fp16} files of one GPU/format.")
@_INSTR
@click.option("--addend", "addend", type=click.Choice(["file", "zero"]), default="file",
              show_default=True,
              help="The addend the files were measured with: the c_* file, or zero (Khattak "
                   "and Mikaitis's H100/H200 FP8 files: D = A*B + 0, Validate_TC_models.m).")
@_JSON
def validate_unit(unit_name: str, fin: str | None, fout: str, data: Path,
                  instruction: str | None, addend: str, as_json: bool) -> None:
    """Compare a unit model bit for bit with measured matrix-unit outputs.

    Say how the files were produced where it matters: --instruction (Khattak and
    Mikaitis's harnesses use mma.sync for FP8, wmma for fp16/bf16/tf32, which issues the
    same mma.sync instructions) and --addend. Exits with status 1 when any case differs.
    """
    from thrifty.numerics.formats import get_format
    from thrifty.numerics.units import load_validation_set, unit, validate
    try:
        ds = load_validation_set(data)
        if fin is not None and get_format(fin).name != ds.input:
            raise FormatError(f"--input {fin} but the files hold {ds.input} inputs")
        u = unit(unit_name, input=ds.input, output=fout, instruction=instruction)
        report = validate(u, ds, addend=addend)
    except ThriftyError as e:
        raise _fail(e) from None
    if as_json:
        emit_json({**report.to_json(), "instruction": u.model.instruction, "addend": addend})
    else:
        kv_table(f"{unit_name} on {data}", {"instruction": u.model.instruction,
                                            "addend": addend,
                                            "input": report.input, "output": report.output,
                                            "cases": report.cases, "matched": report.matched,
                                            "first mismatches": list(report.mismatches[:10])})
    if report.matched != report.cases:
        sys.exit(1)


@click.command("probe")
@click.option("--unit", "unit_name", default=None,
              help="Probe an emulated preset unit as a black box.")
@click.option("--device", default=None, help="Probe a GPU through PyTorch, e.g. cuda.")
@click.option("--input", "fin", default="bf16", show_default=True, help="Input format.")
@_OUTPUT
@click.option("--compare", "compare_to", default=None,
              help="Preset to compare the inferred parameters with (default: --unit).")
@_INSTR
@click.option("--report", "report_path", default=None, type=click.Path(path_type=Path),
              help="Write a Markdown report here.")
@_JSON
def probe_cmd(unit_name: str | None, device: str | None, fin: str, fout: str,
              compare_to: str | None, instruction: str | None, report_path: Path | None,
              as_json: bool) -> None:
    """Infer a matrix unit's parameters with feature tests (Fasi et al.; Khattak-Mikaitis)."""
    from thrifty.numerics.probe import (
        compare,
        emulated_black_box,
        probe,
        report,
        torch_black_box,
    )
    from thrifty.numerics.units import preset, unit
    if (unit_name is None) == (device is None):
        raise click.UsageError("give exactly one of --unit (emulated) or --device (GPU)")
    try:
        box = (emulated_black_box(unit(unit_name, input=fin, output=fout,
                                       instruction=instruction))
               if unit_name is not None else torch_black_box(fin, fout, device or "cuda"))
        result = probe(box, fin, fout)
        ref_name = compare_to or unit_name
        model = preset(ref_name, fin, fout, instruction) if ref_name else None
    except ThriftyError as e:
        raise _fail(e) from None
    cmp = compare(result, model) if model is not None else {}
    if report_path is not None:
        report_path.write_text(report(result, model))
    if as_json:
        emit_json({**result.to_json(), "compared_with": model.name if model else None,
                   "comparison": {k: {"preset": a, "inferred": b, "agree": ok}
                                  for k, (a, b, ok) in cmp.items()}})
        return
    table(f"probe {fin} -> {fout}", ["parameter", "inferred", "preset", "agree"],
          [(k, v, cmp[k][0] if k in cmp else "", (cmp[k][2] if k in cmp else ""))
           for k, v in result.params.items()])


@click.command("bound")
@_UNIT
@click.option("--input", "fin", default="bf16", show_default=True, help="Input format.")
@_OUTPUT
@click.option("--k", "k", default=1024, show_default=True, type=int,
              help="Inner dimension (dot-product length).")
@_INSTR
@_JSON
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="Histogram of observed errors of random dot products, with the bounds.")
def bound_cmd(unit_name: str, fin: str, fout: str, k: int, instruction: str | None,
              as_json: bool, plot_path: str | None = None) -> None:
    """Error bounds of a length-k dot product on a unit: model, gamma_n, block FMA, probabilistic.

    Relative bounds multiply |c| + sum |a_i b_i|. With --json, a non-finite number is the
    string "inf" (JSON has no infinity) and "value" is null (no magnitude is given here).
    """
    from thrifty.numerics.bounds import (
        a_priori_bound,
        block_fma_bound,
        gamma_bound,
        probabilistic_bound,
    )
    from thrifty.numerics.units import preset
    try:
        model = preset(unit_name, fin, fout, instruction)
        rows = [a_priori_bound(model, k), gamma_bound(k, model.output, model.rounding),
                block_fma_bound(k, model.fma, model.output, model.rounding)]
    except ThriftyError as e:
        raise _fail(e) from None
    refusal = None
    try:
        rows.append(probabilistic_bound(model, k))
    except FormatError as e:
        refusal = str(e)
    if plot_path:
        from thrifty.cli.fp_plot import error_histogram

        error_histogram(model, k, rows, plot_path)
    if as_json:
        emit_json({"unit": model.name, "input": model.input, "output": model.output, "k": k,
                   "bounds": [b.to_json() for b in rows], "probabilistic_refused": refusal})
        return
    table(f"{model.name} {model.input} -> {model.output}, k={k}",
          ["bound", "relative", "absolute", "probability", "how"],
          [(b.kind, b.relative, b.absolute, b.probability, b.detail) for b in rows])
    if refusal:
        click.echo(f"probabilistic bound refused: {refusal}")


@click.command("export-rocq")
@_UNIT
@click.option("--input", "fin", default="bf16", show_default=True, help="Input format.")
@_OUTPUT
@_INSTR
@click.option("--k", "k", default=64, show_default=True, type=int,
              help="Dot-product length of the bound theorems.")
@click.option("-o", "--out", "out", default=None, type=click.Path(path_type=Path),
              help="Write the .v file here (default: stdout).")
@click.option("--library", "library", default=None, type=click.Path(path_type=Path),
              help="Also write thrifty's proof library (the .v files the export "
                   "requires) into this folder.")
@click.option("--check", is_flag=True,
              help="Compile the file with coqc against the library; report the Admitted "
                   "count and the axioms of the bound theorems.")
def export_rocq(unit_name: str, fin: str, fout: str, instruction: str | None, k: int,
                out: Path | None, library: Path | None, check: bool) -> None:
    """Write a Rocq/Coq file: formats (Flocq), the unit's dot and matrix products, their
    a priori bounds (proved where thrifty's proof library models the unit)."""
    from thrifty.numerics.rocq import (
        admitted_count,
        assumptions,
        check_with_coqc,
        export_unit,
        write_library,
    )
    from thrifty.numerics.units import preset
    try:
        text = export_unit(preset(unit_name, fin, fout, instruction=instruction), k=k)
        if out is None:
            click.echo(text)
        else:
            out.write_text(text)
        if library is not None:
            write_library(library)
        if check:
            ok, messages = check_with_coqc(text)
            if not ok:
                raise click.ClickException(f"coqc rejected the file:\n{messages}")
            axioms = sorted(set().union(*assumptions(messages)))
            click.echo(f"coqc: ok; Admitted: {admitted_count(text)}; axioms: "
                       f"{', '.join(axioms) or 'none'}", err=True)
    except ThriftyError as e:
        raise _fail(e) from None


#: The commands of this module, for ``thrifty fp``.
COMMANDS = (validate_unit, probe_cmd, bound_cmd, export_rocq)

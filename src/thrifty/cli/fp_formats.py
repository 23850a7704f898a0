"""``thrifty fp formats``: the table of every number format the numerics engine knows.

Example
-------
``thrifty fp formats``, ``thrifty fp formats --json``, ``thrifty fp formats e4m3 binary8p3se``
"""

from __future__ import annotations

import json
import math

import click
from rich.console import Console
from rich.table import Table

from thrifty.errors import FormatError
from thrifty.numerics.formats import FORMATS, get_format


def _num(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3):
            e = math.frexp(v)[1] - 1
            return f"{v:.4g}" if v != 2.0 ** e else f"2^{e}"
        return f"{v:g}"
    return str(v)


def _json_value(v: object) -> object:
    """JSON has no infinity or NaN: such numbers become "inf", "-inf" or "nan"."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


@click.command("formats")
@click.argument("names", nargs=-1)
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object with one entry per format: name -> properties "
                   "(non-finite numbers as the strings \"inf\", \"-inf\", \"nan\").")
def formats(names: tuple[str, ...], as_json: bool) -> None:
    """Print bits, bias, emin, emax, max, smallest normal/subnormal and inf/NaN/-0 of
    NAMES (names, aliases or P3109 names; default: every registered format)."""
    try:
        fmts = [get_format(n) for n in names] if names else list(FORMATS.values())
    except FormatError as e:
        raise click.BadParameter(str(e), param_hint="NAMES") from e
    if as_json:
        out = {f.name: {k: _json_value(v) for k, v in f.summary().items()} for f in fmts}
        click.echo(json.dumps(out, indent=1, allow_nan=False))
        return
    table = Table(title="Number formats", header_style="bold")
    cols = ["name", "bits", "E", "M", "bias", "emin", "emax", "max", "smallest normal",
            "smallest subnormal", "inf", "NaN", "-0", "family"]
    for c in cols:
        table.add_column(c, justify="left" if c in ("name", "family", "NaN") else "right",
                         no_wrap=c == "name")
    for f in fmts:
        table.add_row(f.name, str(f.bits), str(f.exponent_bits), str(f.mantissa_bits),
                      str(f.bias), str(f.emin), str(f.emax), _num(f.max_finite),
                      _num(f.smallest_normal), _num(f.smallest_subnormal),
                      "yes" if f.has_inf else "no", f.nan,
                      "yes" if f.has_negative_zero else "no", f.family)
    Console(width=140).print(table)
